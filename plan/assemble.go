package plan

import (
	"context"
	"fmt"

	"github.com/promptops/promptops/internal/promptfit"
	"github.com/promptops/promptops/internal/tokens"
)

// Assembly is one assembled prompt.
type Assembly struct {
	// Intent assembled.
	Intent string
	// Text is the prompt.
	Text string
	// Tokens is the exact count of Text.
	Tokens int
	// FixedTokens is Tokens less the runtime and memory sections' share.
	FixedTokens int
	// ReservedTokens is the runtime and memory sections' share: their
	// tokens in the prompt.
	ReservedTokens int
	// CacheableTokens counts the prompt's prefix that is the same in every
	// request (Intent.CacheableTokens).
	CacheableTokens int
	// MaxTokens is the plan's budget.
	MaxTokens int
	// WithinBudget is Tokens <= MaxTokens.
	WithinBudget bool
	// Sections holds every section of the plan, in order.
	Sections []SectionResult
	// Cut names the sections that were cut, in the order they were cut.
	Cut []string
	// Memory has one entry per memory section of the plan, in order; nil
	// when the plan has none.
	Memory []MemoryResult
}

// SectionResult is one section's share of an assembly.
type SectionResult struct {
	// Name of the section.
	Name string
	// Kind of the section.
	Kind SectionKind
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

// Assemble finishes one intent at request time: runtime sections get their
// contents (a missing or empty one is left out), and while the prompt is
// over budget runtime sections are cut by priority down to their minimum.
// Never sections and static text are not cut here. Contents for unknown
// sections are an error (*UnknownSectionError), so a typo does not silently
// drop data; an unknown intent is an *UnknownIntentError; a runtime
// content holding a special-token string under specialTokens: Reject is a
// *SpecialTokenError.
//
// Memory sections are first filled by recall (WithRecall; all side by
// side, each bounded by WithMemoryTimeout). A section holds whole items,
// in rank order, at most MaxItems of them, none scored below MinScorePerMille,
// within its reserve (FitMemory); then the prompt is cut as runtime
// contents are, memory sections among runtime sections by priority, a
// memory section losing its lowest-ranked items first. If the prompt is
// still over budget, memory sections are emptied in the same order, so
// memory never keeps a prompt over budget. A recall that fails or times
// out leaves its section empty and says so in Assembly.Memory; it never
// fails the assembly. Without WithRecall memory sections are empty (code
// MemoryNoRecall).
//
// Assemble stops when ctx is done: it checks ctx between counts and cut
// steps and then returns an error wrapping ctx.Err()
// (errors.Is(err, context.DeadlineExceeded) for a deadline). One count of
// one content is not interrupted.
//
// The work grows with the contents only as far as the budget can use them:
// a content is counted once (its edges, where it meets its heading and the
// separators, again as part of the prompt), a cut encodes no more than the
// budget can keep, and after a cut only what changed is counted.
func (p *Plan) Assemble(ctx context.Context, intent string, runtime map[string]string, opts ...AssembleOption) (*Assembly, error) {
	var cfg assembleConfig
	for _, o := range opts {
		o(&cfg)
	}
	pi, e, err := p.prepare(intent, runtime)
	if err != nil {
		return nil, err
	}
	var mem map[string]*memoryFill
	if p.HasMemory() {
		if mem, err = p.recallAll(ctx, e, runtime, cfg); err != nil {
			return nil, fmt.Errorf("plan %s: assembling intent %s: %w", p.Name, intent, err)
		}
	}
	a, err := p.assemble(ctx, e, pi, runtime, mem)
	if err != nil {
		return nil, fmt.Errorf("plan %s: assembling intent %s: %w", p.Name, intent, err)
	}
	return a, nil
}

// prepare finds the intent and the encoder, and checks that runtime names
// only runtime sections.
func (p *Plan) prepare(intent string, runtime map[string]string) (*Intent, *tokens.Encoder, error) {
	pi := p.intent(intent)
	if pi == nil {
		return nil, nil, &UnknownIntentError{Plan: p.Name, Intent: intent, Intents: p.IntentNames()}
	}
	for name := range runtime {
		s := p.section(name)
		if s == nil || s.Kind != KindRuntime {
			return nil, nil, &UnknownSectionError{Plan: p.Name, Section: name}
		}
	}
	e, err := tokens.Get(p.Encoding)
	if err != nil {
		return nil, nil, err
	}
	if p.rejectsSpecials(e) {
		// In prompt order, so that the error names the same section
		// whatever the map's order.
		for _, s := range p.Sections {
			if tok, ok := e.Special(runtime[s.Name]); ok && s.Kind == KindRuntime {
				return nil, nil, &SpecialTokenError{Plan: p.Name, Section: s.Name, Token: tok}
			}
		}
	}
	return pi, e, nil
}

// assemble is Assemble with an encoder and the intent found; mem
// holds the recalled items of memory sections by name (none: left out).
func (p *Plan) assemble(ctx context.Context, e promptfit.Counter, pi *Intent, runtime map[string]string, mem map[string]*memoryFill) (*Assembly, error) {
	sections := make([]promptfit.Section, len(p.Sections))
	cuts := make([]*memoryCut, len(p.Sections))
	for i := range p.Sections {
		s := &p.Sections[i]
		fs := promptfit.Section{
			Name: s.Name, Kind: fitKind(s.Kind), Heading: s.Heading,
			// Static text is not cut here: its cuts are the plan's.
			Cuttable: s.Kind != KindStatic && s.Kind != KindIntent && s.Policy != PolicyNever,
			Priority: s.Priority, MinTokens: s.MinTokens,
		}
		switch s.Kind {
		case KindStatic, KindIntent:
			fs.Text = s.Text
			if s.Kind == KindIntent {
				fs.Text = pi.Instruction
			}
			for _, c := range pi.StaticCuts {
				if c.Section == s.Name {
					fs.Text = c.Text
				}
			}
		case KindMemory:
			if f := mem[s.Name]; f != nil {
				// Memory is cut by priority like runtime content, by whole
				// items, and never kept whole when that leaves the prompt
				// over budget.
				mc := &memoryCut{encoding: p.Encoding, items: f.fit.Items, kept: len(f.fit.Items)}
				cuts[i] = mc
				fs.Text, fs.Tokens, fs.Shrink, fs.Cuttable = f.fit.Text, f.fit.Tokens, mc.shrink, true
			}
		default:
			fs.Text = runtime[s.Name]
		}
		sections[i] = fs
	}
	f, err := promptfit.Fit(ctx, e, sections, p.MaxTokens, mem != nil)
	if err != nil {
		return nil, err
	}
	a := &Assembly{Intent: pi.Name, MaxTokens: p.MaxTokens, Text: f.Text, Tokens: f.Tokens, Cut: f.Cut}
	a.WithinBudget = a.Tokens <= p.MaxTokens
	a.Sections = make([]SectionResult, 0, len(f.Sections))
	for i, r := range f.Sections {
		s := &p.Sections[i]
		if s.Kind == KindRuntime || s.Kind == KindMemory {
			a.ReservedTokens += r.Tokens
		}
		a.Sections = append(a.Sections, SectionResult{Name: s.Name, Kind: s.Kind, Tokens: r.Tokens, TruncatedTokens: r.TruncatedTokens})
	}
	a.FixedTokens = a.Tokens - a.ReservedTokens
	a.CacheableTokens = pi.CacheableTokens
	if mem != nil {
		for i := range p.Sections {
			s := &p.Sections[i]
			if s.Kind != KindMemory {
				continue
			}
			r := mem[s.Name].result
			// nil when the recall filled nothing.
			if mc := cuts[i]; mc != nil {
				r.Items = mc.items[:mc.kept:mc.kept]
			}
			r.Omitted = r.Recalled - len(r.Items)
			a.Memory = append(a.Memory, r)
		}
	}
	return a, nil
}

// memoryCut is a memory section's items while the prompt is cut: the first
// kept are in the prompt.
type memoryCut struct {
	encoding string
	items    []MemoryItem
	kept     int
}

// shrink keeps the longest prefix of the kept items that fits target
// (FitMemory): the lowest-ranked go first.
func (m *memoryCut) shrink(target int) (string, int, error) {
	fit, err := FitMemory(m.encoding, m.items[:m.kept], target)
	if err != nil {
		return "", 0, err
	}
	m.kept = len(fit.Items)
	return fit.Text, fit.Tokens, nil
}

// fitKind is a section kind as package promptfit names it.
func fitKind(k SectionKind) promptfit.Kind {
	switch k {
	case KindIntent:
		return promptfit.Intent
	case KindRuntime:
		return promptfit.Runtime
	case KindMemory:
		return promptfit.Memory
	}
	return promptfit.Static
}
