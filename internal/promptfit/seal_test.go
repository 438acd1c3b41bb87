package promptfit_test

// Render time: the operator's Seal (internal/assembler) over this
// package's Seal, with the real encoder.

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/assembler"
	"github.com/promptops/promptops/internal/promptfit"
	"github.com/promptops/promptops/internal/tokens"
	"github.com/promptops/promptops/plan"
)

// A budget of exactly the intent's tokens is within it, one less is not.
func TestSealWithinBudgetAtTheBudget(t *testing.T) {
	sp := &plan.Plan{APIVersion: plan.PlanAPIVersion, Kind: plan.PlanKind, Name: "s", Encoding: tokens.O200K, Separator: plan.Separator,
		Sections: []plan.Section{{Name: "sys", Kind: plan.KindStatic, Policy: plan.PolicyNever, Text: "You are a careful analyst."},
			{Name: "data", Kind: plan.KindRuntime, Policy: plan.PolicyPriority, Heading: "## Data", ReserveTokens: 50}},
		Intents: []plan.Intent{{Name: "i"}}}
	if _, err := assembler.Seal(context.Background(), sp, false); err != nil {
		t.Fatal(err)
	}
	need := sp.Intents[0].Tokens
	if need <= 50 {
		t.Fatalf("sealed tokens %d", need)
	}
	for _, c := range []struct {
		budget int
		within bool
	}{{need, true}, {need - 1, false}, {need + 1, true}} {
		sp.MaxTokens = c.budget
		as, err := assembler.Seal(context.Background(), sp, false)
		if err != nil {
			t.Fatal(err)
		}
		if sp.Intents[0].WithinBudget != c.within || as[0].WithinBudget != c.within {
			t.Errorf("budget %d, need %d: within %v, want %v", c.budget, need, sp.Intents[0].WithinBudget, c.within)
		}
	}
}

// sealPlan is a plan built in code whose intent is over its budget until
// its static sections are cut.
func sealPlan() *plan.Plan {
	e := tokens.MustGet(tokens.O200K)
	return &plan.Plan{APIVersion: plan.PlanAPIVersion, Kind: plan.PlanKind, Namespace: "ns", Name: "seal", Encoding: tokens.O200K, Separator: plan.Separator, MaxTokens: 60,
		OnExceed: plan.OnExceedTruncate,
		Sections: []plan.Section{
			{Name: "sys", Kind: plan.KindStatic, Policy: plan.PolicyNever, Text: "You are terse."},
			{Name: "notes", Kind: plan.KindStatic, Policy: plan.PolicyPriority, Priority: 1, MinTokens: 5, Heading: "## Notes", Text: strings.Repeat(" note", 100)},
			{Name: "data", Kind: plan.KindRuntime, Policy: plan.PolicyPriority, Priority: 2, Heading: "## Data", Tokens: e.Count("## Data"), ReserveTokens: 20},
			{Name: "task", Kind: plan.KindIntent, Policy: plan.PolicyPriority},
		},
		Intents: []plan.Intent{{Name: "chat", Instruction: strings.Repeat(" do", 50)}},
	}
}

// Seal with truncate cuts static sections by priority down to their
// minimum until the intent fits, records the cuts, and the request-time
// assembly then uses the cut texts; without truncate nothing is cut and the
// verdict is over budget.
func TestSealTruncates(t *testing.T) {
	e := tokens.MustGet(tokens.O200K)
	p := sealPlan()
	as, err := assembler.Seal(context.Background(), p, true)
	if err != nil {
		t.Fatal(err)
	}
	a, pi := as[0], p.Intents[0]
	if !reflect.DeepEqual(a.Cut, []string{"notes", "task"}) {
		t.Fatalf("cut %v, want [notes task]", a.Cut)
	}
	// The fixed text is the prompt with the runtime section as its heading.
	fixed := strings.Replace(a.Text, "## Data\n"+promptfit.Placeholder("data"), "## Data", 1)
	if want := e.Count(fixed) + 20; a.Tokens != want || a.Tokens > 60 || !a.WithinBudget {
		t.Errorf("tokens %d within %v, want %d <= 60", a.Tokens, a.WithinBudget, want)
	}
	if a.ReservedTokens != 20 || a.FixedTokens != a.Tokens-20 || a.MaxTokens != 60 {
		t.Errorf("fixed %d reserved %d max %d", a.FixedTokens, a.ReservedTokens, a.MaxTokens)
	}
	if pi.Tokens != a.Tokens || pi.FixedTokens != a.FixedTokens || pi.ReservedTokens != 20 || !pi.WithinBudget {
		t.Errorf("intent %+v, assembly %+v", pi, a)
	}
	if len(pi.StaticCuts) != 2 {
		t.Fatalf("static cuts %+v", pi.StaticCuts)
	}
	notes, task := pi.StaticCuts[0], pi.StaticCuts[1]
	if notes.Section != "notes" || e.Count(notes.Text) != 5 || !strings.HasPrefix(p.Sections[1].Text, notes.Text) || notes.TruncatedTokens != 95 {
		t.Errorf("notes cut %+v, want its minimum of 5 tokens, 95 cut", notes)
	}
	if task.Section != "task" || !strings.HasPrefix(pi.Instruction, task.Text) || task.TruncatedTokens != 50-e.Count(task.Text) || task.TruncatedTokens == 0 {
		t.Errorf("task cut %+v", task)
	}
	wantSections := map[string][2]int{
		"sys":   {e.Count("You are terse."), 0},
		"notes": {e.Count("## Notes\n" + notes.Text), 95},
		"data":  {e.Count("## Data") + 20, 0},
		"task":  {e.Count(task.Text), task.TruncatedTokens},
	}
	for _, s := range a.Sections {
		if w := wantSections[s.Name]; s.Tokens != w[0] || s.TruncatedTokens != w[1] {
			t.Errorf("section %s: %+v, want tokens %d truncated %d", s.Name, s, w[0], w[1])
		}
	}
	if p.Revision != p.Digest() || !strings.HasPrefix(p.Revision, "sha256:") || len(p.Revision) != len("sha256:")+64 {
		t.Errorf("revision %q, digest %q", p.Revision, p.Digest())
	}

	// Request time uses the cuts.
	ra, err := p.Assemble(context.Background(), "chat", map[string]string{"data": "rows: 3"})
	if err != nil {
		t.Fatal(err)
	}
	want := "You are terse.\n\n## Notes\n" + notes.Text + "\n\n## Data\nrows: 3\n\n" + task.Text
	if ra.Text != want || ra.Tokens != e.Count(want) {
		t.Errorf("assembled %q (%d tokens), want %q", ra.Text, ra.Tokens, want)
	}

	// Without truncate: nothing is cut, the verdict says over budget.
	p = sealPlan()
	as, err = assembler.Seal(context.Background(), p, false)
	if err != nil {
		t.Fatal(err)
	}
	if as[0].WithinBudget || p.Intents[0].WithinBudget || len(as[0].Cut) != 0 || len(p.Intents[0].StaticCuts) != 0 || as[0].Tokens <= 60 {
		t.Errorf("Seal(false): %+v", as[0])
	}
	if !strings.Contains(as[0].Message(), fmt.Sprintf("needs %d tokens (%d fixed + 20 reserved), budget 60", as[0].Tokens, as[0].Tokens-20)) {
		t.Errorf("message %q", as[0].Message())
	}
}

// memoryPlan has a runtime, a memory and a second runtime section, each
// with a reserve.
func memoryPlan() *plan.Plan {
	return &plan.Plan{
		APIVersion: plan.PlanAPIVersion, Kind: plan.PlanKind, Namespace: "ns", Name: "support",
		Encoding: "cl100k_base", MaxTokens: 1000, OnExceed: plan.OnExceedWarn, Separator: plan.Separator,
		Sections: []plan.Section{
			{Name: "role", Kind: plan.KindStatic, Text: "You are the support assistant.", Policy: plan.PolicyNever},
			{Name: "question", Kind: plan.KindRuntime, Heading: "## Question", ReserveTokens: 20, Policy: plan.PolicyNever},
			{Name: "memory", Kind: plan.KindMemory, Heading: "## What we know", ReserveTokens: 300, Policy: plan.PolicyPriority, Priority: 10,
				Memory: &plan.MemorySource{Bank: plan.BankRef{Namespace: "ns", Name: "support"}, Query: plan.MemoryQuery{FromRuntime: "question"}, MaxItems: 50, MinScorePerMille: 200}},
			{Name: "history", Kind: plan.KindRuntime, Heading: "## History", ReserveTokens: 40, Policy: plan.PolicyPriority, Priority: 5},
			{Name: "task", Kind: plan.KindIntent, Heading: "## Task", Policy: plan.PolicyNever},
		},
		Intents: []plan.Intent{{Name: "chat", Instruction: "Answer briefly."}},
	}
}

func TestSealCountsMemoryReserve(t *testing.T) {
	a, err := assembler.Seal(context.Background(), memoryPlan(), false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a[0].ReservedTokens, 20+300+40; got != want {
		t.Errorf("reserved %d, want %d", got, want)
	}
	if !strings.Contains(a[0].Text, "## What we know\n{{memory.memory}}") {
		t.Errorf("static text lacks the memory placeholder:\n%s", a[0].Text)
	}
}

func TestPlaceholders(t *testing.T) {
	if got := promptfit.Placeholder("data"); got != "{{runtime.data}}" {
		t.Errorf("placeholder %q", got)
	}
	if got := promptfit.MemoryPlaceholder("data"); got != "{{memory.data}}" {
		t.Errorf("memory placeholder %q", got)
	}
	if promptfit.Separator != plan.Separator {
		t.Errorf("separator %q, plan's %q", promptfit.Separator, plan.Separator)
	}
}
