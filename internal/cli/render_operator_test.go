package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/controllers"
	"github.com/promptops/promptops/internal/operator"
	"github.com/promptops/promptops/internal/testenv"
)

// TestRenderAgreesWithTheOperator holds render and the operator to the same
// verdict on the same objects, on a real control plane with the manager:
// the ssa-pro sample alone is ReferenceNotFound for both (the operator's
// Ready message is render's, waiting for the ConfigMap), with a ConfigMap
// that lacks the first key both use the fallback text, and with the
// sample's ConfigMap both give the same revision and, per intent, the same
// counts.
func TestRenderAgreesWithTheOperator(t *testing.T) {
	env, cfg, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	mgr, err := operator.NewManager(cfg, operator.Options{MetricsAddr: "0", ProbeAddr: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := controllers.Setup(mgr, controllers.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: controllers.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "verdicts"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	ssa := filepath.Join(samplesDir(), "promptops_v1_prompttemplate_ssa.yaml")
	pt := &promptopsv1.PromptTemplate{}
	readYAML(t, ssa, pt)
	pt.Namespace = ns
	if err := c.Create(ctx, pt); err != nil {
		t.Fatal(err)
	}
	// readyAs waits for the operator's Ready reason on the current
	// generation and returns the template.
	readyAs := func(reason string) *promptopsv1.PromptTemplate {
		t.Helper()
		var got promptopsv1.PromptTemplate
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: pt.Name}, &got); err != nil {
				t.Fatal(err)
			}
			ready := meta.FindStatusCondition(got.Status.Conditions, promptopsv1.ConditionReady)
			if ready != nil && ready.Reason == reason && ready.ObservedGeneration == got.Generation {
				return &got
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for Ready reason %s: %+v", reason, got.Status.Conditions)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	render := func(code int, files ...string) renderTemplate {
		t.Helper()
		args := []string{"render", "-n", ns, "-o", "json"}
		for _, f := range files {
			args = append(args, "-f", f)
		}
		got, out, errOut := run(t, "", args...)
		var ro renderOutput
		if got != code || json.Unmarshal([]byte(out), &ro) != nil || len(ro.Templates) != 1 {
			t.Fatalf("render %v: exit %d, want %d\n%s%s", files, got, code, out, errOut)
		}
		return ro.Templates[0]
	}
	// sameCounts compares the operator's status with render's report.
	sameCounts := func(live *promptopsv1.PromptTemplate, r renderTemplate) {
		t.Helper()
		if live.Status.Revision != r.Revision || len(live.Status.Intents) != len(r.Intents) {
			t.Fatalf("operator %s with %d intents, render %s with %d", live.Status.Revision, len(live.Status.Intents), r.Revision, len(r.Intents))
		}
		for i, op := range live.Status.Intents {
			ri := r.Intents[i]
			want := fmt.Sprint(op.Name, op.Tokens, op.FixedTokens, op.ReservedTokens, op.CacheableTokens, op.WithinBudget)
			if got := fmt.Sprint(ri.Name, ri.Tokens, ri.FixedTokens, ri.ReservedTokens, ri.CacheableTokens, ri.WithinBudget); got != want {
				t.Errorf("intent %d: render %s, operator %s", i, got, want)
			}
		}
	}

	// No ConfigMap: ReferenceNotFound for both, fallback text or not.
	live := readyAs(promptopsv1.ReasonReferenceNotFound)
	r := render(ExitFailed, ssa)
	msg := meta.FindStatusCondition(live.Status.Conditions, promptopsv1.ConditionReady).Message
	if r.Reason != promptopsv1.ReasonReferenceNotFound || msg != r.Message+" Waiting for it." {
		t.Fatalf("render %s %q, operator %q", r.Reason, r.Message, msg)
	}

	// A ConfigMap without SSA_BASE_SYSTEM: the fallback text, for both.
	data, err := os.ReadFile(filepath.Join(samplesDir(), "ssa-prompts-configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	lacking := regexp.MustCompile(`(?ms)^  SSA_BASE_SYSTEM: .*?^  SSA_`).ReplaceAll(data, []byte("  SSA_"))
	lackingFile := filepath.Join(t.TempDir(), "cm.yaml")
	if err := os.WriteFile(lackingFile, lacking, 0o644); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	readYAML(t, lackingFile, cm)
	if _, ok := cm.Data["SSA_BASE_SYSTEM"]; ok || len(cm.Data) == 0 {
		t.Fatalf("the sample ConfigMap's keys changed: %v", cm.Data)
	}
	cm.Namespace = ns
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	live = readyAs(promptopsv1.ReasonSucceeded)
	r = render(ExitOK, ssa, lackingFile)
	if len(r.Notes) != 1 || !regexp.MustCompile(`using the fallback text`).MatchString(r.Notes[0]) {
		t.Fatalf("render notes %q", r.Notes)
	}
	sameCounts(live, r)

	// The sample's ConfigMap: its texts, the same counts.
	full := &corev1.ConfigMap{}
	readYAML(t, filepath.Join(samplesDir(), "ssa-prompts-configmap.yaml"), full)
	cm.Data = full.Data
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	before := live.Status.Revision
	deadline := time.Now().Add(2 * time.Minute)
	for live.Status.Revision == before {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the render of the full ConfigMap")
		}
		time.Sleep(50 * time.Millisecond)
		live = readyAs(promptopsv1.ReasonSucceeded)
	}
	r = render(ExitOK, ssa, filepath.Join(samplesDir(), "ssa-prompts-configmap.yaml"))
	sameCounts(live, r)
	if live.Status.LargestTokens != 2731 {
		t.Errorf("largest %d, want the analyze intent's 2731 of the README", live.Status.LargestTokens)
	}
}

// readYAML decodes a one-document manifest.
func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
