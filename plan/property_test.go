package plan

// A property test of Assemble (issue 21): random plans and runtime contents,
// from a fixed seed, checked against the invariants a user relies on rather
// than against another implementation.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/promptfit"
	"github.com/promptops/promptops/internal/tokens"
)

// propertyText is a few words, lines, numbers and CJK, up to about 120
// tokens.
func propertyText(r *rand.Rand) string {
	words := []string{"alpha", " beta", " 42", "\n", "\n\n", " 数据", "。", ",", " the", " quick", " fox", "-", " 😀", "\tx", "Total: 1,234"}
	var b strings.Builder
	for n := r.IntN(60); n > 0; n-- {
		b.WriteString(words[r.IntN(len(words))])
	}
	return b.String()
}

// propertyPlan is a valid plan of 1 to 6 sections, one intent, and contents
// for some of its runtime sections.
func propertyPlan(r *rand.Rand) (*Plan, map[string]string) {
	p := &Plan{APIVersion: PlanAPIVersion, Kind: PlanKind, Name: "prop", Encoding: []string{tokens.O200K, tokens.CL100K}[r.IntN(2)],
		Separator: Separator, MaxTokens: r.IntN(250)}
	runtime := map[string]string{}
	intent := Intent{Name: "i", Instruction: propertyText(r)}
	hasIntent := false
	for i, n := 0, 1+r.IntN(6); i < n; i++ {
		s := Section{Name: fmt.Sprintf("s%d", i), Policy: PolicyPriority, Priority: r.IntN(3), MinTokens: r.IntN(3) * r.IntN(15)}
		if r.IntN(4) == 0 {
			s.Policy = PolicyNever
		}
		if r.IntN(2) == 0 {
			s.Heading = []string{"## Data", "Notes:", "# 工具"}[r.IntN(3)]
		}
		switch k := r.IntN(4); {
		case k == 0:
			s.Kind, s.Text = KindStatic, propertyText(r)
		case k == 1 && !hasIntent:
			s.Kind, hasIntent = KindIntent, true
		default:
			s.Kind = KindRuntime
			if r.IntN(6) != 0 {
				runtime[s.Name] = propertyText(r)
			}
		}
		p.Sections = append(p.Sections, s)
	}
	p.Intents = []Intent{intent}
	return p, runtime
}

func TestAssembleProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 2026))
	cuts := 0
	for i := 0; i < 400; i++ {
		p, runtime := propertyPlan(r)
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		a, err := p.Assemble(context.Background(), "i", runtime)
		if err != nil {
			t.Fatalf("plan %d: %v", i, err)
		}
		if len(a.Cut) > 0 {
			cuts++
		}
		checkProperties(t, fmt.Sprintf("plan %d", i), p, runtime, a)
	}
	// The seed must exercise cuts, or the properties say little.
	if cuts < 50 {
		t.Fatalf("only %d of 400 plans were cut", cuts)
	}
}

func checkProperties(t *testing.T, name string, p *Plan, runtime map[string]string, a *Assembly) {
	t.Helper()
	e := tokens.MustGet(p.Encoding)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s (budget %d, sections %+v, runtime %q): %s", name, p.MaxTokens, p.Sections, runtime, fmt.Sprintf(format, args...))
	}

	// The count reported is the count of the prompt, and the verdict
	// follows from it.
	if got := e.Count(a.Text); got != a.Tokens {
		fail("reports %d tokens, the prompt has %d", a.Tokens, got)
	}
	if a.WithinBudget != (a.Tokens <= p.MaxTokens) {
		fail("within budget %v with %d of %d tokens", a.WithinBudget, a.Tokens, p.MaxTokens)
	}

	// What each section kept: a prefix of its content, never less than
	// its minimum; Never and non-runtime sections are whole.
	kept := make([]string, len(p.Sections))
	cutSet := map[string]bool{}
	for _, n := range a.Cut {
		if cutSet[n] {
			fail("section %s named twice in the cuts %v", n, a.Cut)
		}
		cutSet[n] = true
	}
	for i, s := range p.Sections {
		sr := a.Sections[i]
		if sr.Name != s.Name {
			fail("section %d is %s, want %s", i, sr.Name, s.Name)
		}
		content := runtime[s.Name]
		switch {
		case s.Kind != KindRuntime:
			kept[i] = s.Text
			if s.Kind == KindIntent {
				kept[i] = p.Intents[0].Instruction
			}
			if sr.TruncatedTokens != 0 || cutSet[s.Name] {
				fail("section %s is not a runtime section and was cut", s.Name)
			}
			continue
		case s.Policy == PolicyNever:
			if sr.TruncatedTokens != 0 || cutSet[s.Name] {
				fail("Never section %s was cut", s.Name)
			}
		}
		original := e.Count(content)
		left := original - sr.TruncatedTokens
		body, n := e.Truncate(content, left)
		if n != left {
			fail("section %s: %d tokens left of %d, truncating gives %d", s.Name, left, original, n)
		}
		kept[i] = body
		if sr.TruncatedTokens > 0 != cutSet[s.Name] {
			fail("section %s truncated by %d but cut list %v", s.Name, sr.TruncatedTokens, a.Cut)
		}
		if left < min(s.MinTokens, original) {
			fail("section %s keeps %d tokens, below its minTokens %d", s.Name, left, s.MinTokens)
		}
		if got := e.Count(promptfit.Block(s.Heading, body)); got != sr.Tokens {
			fail("section %s reports %d tokens, its block has %d", s.Name, sr.Tokens, got)
		}
	}
	// The prompt is the sections as kept, in order.
	var blocks []string
	for i, s := range p.Sections {
		if b := promptfit.Block(s.Heading, kept[i]); b != "" {
			blocks = append(blocks, b)
		}
	}
	if want := strings.Join(blocks, Separator); a.Text != want {
		fail("prompt %q, want the kept sections %q", a.Text, want)
	}

	// Cuts in priority order: higher first, later first on a tie; a section
	// is cut only when every section before it in that order is at its
	// minimum (or was left whole because the budget was met).
	order := []int{}
	for i, s := range p.Sections {
		if s.Kind == KindRuntime && s.Policy != PolicyNever && runtime[s.Name] != "" {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(x, y int) bool {
		a, b := p.Sections[order[x]], p.Sections[order[y]]
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		return order[x] > order[y]
	})
	var wantCut []string
	for _, i := range order {
		if cutSet[p.Sections[i].Name] {
			wantCut = append(wantCut, p.Sections[i].Name)
		}
	}
	if strings.Join(wantCut, ",") != strings.Join(a.Cut, ",") {
		fail("cuts %v, want them in priority order %v", a.Cut, wantCut)
	}
	for j := 1; j < len(a.Cut); j++ {
		prev := sectionIndex(p, a.Cut[j-1])
		s := p.Sections[prev]
		left := e.Count(runtime[s.Name]) - a.Sections[prev].TruncatedTokens
		if left > s.MinTokens {
			fail("section %s was cut after %s, which keeps %d tokens above its minimum %d", a.Cut[j], s.Name, left, s.MinTokens)
		}
	}

	// Never over budget when a cut can make it fit: with every cuttable
	// section at its minimum the prompt is the smallest a cut can make.
	if !a.WithinBudget {
		floor := make([]string, len(kept))
		copy(floor, kept)
		for _, i := range order {
			s := p.Sections[i]
			floor[i], _ = e.Truncate(runtime[s.Name], s.MinTokens)
		}
		var fb []string
		for i, s := range p.Sections {
			if b := promptfit.Block(s.Heading, floor[i]); b != "" {
				fb = append(fb, b)
			}
		}
		if n := e.Count(strings.Join(fb, Separator)); n <= p.MaxTokens {
			fail("over budget (%d of %d) though cutting every section to its minimum gives %d", a.Tokens, p.MaxTokens, n)
		}
	}
	// Nothing is cut when the prompt fits whole.
	if len(a.Cut) > 0 {
		whole := make([]string, 0, len(p.Sections))
		for i, s := range p.Sections {
			text := kept[i]
			if s.Kind == KindRuntime {
				text = runtime[s.Name]
			}
			if b := promptfit.Block(s.Heading, text); b != "" {
				whole = append(whole, b)
			}
		}
		if n := e.Count(strings.Join(whole, Separator)); n <= p.MaxTokens {
			fail("cut %v though the whole prompt (%d tokens) fits %d", a.Cut, n, p.MaxTokens)
		}
	}
}

func sectionIndex(p *Plan, name string) int {
	for i := range p.Sections {
		if p.Sections[i].Name == name {
			return i
		}
	}
	return -1
}
