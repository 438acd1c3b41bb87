package plan_test

import (
	"fmt"
	"log"

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
	a, err := p.Assemble("chat", map[string]string{
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
