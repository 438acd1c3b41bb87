package assembler

import (
	"context"
	"fmt"

	"github.com/promptops/promptops/internal/promptfit"
	"github.com/promptops/promptops/internal/tokens"
	"github.com/promptops/promptops/plan"
)

// Seal computes what the operator writes at render time into a plan built
// in code: each intent's fixed and reserved tokens and budget verdict
// (runtime and memory sections count as their heading plus their reserve),
// with staticCuts the cuts of static text where an intent is over budget
// (onExceed: Truncate), and the revision. It returns one static assembly
// per intent: its Text has a placeholder line for each runtime and memory
// section, its Tokens are FixedTokens + ReservedTokens, its ReservedTokens
// the reserves. A plan from plan.json is already sealed. It stops, with an
// error wrapping ctx.Err(), when ctx is done.
func Seal(ctx context.Context, p *plan.Plan, staticCuts bool) ([]*Assembly, error) {
	e, err := tokens.Get(p.Encoding)
	if err != nil {
		return nil, err
	}
	out := make([]*Assembly, 0, len(p.Intents))
	for i := range p.Intents {
		pi := &p.Intents[i]
		s, err := promptfit.Seal(ctx, e, sealSections(p, pi), p.MaxTokens, staticCuts)
		if err != nil {
			return nil, fmt.Errorf("plan %s: sealing intent %s: %w", p.Name, pi.Name, err)
		}
		pi.Tokens, pi.FixedTokens, pi.ReservedTokens, pi.WithinBudget = s.Tokens, s.FixedTokens, s.ReservedTokens, s.WithinBudget
		pi.CacheableTokens = s.CacheableTokens
		if staticCuts {
			pi.StaticCuts = nil
			for _, c := range s.StaticCuts {
				pi.StaticCuts = append(pi.StaticCuts, StaticCut{Section: c.Section, Text: c.Text, TruncatedTokens: c.TruncatedTokens})
			}
		}
		a := &Assembly{
			Intent: pi.Name, Text: s.Text, Tokens: s.Tokens, FixedTokens: s.FixedTokens, ReservedTokens: s.ReservedTokens,
			CacheableTokens: s.CacheableTokens, MaxTokens: p.MaxTokens, WithinBudget: s.WithinBudget, Cut: s.Cut,
		}
		for k, r := range s.Sections {
			a.Sections = append(a.Sections, SectionResult{Name: p.Sections[k].Name, Kind: p.Sections[k].Kind, Tokens: r.Tokens, TruncatedTokens: r.TruncatedTokens})
		}
		out = append(out, a)
	}
	p.Revision = p.Digest()
	return out, nil
}

// sealSections is the plan's sections for one intent at render time:
// static text and the instruction may be cut by policy, runtime and
// memory sections stand as their heading and reserve.
func sealSections(p *plan.Plan, pi *plan.Intent) []promptfit.Section {
	out := make([]promptfit.Section, len(p.Sections))
	for i := range p.Sections {
		s := &p.Sections[i]
		fs := promptfit.Section{
			Name: s.Name, Heading: s.Heading, Priority: s.Priority, MinTokens: s.MinTokens,
			HeadingTokens: s.Tokens, ReserveTokens: s.ReserveTokens,
		}
		switch s.Kind {
		case plan.KindStatic:
			fs.Kind, fs.Text = promptfit.Static, s.Text
		case plan.KindIntent:
			fs.Kind, fs.Text = promptfit.Intent, pi.Instruction
		case plan.KindRuntime:
			fs.Kind = promptfit.Runtime
		default:
			fs.Kind = promptfit.Memory
		}
		fs.Cuttable = (fs.Kind == promptfit.Static || fs.Kind == promptfit.Intent) && s.Policy != plan.PolicyNever
		out[i] = fs
	}
	return out
}
