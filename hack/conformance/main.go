// Command conformance writes testdata/conformance: request-time assembly
// cases (a plan, an intent, runtime contents) and what promptops answers
// for them, for implementations in other languages. Run from the repository
// root: go run ./hack/conformance. Review the diff before committing.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/assembler"
	"github.com/promptops/promptops/internal/tokens"
	"github.com/promptops/promptops/plan"
)

// Case is one file of testdata/conformance/cases.
type Case struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Plan        json.RawMessage `json:"plan"`
	Intent      string          `json:"intent"`
	Runtime     json.RawMessage `json:"runtime"`
	// Query is the request's query, for memory sections that take it
	// from the request.
	Query string `json:"query,omitempty"`
	// Scope is the request's scope, for memory sections that take it from
	// the request.
	Scope string `json:"scope,omitempty"`
	// Memory is each memory section's recall answer, by section name: the
	// items the bank answered, or why it did not.
	Memory   json.RawMessage `json:"memory,omitempty"`
	Expected Expected        `json:"expected"`
}

// MemoryInput is one memory section's recall answer: items, best first,
// or an error code, or a timeout.
type MemoryInput struct {
	Items    []MemoryItem    `json:"items,omitempty"`
	Error    plan.MemoryCode `json:"error,omitempty"`
	TimedOut bool            `json:"timedOut,omitempty"`
}

// MemoryItem is a recalled item as a case writes it: plan.MemoryItem with
// "trusted" left out when false, as in the cases written before items
// carried it (an item without it is not trusted).
type MemoryItem struct {
	plan.MemoryItem
	Trusted bool `json:"trusted,omitempty"`
}

// planItems are the items as a RecallFunc answers them.
func planItems(in []MemoryItem) []plan.MemoryItem {
	if in == nil {
		return nil
	}
	out := make([]plan.MemoryItem, len(in))
	for i, it := range in {
		out[i] = it.MemoryItem
		out[i].Trusted = it.Trusted
	}
	return out
}

// Recall answers a case's recalls from its memory inputs.
func Recall(memory map[string]MemoryInput) plan.RecallFunc {
	return func(ctx context.Context, r plan.MemoryRequest) ([]plan.MemoryItem, error) {
		m := memory[r.Section]
		switch {
		case m.TimedOut:
			return nil, context.DeadlineExceeded
		case m.Error != "":
			return nil, &plan.RecallError{Code: m.Error, Message: "as the case says"}
		}
		return planItems(m.Items), nil
	}
}

// MemoryExpected is what a memory section got.
type MemoryExpected struct {
	Section string `json:"section"`
	// Scope is the scope the section was recalled from, when not the
	// shared one.
	Scope    string          `json:"scope,omitempty"`
	Items    []string        `json:"items"`
	Recalled int             `json:"recalled"`
	Omitted  int             `json:"omitted"`
	TimedOut bool            `json:"timedOut"`
	Error    plan.MemoryCode `json:"error"`
}

// Expected is the assembly.
type Expected struct {
	Prompt       string    `json:"prompt"`
	Tokens       int       `json:"tokens"`
	MaxTokens    int       `json:"maxTokens"`
	WithinBudget bool      `json:"withinBudget"`
	Cut          []string  `json:"cut"`
	Sections     []Section `json:"sections"`
	// Memory has one entry per memory section, in plan order.
	Memory []MemoryExpected `json:"memory,omitempty"`
	// CacheableTokens is the prompt's prefix that is the same in every
	// request: the plan intent's cacheableTokens.
	CacheableTokens int `json:"cacheableTokens"`
}

// Section is one section's share.
type Section struct {
	Name            string `json:"name"`
	Tokens          int    `json:"tokens"`
	TruncatedTokens int    `json:"truncatedTokens"`
}

var templates = map[string]string{
	"en-support": `
encoding: cl100k_base
budget: {maxTokens: 120, onExceed: Warn}
sections:
- {name: role, text: "You are the support assistant of Acme Cloud. Be brief and exact.", truncation: {policy: Never}}
- {name: knowledge, heading: "## Knowledge", runtime: {reserveTokens: 40}, truncation: {priority: 10, minTokens: 20}}
- {name: history, heading: "## History", runtime: {reserveTokens: 30}, truncation: {priority: 5}}
- {name: task, heading: "## Task", intent: true}
intents:
- {name: chat, instruction: "Answer the customer's question directly."}
- {name: troubleshoot, instruction: "Find the cause step by step; ask for logs when needed."}
`,
	"zh-ssa": `
encoding: o200k_base
budget: {maxTokens: 300, onExceed: Warn}
sections:
- {name: base_system, text: "你是 SSA-Pro 智能统计分析助手。你的职责是规划、解释和沟通，而非计算。", truncation: {policy: Never}}
- {name: data_context, heading: "## 数据上下文", runtime: {reserveTokens: 60}, truncation: {priority: 2, minTokens: 10}}
- {name: variable_dictionary, heading: "## 变量字典", runtime: {reserveTokens: 60}, truncation: {priority: 4, minTokens: 10}}
- {name: tool_outputs, heading: "## 工具执行结果", runtime: {reserveTokens: 60}, truncation: {priority: 5}}
- {name: intent_instruction, heading: "## 当前任务指令", intent: true}
intents:
- {name: analyze, instruction: "你正在协助用户进行分析规划。"}
- {name: chat, instruction: "请基于统计知识直接回答。"}
`,
	"ties": `
encoding: o200k_base
budget: {maxTokens: 60, onExceed: Warn}
sections:
- {name: role, text: "Summarise the notes.", truncation: {policy: Never}}
- {name: a, heading: "# A", runtime: {}, truncation: {priority: 5}}
- {name: b, heading: "# B", runtime: {}, truncation: {priority: 5}}
- {name: c, heading: "# C", runtime: {}, truncation: {priority: 5}}
- {name: task, intent: true}
intents: [{name: sum, instruction: "Three bullet points."}]
`,
	"never-runtime": `
encoding: cl100k_base
budget: {maxTokens: 50, onExceed: Warn}
sections:
- {name: role, text: "You are a careful assistant.", truncation: {policy: Never}}
- {name: customer, heading: "## Customer", runtime: {reserveTokens: 10}, truncation: {policy: Never}}
- {name: notes, heading: "## Notes", runtime: {reserveTokens: 10}, truncation: {priority: 1}}
- {name: task, intent: true}
intents: [{name: chat, instruction: "Reply."}]
`,
	"static-truncate": `
encoding: cl100k_base
budget: {maxTokens: 60, onExceed: Truncate}
sections:
- {name: role, text: "You are an assistant.", truncation: {policy: Never}}
- {name: manual, heading: "## Manual", text: "Step one: open the console. Step two: choose the project. Step three: open billing. Step four: download the invoice. Step five: check the totals. Step six: contact support if they differ.", truncation: {priority: 9, minTokens: 5}}
- {name: ctx, heading: "## Context", runtime: {reserveTokens: 10}, truncation: {priority: 3}}
- {name: task, intent: true}
intents: [{name: chat, instruction: "Answer from the manual."}]
`,
	"intent-truncate": `
encoding: o200k_base
budget: {maxTokens: 30, onExceed: Truncate}
sections:
- {name: role, text: "You are terse.", truncation: {policy: Never}}
- {name: ctx, runtime: {reserveTokens: 5}, truncation: {priority: 1}}
- {name: task, heading: "## Task", intent: true, truncation: {priority: 2, minTokens: 3}}
intents: [{name: long, instruction: "Read every line of the report, then list the findings, then rank them by severity, then explain each in one sentence."}]
`,
	"over-budget": `
encoding: o200k_base
budget: {maxTokens: 20, onExceed: Warn}
sections:
- {name: role, text: "You are the assistant of a large company with a long list of rules that never change and cannot be cut.", truncation: {policy: Never}}
- {name: ctx, heading: "## Context", runtime: {}, truncation: {priority: 1}}
- {name: task, intent: true}
intents: [{name: chat, instruction: "Reply."}]
`,
	"emoji": `
encoding: cl100k_base
budget: {maxTokens: 25, onExceed: Warn}
sections:
- {name: role, text: "Mirror the mood.", truncation: {policy: Never}}
- {name: messages, runtime: {}, truncation: {priority: 1}}
- {name: task, intent: true}
intents: [{name: chat, instruction: "Reply."}]
`,
	"emoji-o200k": `
encoding: o200k_base
budget: {maxTokens: 25, onExceed: Warn}
sections:
- {name: role, text: "Mirror the mood.", truncation: {policy: Never}}
- {name: messages, runtime: {}, truncation: {priority: 1}}
- {name: task, intent: true}
intents: [{name: chat, instruction: "Reply."}]
`,
	"min-tokens": `
encoding: o200k_base
budget: {maxTokens: 70, onExceed: Warn}
sections:
- {name: role, text: "You answer from the sources.", truncation: {policy: Never}}
- {name: primary, heading: "## Primary", runtime: {}, truncation: {priority: 9, minTokens: 30}}
- {name: secondary, heading: "## Secondary", runtime: {}, truncation: {priority: 1, minTokens: 5}}
- {name: task, intent: true}
intents: [{name: chat, instruction: "Cite the source."}]
`,
	"bare": `
encoding: o200k_base
budget: {maxTokens: 40, onExceed: Warn}
sections:
- {name: role, text: "Keep the text exact.", truncation: {policy: Never}}
- {name: raw, runtime: {}, truncation: {priority: 2}}
- {name: extra, heading: "## Extra", runtime: {}, truncation: {priority: 1}}
- {name: task, intent: true}
intents: [{name: chat, instruction: "Reply."}]
`,
	// The cacheable prefix with runtime and memory sections first, in the
	// middle and last.
	"cache-runtime-first": `
encoding: o200k_base
budget: {maxTokens: 200, onExceed: Warn}
sections:
- {name: user, heading: "## User", runtime: {reserveTokens: 20}, truncation: {priority: 1}}
- {name: role, text: "You are the support assistant of Acme Cloud.", truncation: {policy: Never}}
- {name: task, heading: "## Task", intent: true}
intents: [{name: chat, instruction: "Answer briefly."}]
`,
	"cache-runtime-last": `
encoding: o200k_base
budget: {maxTokens: 200, onExceed: Warn}
sections:
- {name: role, text: "You are the support assistant of Acme Cloud.", truncation: {policy: Never}}
- {name: rules, heading: "## Rules", text: "Never promise refunds. Quote the plan's terms exactly.", truncation: {policy: Never}}
- {name: task, heading: "## Task", intent: true}
- {name: question, heading: "## Question", runtime: {reserveTokens: 30}, truncation: {priority: 1}}
intents: [{name: chat, instruction: "Answer briefly."}, {name: refund, instruction: "Explain the refund policy step by step, then answer."}]
`,
}

// memoryTemplates have memory sections.
var memoryTemplates = map[string]string{
	"memory-support": `
encoding: cl100k_base
budget: {maxTokens: 110, onExceed: Warn}
sections:
- {name: role, text: "You are the support assistant of Acme Cloud.", truncation: {policy: Never}}
- {name: question, heading: "## Question", runtime: {reserveTokens: 20}, truncation: {policy: Never}}
- name: memory
  heading: "## What we know"
  memory: {bankRef: {name: customers}, query: {fromRuntime: question}, reserveTokens: 40, maxItems: 4, minScore: 300}
  truncation: {priority: 5, minTokens: 10}
- {name: history, heading: "## History", runtime: {reserveTokens: 20}, truncation: {priority: 3}}
- {name: task, heading: "## Task", intent: true}
intents: [{name: chat, instruction: "Answer briefly."}]
`,
	"memory-request": `
encoding: o200k_base
budget: {maxTokens: 90, onExceed: Warn}
sections:
- {name: role, text: "You are the support assistant of Acme Cloud.", truncation: {policy: Never}}
- name: memory
  heading: "## What we know"
  memory: {bankRef: {name: customers}, query: {fromRequest: true}, reserveTokens: 40}
  truncation: {priority: 1}
- {name: history, heading: "## History", runtime: {reserveTokens: 20}, truncation: {priority: 3}}
- {name: task, heading: "## Task", intent: true}
intents: [{name: chat, instruction: "Answer briefly."}]
`,
	"memory-scoped": `
encoding: o200k_base
budget: {maxTokens: 120, onExceed: Warn}
sections:
- {name: role, text: "You are the tutor of this student.", truncation: {policy: Never}}
- name: memory
  heading: "## What you know of the student"
  memory: {bankRef: {name: students}, query: {fromRequest: true}, scope: {fromRequest: true, includeShared: true}, reserveTokens: 60}
  truncation: {priority: 1}
- {name: task, heading: "## Task", intent: true}
intents: [{name: chat, instruction: "Answer the student's question."}]
`,
	"cache-memory-middle": `
encoding: o200k_base
budget: {maxTokens: 200, onExceed: Warn}
sections:
- {name: role, text: "You are the support assistant of Acme Cloud.", truncation: {policy: Never}}
- name: memory
  heading: "## What we know"
  memory: {bankRef: {name: customers}, query: {fromRequest: true}, reserveTokens: 40}
  truncation: {priority: 1}
- {name: rules, heading: "## Rules", text: "Never promise refunds.", truncation: {policy: Never}}
- {name: task, heading: "## Task", intent: true}
intents: [{name: chat, instruction: "Answer briefly."}]
`,
	"memory-trusted": `
encoding: o200k_base
budget: {maxTokens: 90, onExceed: Warn}
sections:
- {name: role, text: "You are the support assistant of Acme Cloud.", truncation: {policy: Never}}
- name: memory
  heading: "## What we know"
  memory: {bankRef: {name: customers}, query: {fromRequest: true}, reserveTokens: 40, maxItems: 2, trustedOnly: true}
  truncation: {priority: 1}
- {name: task, heading: "## Task", intent: true}
intents: [{name: chat, instruction: "Answer briefly."}]
`,
	"memory-customer": `
encoding: cl100k_base
budget: {maxTokens: 120, onExceed: Warn}
sections:
- {name: role, text: "You are the support assistant of Acme Cloud.", truncation: {policy: Never}}
- {name: customer, heading: "## Customer", runtime: {reserveTokens: 10}, truncation: {policy: Never}}
- {name: question, heading: "## Question", runtime: {reserveTokens: 20}, truncation: {policy: Never}}
- name: memory
  heading: "## What we know"
  memory: {bankRef: {name: customers}, query: {fromRuntime: question}, scope: {fromRuntime: customer}, reserveTokens: 50}
  truncation: {priority: 5}
- {name: task, heading: "## Task", intent: true}
intents: [{name: chat, instruction: "Answer briefly."}]
`,
	"memory-big": `
encoding: o200k_base
budget: {maxTokens: 400, onExceed: Warn}
sections:
- {name: role, text: "You are the support assistant.", truncation: {policy: Never}}
- name: memory
  heading: "## What we know"
  memory: {bankRef: {name: customers}, query: {fromRequest: true}, reserveTokens: 300}
  truncation: {priority: 1}
- {name: task, heading: "## Task", intent: true}
intents: [{name: chat, instruction: "Answer briefly."}]
`,
	"memory-min": `
encoding: cl100k_base
budget: {maxTokens: 60, onExceed: Warn}
sections:
- {name: role, text: "You are the support assistant.", truncation: {policy: Never}}
- {name: question, heading: "## Question", runtime: {reserveTokens: 10}, truncation: {policy: Never}}
- name: memory
  heading: "## What we know"
  memory: {bankRef: {name: customers}, query: {fromRuntime: question}, reserveTokens: 30}
  truncation: {priority: 5, minTokens: 25}
- {name: task, intent: true}
intents: [{name: chat, instruction: "Answer."}]
`,
}

func memItems(texts ...string) []MemoryItem {
	out := make([]MemoryItem, len(texts))
	for i, t := range texts {
		out[i] = MemoryItem{MemoryItem: plan.MemoryItem{ID: fmt.Sprintf("o%d", i+1), Kind: "observation", Text: t, Score: 0.9 - float64(i)*0.05, ProofCount: 1}}
	}
	return out
}

func day(s string) *time.Time {
	t, err := time.Parse("2006-01-02", s)
	if err != nil {
		panic(err)
	}
	return &t
}

var customerFacts = []string{
	"The customer prefers email over phone calls.",
	"The customer is on the Pro plan.",
	"The customer asked about invoices twice in March.",
	"The customer's region is eu-west.",
	"The customer uses the Terraform provider.",
	"The customer reported a billing error once.",
}

// cutTemplates are rendered per case with a budget that makes the first
// cut of section "body" aim at the case's target (see input.target): the
// body is last, after its heading, so the cut is all that changes.
var cutTemplates = map[string]string{
	"cut-cl100k": `
encoding: cl100k_base
budget: {maxTokens: %d, onExceed: Warn}
sections:
- {name: role, text: "Keep the text exact.", truncation: {policy: Never}}
- {name: task, heading: "## Task", intent: true}
- {name: body, heading: "## Body", runtime: {}, truncation: {priority: 1, minTokens: %d}}
intents: [{name: chat, instruction: "Reply."}]
`,
	"cut-o200k": `
encoding: o200k_base
budget: {maxTokens: %d, onExceed: Warn}
sections:
- {name: role, text: "Keep the text exact.", truncation: {policy: Never}}
- {name: task, heading: "## Task", intent: true}
- {name: body, heading: "## Body", runtime: {}, truncation: {priority: 1, minTokens: %d}}
intents: [{name: chat, instruction: "Reply."}]
`,
}

type input struct {
	name, template, intent, description string
	runtime                             map[string]string
	// raw, when set, is the runtime object as written in the case file
	// (JSON escapes a Go string cannot carry, such as a lone surrogate).
	raw string
	// target, for a cutTemplates template: the budget is set so that the
	// first cut of section body aims at target tokens; minTokens is the
	// section's minimum.
	target, minTokens int
	// edit changes the rendered plan (a plan written by hand); the plan is
	// renamed after the case.
	edit func(p *plan.Plan)
	// query, scope and memory: the request's query and scope, and the
	// recall answers.
	query, scope string
	memory       map[string]MemoryInput
	// rawMemory, when set, is memory as written in the case file (a lone
	// surrogate in an item's text).
	rawMemory string
}

// hostile is 64 KiB of one character between ordinary text at the edges.
func hostile(c string) string {
	return "Tool output: " + strings.Repeat(c, (64<<10)/len(c)) + "\nEnd of output"
}

func rep(s string, n int) string { return strings.Repeat(s, n) }

var inputs = append(append(append(baseInputs, memoryInputs()...), cacheInputs...), trustInputs()...)

// trustInputs are memory sections with trustedOnly: the items a recall
// answers that are not trusted are dropped before maxItems and the
// reserve, as those scored below minScore are.
func trustInputs() []input {
	mixed := memItems(customerFacts[:4]...)
	mixed[0].Trusted, mixed[2].Trusted, mixed[3].Trusted = true, true, true
	return []input{
		{name: "memory-trusted-only", template: "memory-trusted", intent: "chat", description: "trustedOnly: an item without \"trusted\": true is dropped, the items after it kept (maxItems 2 counts the trusted ones); \"recalled\" counts every item answered",
			query: "How do I reach this customer?", memory: map[string]MemoryInput{"memory": {Items: mixed}}},
		{name: "memory-trusted-only-none", template: "memory-trusted", intent: "chat", description: "trustedOnly and no trusted item answered (an answer without \"trusted\" is of untrusted items): the section is left out, heading included",
			query: "How do I reach this customer?", memory: map[string]MemoryInput{"memory": {Items: memItems(customerFacts[:2]...)}}},
	}
}

// cacheInputs place runtime and memory sections first, in the middle and
// last: expected.cacheableTokens counts the blocks before the first.
var cacheInputs = []input{
	{name: "cache-runtime-first", template: "cache-runtime-first", intent: "chat", description: "a runtime section first: no prefix is the same in every request (cacheableTokens 0)",
		runtime: map[string]string{"user": "Ana, on the Pro plan."}},
	{name: "cache-runtime-first-missing", template: "cache-runtime-first", intent: "chat", description: "the first runtime section missing from this request: the prefix is still 0, since it changes between requests"},
	{name: "cache-memory-middle", template: "cache-memory-middle", intent: "chat", description: "a memory section between static ones: the prefix is the role alone",
		query: "How do I reach this customer?", memory: map[string]MemoryInput{"memory": {Items: memItems(customerFacts[:2]...)}}},
	{name: "cache-runtime-last", template: "cache-runtime-last", intent: "refund", description: "the runtime section last: the prefix is every static section and the intent's instruction, joined by the separator",
		runtime: map[string]string{"question": "Can I get my money back?"}},
	{name: "cache-runtime-last-over", template: "cache-runtime-last", intent: "chat", description: "the runtime section last and cut: the prefix does not change",
		runtime: map[string]string{"question": rep("Can I get my money back for the last three months? ", 20)}},
}

func memoryInputs() []input {
	q := map[string]string{"question": "How do I reach this customer?"}
	withHistory := map[string]string{"question": "How do I reach this customer?", "history": rep("The customer wrote about an invoice. ", 8)}
	low := memItems(customerFacts[:4]...)
	low[1].Score = 0.2 // below minScore 300 per mille
	dated := memItems("  The customer\tmoved to\n the Pro plan.  ", "The customer was on leave.", "The customer renews yearly.")
	dated[0].OccurredStart = day("2026-03-01")
	dated[1].OccurredStart, dated[1].OccurredEnd = day("2026-03-01"), day("2026-03-05")
	dated[2].OccurredEnd = day("2027-01-31")
	return []input{
		{name: "memory-fits", template: "memory-support", intent: "chat", description: "a memory section filled by recall: whole items, in rank order, within its reserve", runtime: q,
			memory: map[string]MemoryInput{"memory": {Items: memItems(customerFacts[:2]...)}}},
		{name: "memory-reserve", template: "memory-support", intent: "chat", description: "more items than the reserve (40) and maxItems (4) allow: the longest prefix that fits", runtime: q,
			memory: map[string]MemoryInput{"memory": {Items: memItems(customerFacts...)}}},
		{name: "memory-min-score", template: "memory-support", intent: "chat", description: "an item scored below minScorePerMille (300, a score of 0.3) is dropped, the items after it kept", runtime: q,
			memory: map[string]MemoryInput{"memory": {Items: low}}},
		{name: "memory-cut-by-priority", template: "memory-support", intent: "chat", description: "over budget: memory (priority 5) loses its lowest-ranked items before history (3) is cut", runtime: withHistory,
			memory: map[string]MemoryInput{"memory": {Items: memItems(customerFacts[:3]...)}}},
		{name: "memory-history-first", template: "memory-request", intent: "chat", description: "query from the request; history (priority 3) is cut before memory (1)", query: "How do I reach this customer?",
			runtime: map[string]string{"history": rep("The customer wrote about an invoice. ", 12)}, memory: map[string]MemoryInput{"memory": {Items: memItems(customerFacts[:3]...)}}},
		{name: "memory-timed-out", template: "memory-support", intent: "chat", description: "the recall timed out: the section is left out, heading included", runtime: q,
			memory: map[string]MemoryInput{"memory": {TimedOut: true}}},
		{name: "memory-error", template: "memory-support", intent: "chat", description: "the recall failed with an error code: the section is left out", runtime: q,
			memory: map[string]MemoryInput{"memory": {Error: "Unavailable"}}},
		{name: "memory-no-query", template: "memory-support", intent: "chat", description: "no query (the runtime section it names is missing): no recall, the section is left out",
			memory: map[string]MemoryInput{"memory": {Items: memItems(customerFacts[:2]...)}}},
		{name: "memory-lines-and-dates", template: "memory-support", intent: "chat", description: "an item's line: white space runs made one space, then its dates", runtime: q,
			memory: map[string]MemoryInput{"memory": {Items: dated}}},
		{name: "memory-emptied-over-budget", template: "memory-min", intent: "chat", description: "cut to its minTokens the memory still keeps the prompt over budget: it is emptied",
			runtime: map[string]string{"question": rep("Why was the invoice of March different from the one of February? ", 2)}, memory: map[string]MemoryInput{"memory": {Items: memItems(customerFacts...)}}},
		{name: "memory-scope-from-request", template: "memory-scoped", intent: "chat", description: "the scope is the request's scope (expected.memory[].scope is what the bank is asked for)",
			query: "What did I struggle with?", scope: "user:ana@example.com", memory: map[string]MemoryInput{"memory": {Items: memItems(studentFacts...)}}},
		{name: "memory-scope-from-runtime", template: "memory-customer", intent: "chat", description: "the scope is a runtime section's content, as given",
			runtime: map[string]string{"customer": "cus_1842", "question": "How do I reach this customer?"}, memory: map[string]MemoryInput{"memory": {Items: memItems(customerFacts[:3]...)}}},
		{name: "memory-no-scope", template: "memory-scoped", intent: "chat", description: "a section that takes its scope from the request and a request without one: no recall (NoScope), never the shared scope",
			query: "What did I struggle with?", memory: map[string]MemoryInput{"memory": {Items: memItems(studentFacts...)}}},
		{name: "memory-invalid-scope", template: "memory-customer", intent: "chat", description: "a scope that is not 1 to 253 bytes of letters, digits and ._:@- (here a space): no recall (InvalidScope)",
			runtime: map[string]string{"customer": "cus 1842", "question": "How do I reach this customer?"}, memory: map[string]MemoryInput{"memory": {Items: memItems(customerFacts[:3]...)}}},
		{name: "memory-blank-query", template: "memory-request", intent: "chat", description: "a query of only white space (here U+00A0 and U+3000 among ASCII spaces) is no query: no recall (NoQuery)",
			query: " \t\u00a0\u3000 ", memory: map[string]MemoryInput{"memory": {Items: memItems(customerFacts[:2]...)}}},
		{name: "memory-white-space", template: "memory-big", intent: "chat", description: "white space is Unicode's White_Space (U+0085, U+00A0, U+2003, U+2028, U+3000 among them): runs made one space, trimmed at both ends; U+200B and U+FEFF are not white space and stay; an item of only white space has an empty line and is omitted",
			query: "What do we know?", memory: map[string]MemoryInput{"memory": {Items: spaced}}},
		{name: "memory-dates", template: "memory-big", intent: "chat", description: "an item's dates as UTC days: start only, start and end, end only, start and end on one UTC day (one date), a time in another zone moved to its UTC day",
			query: "What do we know?", memory: map[string]MemoryInput{"memory": {Items: dates}}},
		{name: "memory-defaults", template: "memory-big", intent: "chat", description: "a plan without maxItems and minScorePerMille (written by hand): no item limit, and a score of 0 is taken",
			query: "What do we know?", memory: map[string]MemoryInput{"memory": {Items: many}},
			edit: func(p *plan.Plan) {
				for i := range p.Sections {
					if m := p.Sections[i].Memory; m != nil {
						m.MaxItems, m.MinScorePerMille = 0, 0
					}
				}
			}},
		{name: "memory-empty-answer", template: "memory-request", intent: "chat", description: "the bank answers no items: the section is left out, heading included, with no error",
			query: "How do I reach this customer?", memory: map[string]MemoryInput{"memory": {}}},
		{name: "memory-lone-surrogates", template: "memory-request", intent: "chat", description: "a lone surrogate escape in an item's text is U+FFFD, as in the runtime contents; an item of only one has a line of one U+FFFD",
			query: "Where does Ana live?", rawMemory: `{"memory": {"items": [{"id": "o1", "kind": "observation", "text": "Ana\ud800 lives in Lisbon.", "score": 0.9, "proofCount": 1}, {"id": "o2", "kind": "observation", "text": "\udfff", "score": 0.8, "proofCount": 1}]}}`},
		{name: "memory-empty-not-cut", template: "memory-min", intent: "chat", description: "over budget with nothing to cut: a memory section already empty (no query) is not cut, step 5 names none",
			runtime: map[string]string{"question": ""}, edit: func(p *plan.Plan) { p.MaxTokens = 5 }},
	}
}

// studentFacts are a student's memories, for the scoped vectors.
var studentFacts = []string{
	"The student found fractions hard in week 2.",
	"The student prefers worked examples.",
	"Class rule: homework is due on Fridays.",
}

var (
	spaced = func() []MemoryItem {
		items := memItems(
			"\u0085The customer\u00a0prefers\u2003email.\u2028",
			"The\u3000customer is on the\u200bPro plan.\ufeff",
			" \u00a0\u3000\u2029 ",
			"\tThe customer's\r\n\vregion is\feu-west. ",
		)
		return items
	}()
	dates = func() []MemoryItem {
		items := memItems("Moved to Lisbon.", "Was on leave.", "Renews yearly.", "Called support.", "Asked for a refund.")
		east := time.FixedZone("UTC-5", -5*3600)
		at := func(y int, m time.Month, d, h, min int, loc *time.Location) *time.Time {
			t := time.Date(y, m, d, h, min, 0, 0, loc)
			return &t
		}
		items[0].OccurredStart = day("2026-03-01")
		items[1].OccurredStart, items[1].OccurredEnd = day("2026-03-01"), day("2026-03-05")
		items[2].OccurredEnd = day("2027-01-31")
		items[3].OccurredStart, items[3].OccurredEnd = at(2026, 4, 2, 8, 0, time.UTC), at(2026, 4, 2, 17, 30, time.UTC)
		items[4].OccurredStart = at(2026, 4, 30, 21, 0, east) // 2026-05-01 02:00 UTC
		return items
	}()
	many = func() []MemoryItem {
		var texts []string
		for i := range 24 {
			texts = append(texts, fmt.Sprintf("Note %d.", i+1))
		}
		items := memItems(texts...)
		for i := range items {
			items[i].Score = 0
		}
		return items
	}()
)

var baseInputs = []input{
	{name: "en-missing-runtime", template: "en-support", intent: "chat", description: "no runtime contents: runtime sections are left out, headings included", runtime: nil},
	{name: "en-empty-runtime", template: "en-support", intent: "chat", description: "empty strings are the same as missing", runtime: map[string]string{"knowledge": "", "history": ""}},
	{name: "en-fits", template: "en-support", intent: "troubleshoot", description: "everything fits: nothing is cut", runtime: map[string]string{"knowledge": "Restart the agent after an upgrade.", "history": "User asked about upgrades."}},
	{name: "en-cut-highest-priority", template: "en-support", intent: "chat", description: "knowledge (priority 10) is cut before history (5)", runtime: map[string]string{"knowledge": rep("Article: resetting a password takes two steps. ", 12), "history": "User asked about passwords."}},
	{name: "en-cut-to-min-then-next", template: "en-support", intent: "chat", description: "knowledge is cut to its minTokens (20), then history is cut", runtime: map[string]string{"knowledge": rep("Article: invoices are emailed monthly. ", 12), "history": rep("User asked about invoices again. ", 12)}},
	{name: "en-special-token-text", template: "en-support", intent: "chat", description: "special-token strings count as plain text", runtime: map[string]string{"knowledge": "<|endoftext|> is not a control token here. <|im_start|>", "history": ""}},
	{name: "en-only-history", template: "en-support", intent: "troubleshoot", description: "one section missing, the other cut", runtime: map[string]string{"history": rep("The user pasted a stack trace line. ", 20)}},
	{name: "zh-fits", template: "zh-ssa", intent: "analyze", description: "Chinese contents within budget", runtime: map[string]string{"data_context": "数据概览：共 200 行，12 个变量。", "variable_dictionary": "age：年龄，数值型。", "tool_outputs": "描述性统计：均值 45.2。"}},
	{name: "zh-cut-tool-outputs", template: "zh-ssa", intent: "analyze", description: "tool_outputs (priority 5) is cut first, at a character boundary", runtime: map[string]string{"data_context": "数据概览：共 200 行。", "variable_dictionary": "age：年龄。", "tool_outputs": rep("描述性统计结果：均值、标准差、四分位数。", 30)}},
	{name: "zh-cut-two-sections", template: "zh-ssa", intent: "analyze", description: "tool_outputs cut away, then variable_dictionary down to its minimum or less", runtime: map[string]string{"data_context": "数据概览：共 200 行。", "variable_dictionary": rep("变量 age：年龄，数值型。", 30), "tool_outputs": rep("结果：显著。", 40)}},
	{name: "zh-cut-all-three", template: "zh-ssa", intent: "chat", description: "all three runtime sections cut, data_context last", runtime: map[string]string{"data_context": rep("数据概览：共 200 行，12 个变量。", 20), "variable_dictionary": rep("变量 age：年龄，数值型。", 20), "tool_outputs": rep("结果：显著。", 40)}},
	{name: "zh-lines", template: "zh-ssa", intent: "analyze", description: "many lines, some starting with punctuation", runtime: map[string]string{"tool_outputs": rep("结果一：均值。\n。标注\n- 项目\n", 25)}},
	{name: "zh-one-long-line", template: "zh-ssa", intent: "chat", description: "a long Chinese text without a line break", runtime: map[string]string{"variable_dictionary": rep("变量说明没有换行", 80)}},
	{name: "ties-later-first", template: "ties", intent: "sum", description: "equal priorities: the later section is cut first", runtime: map[string]string{"a": rep("alpha notes. ", 10), "b": rep("beta notes. ", 10), "c": rep("gamma notes. ", 10)}},
	{name: "ties-one-empty", template: "ties", intent: "sum", description: "equal priorities with the last one empty: b is cut first", runtime: map[string]string{"a": rep("alpha notes. ", 10), "b": rep("beta notes. ", 10), "c": ""}},
	{name: "ties-all-cut", template: "ties", intent: "sum", description: "equal priorities: c and b cut away, a cut", runtime: map[string]string{"a": rep("alpha notes. ", 30), "b": rep("beta notes. ", 30), "c": rep("gamma notes. ", 30)}},
	{name: "never-runtime-kept", template: "never-runtime", intent: "chat", description: "a Never runtime section is not cut; notes are", runtime: map[string]string{"customer": "Jane Doe, premium plan.", "notes": rep("Note about the account. ", 10)}},
	{name: "never-runtime-over", template: "never-runtime", intent: "chat", description: "a Never runtime section alone is over budget: over budget after cutting notes", runtime: map[string]string{"customer": rep("Jane Doe, premium plan, region eu-west. ", 8), "notes": "short"}},
	{name: "static-cut-used", template: "static-truncate", intent: "chat", description: "the render-time static cut (staticCuts) replaces the manual's text", runtime: map[string]string{}},
	{name: "static-cut-and-runtime-cut", template: "static-truncate", intent: "chat", description: "static cut plus a runtime cut", runtime: map[string]string{"ctx": rep("Customer context line. ", 10)}},
	{name: "intent-cut-at-render", template: "intent-truncate", intent: "long", description: "the intent instruction was cut at render time (its section has a truncation)", runtime: map[string]string{"ctx": "x"}},
	{name: "over-budget-static", template: "over-budget", intent: "chat", description: "static Never text over budget: withinBudget false, nothing to cut", runtime: nil},
	{name: "over-budget-after-cut", template: "over-budget", intent: "chat", description: "runtime cut away entirely, still over budget", runtime: map[string]string{"ctx": rep("context ", 30)}},
	{name: "emoji-cut", template: "emoji", intent: "chat", description: "emoji cut at a character boundary, never inside one", runtime: map[string]string{"messages": rep("🎉😀👍🏽🚀", 10)}},
	{name: "emoji-zwj-cut", template: "emoji", intent: "chat", description: "ZWJ sequences cut at a code point boundary", runtime: map[string]string{"messages": rep("👩‍💻👨‍👩‍👧‍👦", 10)}},
	{name: "emoji-o200k-cut", template: "emoji-o200k", intent: "chat", description: "emoji in o200k_base", runtime: map[string]string{"messages": rep("好的🎉😀 ", 20)}},
	{name: "min-tokens-stop", template: "min-tokens", intent: "chat", description: "primary stops at minTokens 30; secondary is cut next", runtime: map[string]string{"primary": rep("Source A says the rate is 4%. ", 20), "secondary": rep("Source B agrees. ", 20)}},
	{name: "min-tokens-above-content", template: "min-tokens", intent: "chat", description: "primary is under its minTokens: not cut; secondary is", runtime: map[string]string{"primary": "Source A: 4%.", "secondary": rep("Source B agrees with A. ", 30)}},
	{name: "bare-leading-space", template: "bare", intent: "chat", description: "content without a heading starting with white space", runtime: map[string]string{"raw": rep("  spaced words ", 20)}},
	{name: "bare-leading-newlines", template: "bare", intent: "chat", description: "content starting and ending with line feeds", runtime: map[string]string{"raw": "\n\n" + rep("line\n", 30) + "\n\n", "extra": "x"}},
	{name: "bare-crlf", template: "bare", intent: "chat", description: "CRLF line ends and tabs", runtime: map[string]string{"raw": rep("col1\tcol2\r\n", 30)}},
	{name: "en-trailing-space-kept", template: "en-support", intent: "chat", description: "a kept section ending in spaces and a line feed before the next; the earlier, higher-priority section is cut", runtime: map[string]string{"knowledge": rep("Article: quotas reset daily. ", 20), "history": "value   \n"}},
	{name: "bare-punctuation-lines", template: "bare", intent: "chat", description: "lines starting with punctuation and slashes", runtime: map[string]string{"raw": rep("./run\n/path\n- item\n", 15)}},
	// The cut keeps the bytes of the body's first target tokens, backed off
	// to a character and re-encoded: not the longest prefix that fits.
	{name: "cut-invoices", template: "cut-cl100k", intent: "chat", target: 1, description: "target 1: the first token of \"Invoices\" is \"In\", which is kept, though \"Invoice\" alone is also one token", runtime: map[string]string{"body": "Invoices are emailed monthly and list every charge"}},
	{name: "cut-invoices-o200k", template: "cut-o200k", intent: "chat", target: 6, description: "target 6: the cut ends after the first token of the second \"Invoices\"", runtime: map[string]string{"body": "Invoices are emailed monthly. Invoices list every charge"}},
	{name: "cut-code-indent", template: "cut-cl100k", intent: "chat", target: 17, description: "a cut inside the indentation of code: the token of spaces before \"if\" is cut where it ends", runtime: map[string]string{"body": "def total(items):\n    s = 0\n    for it in items:\n        if it.ok:\n            s += it.price\n    return s\n"}},
	{name: "cut-code-indent-o200k", template: "cut-o200k", intent: "chat", target: 11, description: "a cut inside the indentation of code", runtime: map[string]string{"body": "def total(items):\n    s = 0\n    for it in items:\n        if it.ok:\n            s += it.price\n    return s\n"}},
	{name: "cut-double-spaces", template: "cut-cl100k", intent: "chat", target: 8, description: "double spaces: the cut keeps one space of a pair", runtime: map[string]string{"body": "Mean  45.2,  sd  3.1.  Two  spaces  after  each  word,  as  typed  on  old  machines."}},
	{name: "cut-double-spaces-o200k", template: "cut-o200k", intent: "chat", target: 2, description: "double spaces: \"Mean \" is kept, not \"Mean  \"", runtime: map[string]string{"body": "Mean  45.2,  sd  3.1.  Two  spaces  after  each  word,  as  typed  on  old  machines."}},
	{name: "cut-table", template: "cut-cl100k", intent: "chat", target: 6, description: "a Markdown table cut inside a row", runtime: map[string]string{"body": "| name | value |\n|------|-------|\n| mean | 45.2  |\n| sd   | 3.1   |\n| n    | 200   |\n"}},
	{name: "cut-table-o200k", template: "cut-o200k", intent: "chat", target: 18, description: "a Markdown table cut inside the padding of a cell", runtime: map[string]string{"body": "| name | value |\n|------|-------|\n| mean | 45.2  |\n| sd   | 3.1   |\n| n    | 200   |\n"}},
	{name: "cut-below-min", template: "cut-cl100k", intent: "chat", target: 1, minTokens: 4, description: "the cut aims at minTokens 4 but ends at a character boundary with fewer tokens, and the section is not cut again", runtime: map[string]string{"body": rep("🎉😀👍🏽🚀", 4)}},
	{name: "static-cut-whatever-onexceed", template: "static-truncate", intent: "chat", description: "a plan with onExceed Warn that has a staticCuts entry: the entry is used", runtime: map[string]string{"ctx": "Customer context."},
		edit: func(p *plan.Plan) { p.OnExceed = "Warn" }},
	{name: "lone-surrogate", template: "bare", intent: "chat", description: "lone surrogates in the runtime JSON are U+FFFD; a pair is one character", raw: `{"extra": "pair \ud83d\ude00 lone \ud800 and \udc00 end", "raw": "x\udbff"}`},
	// Hostile contents: 64 KiB of one character with text at the edges.
	{name: "hostile-punct", template: "en-support", intent: "chat", description: "64 KiB of '!' cut to budget", runtime: map[string]string{"knowledge": hostile("!"), "history": "User asked twice."}},
	{name: "hostile-spaces", template: "zh-ssa", intent: "analyze", description: "64 KiB of spaces cut to budget", runtime: map[string]string{"tool_outputs": hostile(" "), "data_context": "n=200"}},
	{name: "hostile-letters", template: "en-support", intent: "chat", description: "64 KiB of 'a' cut to budget", runtime: map[string]string{"knowledge": hostile("a")}},
	{name: "hostile-digits", template: "zh-ssa", intent: "analyze", description: "64 KiB of '7' cut to budget", runtime: map[string]string{"tool_outputs": hostile("7")}},
	{name: "hostile-cjk", template: "zh-ssa", intent: "chat", description: "64 KiB of '中' cut to budget", runtime: map[string]string{"variable_dictionary": hostile("中"), "tool_outputs": "均值 45.2"}},
	{name: "hostile-emoji", template: "en-support", intent: "troubleshoot", description: "64 KiB of '😀' cut to budget", runtime: map[string]string{"history": hostile("😀")}},
}

func main() {
	dir := filepath.Join("testdata", "conformance", "cases")
	n, err := generate(dir)
	if err != nil {
		fail(err)
	}
	fmt.Printf("wrote %d cases to %s\n", n, dir)
	path := filepath.Join("testdata", "conformance", "assignment.json")
	if err := generateAssignment(path); err != nil {
		fail(err)
	}
	fmt.Printf("wrote %s\n", path)
}

// Assignment is testdata/conformance/assignment.json: rollout assignment
// keys with their bucket and the least weight that puts them on the
// canary (docs/plan.md, "Rollout assignment").
type Assignment struct {
	Buckets int              `json:"buckets"`
	Cases   []AssignmentCase `json:"cases"`
}

// AssignmentCase is one key of one template.
type AssignmentCase struct {
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	Key         string `json:"key"`
	Bucket      int    `json:"bucket"`
	FirstWeight int    `json:"firstWeight"`
}

// assignment lists the vectors: keys as applications send them (ids,
// e-mail addresses, scopes, CJK, emoji, a line feed, a slash, one
// character 4096 times), the same key in two templates and two
// namespaces, and keys found at the weights' edges (the first and last
// bucket, each side of weight 1, 10 and 50, and inside the first and last
// percent).
func assignment() Assignment {
	a := Assignment{Buckets: plan.Buckets}
	add := func(ns, name, key string) {
		b := plan.Bucket(ns, name, key)
		a.Cases = append(a.Cases, AssignmentCase{Namespace: ns, Name: name, Key: key, Bucket: b, FirstWeight: b/(plan.Buckets/100) + 1})
	}
	for _, key := range []string{"user-1", "user-2", "ana@example.com", "user:ana", "tenant-42/session-7", "会话-中文", "😀 emoji", "line\nfeed", " spaced ", strings.Repeat("a", 4096), "0", "-"} {
		add("shop", "support", key)
	}
	for _, t := range [][2]string{{"shop", "billing"}, {"other", "support"}, {"shop", "support-v2"}} {
		add(t[0], t[1], "user-1")
	}
	// The first key ("edge-<n>") found in each of these bucket ranges.
	for _, r := range [][2]int{{0, 1}, {1, 99}, {99, 100}, {100, 101}, {999, 1000}, {1000, 1001}, {4999, 5000}, {5000, 5001}, {plan.Buckets - 100, plan.Buckets - 1}, {plan.Buckets - 1, plan.Buckets}} {
		for n := 0; ; n++ {
			key := fmt.Sprintf("edge-%d", n)
			if b := plan.Bucket("shop", "support", key); b >= r[0] && b < r[1] {
				add("shop", "support", key)
				break
			}
		}
	}
	return a
}

// generateAssignment writes the assignment vectors to path.
func generateAssignment(path string) error {
	data, err := json.MarshalIndent(assignment(), "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// render renders a template's YAML as the operator does and returns its
// plan.json.
func render(name, y string) ([]byte, error) {
	spec := &promptopsv1.PromptTemplateSpec{}
	if err := yaml.UnmarshalStrict([]byte(y), spec); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	res, err := assembler.Render(assembler.Input{Namespace: "conformance", Name: name, Spec: spec})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	data, err := assembler.ConfigMapData(res)
	if err != nil {
		return nil, err
	}
	return []byte(data[assembler.PlanKey]), nil
}

// planFor is the plan.json of one case.
func planFor(in input, plans map[string][]byte, runtime map[string]string) ([]byte, error) {
	if y, ok := cutTemplates[in.template]; ok {
		// Render with room for everything, then set the budget so that
		// target = n - (t - limit) for the body: limit = t - n + target.
		data, err := render(in.name, fmt.Sprintf(y, 1<<20, in.minTokens))
		if err != nil {
			return nil, err
		}
		p, err := plan.Load(data)
		if err != nil {
			return nil, err
		}
		a, err := p.Assemble(context.Background(), in.intent, runtime)
		if err != nil {
			return nil, err
		}
		n := tokens.MustGet(p.Encoding).Count(runtime["body"])
		return render(in.name, fmt.Sprintf(y, a.Tokens-n+in.target, in.minTokens))
	}
	data, ok := plans[in.template]
	if !ok {
		return nil, fmt.Errorf("%s: no template %q", in.name, in.template)
	}
	if in.edit != nil {
		p, err := plan.Load(data)
		if err != nil {
			return nil, err
		}
		in.edit(p)
		p.Name = in.name
		p.Revision = p.Digest()
		out, err := json.MarshalIndent(p, "", "  ")
		if err != nil {
			return nil, err
		}
		return append(out, '\n'), nil
	}
	return data, nil
}

// generate writes every case into dir, which it empties first, and
// returns how many it wrote.
func generate(dir string) (int, error) {
	if err := os.RemoveAll(dir); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	plans := map[string][]byte{}
	for name, y := range memoryTemplates {
		data, err := render(name, y)
		if err != nil {
			return 0, err
		}
		plans[name] = data
	}
	for name, y := range templates {
		data, err := render(name, y)
		if err != nil {
			return 0, err
		}
		plans[name] = data
	}
	for i, in := range inputs {
		runtime := in.runtime
		raw := []byte(in.raw)
		if in.raw != "" {
			// As every JSON reader of promptops decodes it.
			if err := json.Unmarshal(raw, &runtime); err != nil {
				return 0, fmt.Errorf("%s: %w", in.name, err)
			}
		} else {
			if runtime == nil {
				runtime = map[string]string{}
			}
			var err error
			if raw, err = json.Marshal(runtime); err != nil {
				return 0, err
			}
		}
		memory, rawMemory := in.memory, []byte(in.rawMemory)
		if in.rawMemory != "" {
			if err := json.Unmarshal(rawMemory, &memory); err != nil {
				return 0, fmt.Errorf("%s: %w", in.name, err)
			}
		} else if memory != nil {
			var err error
			if rawMemory, err = json.Marshal(memory); err != nil {
				return 0, err
			}
		}
		data, err := planFor(in, plans, runtime)
		if err != nil {
			return 0, err
		}
		p, err := plan.Load(data)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", in.name, err)
		}
		a, err := p.Assemble(context.Background(), in.intent, runtime, plan.WithRecall(Recall(memory)), plan.WithQuery(in.query), plan.WithScope(in.scope))
		if err != nil {
			return 0, fmt.Errorf("%s: %w", in.name, err)
		}
		c := Case{Name: in.name, Description: in.description, Plan: json.RawMessage(data), Intent: in.intent, Runtime: raw, Query: in.query, Scope: in.scope, Memory: rawMemory,
			Expected: Expected{Prompt: a.Text, Tokens: a.Tokens, MaxTokens: a.MaxTokens, WithinBudget: a.WithinBudget, Cut: a.Cut, Memory: MemoryOf(a), CacheableTokens: a.CacheableTokens}}
		if c.Expected.Cut == nil {
			c.Expected.Cut = []string{}
		}
		for _, s := range a.Sections {
			c.Expected.Sections = append(c.Expected.Sections, Section{s.Name, s.Tokens, s.TruncatedTokens})
		}
		out, err := json.MarshalIndent(&c, "", "  ")
		if err != nil {
			return 0, err
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%03d-%s.json", i+1, in.name)), append(out, '\n'), 0o644); err != nil {
			return 0, err
		}
	}
	return len(inputs), nil
}

// MemoryOf is what an assembly's memory sections got, as a case expects it.
func MemoryOf(a *plan.Assembly) []MemoryExpected {
	var out []MemoryExpected
	for _, m := range a.Memory {
		e := MemoryExpected{Section: m.Section, Scope: m.Scope, Items: []string{}, Recalled: m.Recalled, Omitted: m.Omitted, TimedOut: m.TimedOut, Error: m.Code}
		for _, it := range m.Items {
			e.Items = append(e.Items, it.ID)
		}
		out = append(out, e)
	}
	return out
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "conformance:", err)
	os.Exit(1)
}
