package assembler

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/promptops/promptops/plan"
)

const withMemory = `
encoding: cl100k_base
budget: {maxTokens: 1000}
sections:
- {name: role, text: "You are the support assistant.", truncation: {policy: Never}}
- {name: question, heading: "## Question", runtime: {reserveTokens: 100}}
- name: memory
  heading: "## What we know about the customer"
  memory: {bankRef: {name: support}, query: {fromRuntime: question}, reserveTokens: 300, minScore: 250}
  truncation: {priority: 10, minTokens: 50}
- {name: task, heading: "## Task", intent: true}
intents: [{name: chat, instruction: "Answer briefly."}]
`

func TestMemoryReserveCountsLikeRuntime(t *testing.T) {
	r, err := Render(Input{Namespace: "ns", Name: "t", Spec: spec(t, withMemory), MemoryEndpoints: map[string]string{"support": "http://support-memory.ns.svc:8089"}})
	if err != nil {
		t.Fatal(err)
	}
	e := r.Plan
	heading := e.Sections[2].Tokens
	if heading == 0 {
		t.Fatal("the memory heading is not counted")
	}
	asm := r.Intents[0]
	if asm.ReservedTokens != 100+300 {
		t.Errorf("reserved %d, want 400", asm.ReservedTokens)
	}
	// The same template with the memory section as a runtime section of
	// the same reserve and heading has the same verdict.
	asRuntime := strings.Replace(withMemory, "memory: {bankRef: {name: support}, query: {fromRuntime: question}, reserveTokens: 300, minScore: 250}", "runtime: {reserveTokens: 300}", 1)
	rr := render(t, asRuntime, nil)
	if got, want := asm.Tokens, rr.Intents[0].Tokens; got != want {
		t.Errorf("tokens %d with memory, %d with the same runtime reserve", got, want)
	}
	if asm.FixedTokens != rr.Intents[0].FixedTokens {
		t.Errorf("fixed %d, want %d", asm.FixedTokens, rr.Intents[0].FixedTokens)
	}
	m := e.Sections[2]
	want := plan.MemorySource{Bank: plan.BankRef{Namespace: "ns", Name: "support"}, Endpoint: "http://support-memory.ns.svc:8089",
		Query: plan.MemoryQuery{FromRuntime: "question"}, MaxItems: DefaultMemoryMaxItems, MinScorePerMille: 250}
	if m.Kind != plan.KindMemory || m.ReserveTokens != 300 || m.Memory == nil || *m.Memory != want || m.MinTokens != 50 || m.Priority != 10 {
		t.Errorf("plan section %+v memory %+v", m, m.Memory)
	}
	if !strings.Contains(asm.Text, "## What we know about the customer\n{{memory.memory}}") {
		t.Errorf("static text:\n%s", asm.Text)
	}
	data, err := ConfigMapData(r)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Load([]byte(data[PlanKey]))
	if err != nil {
		t.Fatal(err)
	}
	if p.Runtime.MemoryPlaceholder != "{{memory.NAME}}" || p.Sections[2].Memory.Endpoint == "" {
		t.Errorf("loaded plan %+v", p.Runtime)
	}
	var raw map[string]any
	_ = json.Unmarshal([]byte(data[PlanKey]), &raw)
	if got := raw["sections"].([]any)[2].(map[string]any)["memory"].(map[string]any)["minScorePerMille"]; got != 250.0 {
		t.Errorf("minScorePerMille in plan.json is %v, want the spec's 250", got)
	}
	// Not served: the endpoint is empty, the render succeeds.
	r2, err := Render(Input{Namespace: "ns", Name: "t", Spec: spec(t, withMemory)})
	if err != nil || r2.Plan.Sections[2].Memory.Endpoint != "" {
		t.Fatalf("unserved bank: %v", err)
	}
	if r2.Plan.Revision == r.Plan.Revision {
		t.Error("the endpoint is not in the revision")
	}
	if got := MemoryBanks(spec(t, withMemory)); len(got) != 1 || got[0] != "support" {
		t.Errorf("MemoryBanks %v", got)
	}
}

func TestMemoryOverBudget(t *testing.T) {
	y := strings.Replace(withMemory, "reserveTokens: 300,", "reserveTokens: 950,", 1)
	r := render(t, y, nil)
	if r.Intents[0].WithinBudget {
		t.Errorf("a memory reserve of 950 fits a budget of 1000 with 100 reserved elsewhere: %s", r.Intents[0].Message())
	}
}

func TestValidateMemory(t *testing.T) {
	for want, y := range map[string]string{
		"exactly one of fromRuntime and fromRequest":     strings.Replace(withMemory, "query: {fromRuntime: question}", "query: {fromRuntime: question, fromRequest: true}", 1),
		"needs exactly one of":                           strings.Replace(withMemory, "query: {fromRuntime: question}", "query: {}", 1),
		"must name a runtime section":                    strings.Replace(withMemory, "fromRuntime: question", "fromRuntime: role", 1),
		"memory.reserveTokens":                           strings.Replace(withMemory, "reserveTokens: 300,", "reserveTokens: 1000,", 1),
		"per mille":                                      strings.Replace(withMemory, "minScore: 250", "minScore: 1001", 1),
		"memory.maxItems":                                strings.Replace(withMemory, "minScore: 250", "maxItems: 1001", 1),
		"not a valid MemoryBank name":                    strings.Replace(withMemory, "name: support", "name: Support", 1),
		"truncation.policy":                              strings.Replace(withMemory, "truncation: {priority: 10, minTokens: 50}", "truncation: {policy: Never}", 1),
		"exactly one of text (or from), runtime, memory": strings.Replace(withMemory, "  memory: {", "  runtime: {}\n  memory: {", 1),
		"memory.scope: needs exactly one of":             strings.Replace(withMemory, "reserveTokens: 300,", "scope: {}, reserveTokens: 300,", 1),
		"memory.scope: needs exactly one of fromRuntime": strings.Replace(withMemory, "reserveTokens: 300,", "scope: {fromRuntime: question, fromRequest: true}, reserveTokens: 300,", 1),
		"memory.scope.fromRuntime: \"role\" must name":   strings.Replace(withMemory, "reserveTokens: 300,", "scope: {fromRuntime: role}, reserveTokens: 300,", 1),
	} {
		err := Validate(spec(t, y))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q, got %v", want, err)
		}
	}
}

// A memory section's scope goes into plan.json as the template says it.
func TestMemoryScopeInPlan(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want *plan.MemoryScope
	}{
		{"", nil},
		{"scope: {fromRequest: true}, ", &plan.MemoryScope{FromRequest: true}},
		{"scope: {fromRuntime: question, includeShared: true}, ", &plan.MemoryScope{FromRuntime: "question", IncludeShared: true}},
	} {
		r := render(t, strings.Replace(withMemory, "reserveTokens: 300,", tc.yaml+"reserveTokens: 300,", 1), nil)
		got := r.Plan.Sections[2].Memory.Scope
		if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("%q: scope %+v, want %+v", tc.yaml, got, tc.want)
		}
	}
}

// A memory section's trustedOnly goes into the plan as it is; a section
// without it writes no trustedOnly, so the plan.json of a template that
// does not use it is the one it was.
func TestMemoryTrustedOnlyInPlan(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want bool
	}{{"", false}, {"trustedOnly: false, ", false}, {"trustedOnly: true, ", true}} {
		r := render(t, strings.Replace(withMemory, "reserveTokens: 300,", tc.yaml+"reserveTokens: 300,", 1), nil)
		if got := r.Plan.Sections[2].Memory.TrustedOnly; got != tc.want {
			t.Errorf("%q: trustedOnly %v, want %v", tc.yaml, got, tc.want)
		}
		data, err := json.Marshal(r.Plan.Sections[2].Memory)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "trustedOnly") != tc.want {
			t.Errorf("%q: the plan's memory source is %s", tc.yaml, data)
		}
	}
}
