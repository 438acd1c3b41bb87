package assembler

import (
	"context"
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/tokens"
)

func planOf(t *testing.T, y string) *Plan {
	t.Helper()
	return render(t, y, nil).Plan
}

// The statistics assistant at request time: tool output (priority 5) is cut
// first, then the variable dictionary (4), and the base system and intent
// instruction (Never) are never cut.
func TestAssembleCutsHighestPriorityRuntimeFirstChinese(t *testing.T) {
	p := planOf(t, strings.Replace(sixSections, "maxTokens: 4000", "maxTokens: 600", 1))
	runtime := map[string]string{
		"data_context":        "数据概览：共 200 行，12 个变量。",
		"variable_dictionary": strings.Repeat("变量 age：年龄，数值型。", 10),
		"tool_outputs":        strings.Repeat("描述性统计结果：均值、标准差、四分位数。", 40),
	}
	a, err := p.Assemble(context.Background(), "analyze", runtime)
	if err != nil {
		t.Fatal(err)
	}
	if !a.WithinBudget || a.Tokens > 600 {
		t.Fatalf("want within 600, got %d", a.Tokens)
	}
	if len(a.Cut) != 1 || a.Cut[0] != "tool_outputs" {
		t.Fatalf("only tool_outputs should be cut, cut %v", a.Cut)
	}
	if !strings.HasPrefix(a.Text, "你是 SSA-Pro 智能统计分析助手。") || !strings.HasSuffix(a.Text, "## 当前任务指令\n你正在协助用户进行分析规划。") {
		t.Fatalf("Never sections must be intact:\n%s", a.Text)
	}
	if !strings.Contains(a.Text, runtime["variable_dictionary"]) || !strings.Contains(a.Text, runtime["data_context"]) {
		t.Fatal("lower-priority sections should be whole")
	}
	if a.Tokens != tokensOf(p, a.Text) {
		t.Fatalf("reported %d tokens, text has %d", a.Tokens, tokensOf(p, a.Text))
	}
	// Empty pico_inference is left out entirely: no double separators.
	if strings.Contains(a.Text, "\n\n\n\n") {
		t.Fatalf("empty runtime section left a gap: %q", a.Text)
	}
}

func TestAssembleNeverCutsNeverRuntimeSectionEnglish(t *testing.T) {
	p := planOf(t, `
budget: {maxTokens: 150}
sections:
- {name: role, text: You are a support assistant., truncation: {policy: Never}}
- name: customer
  heading: "## Customer"
  runtime: {reserveTokens: 30}
  truncation: {policy: Never}
- name: knowledge
  heading: "## Knowledge"
  runtime: {reserveTokens: 60}
  truncation: {priority: 10, minTokens: 20}
- name: history
  heading: "## History"
  runtime: {reserveTokens: 30}
  truncation: {priority: 5}
- {name: task, heading: "## Task", intent: true, truncation: {policy: Never}}
intents: [{name: chat, instruction: Answer briefly.}]
`)
	customer := strings.Repeat("Customer Jane Doe, premium plan, region eu-west. ", 3)
	a, err := p.Assemble(context.Background(), "chat", map[string]string{
		"customer":  customer,
		"knowledge": strings.Repeat("Article: resetting your password takes two steps. ", 30),
		"history":   strings.Repeat("User asked about invoices. ", 20),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !a.WithinBudget {
		t.Fatalf("want within budget, got %d", a.Tokens)
	}
	if a.Cut[0] != "knowledge" {
		t.Fatalf("knowledge (priority 10) must be cut first: %v", a.Cut)
	}
	if !strings.Contains(a.Text, "## Customer\n"+customer) {
		t.Fatal("the Never runtime section was cut")
	}
	for _, s := range a.Sections {
		if s.Name == "knowledge" && s.Tokens < 20 {
			t.Fatalf("knowledge cut below its minTokens: %d", s.Tokens)
		}
	}
	// history (priority 5) is cut only once knowledge is at its minimum.
	if len(a.Cut) == 2 && a.Cut[1] != "history" {
		t.Fatalf("cut order %v", a.Cut)
	}
}

func TestAssembleRejectsUnknownSectionAndIntent(t *testing.T) {
	p := planOf(t, sixSections)
	if _, err := p.Assemble(context.Background(), "nope", nil); err == nil || !strings.Contains(err.Error(), `no intent "nope"`) {
		t.Fatalf("got %v", err)
	}
	if _, err := p.Assemble(context.Background(), "chat", map[string]string{"data_contxt": "x"}); err == nil || !strings.Contains(err.Error(), `no runtime section "data_contxt"`) {
		t.Fatalf("got %v", err)
	}
	if _, err := p.Assemble(context.Background(), "chat", map[string]string{"base_system": "x"}); err == nil {
		t.Fatal("a static section is not a runtime slot")
	}
}

func tokensOf(p *Plan, s string) int {
	return tokens.MustGet(p.Encoding).Count(s)
}
