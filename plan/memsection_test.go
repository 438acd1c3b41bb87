package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/promptfit"
	"github.com/promptops/promptops/internal/tokens"
)

// memoryPlan is a plan with a runtime question, a memory section filled
// from it and a runtime history, sealed.
func memoryPlan(t *testing.T, maxTokens, reserve, memPrio, histPrio int) *Plan {
	t.Helper()
	p := &Plan{
		APIVersion: PlanAPIVersion, Kind: PlanKind, Namespace: "ns", Name: "support",
		Encoding: "cl100k_base", MaxTokens: maxTokens, OnExceed: "Warn", Separator: Separator,
		Sections: []Section{
			{Name: "role", Kind: KindStatic, Text: "You are the support assistant.", Policy: PolicyNever},
			{Name: "question", Kind: KindRuntime, Heading: "## Question", ReserveTokens: 20, Policy: PolicyNever},
			{Name: "memory", Kind: KindMemory, Heading: "## What we know", ReserveTokens: reserve, Policy: PolicyPriority, Priority: memPrio,
				Memory: &MemorySource{Bank: BankRef{Namespace: "ns", Name: "support"}, Query: MemoryQuery{FromRuntime: "question"}, MaxItems: 50, MinScorePerMille: 200}},
			{Name: "history", Kind: KindRuntime, Heading: "## History", ReserveTokens: 40, Policy: PolicyPriority, Priority: histPrio},
			{Name: "task", Kind: KindIntent, Heading: "## Task", Policy: PolicyNever},
		},
		Intents: []Intent{{Name: "chat", Instruction: "Answer briefly."}},
		Runtime: RuntimeSummary{Placeholder: "{{runtime.NAME}}", MemoryPlaceholder: "{{memory.NAME}}"},
	}
	return sealedPlan(t, p)
}

func items(n int) []MemoryItem {
	out := make([]MemoryItem, n)
	for i := range out {
		out[i] = MemoryItem{ID: fmt.Sprint("o", i), Kind: "observation", Text: fmt.Sprintf("Fact number %d: the customer prefers email over phone calls.", i), Score: 1 - float64(i)/float64(2*n)}
	}
	return out
}

func fixed(list []MemoryItem) RecallFunc {
	return func(ctx context.Context, r MemoryRequest) ([]MemoryItem, error) { return list, nil }
}

func TestAssembleMemoryFills(t *testing.T) {
	p := memoryPlan(t, 1000, 60, 10, 5)
	var got MemoryRequest
	recall := func(ctx context.Context, r MemoryRequest) ([]MemoryItem, error) { got = r; return items(10), nil }
	a, err := p.Assemble(context.Background(), "chat", map[string]string{"question": "How to reach me?"}, WithRecall(recall))
	if err != nil {
		t.Fatal(err)
	}
	if got.Query != "How to reach me?" || got.MaxTokens != 60 || got.MaxItems != 50 || got.MinScorePerMille != 200 || got.Bank.Name != "support" {
		t.Errorf("request %+v", got)
	}
	m := a.Memory[0]
	if len(m.Items) == 0 || m.Recalled != 10 || m.Omitted != 10-len(m.Items) || m.Code != "" {
		t.Fatalf("memory %+v", m)
	}
	fit, _ := FitMemory(p.Encoding, items(10), 60)
	if !strings.Contains(a.Text, "## What we know\n"+fit.Text+"\n\n") {
		t.Errorf("prompt lacks the items:\n%s", a.Text)
	}
	if a.Tokens > a.MaxTokens || !a.WithinBudget {
		t.Errorf("%d of %d", a.Tokens, a.MaxTokens)
	}
}

func TestAssembleMemoryFailures(t *testing.T) {
	p := memoryPlan(t, 1000, 60, 10, 5)
	rt := map[string]string{"question": "q", "history": "Earlier: a refund."}
	base, err := p.Assemble(context.Background(), "chat", rt)
	if err != nil {
		t.Fatal(err)
	}
	block := make(chan struct{})
	defer close(block)
	for _, tc := range []struct {
		name     string
		recall   RecallFunc
		runtime  map[string]string
		code     MemoryCode
		timedOut bool
	}{
		{"hangs and ignores ctx", func(ctx context.Context, r MemoryRequest) ([]MemoryItem, error) { <-block; return items(3), nil }, rt, MemoryTimedOut, true},
		{"hangs until ctx", func(ctx context.Context, r MemoryRequest) ([]MemoryItem, error) { <-ctx.Done(); return nil, ctx.Err() }, rt, MemoryTimedOut, true},
		{"fails", func(ctx context.Context, r MemoryRequest) ([]MemoryItem, error) { return nil, errors.New("boom") }, rt, MemoryRecallFailed, false},
		{"names its code", func(ctx context.Context, r MemoryRequest) ([]MemoryItem, error) {
			return nil, fmt.Errorf("wrapped: %w", &RecallError{Code: "HTTP401", Message: "no"})
		}, rt, "HTTP401", false},
		{"panics", func(ctx context.Context, r MemoryRequest) ([]MemoryItem, error) { panic("x") }, rt, MemoryRecallFailed, false},
		{"no query", fixed(items(3)), map[string]string{"history": "Earlier: a refund."}, MemoryNoQuery, false},
		{"no recall", nil, rt, MemoryNoRecall, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := p.Assemble(context.Background(), "chat", tc.runtime, WithRecall(tc.recall), WithMemoryTimeout(20*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			m := a.Memory[0]
			if m.Code != tc.code || m.TimedOut != tc.timedOut || len(m.Items) != 0 {
				t.Errorf("memory %+v, want code %s timedOut %v", m, tc.code, tc.timedOut)
			}
			if tc.runtime["question"] != "" && a.Text != base.Text {
				t.Errorf("prompt %q, want the prompt without memory %q", a.Text, base.Text)
			}
		})
	}
}

// The invariants of the fill and the cut: never over budget when the
// prompt without memory fits; whole items, a prefix of the recalled ones
// in rank order; the same priority cut as runtime sections.
func TestMemoryCutInvariants(t *testing.T) {
	rng := rand.New(rand.NewSource(19))
	for i := 0; i < 200; i++ {
		maxTokens := 80 + rng.Intn(200)
		reserve := 1 + rng.Intn(maxTokens-60)
		memPrio, histPrio := rng.Intn(3), rng.Intn(3)
		p := memoryPlan(t, maxTokens, reserve, memPrio, histPrio)
		list := items(rng.Intn(30))
		hist := strings.Repeat("The customer wrote again about the invoice. ", rng.Intn(20))
		rt := map[string]string{"question": "Which channel?", "history": hist}
		a, err := p.Assemble(context.Background(), "chat", rt, WithRecall(fixed(list)))
		if err != nil {
			t.Fatal(err)
		}
		without, err := p.Assemble(context.Background(), "chat", rt)
		if err != nil {
			t.Fatal(err)
		}
		m := a.Memory[0]
		where := fmt.Sprintf("case %d (max %d reserve %d prio mem %d hist %d, %d items)", i, maxTokens, reserve, memPrio, histPrio, len(list))
		if without.WithinBudget && (!a.WithinBudget || a.Tokens > maxTokens) {
			t.Fatalf("%s: %d tokens over %d with memory, fits without", where, a.Tokens, maxTokens)
		}
		for j, it := range m.Items {
			if it.ID != list[j].ID {
				t.Fatalf("%s: item %d is %s, want %s (a prefix in rank order)", where, j, it.ID, list[j].ID)
			}
		}
		var lines []string
		for _, it := range m.Items {
			lines = append(lines, MemoryLine(it))
		}
		if len(lines) > 0 && !strings.Contains(a.Text, "## What we know\n"+strings.Join(lines, "\n")+"\n\n") {
			t.Fatalf("%s: the section is not whole items", where)
		}
		if len(lines) == 0 && strings.Contains(a.Text, "## What we know") {
			t.Fatalf("%s: empty section kept its heading", where)
		}
		if sec := a.Sections[2]; sec.Tokens-sec.TruncatedTokens > reserve+10 {
			t.Fatalf("%s: memory took %d tokens, reserve %d", where, sec.Tokens, reserve)
		}
		// Same priority cut: when history ranks to be cut first (higher
		// priority, or equal and later) and still holds text, memory was
		// not cut.
		memCut, histCut := contains(a.Cut, "memory"), contains(a.Cut, "history")
		if histPrio >= memPrio && memCut && a.Sections[3].Tokens > 0 {
			t.Fatalf("%s: memory cut while history (cut first) kept %d tokens", where, a.Sections[3].Tokens)
		}
		if memPrio > histPrio && histCut && len(m.Items) > 0 {
			t.Fatalf("%s: history cut while memory (cut first) kept %d items", where, len(m.Items))
		}
		if m.Omitted != len(list)-len(m.Items) {
			t.Fatalf("%s: omitted %d of %d, used %d", where, m.Omitted, len(list), len(m.Items))
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestFitRecalledDistrustsTheAnswer(t *testing.T) {
	p := memoryPlan(t, 1000, 30, 10, 5)
	list := items(5)
	list[1].Score = 0.1 // below minScore 0.2
	a, err := p.Assemble(context.Background(), "chat", map[string]string{"question": "q"}, WithRecall(fixed(list)))
	if err != nil {
		t.Fatal(err)
	}
	m := a.Memory[0]
	for _, it := range m.Items {
		if it.ID == "o1" {
			t.Error("kept an item below minScore")
		}
	}
	if a.Sections[2].Tokens > 30+5 {
		t.Errorf("memory section %d tokens over its reserve 30", a.Sections[2].Tokens)
	}
}

func TestValidateMemory(t *testing.T) {
	for name, mut := range map[string]func(p *Plan){
		"no memory":          func(p *Plan) { p.Sections[2].Memory = nil },
		"no bank":            func(p *Plan) { p.Sections[2].Memory.Bank.Name = "" },
		"both queries":       func(p *Plan) { p.Sections[2].Memory.Query.FromRequest = true },
		"query not runtime":  func(p *Plan) { p.Sections[2].Memory.Query.FromRuntime = "role" },
		"min score above 1":  func(p *Plan) { p.Sections[2].Memory.MinScorePerMille = 1001 },
		"never":              func(p *Plan) { p.Sections[2].Policy = PolicyNever },
		"memory on runtime":  func(p *Plan) { p.Sections[1].Memory = &MemorySource{} },
		"static cut of mem":  func(p *Plan) { p.Intents[0].StaticCuts = []StaticCut{{Section: "memory"}} },
		"negative max items": func(p *Plan) { p.Sections[2].Memory.MaxItems = -1 },
	} {
		p := memoryPlan(t, 1000, 30, 1, 1)
		mut(p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: valid", name)
		}
	}
}

// sealedPlan seals and validates a plan built in a test: it writes the
// intents' verdicts and the revision as the operator does
// (internal/assembler.Seal, which imports this package).
func sealedPlan(t *testing.T, p *Plan) *Plan {
	t.Helper()
	e := tokens.MustGet(p.Encoding)
	for i := range p.Intents {
		pi := &p.Intents[i]
		var sections []promptfit.Section
		for _, s := range p.Sections {
			fs := promptfit.Section{Name: s.Name, Heading: s.Heading, Kind: fitKind(s.Kind), Text: s.Text, HeadingTokens: s.Tokens, ReserveTokens: s.ReserveTokens}
			if s.Kind == KindIntent {
				fs.Text = pi.Instruction
			}
			sections = append(sections, fs)
		}
		s, err := promptfit.Seal(context.Background(), e, sections, p.MaxTokens, false)
		if err != nil {
			t.Fatal(err)
		}
		pi.Tokens, pi.FixedTokens, pi.ReservedTokens, pi.WithinBudget, pi.CacheableTokens = s.Tokens, s.FixedTokens, s.ReservedTokens, s.WithinBudget, s.CacheableTokens
	}
	p.Revision = p.Digest()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

// scopedPlan is memoryPlan with a runtime "user" section and the memory
// section's scope from sc.
func scopedPlan(t *testing.T, sc MemoryScope) *Plan {
	t.Helper()
	p := memoryPlan(t, 1000, 60, 10, 5)
	p.Sections = append(p.Sections[:1], append([]Section{{Name: "user", Kind: KindRuntime, ReserveTokens: 10, Policy: PolicyNever}}, p.Sections[1:]...)...)
	for i := range p.Sections {
		if p.Sections[i].Kind == KindMemory {
			p.Sections[i].Memory.Scope = &sc
		}
	}
	return sealedPlan(t, p)
}

func TestAssembleMemoryScope(t *testing.T) {
	var got []MemoryRequest
	recall := func(ctx context.Context, r MemoryRequest) ([]MemoryItem, error) {
		got = append(got, r)
		return items(2), nil
	}
	q := map[string]string{"question": "How to reach me?"}
	for _, tc := range []struct {
		name     string
		scope    MemoryScope
		runtime  map[string]string
		reqScope string // the request's scope
		want     string // the scope asked for, or the code without a recall
		code     MemoryCode
		shared   bool
	}{
		{"from the request", MemoryScope{FromRequest: true, IncludeShared: true}, q, "user:ana", "user:ana", "", true},
		{"from a runtime section", MemoryScope{FromRuntime: "user"}, map[string]string{"question": "Hi?", "user": "u-7"}, "user:ana", "u-7", "", false},
		{"no scope given", MemoryScope{FromRequest: true}, q, "", "", MemoryNoScope, false},
		{"the runtime section missing", MemoryScope{FromRuntime: "user"}, q, "user:ana", "", MemoryNoScope, false},
		{"not a scope name", MemoryScope{FromRequest: true}, q, "ana smith", "", MemoryInvalidScope, false},
		{"no query before no scope", MemoryScope{FromRequest: true}, map[string]string{"question": " \u00a0\u3000\n"}, "", "", MemoryNoQuery, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = nil
			p := scopedPlan(t, tc.scope)
			a, err := p.Assemble(context.Background(), "chat", tc.runtime, WithRecall(recall), WithScope(tc.reqScope))
			if err != nil {
				t.Fatal(err)
			}
			m := a.Memory[0]
			if tc.code != "" {
				if len(got) != 0 || m.Code != tc.code || m.Scope != "" || len(m.Items) != 0 || strings.Contains(a.Text, "## What we know") {
					t.Fatalf("want no recall and code %s; asked %+v, got %+v", tc.code, got, m)
				}
				return
			}
			if len(got) != 1 || got[0].Scope != tc.want || got[0].IncludeShared != tc.shared || m.Scope != tc.want || m.Code != "" || len(m.Items) != 2 {
				t.Fatalf("asked %+v, got %+v", got, m)
			}
		})
	}
	// A plan without a scope asks for the shared scope, whatever the
	// request's scope.
	got = nil
	if _, err := memoryPlan(t, 1000, 60, 10, 5).Assemble(context.Background(), "chat", q, WithRecall(recall), WithScope("user:ana")); err != nil || len(got) != 1 || got[0].Scope != "" || got[0].IncludeShared {
		t.Fatalf("unscoped section asked %+v (%v)", got, err)
	}
}

func TestValidateMemoryScope(t *testing.T) {
	for _, tc := range []struct {
		scope MemoryScope
		want  string
	}{
		{MemoryScope{}, "needs exactly one of scope.fromRuntime and scope.fromRequest"},
		{MemoryScope{FromRuntime: "user", FromRequest: true}, "needs exactly one of scope.fromRuntime and scope.fromRequest"},
		{MemoryScope{FromRuntime: "role"}, `takes its scope from "role", which is not a runtime section`},
		{MemoryScope{FromRuntime: "nope"}, `takes its scope from "nope", which is not a runtime section`},
	} {
		p := memoryPlan(t, 1000, 60, 10, 5)
		p.Sections = append(p.Sections, Section{Name: "user", Kind: KindRuntime, ReserveTokens: 10, Policy: PolicyNever})
		sc := tc.scope
		p.Sections[2].Memory.Scope = &sc
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.scope, err, tc.want)
		}
	}
	p := memoryPlan(t, 1000, 60, 10, 5)
	p.Sections[2].Memory.Scope = &MemoryScope{FromRequest: true}
	if err := p.Validate(); err != nil {
		t.Errorf("a valid scope: %v", err)
	}
	var ise *InvalidScopeError
	if ValidateScope("user:ana@example.com") != nil || ValidateScope("") != nil || ValidateScope(strings.Repeat("a", 254)) == nil {
		t.Error("ValidateScope")
	}
	if err := ValidateScope("a/b"); !errors.As(err, &ise) || err.Error() != "scope: byte 2 is not a letter, digit or one of . _ : @ -" {
		t.Errorf("ValidateScope(a/b): %v", err)
	}
}

// A section's trustedOnly reaches the recall's request, and the section
// drops what the answer holds that is not trusted, as it drops items below
// minScore; a section without it asks for every item and takes them,
// trusted or not.
func TestTrustedOnly(t *testing.T) {
	for _, trustedOnly := range []bool{false, true} {
		p := memoryPlan(t, 1000, 200, 10, 5)
		p.Sections[2].Memory.TrustedOnly = trustedOnly
		list := items(4)
		list[0].Trusted, list[2].Trusted = true, true
		var got MemoryRequest
		recall := func(ctx context.Context, r MemoryRequest) ([]MemoryItem, error) { got = r; return list, nil }
		a, err := p.Assemble(context.Background(), "chat", map[string]string{"question": "q"}, WithRecall(recall))
		if err != nil {
			t.Fatal(err)
		}
		if got.TrustedOnly != trustedOnly {
			t.Errorf("trustedOnly %v: request %+v", trustedOnly, got)
		}
		var ids []string
		for _, it := range a.Memory[0].Items {
			ids = append(ids, it.ID)
		}
		want := map[bool]string{false: "o0 o1 o2 o3", true: "o0 o2"}[trustedOnly]
		if strings.Join(ids, " ") != want || a.Memory[0].Recalled != 4 || a.Memory[0].Omitted != 4-len(ids) {
			t.Errorf("trustedOnly %v: items %v, %+v; want %s", trustedOnly, ids, a.Memory[0], want)
		}
	}
}

// A plan written before minScorePerMille, with the minScore of before (0
// to 1), is refused naming the field that replaced it, as the fact API's
// snake_case names are: read as thousandths it would be another threshold.
func TestLoadRefusesTheMinScoreOfBefore(t *testing.T) {
	p := memoryPlan(t, 1000, 30, 1, 1)
	p.Sections[2].Memory.MinScorePerMille = 300
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Load(data); err != nil || got.Sections[2].Memory.MinScorePerMille != 300 {
		t.Fatalf("minScorePerMille 300: %v", err)
	}
	old := strings.Replace(string(data), `"minScorePerMille":300`, `"minScore":0.3`, 1)
	_, err = Load([]byte(old))
	var ip *InvalidPlanError
	if !errors.As(err, &ip) || ip.Section != "memory" ||
		ip.Reason != "memory section memory has minScore 0.3: a field renamed minScorePerMille, in thousandths of a score (0 to 1000; 250 for 0.25); render the template again" {
		t.Fatalf("minScore 0.3: got %v", err)
	}
	// A runtime section's text that says "minScore" is no memory section's.
	p.Sections[2].Memory.MinScorePerMille = 0
	p.Sections[0].Text = `say "minScore" twice: "minScore"`
	data, _ = json.Marshal(sealedPlan(t, p))
	if _, err := Load(data); err != nil {
		t.Fatalf("a text holding \"minScore\": %v", err)
	}
}
