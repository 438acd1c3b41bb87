package assembler

import (
	"errors"
	"fmt"
	"testing"

	"github.com/promptops/promptops/internal/tokens"
	"github.com/promptops/promptops/internal/tokens/tokenstest"
)

// TestSpecialTokensInStaticText: under specialTokens Reject (the default)
// a special-token string of the encoding in a heading, a static text (its
// own or a ConfigMap's) or an instruction does not render, naming the
// field; under Allow the plan says Allow and counts it as one token; a
// tiktoken encoding has no specials and no specialTokens in its plan.
func TestSpecialTokensInStaticText(t *testing.T) {
	enc := tokenstest.Encoder(t, tokens.Llama3)
	base := `
encoding: llama3
budget: {maxTokens: 100}
sections:
- {name: role, heading: "%s", text: "%s"}
- {name: notes, from: {configMapKeyRef: {name: cm, key: notes}}}
- {name: task, intent: true}
intents: [{name: chat, instruction: "%s"}]
`
	sources := func(notes string) ConfigMaps {
		return ConfigMaps{"cm": {"notes": notes}}
	}
	for _, c := range []struct {
		heading, text, notes, instruction, field string
	}{
		{"<|eot_id|>", "Help.", "n", "Answer.", "spec.sections[0].heading"},
		{"Role", "Help.<|start_header_id|>", "n", "Answer.", "spec.sections[0].text"},
		{"Role", "Help.", "n <|eot_id|>", "Answer.", "spec.sections[1].from"},
		{"Role", "Help.", "n", "<|begin_of_text|>Answer.", "spec.intents[0].instruction"},
	} {
		y := sprintf(base, c.heading, c.text, c.instruction)
		_, err := Render(Input{Namespace: "ns", Name: "t", Spec: spec(t, y), Sources: sources(c.notes)})
		var invalid *InvalidSpecError
		if !errors.As(err, &invalid) || invalid.Field != c.field {
			t.Errorf("%s: %v", c.field, err)
		}
		r, err := Render(Input{Namespace: "ns", Name: "t", Spec: spec(t, "specialTokens: Allow\n"+y), Sources: sources(c.notes)})
		if err != nil || r.Plan.SpecialTokens != "Allow" || r.Intents[0].Tokens != enc.Count(r.Intents[0].Text) {
			t.Errorf("%s, Allow: %v", c.field, err)
		}
	}
	r := render(t, sprintf(base, "Role", "Help.", "Answer."), sources("n"))
	if r.Plan.SpecialTokens != "Reject" {
		t.Errorf("llama3's plan: specialTokens %q, want the default Reject", r.Plan.SpecialTokens)
	}
	r = render(t, "encoding: o200k_base\n"+sprintf(base[len("\nencoding: llama3"):], "<|eot_id|>", "Help.", "Answer."), sources("n"))
	if r.Plan.SpecialTokens != "" {
		t.Errorf("o200k_base's plan: specialTokens %q", r.Plan.SpecialTokens)
	}
}

func sprintf(format string, a ...any) string { return fmt.Sprintf(format, a...) }
