package controllers

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/tokens"
)

// TestTokenizerUnavailable: a llama3 template whose vocabulary the manager
// does not have is Stalled with reason TokenizerUnavailable and a message
// that says how to supply it; another model's file is refused with the
// reason; once the model's tokenizer.json is in the directory the template
// is Ready by itself, counted in Llama 3's tokens.
func TestTokenizerUnavailable(t *testing.T) {
	data, err := os.ReadFile(tokens.File(tokens.Dir(), tokens.Llama3))
	if err != nil {
		if os.Getenv("PROMPTOPS_TOKENIZERS_REQUIRED") != "" {
			t.Fatal(err)
		}
		t.Skipf("no Llama 3 vocabulary (make tokenizers fetches it; make test sets %s): %v", tokens.EnvDir, err)
	}
	defer tokens.SetDir(tokens.Dir())
	dir := t.TempDir()
	tokens.SetDir(dir)

	ns := newNamespace(t)
	createYAML(t, ns, `
apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: llama}
spec:
  encoding: llama3
  budget: {maxTokens: 200}
  sections:
  - {name: role, text: "You are a helpful assistant for Acme's customers."}
  - {name: task, intent: true}
  intents: [{name: chat, instruction: Answer in one sentence.}]
`)
	pt := waitCondition(t, ns, "llama", promptopsv1.ConditionStalled, metav1.ConditionTrue, promptopsv1.ReasonTokenizerUnavailable)
	ready := meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionReady)
	if ready.Status != metav1.ConditionFalse || ready.Reason != promptopsv1.ReasonTokenizerUnavailable ||
		!strings.Contains(ready.Message, "<dir>/llama3/tokenizer.json") || !strings.Contains(ready.Message, tokens.EnvDir) {
		t.Fatalf("Ready: %+v", ready)
	}

	// Another file where the vocabulary goes: refused, saying why.
	if err := os.MkdirAll(dir+"/llama3", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/llama3/tokenizer.json", []byte(`{"model":{"type":"Unigram"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		pt = getPT(t, ns, "llama")
		if c := meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionReady); c == nil || !strings.Contains(c.Message, `model type "Unigram", want BPE`) {
			return fmt.Errorf("Ready is %+v", c)
		}
		return nil
	})

	// The model's own file: Ready, with no change to the template.
	if err := os.WriteFile(dir+"/llama3/tokenizer.json", data, 0o644); err != nil {
		t.Fatal(err)
	}
	pt = waitCondition(t, ns, "llama", promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded)
	if meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionStalled) != nil {
		t.Fatal("Stalled must be removed once the vocabulary is there")
	}
	text := getCM(t, ns, "llama-prompts").Data["chat.txt"]
	if want := tokens.MustGet(tokens.Llama3).Count(text); len(pt.Status.Intents) != 1 || int(pt.Status.Intents[0].Tokens) != want {
		t.Fatalf("intents %+v, want %d Llama 3 tokens", pt.Status.Intents, want)
	}
	if o := tokens.MustGet(tokens.O200K).Count(text); o == int(pt.Status.Intents[0].Tokens) {
		t.Logf("the text counts %d in o200k_base too", o)
	}
}
