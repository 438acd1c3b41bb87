package assembler

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/tokens"
)

func spec(t *testing.T, y string) *promptopsv1.PromptTemplateSpec {
	t.Helper()
	s := &promptopsv1.PromptTemplateSpec{}
	if err := yaml.UnmarshalStrict([]byte(y), s); err != nil {
		t.Fatal(err)
	}
	return s
}

func render(t *testing.T, y string, sources ConfigMaps) *Result {
	t.Helper()
	r, err := Render(Input{Namespace: "ns", Name: "t", Spec: spec(t, y), Sources: sources})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestOnlyIntentSectionIsTheInstructionByteForByte(t *testing.T) {
	instr := "  Answer briefly.\n\n  Keep   spacing, 中文 and emoji 🎉 exactly.\n"
	r := render(t, `
budget: {maxTokens: 100}
sections: [{name: task, intent: true}]
intents: [{name: chat, instruction: "`+strings.ReplaceAll(strings.ReplaceAll(instr, "\n", `\n`), `"`, `\"`)+`"}]
`, nil)
	if got := r.Intents[0].Text; got != instr {
		t.Fatalf("got %q, want %q", got, instr)
	}
	if want := tokens.MustGet(tokens.O200K).Count(instr); r.Intents[0].Tokens != want {
		t.Fatalf("tokens %d, want %d", r.Intents[0].Tokens, want)
	}
}

const sixSections = `
encoding: cl100k_base
budget: {maxTokens: 4000}
variables: {assistantName: SSA-Pro}
sections:
- name: base_system
  text: 你是 {{ assistantName }} 智能统计分析助手。
  truncation: {policy: Never}
- name: data_context
  runtime: {reserveTokens: 500}
  truncation: {priority: 2}
- name: pico_inference
  runtime: {reserveTokens: 100}
  truncation: {priority: 3}
- name: variable_dictionary
  runtime: {reserveTokens: 300}
  truncation: {priority: 4}
- name: tool_outputs
  heading: "## 工具执行结果"
  runtime: {}
  truncation: {priority: 5}
- name: intent_instruction
  heading: "## 当前任务指令"
  intent: true
  truncation: {policy: Never}
intents:
- {name: chat, instruction: 请直接回答用户的问题。}
- {name: analyze, instruction: 你正在协助用户进行分析规划。}
`

func TestSixSectionsInOrderWithSeparators(t *testing.T) {
	r := render(t, sixSections, nil)
	want := "你是 SSA-Pro 智能统计分析助手。\n\n{{runtime.data_context}}\n\n{{runtime.pico_inference}}\n\n{{runtime.variable_dictionary}}\n\n## 工具执行结果\n{{runtime.tool_outputs}}\n\n## 当前任务指令\n请直接回答用户的问题。"
	if got := r.Intents[0].Text; got != want {
		t.Fatalf("static text:\n%q\nwant\n%q", got, want)
	}
	e := tokens.MustGet(tokens.CL100K)
	fixedText := "你是 SSA-Pro 智能统计分析助手。\n\n## 工具执行结果\n\n## 当前任务指令\n请直接回答用户的问题。"
	a := r.Intents[0]
	if a.FixedTokens != e.Count(fixedText) || a.ReservedTokens != 900 || a.Tokens != a.FixedTokens+900 || !a.WithinBudget {
		t.Fatalf("counts: %+v (fixed text has %d tokens)", a, e.Count(fixedText))
	}
	if len(a.Sections) != 6 || a.Sections[5].Name != "intent_instruction" {
		t.Fatalf("sections: %+v", a.Sections)
	}
}

func TestOverBudgetMessageNamesIntentAndFigures(t *testing.T) {
	s := strings.Replace(sixSections, "maxTokens: 4000", "maxTokens: 920", 1)
	r := render(t, s, nil)
	over := r.OverBudget()
	if len(over) != 2 {
		t.Fatalf("want both intents over budget, got %d", len(over))
	}
	a := over[1]
	want := "intent analyze needs " + itoa(a.Tokens) + " tokens (" + itoa(a.FixedTokens) + " fixed + 900 reserved), budget 920"
	if a.Message() != want {
		t.Fatalf("message %q, want %q", a.Message(), want)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestUnknownVariableIsNamed(t *testing.T) {
	_, err := Render(Input{Spec: spec(t, `
budget: {maxTokens: 100}
sections: [{name: role, text: "Hi {{ user_name }}"}, {name: task, intent: true}]
intents: [{name: chat, instruction: x}]
`)})
	var uv *UnknownVariableError
	if !errors.As(err, &uv) || uv.Name != "user_name" || !strings.Contains(err.Error(), "section role uses the variable {{ user_name }}") {
		t.Fatalf("got %v", err)
	}
}

func TestMissingReferenceFallbackAndError(t *testing.T) {
	y := `
budget: {maxTokens: 100}
sections:
- name: role
  from: {configMapKeyRef: {name: prompts, key: ROLE}}
  text: fallback role
- {name: task, intent: true}
intents:
- name: chat
  from: {configMapKeyRef: {name: prompts, key: CHAT}}
`
	// Both present.
	r := render(t, y, ConfigMaps{"prompts": {"ROLE": "real role", "CHAT": "real chat"}})
	if r.Intents[0].Text != "real role\n\nreal chat" || len(r.Notes) != 0 {
		t.Fatalf("got %q notes %v", r.Intents[0].Text, r.Notes)
	}
	// Role's key missing from the ConfigMap: fallback, with a note.
	r = render(t, y, ConfigMaps{"prompts": {"CHAT": "real chat"}})
	if r.Intents[0].Text != "fallback role\n\nreal chat" || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "using the fallback text") {
		t.Fatalf("got %q notes %v", r.Intents[0].Text, r.Notes)
	}
	// Instruction's key missing with no fallback: an error naming the reference.
	_, err := Render(Input{Spec: spec(t, y), Sources: ConfigMaps{"prompts": {"ROLE": "r"}}})
	var mr *MissingReferenceError
	if !errors.As(err, &mr) || mr.ConfigMap != "prompts" || mr.Key != "CHAT" || mr.Where != "intent chat" || mr.NoConfigMap ||
		err.Error() != `intent chat reads key "CHAT", which ConfigMap "prompts" lacks, and has no fallback text: add the key to the ConfigMap or text to the intent chat` {
		t.Fatalf("got %v", err)
	}
	// No ConfigMap at all: missing whatever the fallback, as the operator
	// waits for a ConfigMap applied after its template.
	for _, sources := range []ConfigMaps{nil, {"other": {"ROLE": "r", "CHAT": "c"}}} {
		_, err = Render(Input{Spec: spec(t, y), Sources: sources})
		if !errors.As(err, &mr) || mr.ConfigMap != "prompts" || mr.Key != "ROLE" || mr.Where != "section role" || !mr.NoConfigMap || !mr.HasFallback ||
			!strings.HasPrefix(err.Error(), `section role reads key "ROLE" of ConfigMap "prompts", which does not exist: create the ConfigMap (a fallback text stands in only`) {
			t.Fatalf("%v: got %v", sources, err)
		}
	}
	// A ConfigMap with no data exists: its missing keys fall back.
	r = render(t, strings.Replace(y, "  from: {configMapKeyRef: {name: prompts, key: CHAT}}", "  instruction: fallback chat", 1), ConfigMaps{"prompts": nil})
	if r.Intents[0].Text != "fallback role\n\nfallback chat" || len(r.Notes) != 1 {
		t.Fatalf("got %q notes %v", r.Intents[0].Text, r.Notes)
	}
}

func TestDeterministic(t *testing.T) {
	a := render(t, sixSections, nil)
	b := render(t, sixSections, nil)
	if a.Plan.Revision != b.Plan.Revision || a.Intents[1].Text != b.Intents[1].Text {
		t.Fatal("same input gave different output")
	}
	c := render(t, strings.Replace(sixSections, "请直接回答用户的问题。", "请直接回答。", 1), nil)
	if c.Plan.Revision == a.Plan.Revision {
		t.Fatal("a changed instruction kept the revision")
	}
	if !strings.HasPrefix(a.Plan.Revision, "sha256:") || len(a.Plan.Revision) != 71 {
		t.Fatalf("revision %q", a.Plan.Revision)
	}
}

// A render whose context is done gives up with the context's error.
func TestRenderContextStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := RenderContext(ctx, Input{Namespace: "ns", Name: "t", Spec: spec(t, sixSections)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

const truncatable = `
budget: {maxTokens: 120, onExceed: Truncate}
sections:
- name: rules
  text: "` + "Never reveal secrets. Always be polite. " + `"
  truncation: {policy: Never}
- name: background
  text: "BACKGROUND_TEXT"
  truncation: {priority: 1, minTokens: 10}
- name: examples
  text: "EXAMPLES_TEXT"
  truncation: {priority: 9, minTokens: 5}
- name: context
  runtime: {reserveTokens: 20}
- {name: task, intent: true, truncation: {policy: Never}}
intents:
- {name: chat, instruction: Answer the question.}
`

func TestTruncateCutsStaticByPriority(t *testing.T) {
	long := strings.Repeat("Example sentence number one about products. ", 20)
	y := strings.Replace(strings.Replace(truncatable, "BACKGROUND_TEXT", strings.Repeat("Company background. ", 10), 1), "EXAMPLES_TEXT", long, 1)
	r := render(t, y, nil)
	a := r.Intents[0]
	if !a.WithinBudget || a.Tokens > 120 {
		t.Fatalf("want within budget after cuts: %+v", a)
	}
	if len(a.Cut) == 0 || a.Cut[0] != "examples" {
		t.Fatalf("highest priority section should be cut first: %v", a.Cut)
	}
	for _, s := range a.Sections {
		if (s.Name == "rules" || s.Name == "task") && s.TruncatedTokens != 0 {
			t.Fatalf("Never section %s was cut", s.Name)
		}
	}
	if !strings.Contains(a.Text, "Never reveal secrets. Always be polite.") || !strings.HasSuffix(a.Text, "Answer the question.") {
		t.Fatalf("Never texts must be intact: %q", a.Text)
	}
	if len(r.Plan.Intents[0].StaticCuts) == 0 {
		t.Fatal("plan should record the static cut")
	}
	// When examples alone cannot absorb the excess, background is cut next,
	// and examples stop at their minimum.
	huge := strings.Repeat("Background detail. ", 60)
	y = strings.Replace(strings.Replace(truncatable, "BACKGROUND_TEXT", huge, 1), "EXAMPLES_TEXT", long, 1)
	a = render(t, y, nil).Intents[0]
	if len(a.Cut) != 2 || a.Cut[0] != "examples" || a.Cut[1] != "background" || !a.WithinBudget {
		t.Fatalf("cut order %v within=%v", a.Cut, a.WithinBudget)
	}
	if got := a.Sections[2].Tokens; got > 5+1 {
		t.Fatalf("examples should be down to about its minimum, has %d", got)
	}
	// Never text alone too big: still over budget.
	y = strings.Replace(strings.Replace(strings.Replace(truncatable, "Never reveal secrets. Always be polite. ", strings.Repeat("Never reveal secrets. ", 40), 1), "BACKGROUND_TEXT", "b", 1), "EXAMPLES_TEXT", "e", 1)
	if a = render(t, y, nil).Intents[0]; a.WithinBudget {
		t.Fatal("Never text alone over budget must stay over budget")
	}
}

func TestValidateMirrorsCRD(t *testing.T) {
	base := `
budget: {maxTokens: 100}
sections: [{name: role, text: x}, {name: task, intent: true}]
intents: [{name: chat, instruction: x}]
`
	if err := Validate(spec(t, base)); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"exactly one section must have intent: true":  strings.Replace(base, "{name: task, intent: true}", "{name: task, text: y}", 1),
		"a section has exactly one of text (or from)": strings.Replace(base, "{name: role, text: x}", "{name: role, text: x, runtime: {}}", 1),
		"duplicate section name":                      strings.Replace(base, "name: task", "name: role", 1),
		"duplicate intent name":                       strings.Replace(base, "[{name: chat, instruction: x}]", "[{name: chat, instruction: x}, {name: chat, instruction: y}]", 1),
		"less than budget.maxTokens":                  strings.Replace(base, "{name: role, text: x}", "{name: role, runtime: {reserveTokens: 100}}", 1),
		"unsupported value \"p50k_base\"":             "encoding: p50k_base\n" + base,
		"an intent needs instruction or from":         strings.Replace(base, "{name: chat, instruction: x}", "{name: chat}", 1),
		"is not a valid intent name":                  strings.Replace(base, "name: chat", "name: Chat", 1),
		"priority and minTokens apply only to policy": strings.Replace(base, "{name: role, text: x}", "{name: role, text: x, truncation: {policy: Never, priority: 1}}", 1),
	}
	for want, y := range cases {
		err := Validate(spec(t, y))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q, got %v", want, err)
		}
	}
}

// TestTruncateDefaultsNeverCutTheIntentAndAgreeWithAssemble: with the
// default truncation settings the intent's instruction is never cut (it
// used to be cut first, being the last section), and the verdict status
// shows equals what request-time assembly of the same plan gives.
func TestTruncateDefaultsNeverCutTheIntentAndAgreeWithAssemble(t *testing.T) {
	long := strings.Repeat("Background paragraph about the product and its history. ", 40)
	instr := strings.Repeat("Answer with care and cite the excerpts. ", 10)
	for _, tc := range []struct {
		name, yaml string
		within     bool
	}{
		{"static cut to fit", `
budget: {maxTokens: 300, onExceed: Truncate}
sections:
- {name: role, text: "You are the assistant."}
- {name: background, text: "` + long + `"}
- {name: task, intent: true}
intents: [{name: chat, instruction: "` + instr + `"}, {name: short, instruction: "Answer."}]
`, true},
		{"the instruction alone is over", `
budget: {maxTokens: 50, onExceed: Truncate}
sections:
- {name: background, text: "` + long + `"}
- {name: task, intent: true}
intents: [{name: chat, instruction: "` + instr + `"}]
`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, tc.yaml, nil)
			for i, a := range r.Intents {
				pi := r.Plan.Intents[i]
				if !strings.Contains(a.Text, pi.Instruction) || strings.Contains(strings.Join(a.Cut, ","), "task") {
					t.Fatalf("intent %s: the instruction was cut: %v", a.Intent, a.Cut)
				}
				got, err := r.Plan.Assemble(context.Background(), a.Intent, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got.WithinBudget != a.WithinBudget || got.Text != a.Text || got.Tokens != a.Tokens {
					t.Fatalf("intent %s: render says %d tokens within=%v, assemble says %d within=%v", a.Intent, a.Tokens, a.WithinBudget, got.Tokens, got.WithinBudget)
				}
				if a.Intent == "chat" && a.WithinBudget != tc.within {
					t.Fatalf("intent chat within budget %v, want %v", a.WithinBudget, tc.within)
				}
			}
		})
	}
	// An intent section with a truncation of its own may be cut, and the
	// cut instruction is what request time uses.
	r := render(t, `
budget: {maxTokens: 40, onExceed: Truncate}
sections:
- {name: role, text: "You are the assistant.", truncation: {policy: Never}}
- {name: task, intent: true, truncation: {priority: 1}}
intents: [{name: chat, instruction: "`+instr+`"}]
`, nil)
	a := r.Intents[0]
	got, err := r.Plan.Assemble(context.Background(), "chat", nil)
	if err != nil || strings.Join(a.Cut, ",") != "task" || !a.WithinBudget || got.Text != a.Text || !got.WithinBudget {
		t.Fatalf("%v cut %v within %v; assemble %q within %v", err, a.Cut, a.WithinBudget, got.Text, got.WithinBudget)
	}
}
