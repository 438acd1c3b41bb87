package plan

// Tests that fail when the cut, the verdict or Load is wrong in one of the
// ways a reviewer would try (issue 21, docs/mutation.md): the cut order by
// priority and by ties, minTokens, the cut target, WithinBudget at the
// budget exactly, and negative budgets in Load.

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/promptops/promptops/internal/tokens"
)

// runeTokens counts a rune as a token, so a test can say exactly where a
// cut must end; truncations records the targets it was asked to cut to.
type runeTokens struct{ truncations []int }

func (c *runeTokens) Count(s string) int         { return utf8.RuneCountInString(s) }
func (c *runeTokens) CountUncached(s string) int { return utf8.RuneCountInString(s) }
func (c *runeTokens) Truncate(s string, n int) (string, int) {
	c.truncations = append(c.truncations, n)
	i, k := 0, 0
	for ; i < len(s) && k < n; k++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i], k
}

// runtimePlan is a plan of runtime sections without headings, so that with
// runeTokens a prompt counts its contents' runes plus 2 per separator.
func runtimePlan(maxTokens int, sections ...Section) *Plan {
	p := &Plan{APIVersion: PlanAPIVersion, Kind: PlanKind, Name: "m", Encoding: tokens.O200K, Separator: Separator, MaxTokens: maxTokens}
	for _, s := range sections {
		if s.Kind == "" {
			s.Kind = KindRuntime
		}
		if s.Policy == "" {
			s.Policy = PolicyPriority
		}
		p.Sections = append(p.Sections, s)
	}
	p.Intents = []Intent{{Name: "i"}}
	return p
}

func assembleRunes(t *testing.T, p *Plan, runtime map[string]string) (*Assembly, *runeTokens) {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	c := &runeTokens{}
	a, err := p.assemble(context.Background(), c, p.intent("i"), runtime, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a, c
}

func sectionResult(t *testing.T, a *Assembly, name string) SectionResult {
	t.Helper()
	for _, s := range a.Sections {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no section %s in %+v", name, a.Sections)
	return SectionResult{}
}

// The section of higher priority is cut first, whatever its place; on a
// tie the later section is. Only as much is cut as the budget needs, so
// the section cut second stays whole when the first cut suffices.
func TestCutOrder(t *testing.T) {
	ten := strings.Repeat("a", 10)
	for _, c := range []struct {
		name       string
		prioA      int
		prioB      int
		wantCut    string
		wantIntact string
	}{
		{"higher priority first, first section", 2, 1, "a", "b"},
		{"higher priority first, second section", 1, 2, "b", "a"},
		{"tie: the later section first", 1, 1, "b", "a"},
		{"tie at zero: the later section first", 0, 0, "b", "a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// 10 + 2 + 10 = 22 runes, budget 17: 5 come off one section.
			p := runtimePlan(17, Section{Name: "a", Priority: c.prioA}, Section{Name: "b", Priority: c.prioB})
			a, _ := assembleRunes(t, p, map[string]string{"a": ten, "b": ten})
			if !reflect.DeepEqual(a.Cut, []string{c.wantCut}) {
				t.Fatalf("cut %v, want [%s]", a.Cut, c.wantCut)
			}
			if got := sectionResult(t, a, c.wantCut); got.TruncatedTokens != 5 || got.Tokens != 5 {
				t.Errorf("%s: %+v, want 5 tokens left, 5 cut", c.wantCut, got)
			}
			if got := sectionResult(t, a, c.wantIntact); got.TruncatedTokens != 0 || got.Tokens != 10 {
				t.Errorf("%s: %+v, want it whole", c.wantIntact, got)
			}
			if a.Tokens != 17 || !a.WithinBudget {
				t.Errorf("tokens %d within %v, want 17 within budget", a.Tokens, a.WithinBudget)
			}
		})
	}
}

// Three sections of distinct priorities are cut from the highest down, each
// to its minimum before the next is touched.
func TestCutOrderThree(t *testing.T) {
	ten := strings.Repeat("x", 10)
	// 3 x 10 + 2 x 2 = 34; budget 17: the first cut takes b to its 4, the
	// second c to its 1, the third a to 10-(19-17) = 8.
	p := runtimePlan(17,
		Section{Name: "a", Priority: 1, MinTokens: 2},
		Section{Name: "b", Priority: 3, MinTokens: 4},
		Section{Name: "c", Priority: 2, MinTokens: 1})
	a, _ := assembleRunes(t, p, map[string]string{"a": ten, "b": ten, "c": ten})
	if want := []string{"b", "c", "a"}; !reflect.DeepEqual(a.Cut, want) {
		t.Fatalf("cut %v, want %v", a.Cut, want)
	}
	for name, left := range map[string]int{"a": 8, "b": 4, "c": 1} {
		if got := sectionResult(t, a, name); got.Tokens != left || got.TruncatedTokens != 10-left {
			t.Errorf("%s: %+v, want %d left", name, got, left)
		}
	}
	if a.Tokens != 17 {
		t.Errorf("tokens %d, want 17", a.Tokens)
	}
}

// A cut keeps a section's minTokens and moves on to the next section; when
// every section is at its minimum the prompt stays over budget, and says so.
func TestCutKeepsMinTokens(t *testing.T) {
	ten := strings.Repeat("m", 10)
	// 22 runes, budget 12: b (cut first) keeps 7, a gives the other 7.
	p := runtimePlan(12, Section{Name: "a", Priority: 1}, Section{Name: "b", Priority: 2, MinTokens: 7})
	a, _ := assembleRunes(t, p, map[string]string{"a": ten, "b": ten})
	if want := []string{"b", "a"}; !reflect.DeepEqual(a.Cut, want) {
		t.Fatalf("cut %v, want %v", a.Cut, want)
	}
	if got := sectionResult(t, a, "b"); got.Tokens != 7 {
		t.Errorf("b keeps %d tokens, want its minTokens 7", got.Tokens)
	}
	if got := sectionResult(t, a, "a"); got.Tokens != 3 {
		t.Errorf("a keeps %d tokens, want 3", got.Tokens)
	}
	if a.Tokens != 12 || !a.WithinBudget {
		t.Errorf("tokens %d within %v, want 12 within", a.Tokens, a.WithinBudget)
	}

	// Both minimums together are over the budget: each is kept.
	p = runtimePlan(12, Section{Name: "a", Priority: 1, MinTokens: 6}, Section{Name: "b", Priority: 2, MinTokens: 7})
	a, _ = assembleRunes(t, p, map[string]string{"a": ten, "b": ten})
	if a.Tokens != 15 || a.WithinBudget {
		t.Errorf("tokens %d within %v, want 15 (6 + 2 + 7) over budget", a.Tokens, a.WithinBudget)
	}
	if !strings.Contains(a.Message(), "needs 15 tokens") {
		t.Errorf("message %q", a.Message())
	}
	// A section at or under its minimum is not cut at all.
	p = runtimePlan(12, Section{Name: "a", Priority: 1, MinTokens: 10}, Section{Name: "b", Priority: 2, MinTokens: 10})
	a, _ = assembleRunes(t, p, map[string]string{"a": ten, "b": ten})
	if len(a.Cut) != 0 || a.Tokens != 22 {
		t.Errorf("cut %v tokens %d, want nothing cut, 22", a.Cut, a.Tokens)
	}
}

// One section over by k tokens is cut once, to exactly its count less k:
// not a token more (the prompt would be under budget for nothing), not a
// token less, and not one token at a time.
func TestCutTargetIsExact(t *testing.T) {
	for over := 1; over <= 9; over++ {
		ten := strings.Repeat("t", 10)
		p := runtimePlan(22-over, Section{Name: "a", Priority: 1}, Section{Name: "b", Kind: KindRuntime, Policy: PolicyNever})
		a, c := assembleRunes(t, p, map[string]string{"a": ten, "b": ten})
		if a.Tokens != 22-over || !a.WithinBudget {
			t.Errorf("over by %d: tokens %d, want %d", over, a.Tokens, 22-over)
		}
		if !reflect.DeepEqual(c.truncations, []int{10 - over}) {
			t.Errorf("over by %d: truncated to %v, want once to %d", over, c.truncations, 10-over)
		}
		if got := sectionResult(t, a, "b"); got.TruncatedTokens != 0 {
			t.Errorf("over by %d: the Never section was cut: %+v", over, got)
		}
	}
}

// A prompt of exactly the budget is within it: nothing is cut, and the
// verdict and message say so (at render time: TestSealWithinBudgetAtTheBudget
// in internal/promptfit).
func TestWithinBudgetAtTheBudget(t *testing.T) {
	ten := strings.Repeat("w", 10)
	p := runtimePlan(22, Section{Name: "a", Priority: 1}, Section{Name: "b", Priority: 1})
	a, c := assembleRunes(t, p, map[string]string{"a": ten, "b": ten})
	if a.Tokens != 22 || !a.WithinBudget || len(a.Cut) != 0 || len(c.truncations) != 0 {
		t.Errorf("tokens %d within %v cut %v, want 22 within, nothing cut", a.Tokens, a.WithinBudget, a.Cut)
	}
	if !strings.Contains(a.Message(), "takes 22 tokens") {
		t.Errorf("message %q", a.Message())
	}
	p.MaxTokens = 21
	a, _ = assembleRunes(t, p, map[string]string{"a": ten, "b": ten})
	if a.Tokens != 21 || !a.WithinBudget || !reflect.DeepEqual(a.Cut, []string{"b"}) {
		t.Errorf("budget 21: tokens %d within %v cut %v", a.Tokens, a.WithinBudget, a.Cut)
	}
}

// A negative budget or minimum cannot be assembled: Load says which field.
func TestLoadRejectsNegatives(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{`"maxTokens":10`, `"maxTokens":-1`, "maxTokens -1 is negative"},
		{`"policy":"Priority"`, `"policy":"Priority","minTokens":-3`, "section ctx has negative minTokens"},
	} {
		_, err := Load([]byte(strings.Replace(minimal, c.from, c.to, 1)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.to, err, c.want)
		}
	}
	// Zero is a budget and a minimum.
	if _, err := Load([]byte(strings.Replace(strings.Replace(minimal, `"maxTokens":10`, `"maxTokens":0`, 1), `"policy":"Priority"`, `"policy":"Priority","minTokens":0`, 1))); err != nil {
		t.Errorf("zero budget and minimum: %v", err)
	}
}

// sealPlan is a plan built in code whose intent is over its budget until
// its static sections are cut.
func sealPlan() *Plan {
	e := tokens.MustGet(tokens.O200K)
	return &Plan{APIVersion: PlanAPIVersion, Kind: PlanKind, Namespace: "ns", Name: "seal", Encoding: tokens.O200K, Separator: Separator, MaxTokens: 60,
		OnExceed: "Truncate",
		Sections: []Section{
			{Name: "sys", Kind: KindStatic, Policy: PolicyNever, Text: "You are terse."},
			{Name: "notes", Kind: KindStatic, Policy: PolicyPriority, Priority: 1, MinTokens: 5, Heading: "## Notes", Text: strings.Repeat(" note", 100)},
			{Name: "data", Kind: KindRuntime, Policy: PolicyPriority, Priority: 2, Heading: "## Data", Tokens: e.Count("## Data"), ReserveTokens: 20},
			{Name: "task", Kind: KindIntent, Policy: PolicyPriority},
		},
		Intents: []Intent{{Name: "chat", Instruction: strings.Repeat(" do", 50)}},
	}
}

// The plan's small helpers: names, and a digest that follows
// the content and ignores the revision written in it.
func TestPlanHelpers(t *testing.T) {
	p := sealPlan()
	if got := p.RuntimeSections(); !reflect.DeepEqual(got, []string{"data"}) {
		t.Errorf("runtime sections %v", got)
	}
	if got := p.IntentNames(); !reflect.DeepEqual(got, []string{"chat"}) {
		t.Errorf("intents %v", got)
	}
	d := p.Digest()
	p.Revision = "sha256:whatever"
	if p.Digest() != d {
		t.Error("the digest depends on the revision written")
	}
	p.Sections[0].Text += "!"
	if p.Digest() == d {
		t.Error("the digest ignores a section's text")
	}
	// Two intent sections cannot be assembled.
	p = sealPlan()
	p.Sections = append(p.Sections, Section{Name: "task2", Kind: KindIntent, Policy: PolicyNever})
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "2 intent sections") {
		t.Errorf("two intent sections: %v", err)
	}
}
