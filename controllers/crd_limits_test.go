package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/assembler"
	"github.com/promptops/promptops/internal/consolidation"
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

// TestTrustedSourcesAgreeWithConsolidation: the API server accepts in
// spec.trustedSources exactly the names and counts the Job and serve
// accept in --trusted-sources (consolidation.NewTrust), so a bank that
// applies never fails in its pods.
func TestTrustedSourcesAgreeWithConsolidation(t *testing.T) {
	ns := newNamespace(t)
	many := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("s%d", i)
		}
		return out
	}
	cases := [][]string{
		{"user"}, {"unspecified", "crm", "tool.web-search", "a1_b2-c3"},
		{strings.Repeat("a", consolidation.MaxSourceBytes)}, {strings.Repeat("a", consolidation.MaxSourceBytes+1)},
		{"User"}, {"1user"}, {"user."}, {"a..b"}, {"a.-b"}, {"tool web"}, {"crm/x"}, {"_x"}, {"é"},
		many(consolidation.MaxTrustedSources), many(consolidation.MaxTrustedSources + 1),
	}
	for i, sources := range cases {
		u := decodeYAML(t, []byte(validBank))[0]
		u.SetNamespace(ns)
		u.SetName(fmt.Sprintf("trust-%d", i))
		list := make([]any, len(sources))
		for j, s := range sources {
			list[j] = s
		}
		set(u.Object, list, "spec", "trustedSources")
		apiErr := k8sClient.Create(context.Background(), u)
		_, trustErr := consolidation.NewTrust(sources)
		if (apiErr == nil) != (trustErr == nil) {
			t.Errorf("case %d (%.40q): the API server says %v, --trusted-sources says %v", i, sources, apiErr, trustErr)
		}
	}
	// An empty list is refused at apply (leave the field out to trust
	// every source), and a name twice is not a set.
	for i, sources := range []any{[]any{}, []any{"user", "user"}} {
		u := decodeYAML(t, []byte(validBank))[0]
		u.SetNamespace(ns)
		u.SetName(fmt.Sprintf("trust-bad-%d", i))
		set(u.Object, sources, "spec", "trustedSources")
		if err := k8sClient.Create(context.Background(), u); err == nil {
			t.Errorf("trustedSources %v accepted", sources)
		}
	}
}
