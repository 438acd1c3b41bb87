package plan

// The assembly algorithm as it was before the bounded-cost rewrite (issue
// 16), kept verbatim (names prefixed ref, the encoder behind an interface) as the reference the rewrite must
// match byte for byte: TestAssembleMatchesReference.

import (
	"sort"
	"strings"

	"github.com/promptops/promptops/internal/promptfit"
	"github.com/promptops/promptops/internal/tokens"
)

// refPart is one section while an assembly is being cut.
type refPart struct {
	name, heading, body string
	kind                SectionKind
	cuttable            bool
	priority, minTokens int
	tokens, original    int // of body
}

func refJoin(parts []refPart, render func(p *refPart) string) string {
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

// refCut shrinks cuttable parts, highest priority first (later sections first on
// a tie), each down to its minimum, until total() fits limit. It returns the
// names of the parts cut, in order.
func refCut(e promptfit.Counter, parts []refPart, limit int, total func() int) []string {
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

// refCountJoined is the exact token count of the parts' blocks joined by
// Separator, computed from each body's known count. Where a line feed is
// followed by a letter or a number (tokens.StartsPiece) the count splits
// exactly, so only the text around the joins is counted: the first and last
// line of each body, headings and separators. A long body is then not
// counted again after it is refCut or when nothing is refCut; a body with no such
// line is counted with its neighbours.
func refCountJoined(e promptfit.Counter, parts []refPart) int {
	last := -1 // the last refPart in the prompt
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
			f = refNextSplit(body, 0)
		}
		if f < 0 {
			glue.WriteString(body)
			continue
		}
		l := len(body)
		if i != last && !tokens.EndsPiece(body) {
			l = refLastSplit(body, f)
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

// refNextSplit is the first offset i >= from, i > 0, where s[i-1] is a line feed
// and s[i:] starts a piece, or -1.
func refNextSplit(s string, from int) int {
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

// refLastSplit is the last split offset of s at or after from (a split point).
func refLastSplit(s string, from int) int {
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

// refBlockTokens is the exact count of one refPart's block.
func refBlockTokens(e promptfit.Counter, p *refPart) int {
	switch {
	case p.body == "":
		return 0
	case p.heading == "":
		return p.tokens
	case tokens.StartsPiece(p.body):
		return e.Count(p.heading+"\n") + p.tokens
	}
	return e.CountUncached(promptfit.Block(p.heading, p.body))
}

// parts turns the plan's sections into parts; body gives a section's text
// and whether this assembly may refCut it (Never sections never are).
func refParts(p *Plan, e promptfit.Counter, body func(s *Section) (text string, cuttable bool)) []refPart {
	parts := make([]refPart, len(p.Sections))
	for i := range p.Sections {
		s := &p.Sections[i]
		text, cuttable := body(s)
		n := e.Count(text)
		parts[i] = refPart{
			name: s.Name, kind: s.Kind, heading: s.Heading, body: text,
			cuttable: cuttable && s.Policy != PolicyNever,
			priority: s.Priority, minTokens: s.MinTokens, tokens: n, original: n,
		}
	}
	return parts
}

// refAssemble finishes one intent at request time: runtime sections get their
// contents (a missing or empty one is left out), and while the prompt is
// over budget runtime sections are refCut by priority down to their minimum.
// Never sections and static text are not refCut here. Contents for unknown
// sections are an error (*UnknownSectionError), so a typo does not silently
// drop data; an unknown intent is an *UnknownIntentError.
//
// The work is linear in the size of the contents: each is counted once, a
// refCut encodes only what it keeps, and the prompt is re-counted only around
// the joins.
func refAssemble(p *Plan, intent string, runtime map[string]string) (*Assembly, error) {
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
	return refAssembleWith(p, e, intent, runtime)
}

// refAssembleWith is refAssemble with a given counter (the only change to
// the code: the encoder's type).
func refAssembleWith(p *Plan, e promptfit.Counter, intent string, runtime map[string]string) (*Assembly, error) {
	pi := p.intent(intent)
	parts := refParts(p, e, func(s *Section) (string, bool) {
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
	total := func() int { return refCountJoined(e, parts) }
	a := &Assembly{Intent: intent, MaxTokens: p.MaxTokens}
	t := total()
	if t > p.MaxTokens {
		a.Cut = refCut(e, parts, p.MaxTokens, total)
		t = total()
	}
	a.Text = refJoin(parts, func(p *refPart) string { return promptfit.Block(p.heading, p.body) })
	a.Tokens = t
	a.WithinBudget = a.Tokens <= p.MaxTokens
	a.Sections = make([]SectionResult, 0, len(parts))
	for i := range parts {
		pt := &parts[i]
		n := refBlockTokens(e, pt)
		if pt.kind == KindRuntime {
			a.ReservedTokens += n
		}
		a.Sections = append(a.Sections, SectionResult{Name: pt.name, Kind: pt.kind, Tokens: n, TruncatedTokens: pt.original - pt.tokens})
	}
	a.FixedTokens = a.Tokens - a.ReservedTokens
	// The plan's own: the prefix does not depend on the request.
	a.CacheableTokens = pi.CacheableTokens
	return a, nil
}
