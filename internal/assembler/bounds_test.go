package assembler

// Tests that fail when a render is judged wrongly in one of the ways a
// reviewer would try (issue 21, docs/mutation.md): the bounds Validate
// shares with the CRD, at the bound and one past it, and the verdicts of a
// Result.

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/textclip"
	"github.com/promptops/promptops/internal/tokens"
	"github.com/promptops/promptops/plan"
)

const oneIntent = `
budget: {maxTokens: 100}
sections: [{name: task, intent: true}]
intents: [{name: chat, instruction: "Hi."}]
`

// Each bound of Validate holds at the bound and fails one past it, naming
// the field.
func TestValidateBounds(t *testing.T) {
	text := func(n int) *string { s := strings.Repeat("字", n); return &s }
	for _, c := range []struct {
		name   string
		change func(s *promptopsv1.PromptTemplateSpec, past int)
		field  string
	}{
		{"maxTokens at least 1", func(s *promptopsv1.PromptTemplateSpec, past int) { s.Budget.MaxTokens = int32(1 - past) }, "spec.budget.maxTokens"},
		{"maxTokens at most 2000000", func(s *promptopsv1.PromptTemplateSpec, past int) { s.Budget.MaxTokens = int32(2000000 + past) }, "spec.budget.maxTokens"},
		{"64 variables", func(s *promptopsv1.PromptTemplateSpec, past int) {
			s.Variables = map[string]string{}
			for i := 0; i < 64+past; i++ {
				s.Variables[fmt.Sprintf("v%d", i)] = "x"
			}
		}, "spec.variables"},
		{"a variable's value", func(s *promptopsv1.PromptTemplateSpec, past int) {
			s.Variables = map[string]string{"v": *text(MaxExpandedText + past)}
		}, "spec.variables[v]"},
		{"a heading", func(s *promptopsv1.PromptTemplateSpec, past int) { s.Sections[0].Heading = *text(1024 + past) }, "spec.sections[0].heading"},
		{"a text", func(s *promptopsv1.PromptTemplateSpec, past int) {
			s.Sections = append(s.Sections, promptopsv1.Section{Name: "sys", Text: text(MaxExpandedText + past)})
		}, "spec.sections[1].text"},
		{"32 sections", func(s *promptopsv1.PromptTemplateSpec, past int) {
			for i := 1; i < 32+past; i++ {
				s.Sections = append(s.Sections, promptopsv1.Section{Name: fmt.Sprintf("s%d", i), Text: text(1)})
			}
		}, "spec.sections"},
		{"64 intents", func(s *promptopsv1.PromptTemplateSpec, past int) {
			for i := 1; i < 64+past; i++ {
				s.Intents = append(s.Intents, promptopsv1.Intent{Name: fmt.Sprintf("i%d", i), Instruction: text(1)})
			}
		}, "spec.intents"},
		{"a section name of 63", func(s *promptopsv1.PromptTemplateSpec, past int) {
			s.Sections[0].Name = strings.Repeat("n", 63+past)
		}, "spec.sections[0].name"},
		{"a reserve under the budget", func(s *promptopsv1.PromptTemplateSpec, past int) {
			s.Sections = append(s.Sections, promptopsv1.Section{Name: "data", Runtime: &promptopsv1.RuntimeSection{ReserveTokens: int32(99 + past)}})
		}, "spec.sections[1].runtime.reserveTokens"},
		{"a reserve of 0", func(s *promptopsv1.PromptTemplateSpec, past int) {
			s.Sections = append(s.Sections, promptopsv1.Section{Name: "data", Runtime: &promptopsv1.RuntimeSection{ReserveTokens: int32(-past)}})
		}, "spec.sections[1].runtime.reserveTokens"},
		{"priority at most 100", func(s *promptopsv1.PromptTemplateSpec, past int) {
			s.Sections[0].Truncation = &promptopsv1.Truncation{Priority: ptr(int32(100 + past))}
		}, "spec.sections[0].truncation.priority"},
		{"priority at least 0", func(s *promptopsv1.PromptTemplateSpec, past int) {
			s.Sections[0].Truncation = &promptopsv1.Truncation{Priority: ptr(int32(-past))}
		}, "spec.sections[0].truncation.priority"},
		{"minTokens under the budget", func(s *promptopsv1.PromptTemplateSpec, past int) {
			s.Sections[0].Truncation = &promptopsv1.Truncation{Policy: promptopsv1.TruncationPriority, MinTokens: ptr(int32(99 + past))}
		}, "spec.sections[0].truncation.minTokens"},
		{"minTokens at least 0", func(s *promptopsv1.PromptTemplateSpec, past int) {
			s.Sections[0].Truncation = &promptopsv1.Truncation{MinTokens: ptr(int32(-past))}
		}, "spec.sections[0].truncation.minTokens"},
		{"an intent name of 63", func(s *promptopsv1.PromptTemplateSpec, past int) {
			s.Intents[0].Name = strings.Repeat("i", 63+past)
		}, "spec.intents[0].name"},
		{"an instruction", func(s *promptopsv1.PromptTemplateSpec, past int) {
			s.Intents[0].Instruction = text(MaxExpandedText + past)
		}, "spec.intents[0].instruction"},
	} {
		t.Run(c.name, func(t *testing.T) {
			at := spec(t, oneIntent)
			c.change(at, 0)
			if err := Validate(at); err != nil {
				t.Errorf("at the bound: %v", err)
			}
			past := spec(t, oneIntent)
			c.change(past, 1)
			var ise *InvalidSpecError
			if err := Validate(past); !errors.As(err, &ise) || ise.Field != c.field {
				t.Errorf("one past the bound: %v, want an error on %s", err, c.field)
			}
		})
	}
}

// A variable may expand a text up to MaxExpandedText characters, not one
// more.
func TestExpandedTextBound(t *testing.T) {
	for _, c := range []struct {
		extra int
		ok    bool
	}{{0, true}, {1, false}} {
		s := spec(t, `
budget: {maxTokens: 100}
sections: [{name: sys, text: "{{ a }}{{ a }}", truncation: {policy: Never}}, {name: task, intent: true}]
intents: [{name: chat, instruction: "Hi."}]
`)
		s.Variables = map[string]string{"a": strings.Repeat("字", MaxExpandedText/2) + strings.Repeat("y", c.extra)}
		_, err := Render(Input{Namespace: "ns", Name: "t", Spec: s})
		var tl *TooLargeError
		if c.ok && err != nil || !c.ok && !errors.As(err, &tl) {
			t.Errorf("expanded to %d characters: %v", MaxExpandedText+2*c.extra, err)
		}
	}
}

// A static section's tokens in the plan are those of its block: heading
// line and text, or the text alone without a heading.
func TestPlanSectionTokens(t *testing.T) {
	r := render(t, `
budget: {maxTokens: 1000}
sections:
- {name: a, heading: "## Rules", text: "Be brief."}
- {name: b, text: "Answer in English."}
- {name: task, intent: true}
intents: [{name: chat, instruction: "Hi."}]
`, nil)
	e := tokens.MustGet(tokens.O200K)
	for i, want := range []int{e.Count("## Rules\nBe brief."), e.Count("Answer in English.")} {
		if got := r.Plan.Sections[i].Tokens; got != want {
			t.Errorf("section %s: %d tokens, want %d", r.Plan.Sections[i].Name, got, want)
		}
	}
}

// The verdicts of a Result: over budget, applied or not by onExceed,
// truncated, and the largest intent.
func TestResultVerdicts(t *testing.T) {
	mk := func(onExceed plan.OnExceed, as ...*Assembly) *Result {
		return &Result{Plan: &Plan{OnExceed: onExceed}, Intents: as}
	}
	fits := &Assembly{Intent: "a", Tokens: 90, WithinBudget: true}
	over := &Assembly{Intent: "b", Tokens: 120, WithinBudget: false}
	cut := &Assembly{Intent: "c", Tokens: 100, WithinBudget: true, Cut: []string{"sys"}}
	for _, c := range []struct {
		r       *Result
		over    int
		applies bool
		trunc   int
		largest int
	}{
		{mk("Reject", fits), 0, true, 0, 90},
		{mk("Reject", fits, over), 1, false, 0, 120},
		{mk("Truncate", over, cut), 1, false, 1, 120},
		{mk("Warn", fits, over), 1, true, 0, 120},
		{mk("Truncate", cut, fits), 0, true, 1, 100},
	} {
		if got := len(c.r.OverBudget()); got != c.over {
			t.Errorf("%s %v: %d over budget, want %d", c.r.Plan.OnExceed, c.r.Intents, got, c.over)
		}
		if got := c.r.Applies(); got != c.applies {
			t.Errorf("%s %v: applies %v, want %v", c.r.Plan.OnExceed, c.r.Intents, got, c.applies)
		}
		if got := len(c.r.Truncated()); got != c.trunc {
			t.Errorf("%s %v: %d truncated, want %d", c.r.Plan.OnExceed, c.r.Intents, got, c.trunc)
		}
		if got := c.r.Largest(); got != c.largest {
			t.Errorf("%s %v: largest %d, want %d", c.r.Plan.OnExceed, c.r.Intents, got, c.largest)
		}
	}
}

// A rendered ConfigMap of exactly the API server's limit is written; one
// byte more is refused, keys counted.
func TestConfigMapDataBound(t *testing.T) {
	r := render(t, oneIntent, nil)
	data, err := ConfigMapData(r)
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for k, v := range data {
		size += len(k) + len(v)
	}
	if data[IntentKey("chat")] != r.Intents[0].Text || data[PlanKey] == "" {
		t.Fatalf("data %v", data)
	}
	r.Intents[0].Text += strings.Repeat("x", MaxConfigMapBytes-size)
	if _, err := ConfigMapData(r); err != nil {
		t.Errorf("at the limit: %v", err)
	}
	r.Intents[0].Text += "x"
	var tl *TooLargeError
	if _, err := ConfigMapData(r); !errors.As(err, &tl) || tl.Size != MaxConfigMapBytes+1 {
		t.Errorf("one byte over: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// Specs Validate refuses whatever their size, each naming its field.
func TestValidateRefuses(t *testing.T) {
	ref := &promptopsv1.TextSource{ConfigMapKeyRef: promptopsv1.ConfigMapKeyRef{Name: "cm"}}
	for _, c := range []struct {
		name   string
		change func(s *promptopsv1.PromptTemplateSpec)
		field  string
	}{
		{"an unknown policy", func(s *promptopsv1.PromptTemplateSpec) {
			s.Sections[0].Truncation = &promptopsv1.Truncation{Policy: "Sometimes"}
		}, "spec.sections[0].truncation.policy"},
		{"Never with a priority", func(s *promptopsv1.PromptTemplateSpec) {
			s.Sections[0].Truncation = &promptopsv1.Truncation{Policy: promptopsv1.TruncationNever, Priority: ptr(int32(1))}
		}, "spec.sections[0].truncation"},
		{"Never with a minimum", func(s *promptopsv1.PromptTemplateSpec) {
			s.Sections[0].Truncation = &promptopsv1.Truncation{Policy: promptopsv1.TruncationNever, MinTokens: ptr(int32(1))}
		}, "spec.sections[0].truncation"},
		{"a section from a ConfigMap without key", func(s *promptopsv1.PromptTemplateSpec) {
			s.Sections = append(s.Sections, promptopsv1.Section{Name: "sys", From: ref})
		}, "spec.sections[1].from.configMapKeyRef"},
		{"an intent from a ConfigMap without key", func(s *promptopsv1.PromptTemplateSpec) {
			s.Intents[0].Instruction, s.Intents[0].From = nil, ref
		}, "spec.intents[0].from.configMapKeyRef"},
		{"an intent without instruction", func(s *promptopsv1.PromptTemplateSpec) { s.Intents[0].Instruction = nil }, "spec.intents[0]"},
		{"no intent section", func(s *promptopsv1.PromptTemplateSpec) {
			s.Sections[0] = promptopsv1.Section{Name: "sys", Text: ptr("x")}
		}, "spec.sections"},
		{"a long variable name", func(s *promptopsv1.PromptTemplateSpec) {
			s.Variables = map[string]string{strings.Repeat("v", 200): "x"}
		}, "spec.variables"},
	} {
		s := spec(t, oneIntent)
		c.change(s)
		var ise *InvalidSpecError
		if err := Validate(s); !errors.As(err, &ise) || ise.Field != c.field {
			t.Errorf("%s: %v, want an error on %s", c.name, err, c.field)
		} else if len(ise.Message) > 300 {
			t.Errorf("%s: message of %d bytes: %s", c.name, len(ise.Message), ise.Message)
		}
	}
	// Policy Priority with both set, Never alone: valid.
	s := spec(t, oneIntent)
	s.Sections[0].Truncation = &promptopsv1.Truncation{Policy: promptopsv1.TruncationPriority, Priority: ptr(int32(3)), MinTokens: ptr(int32(2))}
	if err := Validate(s); err != nil {
		t.Error(err)
	}
	s.Sections[0].Truncation = &promptopsv1.Truncation{Policy: promptopsv1.TruncationNever}
	if err := Validate(s); err != nil {
		t.Error(err)
	}
}

// A template's name is 1 to 63 characters.
func TestValidateNameBounds(t *testing.T) {
	for name, ok := range map[string]bool{"": false, "a": true, strings.Repeat("a", 63): true, strings.Repeat("a", 64): false} {
		if err := ValidateName(name); (err == nil) != ok {
			t.Errorf("%d characters: %v", len(name), err)
		}
	}
}

// References lists each ConfigMap key once, sections before intents.
func TestReferencesOnce(t *testing.T) {
	src := func(name, key string) *promptopsv1.TextSource {
		return &promptopsv1.TextSource{ConfigMapKeyRef: promptopsv1.ConfigMapKeyRef{Name: name, Key: key}}
	}
	s := spec(t, oneIntent)
	s.Sections = append(s.Sections, promptopsv1.Section{Name: "a", From: src("cm", "a")}, promptopsv1.Section{Name: "b", From: src("cm", "a")})
	s.Intents = append(s.Intents, promptopsv1.Intent{Name: "x", From: src("cm", "x")}, promptopsv1.Intent{Name: "y", From: src("cm", "a")})
	got := References(s)
	if want := []SourceKey{{"cm", "a"}, {"cm", "x"}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("references %v, want %v", got, want)
	}
}

// A name of 80 bytes is quoted whole in a message; a longer one is clipped
// to 80 and marked.
func TestClipBound(t *testing.T) {
	if got := textclip.Head(strings.Repeat("a", 80), 80, "..."); got != strings.Repeat("a", 80) {
		t.Errorf("80 bytes clipped to %q", got)
	}
	if got := textclip.Head(strings.Repeat("a", 81), 80, "..."); got != strings.Repeat("a", 80)+"..." {
		t.Errorf("81 bytes clipped to %q", got)
	}
}
