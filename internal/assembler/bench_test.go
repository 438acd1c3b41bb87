package assembler

import (
	"context"
	"strconv"
	"strings"
	"testing"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/tokens/corpus"
)

// benchSpec is a six-section, six-intent template of about 4 KB, like the
// statistics assistant; salt makes every text new so nothing is cached.
func benchSpec(salt string) *promptopsv1.PromptTemplateSpec {
	text := corpus.Generate(3000)
	str := func(s string) *string { return &s }
	prio := func(n int32) *promptopsv1.Truncation { return &promptopsv1.Truncation{Priority: &n} }
	s := &promptopsv1.PromptTemplateSpec{
		Encoding: promptopsv1.EncodingO200K,
		Budget:   promptopsv1.Budget{MaxTokens: 4000},
		Sections: []promptopsv1.Section{
			{Name: "base_system", Text: str(salt + text), Truncation: &promptopsv1.Truncation{Policy: promptopsv1.TruncationNever}},
			{Name: "data_context", Runtime: &promptopsv1.RuntimeSection{ReserveTokens: 500}, Truncation: prio(2)},
			{Name: "pico_inference", Runtime: &promptopsv1.RuntimeSection{ReserveTokens: 200}, Truncation: prio(3)},
			{Name: "variable_dictionary", Runtime: &promptopsv1.RuntimeSection{ReserveTokens: 600}, Truncation: prio(4)},
			{Name: "tool_outputs", Heading: "## 工具执行结果", Runtime: &promptopsv1.RuntimeSection{}, Truncation: prio(5)},
			{Name: "intent_instruction", Heading: "## 当前任务指令", Intent: true},
		},
	}
	for i, n := range []string{"chat", "explore", "consult", "analyze", "discuss", "feedback"} {
		s.Intents = append(s.Intents, promptopsv1.Intent{Name: n, Instruction: str(salt + strings.Repeat("请基于统计知识回答。", 10+i))})
	}
	return s
}

func BenchmarkRenderSixSections(b *testing.B) {
	b.Run("cold", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := Render(Input{Spec: benchSpec(strconv.Itoa(i) + " ")}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		spec := benchSpec("")
		if _, err := Render(Input{Spec: spec}); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := Render(Input{Spec: spec}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkAssembleRuntime(b *testing.B) {
	res, err := Render(Input{Spec: benchSpec("")})
	if err != nil {
		b.Fatal(err)
	}
	tool := corpus.Generate(12000) // over budget: forces a cut
	b.Run("with-cut", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := res.Plan.Assemble(context.Background(), "analyze", map[string]string{"data_context": "n=200", "tool_outputs": tool}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
