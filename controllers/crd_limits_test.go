package controllers

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/assembler"
)

// TestRenderAndAPIServerAgreeOnLimits: what `promptops render` refuses
// offline as over a CRD limit, the real API server refuses too, and a value
// just at the limit passes both.
func TestRenderAndAPIServerAgreeOnLimits(t *testing.T) {
	ns := newNamespace(t)
	for _, tc := range []struct {
		name   string
		value  int
		reject bool
	}{{"at-limit", assembler.MaxExpandedText, false}, {"over-limit", assembler.MaxExpandedText + 1, true}} {
		u := decodeYAML(t, []byte(validTemplate))[0]
		u.SetNamespace(ns)
		u.SetName("variable-" + tc.name)
		set(u.Object, map[string]any{"v": strings.Repeat("x", tc.value)}, "spec", "variables")
		err := k8sClient.Create(context.Background(), u)
		if tc.reject != (err != nil) || (err != nil && !strings.Contains(err.Error(), "variable values are at most 65536 characters")) {
			t.Fatalf("%s: API server says %v", tc.name, err)
		}
		if verr := assembler.Validate(templateSpec(t, u.Object)); tc.reject != (verr != nil) {
			t.Fatalf("%s: render says %v", tc.name, verr)
		}
	}
}

// templateSpec converts an unstructured PromptTemplate's spec.
func templateSpec(t *testing.T, obj map[string]any) *promptopsv1.PromptTemplateSpec {
	t.Helper()
	pt := &promptopsv1.PromptTemplate{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, pt); err != nil {
		t.Fatal(err)
	}
	return &pt.Spec
}
