package plan_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/promptops/promptops/plan"
)

// An application loads the mounted plan.json once and assembles per request.
func Example() {
	p, err := plan.Load([]byte(`{
  "apiVersion": "promptops.io/v1", "kind": "PromptPlan",
  "namespace": "default", "name": "support", "revision": "sha256:example",
  "encoding": "cl100k_base", "maxTokens": 30, "onExceed": "Reject", "separator": "\n\n",
  "sections": [
    {"name": "role", "kind": "static", "text": "You are a support assistant.", "tokens": 6, "policy": "Never", "priority": 0, "minTokens": 0},
    {"name": "knowledge", "kind": "runtime", "heading": "## Knowledge", "tokens": 3, "reserveTokens": 20, "policy": "Priority", "priority": 10, "minTokens": 0},
    {"name": "task", "kind": "intent", "heading": "## Task", "tokens": 0, "policy": "Never", "priority": 0, "minTokens": 0}
  ],
  "intents": [{"name": "chat", "instruction": "Answer briefly.", "tokens": 30, "fixedTokens": 10, "reservedTokens": 20, "withinBudget": true}],
  "runtime": {"placeholder": "{{runtime.NAME}}"}
}`))
	if err != nil {
		log.Fatal(err)
	}
	a, err := p.Assemble(context.Background(), "chat", map[string]string{
		"knowledge": "Passwords are reset from the account page. Invoices are sent monthly. Refunds take five days.",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a.Text)
	fmt.Println("---")
	fmt.Printf("%d of %d tokens, revision %s\n", a.Tokens, a.MaxTokens, p.Revision)
	for _, s := range a.Sections {
		fmt.Printf("%s: %d tokens, %d cut\n", s.Name, s.Tokens, s.TruncatedTokens)
	}
	// Output:
	// You are a support assistant.
	//
	// ## Knowledge
	// Passwords are reset from the account page. Invoices are sent monthly.
	//
	// ## Task
	// Answer briefly.
	// ---
	// 29 of 30 tokens, revision sha256:example
	// role: 6 tokens, 0 cut
	// knowledge: 17 tokens, 6 cut
	// task: 6 tokens, 0 cut
}

// An application fills memory sections with its own recall: here a fixed
// answer; in production a call to the bank's endpoint (the section's
// Memory.Endpoint) or an in-process store.
func ExamplePlan_Assemble_memory() {
	p, err := plan.Load([]byte(`{
  "apiVersion": "promptops.io/v1", "kind": "PromptPlan",
  "namespace": "shop", "name": "support", "revision": "sha256:example",
  "encoding": "cl100k_base", "maxTokens": 60, "onExceed": "Reject", "separator": "\n\n",
  "sections": [
    {"name": "role", "kind": "static", "text": "You are a support assistant.", "tokens": 6, "policy": "Never", "priority": 0, "minTokens": 0},
    {"name": "question", "kind": "runtime", "heading": "## Question", "tokens": 3, "reserveTokens": 15, "policy": "Never", "priority": 0, "minTokens": 0},
    {"name": "memory", "kind": "memory", "heading": "## What we know", "tokens": 4, "reserveTokens": 20, "policy": "Priority", "priority": 10, "minTokens": 0,
     "memory": {"bank": {"namespace": "shop", "name": "customers"}, "query": {"fromRuntime": "question"}, "maxItems": 5, "minScorePerMille": 300}},
    {"name": "task", "kind": "intent", "heading": "## Task", "tokens": 0, "policy": "Never", "priority": 0, "minTokens": 0}
  ],
  "intents": [{"name": "chat", "instruction": "Answer briefly.", "tokens": 60, "fixedTokens": 25, "reservedTokens": 35, "withinBudget": true}],
  "runtime": {"placeholder": "{{runtime.NAME}}", "memoryPlaceholder": "{{memory.NAME}}"}
}`))
	if err != nil {
		log.Fatal(err)
	}
	recall := func(ctx context.Context, r plan.MemoryRequest) ([]plan.MemoryItem, error) {
		// r.Query is the question; r.MaxTokens the section's reserve.
		return []plan.MemoryItem{
			{ID: "o1", Text: "The customer prefers email.", Score: 0.9},
			{ID: "o2", Text: "The customer is on the Pro plan since March.", Score: 0.8},
			{ID: "o3", Text: "The customer asked about invoices twice.", Score: 0.7},
		}, nil
	}
	a, err := p.Assemble(context.Background(), "chat", map[string]string{"question": "How should I contact them?"},
		plan.WithRecall(recall), plan.WithMemoryTimeout(250*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a.Text)
	fmt.Println("---")
	m := a.Memory[0]
	fmt.Printf("%d of %d tokens; memory: %d used, %d omitted, timed out %v\n", a.Tokens, a.MaxTokens, len(m.Items), m.Omitted, m.TimedOut)
	// Output:
	// You are a support assistant.
	//
	// ## Question
	// How should I contact them?
	//
	// ## What we know
	// The customer prefers email.
	// The customer is on the Pro plan since March.
	//
	// ## Task
	// Answer briefly.
	// ---
	// 41 of 60 tokens; memory: 2 used, 1 omitted, timed out false
}
