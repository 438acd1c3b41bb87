package plan

import (
	"fmt"
	"sort"
	"strings"

	"github.com/promptops/promptops/internal/tokens"
)

// Assembly is one assembled prompt.
type Assembly struct {
	// Intent assembled.
	Intent string
	// Text is the prompt. In a static assembly (Seal) runtime sections
	// appear as their heading and a Placeholder line.
	Text string
	// Tokens is the exact count of Text in a runtime assembly; FixedTokens +
	// ReservedTokens in a static one.
	Tokens int
	// FixedTokens is Tokens less the runtime sections' share.
	FixedTokens int
	// ReservedTokens is the runtime sections' share: their tokens in a
	// runtime assembly, their reserves in a static one.
	ReservedTokens int
	// MaxTokens is the plan's budget.
	MaxTokens int
	// WithinBudget is Tokens <= MaxTokens.
	WithinBudget bool
	// Sections holds every section of the plan, in order.
	Sections []SectionResult
	// Cut names the sections that were cut, in the order they were cut.
	Cut []string
}

// SectionResult is one section's share of an assembly.
type SectionResult struct {
	// Name and Kind of the section.
	Name, Kind string
	// Tokens of the section as it is in the prompt, heading included; 0 when
	// it was left out.
	Tokens int
	// TruncatedTokens is how many tokens of its text the cut removed.
	TruncatedTokens int
}

// Message describes the verdict for a user: "intent analyze needs 4312
// tokens (3812 fixed + 500 reserved), budget 4000".
func (a *Assembly) Message() string {
	if a.WithinBudget {
		return fmt.Sprintf("intent %s takes %d tokens (%d fixed + %d reserved) of budget %d", a.Intent, a.Tokens, a.FixedTokens, a.ReservedTokens, a.MaxTokens)
	}
	return fmt.Sprintf("intent %s needs %d tokens (%d fixed + %d reserved), budget %d", a.Intent, a.Tokens, a.FixedTokens, a.ReservedTokens, a.MaxTokens)
}

// block is a section as rendered: heading line, then text. An empty text
// leaves the section out.
func block(heading, text string) string {
	if text == "" {
		return ""
	}
	if heading == "" {
		return text
	}
	return heading + "\n" + text
}

// part is one section while an assembly is being cut.
type part struct {
	name, kind, heading, body string
	cuttable                  bool
	priority, minTokens       int
	tokens, original          int // of body
}

func join(parts []part, render func(p *part) string) string {
	var b strings.Builder
	first := true
	for i := range parts {
		s := render(&parts[i])
		if s == "" {
			continue
		}
		if !first {
			b.WriteString(Separator)
		}
		first = false
		b.WriteString(s)
	}
	return b.String()
}

// cut shrinks cuttable parts, highest priority first (later sections first on
// a tie), each down to its minimum, until total() fits limit. It returns the
// names of the parts cut, in order.
func cut(e *tokens.Encoder, parts []part, limit int, total func() int) []string {
	order := make([]int, 0, len(parts))
	for i := range parts {
		if parts[i].cuttable {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		pa, pb := parts[order[a]], parts[order[b]]
		if pa.priority != pb.priority {
			return pa.priority > pb.priority
		}
		return order[a] > order[b]
	})
	var cutNames []string
	t := total()
	for _, i := range order {
		p := &parts[i]
		for t > limit && p.tokens > p.minTokens {
			target := max(p.minTokens, p.tokens-(t-limit))
			if target >= p.tokens {
				target = p.tokens - 1
			}
			p.body, p.tokens = e.Truncate(p.body, target)
			if len(cutNames) == 0 || cutNames[len(cutNames)-1] != p.name {
				cutNames = append(cutNames, p.name)
			}
			t = total()
		}
		if t <= limit {
			break
		}
	}
	return cutNames
}

// countJoined is the exact token count of the parts' blocks joined by
// Separator, computed from each body's known count. Where a line feed is
// followed by a letter or a number (tokens.StartsPiece) the count splits
// exactly, so only the text around the joins is counted: the first and last
// line of each body, headings and separators. A long body is then not
// counted again after it is cut or when nothing is cut; a body with no such
// line is counted with its neighbours.
func countJoined(e *tokens.Encoder, parts []part) int {
	last := -1 // the last part in the prompt
	for i := range parts {
		if parts[i].body != "" {
			last = i
		}
	}
	n := 0
	var glue strings.Builder // text since the last split point, not yet counted
	first := true
	for i := range parts {
		p := &parts[i]
		if p.body == "" {
			continue
		}
		if !first {
			glue.WriteString(Separator)
		}
		first = false
		if p.heading != "" {
			glue.WriteString(p.heading)
			glue.WriteByte('\n')
		}
		body := p.body
		// f: the first split point in body; l: the last. The start of the
		// prompt splits; so does a line feed (a separator or a heading's)
		// before a letter or a number, and the end of the prompt, or a body
		// ending in a letter or a number before its separator.
		f := -1
		if glue.Len() == 0 || tokens.StartsPiece(body) {
			f = 0
		} else {
			f = nextSplit(body, 0)
		}
		if f < 0 {
			glue.WriteString(body)
			continue
		}
		l := len(body)
		if i != last && !tokens.EndsPiece(body) {
			l = lastSplit(body, f)
		}
		glue.WriteString(body[:f])
		n += e.Count(glue.String())
		glue.Reset()
		// body[f:l] = body less its text before the first split and after
		// the last, which split exactly inside body too.
		n += p.tokens - e.CountUncached(body[:f]) - e.CountUncached(body[l:])
		glue.WriteString(body[l:])
	}
	if glue.Len() > 0 {
		n += e.Count(glue.String())
	}
	return n
}

// nextSplit is the first offset i >= from, i > 0, where s[i-1] is a line feed
// and s[i:] starts a piece, or -1.
func nextSplit(s string, from int) int {
	for i := from; i < len(s); {
		j := strings.IndexByte(s[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		if tokens.StartsPiece(s[i:]) {
			return i
		}
	}
	return -1
}

// lastSplit is the last split offset of s at or after from (a split point).
func lastSplit(s string, from int) int {
	for end := len(s); end > from; {
		j := strings.LastIndexByte(s[:end], '\n')
		if j < 0 || j+1 <= from {
			break
		}
		if tokens.StartsPiece(s[j+1:]) {
			return j + 1
		}
		end = j
	}
	return from
}

// blockTokens is the exact count of one part's block.
func blockTokens(e *tokens.Encoder, p *part) int {
	switch {
	case p.body == "":
		return 0
	case p.heading == "":
		return p.tokens
	case tokens.StartsPiece(p.body):
		return e.Count(p.heading+"\n") + p.tokens
	}
	return e.CountUncached(block(p.heading, p.body))
}

// parts turns the plan's sections into parts; body gives a section's text
// and whether this assembly may cut it (Never sections never are).
func (p *Plan) parts(e *tokens.Encoder, body func(s *Section) (text string, cuttable bool)) []part {
	parts := make([]part, len(p.Sections))
	for i := range p.Sections {
		s := &p.Sections[i]
		text, cuttable := body(s)
		n := e.Count(text)
		parts[i] = part{
			name: s.Name, kind: s.Kind, heading: s.Heading, body: text,
			cuttable: cuttable && s.Policy != PolicyNever,
			priority: s.Priority, minTokens: s.MinTokens, tokens: n, original: n,
		}
	}
	return parts
}

// Seal computes what the operator writes at render time: each intent's
// fixed and reserved tokens and budget verdict (runtime sections count as
// their heading plus their reserve), with truncate the static cuts that make
// an intent fit, and the revision. It returns one static assembly per
// intent. A plan from plan.json is already sealed; Seal is for a plan built
// in code.
func (p *Plan) Seal(truncate bool) ([]*Assembly, error) {
	e, err := tokens.Get(p.Encoding)
	if err != nil {
		return nil, err
	}
	out := make([]*Assembly, 0, len(p.Intents))
	for i := range p.Intents {
		pi := &p.Intents[i]
		a := p.assembleStatic(e, pi, truncate)
		pi.Tokens, pi.FixedTokens, pi.ReservedTokens, pi.WithinBudget = a.Tokens, a.FixedTokens, a.ReservedTokens, a.WithinBudget
		out = append(out, a)
	}
	p.Revision = p.Digest()
	return out, nil
}

// assembleStatic assembles one intent at reconcile time: runtime sections
// are their heading plus their reserve.
func (p *Plan) assembleStatic(e *tokens.Encoder, pi *Intent, truncate bool) *Assembly {
	reserved := 0
	parts := p.parts(e, func(s *Section) (string, bool) {
		switch s.Kind {
		case KindStatic:
			return s.Text, true
		case KindIntent:
			return pi.Instruction, true
		}
		reserved += s.ReserveTokens
		return "", false
	})
	// Fixed text: runtime sections stand as their heading alone.
	fixed := func(p *part) string {
		if p.kind == KindRuntime {
			return p.heading
		}
		return block(p.heading, p.body)
	}
	total := func() int { return e.Count(join(parts, fixed)) + reserved }
	a := &Assembly{Intent: pi.Name, MaxTokens: p.MaxTokens, ReservedTokens: reserved}
	if truncate && total() > p.MaxTokens {
		a.Cut = cut(e, parts, p.MaxTokens, total)
		pi.StaticCuts = nil
		for _, pt := range parts {
			if pt.tokens < pt.original && (pt.kind == KindStatic || pt.kind == KindIntent) {
				pi.StaticCuts = append(pi.StaticCuts, StaticCut{Section: pt.name, Text: pt.body, TruncatedTokens: pt.original - pt.tokens})
			}
		}
	}
	a.FixedTokens = e.Count(join(parts, fixed))
	a.Tokens = a.FixedTokens + reserved
	a.WithinBudget = a.Tokens <= p.MaxTokens
	a.Text = join(parts, func(p *part) string {
		if p.kind == KindRuntime {
			return block(p.heading, Placeholder(p.name))
		}
		return block(p.heading, p.body)
	})
	for i, pt := range parts {
		sr := SectionResult{Name: pt.name, Kind: pt.kind, TruncatedTokens: pt.original - pt.tokens}
		if pt.kind == KindRuntime {
			sr.Tokens = p.Sections[i].Tokens + p.Sections[i].ReserveTokens
		} else {
			sr.Tokens = e.Count(block(pt.heading, pt.body))
		}
		a.Sections = append(a.Sections, sr)
	}
	return a
}

// Assemble finishes one intent at request time: runtime sections get their
// contents (a missing or empty one is left out), and while the prompt is
// over budget runtime sections are cut by priority down to their minimum.
// Never sections and static text are not cut here. Contents for unknown
// sections are an error (*UnknownSectionError), so a typo does not silently
// drop data; an unknown intent is an *UnknownIntentError.
//
// The work is linear in the size of the contents: each is counted once, a
// cut encodes only what it keeps, and the prompt is re-counted only around
// the joins.
func (p *Plan) Assemble(intent string, runtime map[string]string) (*Assembly, error) {
	pi := p.intent(intent)
	if pi == nil {
		return nil, &UnknownIntentError{Plan: p.Name, Intent: intent, Intents: p.IntentNames()}
	}
	for name := range runtime {
		s := p.section(name)
		if s == nil || s.Kind != KindRuntime {
			return nil, &UnknownSectionError{Plan: p.Name, Section: name}
		}
	}
	e, err := tokens.Get(p.Encoding)
	if err != nil {
		return nil, err
	}
	parts := p.parts(e, func(s *Section) (string, bool) {
		switch s.Kind {
		case KindStatic, KindIntent:
			text := s.Text
			if s.Kind == KindIntent {
				text = pi.Instruction
			}
			for _, c := range pi.StaticCuts {
				if c.Section == s.Name {
					text = c.Text
				}
			}
			return text, false
		}
		return runtime[s.Name], true
	})
	total := func() int { return countJoined(e, parts) }
	a := &Assembly{Intent: intent, MaxTokens: p.MaxTokens}
	t := total()
	if t > p.MaxTokens {
		a.Cut = cut(e, parts, p.MaxTokens, total)
		t = total()
	}
	a.Text = join(parts, func(p *part) string { return block(p.heading, p.body) })
	a.Tokens = t
	a.WithinBudget = a.Tokens <= p.MaxTokens
	a.Sections = make([]SectionResult, 0, len(parts))
	for i := range parts {
		pt := &parts[i]
		n := blockTokens(e, pt)
		if pt.kind == KindRuntime {
			a.ReservedTokens += n
		}
		a.Sections = append(a.Sections, SectionResult{Name: pt.name, Kind: pt.kind, Tokens: n, TruncatedTokens: pt.original - pt.tokens})
	}
	a.FixedTokens = a.Tokens - a.ReservedTokens
	return a, nil
}
