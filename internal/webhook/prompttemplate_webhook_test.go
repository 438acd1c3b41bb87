package webhook

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/testenv"
)

func sample(t testing.TB, file string) *promptopsv1.PromptTemplate {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "config", "samples", file))
	if err != nil {
		t.Fatal(err)
	}
	pt := &promptopsv1.PromptTemplate{}
	if err := yaml.UnmarshalStrict(data, pt); err != nil {
		t.Fatal(err)
	}
	pt.Namespace = "default"
	return pt
}

func unknownVariable() *promptopsv1.PromptTemplate {
	text, instr := "You work for {{ company }}.", "Answer."
	return &promptopsv1.PromptTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bad"},
		Spec: promptopsv1.PromptTemplateSpec{
			Budget:   promptopsv1.Budget{MaxTokens: 100},
			Sections: []promptopsv1.Section{{Name: "role", Text: &text}, {Name: "task", Intent: true}},
			Intents:  []promptopsv1.Intent{{Name: "chat", Instruction: &instr}},
		},
	}
}

// An update that leaves the spec alone is never denied, so a template that
// cannot render can still be labelled, annotated or have its finalizers
// removed; a spec change to something that cannot render is.
func TestUpdateDeniesOnlyASpecChange(t *testing.T) {
	v := &PromptTemplateValidator{Reader: fake.NewClientBuilder().Build()}
	ctx := context.Background()
	old := unknownVariable()
	annotated := old.DeepCopy()
	annotated.Annotations = map[string]string{"promptops.io/reconcile-requested-at": "now"}
	warnings, err := v.ValidateUpdate(ctx, old, annotated)
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], "{{ company }}") {
		t.Fatalf("metadata-only update: warnings %q, err %v", warnings, err)
	}
	good := sample(t, "promptops_v1_prompttemplate_support.yaml")
	if _, err := v.ValidateUpdate(ctx, good, old); err == nil {
		t.Fatal("a spec change to an unknown variable was allowed")
	}
	if w, err := v.ValidateDelete(ctx, old); err != nil || w != nil {
		t.Fatalf("delete: %q %v", w, err)
	}
}

// BenchmarkReview is one admission review of the over-budget sample: the
// render an apply waits for.
func BenchmarkReview(b *testing.B) {
	v := &PromptTemplateValidator{Reader: fake.NewClientBuilder().Build()}
	pt := sample(b, "promptops_v1_prompttemplate_overbudget.yaml")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Review(ctx, pt); err != nil {
			b.Fatal(err)
		}
	}
}
