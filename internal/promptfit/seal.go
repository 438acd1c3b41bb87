package promptfit

import (
	"context"
	"slices"
)

// Sealed is one intent assembled at render time: what the operator writes
// into <intent>.txt and the intent's verdict in plan.json.
type Sealed struct {
	// Text is the prompt with each runtime section as its heading and a
	// Placeholder line, each memory section with a MemoryPlaceholder line.
	Text string
	// Tokens is FixedTokens + ReservedTokens.
	Tokens int
	// FixedTokens counts every static text, the instruction, runtime and
	// memory headings and separators.
	FixedTokens int
	// ReservedTokens is the sum of the runtime and memory sections'
	// reserves.
	ReservedTokens int
	// CacheableTokens counts the fixed text before the first runtime or
	// memory section; all of it when there is none.
	CacheableTokens int
	// WithinBudget is Tokens <= maxTokens.
	WithinBudget bool
	// Cut names the sections that were cut, in the order they were cut.
	Cut []string
	// Sections holds each section's share, in order.
	Sections []Result
	// StaticCuts are the static and intent sections' texts after the cut,
	// with staticCuts only.
	StaticCuts []StaticCut
}

// StaticCut is a static or intent section's text after the cut.
type StaticCut struct {
	// Section is the name of the section cut.
	Section string
	// Text replaces the section's text.
	Text string
	// TruncatedTokens is how many tokens the cut removed.
	TruncatedTokens int
}

// Seal assembles one intent at render time: runtime and memory sections
// stand as their heading plus their reserve. With staticCuts it cuts
// static and intent sections marked Cuttable, by priority down to their
// minimum, while the intent is over maxTokens (what the operator does for
// onExceed: Truncate); without, an intent over budget keeps its text and
// its verdict says so. It stops with an error wrapping ctx.Err() when ctx
// is done, checking between the counts of the cut.
func Seal(ctx context.Context, e Counter, sections []Section, maxTokens int, staticCuts bool) (*Sealed, error) {
	reserved := 0
	parts := make([]part, len(sections))
	for i := range sections {
		s := &sections[i]
		text := ""
		if s.Kind == Static || s.Kind == Intent {
			text = s.Text
		} else {
			reserved += s.ReserveTokens
		}
		n := e.Count(text)
		parts[i] = part{
			name: s.Name, kind: s.Kind, heading: s.Heading, body: text,
			cuttable: s.Cuttable, priority: s.Priority, minTokens: s.MinTokens, tokens: n, original: n,
		}
	}
	// Fixed text: runtime and memory sections stand as their heading alone.
	fixed := func(p *part) string {
		if p.kind == Runtime || p.kind == Memory {
			return p.heading
		}
		return Block(p.heading, p.body)
	}
	sc := &staticCutter{ctx: ctx, e: e, parts: parts, fixed: fixed, plus: reserved}
	a := &Sealed{ReservedTokens: reserved}
	t, err := sc.total()
	if err != nil {
		return nil, err
	}
	if staticCuts {
		// Within the budget this cuts nothing, and the static cuts are none.
		if a.Cut, t, err = cut(sc, parts, maxTokens, t); err != nil {
			return nil, err
		}
		for _, pt := range parts {
			if pt.tokens < pt.original && (pt.kind == Static || pt.kind == Intent) {
				a.StaticCuts = append(a.StaticCuts, StaticCut{Section: pt.name, Text: pt.body, TruncatedTokens: pt.original - pt.tokens})
			}
		}
	}
	a.Tokens = t
	a.FixedTokens = a.Tokens - reserved
	a.WithinBudget = a.Tokens <= maxTokens
	a.CacheableTokens = a.FixedTokens
	if k := slices.IndexFunc(parts, func(p part) bool { return p.kind == Runtime || p.kind == Memory }); k >= 0 {
		a.CacheableTokens = e.Count(join(parts[:k], fixed))
	}
	a.Text = join(parts, func(p *part) string {
		switch p.kind {
		case Runtime:
			return Block(p.heading, Placeholder(p.name))
		case Memory:
			return Block(p.heading, MemoryPlaceholder(p.name))
		}
		return Block(p.heading, p.body)
	})
	a.Sections = make([]Result, 0, len(parts))
	for i, pt := range parts {
		r := Result{TruncatedTokens: pt.original - pt.tokens}
		if pt.kind == Runtime || pt.kind == Memory {
			r.Tokens = sections[i].HeadingTokens + sections[i].ReserveTokens
		} else {
			r.Tokens = e.Count(Block(pt.heading, pt.body))
		}
		a.Sections = append(a.Sections, r)
	}
	return a, nil
}

// staticCutter is the cutter of a static assembly: every count is known,
// the total is the fixed text's count plus the reserves.
type staticCutter struct {
	ctx   context.Context
	e     Counter
	parts []part
	fixed func(p *part) string
	plus  int
}

func (s *staticCutter) tokensOf(p *part) (int, error) { return p.tokens, nil }

func (s *staticCutter) total() (int, error) {
	if err := s.ctx.Err(); err != nil {
		return 0, err
	}
	return s.e.Count(join(s.parts, s.fixed)) + s.plus, nil
}

func (s *staticCutter) truncate(p *part, target int) error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	p.body, p.tokens = s.e.Truncate(p.body, target)
	return nil
}
