package plan

// Tests of memory at request time: sections emptied to the budget, the
// bounds Validate keeps, FitMemory's whole items and exact counts, and the
// recall's answer held to its section's bounds.

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/tokens"
)

// twoMemoryPlan has two memory sections, m1 and m2, filled from the
// request, whose minTokens keep the cut from shrinking them: over the
// budget they can only be dropped.
func twoMemoryPlan(t *testing.T, prio1, prio2 int) *Plan {
	t.Helper()
	mem := func(name string, prio int) Section {
		return Section{Name: name, Kind: KindMemory, Heading: "## " + name, ReserveTokens: 300, MinTokens: 1000, Policy: PolicyPriority, Priority: prio,
			Memory: &MemorySource{Bank: BankRef{Namespace: "ns", Name: name}, Query: MemoryQuery{FromRequest: true}}}
	}
	p := &Plan{
		APIVersion: PlanAPIVersion, Kind: PlanKind, Namespace: "ns", Name: "two", Encoding: "cl100k_base", MaxTokens: 10000, OnExceed: "Warn", Separator: Separator,
		Sections: []Section{
			{Name: "role", Kind: KindStatic, Text: "You are the support assistant.", Policy: PolicyNever},
			mem("m1", prio1),
			mem("m2", prio2),
			{Name: "task", Kind: KindIntent, Heading: "## Task", Policy: PolicyNever},
		},
		Intents: []Intent{{Name: "chat", Instruction: "Answer briefly."}},
		Runtime: RuntimeSummary{Placeholder: "{{runtime.NAME}}", MemoryPlaceholder: "{{memory.NAME}}"},
	}
	return sealedPlan(t, p)
}

// assembleTwo fills m1 with four items and m2 with two, leaving out the
// sections named in empty.
func assembleTwo(t *testing.T, p *Plan, empty ...string) *Assembly {
	t.Helper()
	recall := func(ctx context.Context, r MemoryRequest) ([]MemoryItem, error) {
		switch {
		case contains(empty, r.Section):
			return nil, nil
		case r.Section == "m1":
			return items(4), nil
		}
		return items(2), nil
	}
	a, err := p.Assemble(context.Background(), "chat", nil, WithRecall(recall), WithQuery("q"))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Over the budget after the cut, memory sections are emptied in cut order
// (highest priority first, the later section on a tie) and only while the
// prompt is over: at the budget exactly the next one keeps its items.
func TestDropMemoryToTheBudget(t *testing.T) {
	for _, tc := range []struct {
		name         string
		prio1, prio2 int
		dropped      string
	}{
		{"m1 ranks first", 2, 1, "m1"},
		{"m2 ranks first", 1, 2, "m2"},
		{"a tie drops the later", 1, 1, "m2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := twoMemoryPlan(t, tc.prio1, tc.prio2)
			all := assembleTwo(t, p)
			if len(all.Cut) != 0 || len(all.Memory[0].Items) != 4 || len(all.Memory[1].Items) != 2 {
				t.Fatalf("within budget: cut %v, memory %+v", all.Cut, all.Memory)
			}
			want := assembleTwo(t, p, tc.dropped)
			p.MaxTokens = want.Tokens
			// At the budget exactly nothing is dropped.
			if a := assembleTwo(t, p, tc.dropped); len(a.Cut) != 0 || a.Text != want.Text {
				t.Fatalf("at the budget: cut %v", a.Cut)
			}
			a := assembleTwo(t, p)
			if !reflect.DeepEqual(a.Cut, []string{tc.dropped}) || a.Text != want.Text || a.Tokens != want.Tokens || !a.WithinBudget {
				t.Fatalf("cut %v, %d tokens of %d (%v), want %s dropped and %d tokens:\n%s", a.Cut, a.Tokens, p.MaxTokens, a.WithinBudget, tc.dropped, want.Tokens, a.Text)
			}
			for _, m := range a.Memory {
				kept := 4
				if m.Section == "m2" {
					kept = 2
				}
				if m.Section == tc.dropped {
					kept = 0
				}
				if len(m.Items) != kept || m.Omitted != m.Recalled-kept {
					t.Errorf("%s: %d items kept, %d omitted, want %d kept", m.Section, len(m.Items), m.Omitted, kept)
				}
			}
			// One token less drops the other too.
			p.MaxTokens--
			a = assembleTwo(t, p)
			if len(a.Cut) != 2 || a.Cut[0] != tc.dropped || len(a.Memory[0].Items)+len(a.Memory[1].Items) != 0 {
				t.Fatalf("one under: cut %v", a.Cut)
			}
		})
	}
}

func TestValidateMemoryBounds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mut   func(m *MemorySource)
		valid bool
	}{
		{"maxItems 0 (no limit)", func(m *MemorySource) { m.MaxItems = 0 }, true},
		{"minScorePerMille 0", func(m *MemorySource) { m.MinScorePerMille = 0 }, true},
		{"minScorePerMille 1000", func(m *MemorySource) { m.MinScorePerMille = 1000 }, true},
		{"minScorePerMille 1001", func(m *MemorySource) { m.MinScorePerMille = 1001 }, false},
		{"minScorePerMille below 0", func(m *MemorySource) { m.MinScorePerMille = -1 }, false},
		{"query from the request", func(m *MemorySource) { m.Query = MemoryQuery{FromRequest: true} }, true},
		{"no query", func(m *MemorySource) { m.Query = MemoryQuery{} }, false},
	} {
		p := memoryPlan(t, 1000, 30, 1, 1)
		tc.mut(p.Sections[2].Memory)
		if err := p.Validate(); (err == nil) != tc.valid {
			t.Errorf("%s: error %v, want valid %v", tc.name, err, tc.valid)
		}
	}
}

func TestMemoryHelpers(t *testing.T) {
	p := twoMemoryPlan(t, 1, 1)
	if got := p.MemorySections(); !reflect.DeepEqual(got, []string{"m1", "m2"}) {
		t.Errorf("memory sections %v", got)
	}
	if !p.HasMemory() {
		t.Error("HasMemory false with two memory sections")
	}
	if got := p.Sections[1].Memory.Bank.String(); got != "ns/m1" {
		t.Errorf("bank %q", got)
	}
	p = sealPlan()
	if p.HasMemory() || p.MemorySections() != nil {
		t.Errorf("a plan without memory has memory: %v", p.MemorySections())
	}
}

// An item whose line is empty is left out and counted as omitted; the
// items after it still fit.
func TestFitMemoryEmptyLines(t *testing.T) {
	list := []MemoryItem{{ID: "a", Text: "Alice likes tea."}, {ID: "b", Text: " \n\t "}, {ID: "c", Text: "Bob likes coffee."}}
	fit, err := FitMemory("cl100k_base", list, 100)
	if err != nil {
		t.Fatal(err)
	}
	if fit.Text != "Alice likes tea.\nBob likes coffee." || fit.Omitted != 1 || len(fit.Items) != 2 || fit.Items[1].ID != "c" {
		t.Fatalf("fit %+v", fit)
	}
}

// Items that fill the budget exactly are all kept.
func TestFitMemoryExactlyFull(t *testing.T) {
	e := tokens.MustGet("cl100k_base")
	list := items(3)
	var lines []string
	for _, it := range list {
		lines = append(lines, MemoryLine(it))
	}
	full := e.Count(strings.Join(lines, "\n"))
	fit, err := FitMemory("cl100k_base", list, full)
	if err != nil {
		t.Fatal(err)
	}
	if len(fit.Items) != 3 || fit.Tokens != full || fit.Omitted != 0 {
		t.Fatalf("budget %d: kept %d items, %d tokens, %d omitted", full, len(fit.Items), fit.Tokens, fit.Omitted)
	}
	if fit, _ = FitMemory("cl100k_base", list, full-1); len(fit.Items) != 2 || fit.Omitted != 1 {
		t.Fatalf("budget %d: kept %d items, %d omitted", full-1, len(fit.Items), fit.Omitted)
	}
}

// sumBreaker counts three lines or more as 3 tokens more than their lines
// add up to: an encoding where the additive count is not exact.
type sumBreaker struct{ *tokens.Encoder }

func (s sumBreaker) Count(text string) int {
	n := s.Encoder.Count(text)
	if strings.Count(text, "\n") >= 2 {
		n += 3
	}
	return n
}

// When the lines do not add up, the final count decides: the last items go
// until the text fits, and Tokens is the text's count.
func TestFitMemoryChecksTheSum(t *testing.T) {
	enc := sumBreaker{tokens.MustGet("cl100k_base")}
	list := items(4)
	var lines []string
	for _, it := range list {
		lines = append(lines, MemoryLine(it))
	}
	three := enc.Encoder.Count(strings.Join(lines[:3], "\n")) // what the lines add up to
	fit := fitMemory(enc, list, three)
	two := strings.Join(lines[:2], "\n")
	if fit.Text != two || len(fit.Items) != 2 || fit.Items[1].ID != list[1].ID || fit.Omitted != 2 || fit.Tokens != enc.Count(two) {
		t.Fatalf("fit %d items %q, %d tokens, %d omitted; want 2 items, %d tokens, 2 omitted", len(fit.Items), fit.Text, fit.Tokens, fit.Omitted, enc.Count(two))
	}
	// With room for the 3 more, the three lines stay.
	if fit = fitMemory(enc, list, three+3); len(fit.Items) != 3 || fit.Tokens != three+3 || fit.Omitted != 1 {
		t.Fatalf("fit %d items, %d tokens, %d omitted; want 3 items, %d tokens", len(fit.Items), fit.Tokens, fit.Omitted, three+3)
	}
	// One line alone never breaks the sum; a budget under it keeps nothing.
	if fit = fitMemory(enc, list[:1], 1); fit.Text != "" || len(fit.Items) != 0 || fit.Tokens != 0 || fit.Omitted != 1 {
		t.Fatalf("fit %+v", fit)
	}
}

// The recall's answer is held to minScore (an item at it exactly is kept)
// and maxItems (0: no limit).
func TestFitRecalledBounds(t *testing.T) {
	p := memoryPlan(t, 1000, 500, 10, 5)
	list := items(5)
	list[1].Score, list[2].Score = 0.2, 0.1 // minScore 0.2
	ids := func(f MemoryFit) (out []string) {
		for _, it := range f.Items {
			out = append(out, it.ID)
		}
		return out
	}
	for _, tc := range []struct {
		maxItems int
		minScore int
		want     []string
	}{
		{0, 200, []string{"o0", "o1", "o3", "o4"}},
		{4, 200, []string{"o0", "o1", "o3", "o4"}},
		{3, 200, []string{"o0", "o1", "o3"}},
		{0, 0, []string{"o0", "o1", "o2", "o3", "o4"}},
	} {
		fit, err := p.fitRecalled(MemoryRequest{MaxTokens: 500, MaxItems: tc.maxItems, MinScorePerMille: tc.minScore}, list)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(fit); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("maxItems %d minScore %v: kept %v, want %v", tc.maxItems, tc.minScore, got, tc.want)
		}
	}
	// All below minScore: none kept.
	low := items(3)
	for i := range low {
		low[i].Score = 0.1
	}
	if fit, err := p.fitRecalled(MemoryRequest{MaxTokens: 500, MinScorePerMille: 200}, low); err != nil || len(fit.Items) != 0 {
		t.Errorf("all below minScore: kept %v (%v)", ids(fit), err)
	}
}

// joinedCounter counts how often a text of more than one line is counted.
type joinedCounter struct {
	*tokens.Encoder
	joined int
}

func (c *joinedCounter) Count(text string) int {
	if strings.Contains(strings.TrimSuffix(text, "\n"), "\n") {
		c.joined++
	}
	return c.Encoder.Count(text)
}

// The kept lines are counted together once, by the final check: the fit
// adds up each line's count exactly and never takes a line it must give
// back (which would count the text again for each, quadratic in the
// items).
func TestFitMemoryCountsTheTextOnce(t *testing.T) {
	list := items(12)
	for i := range list {
		if i%2 == 0 { // a line ending in a word: its line break is a token
			list[i].Text = strings.TrimSuffix(list[i].Text, ".")
		}
	}
	list[3].Text += " e.g. 42!!"
	list[7].Text = "咖啡很好。 " + list[7].Text
	for max := 0; max < 260; max++ {
		c := &joinedCounter{Encoder: tokens.MustGet("cl100k_base")}
		fit := fitMemory(c, list, max)
		if c.joined > 1 || fit.Tokens != c.Encoder.Count(fit.Text) || fit.Tokens > max {
			t.Fatalf("max %d: the joined text counted %d times; %d tokens, %d items", max, c.joined, fit.Tokens, len(fit.Items))
		}
	}
}
