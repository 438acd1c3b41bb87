package promptfit

import "context"

// Fitted is a prompt assembled at request time.
type Fitted struct {
	// Text is the prompt.
	Text string
	// Tokens is the exact count of Text.
	Tokens int
	// Cut names the sections that were cut, in the order they were cut.
	Cut []string
	// Sections holds each section's share, in order.
	Sections []Result
}

// Fit assembles sections at request time: it joins them with Separator
// and, while the prompt is over maxTokens, cuts the cuttable ones by
// priority down to their minimum (a section with Shrink by it). With
// dropMemory, memory sections still in a prompt over budget after that are
// then emptied in the same order: memory never keeps a prompt over budget.
//
// Each text is counted once: a body is split at its first and last split
// points (a line feed before a letter or a number), where the count of
// the prompt, of the body alone and of its block all split exactly, and
// only what a cut changed is counted again. It stops with an error
// wrapping ctx.Err() when ctx is done, checking between counts and cut
// steps.
func Fit(ctx context.Context, e Counter, sections []Section, maxTokens int, dropMemory bool) (*Fitted, error) {
	parts := make([]part, len(sections))
	for i := range sections {
		s := &sections[i]
		parts[i] = part{
			name: s.Name, kind: s.Kind, heading: s.Heading, body: s.Text,
			cuttable: s.Cuttable, priority: s.Priority, minTokens: s.MinTokens,
			tokens: -1, original: -1,
		}
		if s.Shrink != nil {
			parts[i].shrink = s.Shrink
			parts[i].tokens, parts[i].original = s.Tokens, s.Tokens
		}
	}
	c := &counts{ctx: ctx, e: e, parts: parts}
	f := &Fitted{}
	t, err := c.total()
	if err != nil {
		return nil, err
	}
	// Within the budget neither cuts anything.
	if f.Cut, t, err = cut(c, parts, maxTokens, t); err != nil {
		return nil, err
	}
	if dropMemory {
		if f.Cut, t, err = dropMemorySections(c, parts, maxTokens, t, f.Cut); err != nil {
			return nil, err
		}
	}
	f.Text = join(parts, func(p *part) string { return Block(p.heading, p.body) })
	f.Tokens = t
	f.Sections = make([]Result, len(parts))
	for i := range parts {
		pt := &parts[i]
		n, err := c.blockTokens(pt)
		if err != nil {
			return nil, err
		}
		f.Sections[i].Tokens = n
		if pt.cutNow {
			f.Sections[i].TruncatedTokens = pt.original - pt.tokens
		}
	}
	return f, nil
}
