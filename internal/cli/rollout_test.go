package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/testenv"
)

const (
	rolloutStable = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	rolloutCanary = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

const rolloutTemplate = `
apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: %NAME%}
spec:
  budget: {maxTokens: 4000}
  sections:
  - {name: role, text: "You are the assistant."}
  - {name: task, intent: true}
  intents: [{name: chat, instruction: Answer the question.}]
  rollout:
    steps:
    - {weight: 10, pause: {}}
    - {weight: 50, pause: {duration: 10m}}
    - {weight: 100}
    analysis:
      prometheus: {address: "http://prometheus:9090", query: "vector(0)", maxValue: "0.05"}
      failureLimit: 3
`

// rolloutEnv is a control plane with the CRDs, a client for the test's
// own writes (standing in for the manager) and a kubeconfig whose current
// context is namespace "default" and whose context "team" is namespace
// "team".
type rolloutEnv struct {
	c          client.Client
	kubeconfig string
}

func startRolloutEnv(t *testing.T) *rolloutEnv {
	t.Helper()
	env, cfg, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := promptopsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(env.KubeConfig)
	if err != nil {
		t.Fatal(err)
	}
	cur := kc.Contexts[kc.CurrentContext]
	team := clientcmdapi.NewContext()
	team.Cluster, team.AuthInfo, team.Namespace = cur.Cluster, cur.AuthInfo, "team"
	kc.Contexts["team"] = team
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	// Neither the developer's ~/.kube/config nor $KUBECONFIG counts.
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBECONFIG", "")
	return &rolloutEnv{c: c, kubeconfig: path}
}

// create writes a template and, as the manager would, its status.rollout
// through the status subresource (nil: no rollout).
func (e *rolloutEnv) create(t *testing.T, ns, name string, r *promptopsv1.RolloutStatus) *promptopsv1.PromptTemplate {
	t.Helper()
	pt := &promptopsv1.PromptTemplate{}
	if err := yaml.UnmarshalStrict([]byte(strings.ReplaceAll(rolloutTemplate, "%NAME%", name)), pt); err != nil {
		t.Fatal(err)
	}
	pt.Namespace = ns
	ctx := context.Background()
	if err := e.c.Create(ctx, pt); err != nil {
		t.Fatal(err)
	}
	pt.Status.Revision = rolloutStable
	pt.Status.Rollout = r
	if err := e.c.Status().Update(ctx, pt); err != nil {
		t.Fatal(err)
	}
	return pt
}

func (e *rolloutEnv) get(t *testing.T, ns, name string) *promptopsv1.PromptTemplate {
	t.Helper()
	pt := &promptopsv1.PromptTemplate{}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pt); err != nil {
		t.Fatal(err)
	}
	return pt
}

func runMain(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := Main(args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func inPhase(phase promptopsv1.RolloutPhase, step, weight int32) *promptopsv1.RolloutStatus {
	started := metav1.NewTime(time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC))
	return &promptopsv1.RolloutStatus{
		StableRevision: rolloutStable, CanaryRevision: rolloutCanary,
		Weight: weight, Step: step, Phase: phase,
		Message:       fmt.Sprintf("Step %d holds at its weight until promoted.", step),
		StepStartedAt: &started, AnalysisFailures: 1,
	}
}

// TestRollout runs status, promote and abort through Main against a real
// API server, on templates whose status.rollout is written as the manager
// writes it, and checks what they print and the annotation they set.
func TestRollout(t *testing.T) {
	e := startRolloutEnv(t)
	kc := "--kubeconfig=" + e.kubeconfig

	t.Run("status", func(t *testing.T) {
		e.create(t, "team", "paused", inPhase(promptopsv1.RolloutPaused, 1, 10))
		// The context's namespace, flags after the name, as kubectl.
		code, out, errOut := runMain("rollout", "status", "paused", kc, "--context", "team")
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		for _, want := range []string{
			"PromptTemplate:     team/paused",
			"Phase:              Paused",
			"Step:               1 of 3",
			"Weight:             10%",
			"Stable revision:    " + rolloutStable,
			"Canary revision:    " + rolloutCanary,
			"Analysis failures:  1 of 3",
			"Step started:       2026-12-07T18:00:00Z",
			"Message:            Step 1 holds at its weight until promoted.",
		} {
			if !strings.Contains(out, want+"\n") {
				t.Errorf("status lacks %q:\n%s", want, out)
			}
		}

		// -o json is status.rollout as the API server has it; KUBECONFIG
		// as kubectl reads it.
		t.Setenv("KUBECONFIG", e.kubeconfig)
		code, out, errOut = runMain("rollout", "status", "-n", "team", "-o", "json", "paused")
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var got promptopsv1.RolloutStatus
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if got.Phase != promptopsv1.RolloutPaused || got.Step != 1 || got.Weight != 10 || got.CanaryRevision != rolloutCanary || got.StableRevision != rolloutStable || got.AnalysisFailures != 1 {
			t.Fatalf("json: %+v", got)
		}
		t.Setenv("KUBECONFIG", "")

		e.create(t, "team", "quiet", nil)
		code, out, errOut = runMain("rollout", "status", "quiet", "-n", "team", kc)
		if code != ExitOK || !strings.Contains(out, "PromptTemplate team/quiet has no rollout; it serves revision "+rolloutStable) {
			t.Fatalf("exit %d: %q %q", code, out, errOut)
		}
		code, out, _ = runMain("rollout", "status", "quiet", "-n", "team", "-o", "json", kc)
		if code != ExitOK || strings.TrimSpace(out) != "null" {
			t.Fatalf("exit %d: %q", code, out)
		}
	})

	for _, tc := range []struct {
		verb, annotation string
		phase            promptopsv1.RolloutPhase
	}{
		{"promote", promptopsv1.AnnotationRolloutPromote, promptopsv1.RolloutPaused},
		{"abort", promptopsv1.AnnotationRolloutAbort, promptopsv1.RolloutProgressing},
	} {
		t.Run(tc.verb, func(t *testing.T) {
			name := tc.verb + "-running"
			e.create(t, "team", name, inPhase(tc.phase, 2, 50))
			code, out, errOut := runMain("rollout", tc.verb, name, "-n", "team", kc)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if want := "PromptTemplate team/" + name + ": " + tc.verb + " requested for canary revision " + rolloutCanary; !strings.Contains(out, want) {
				t.Fatalf("output %q lacks %q", out, want)
			}
			pt := e.get(t, "team", name)
			if got := pt.Annotations[tc.annotation]; got != rolloutCanary {
				t.Fatalf("annotation %s = %q, want %s", tc.annotation, got, rolloutCanary)
			}
			if len(pt.Annotations) != 1 {
				t.Fatalf("annotations %v: only %s is set", pt.Annotations, tc.annotation)
			}

			// A rollout that is over (or never was) is left alone.
			for phase, r := range map[string]*promptopsv1.RolloutStatus{
				"none":     nil,
				"promoted": {StableRevision: rolloutCanary, CanaryRevision: rolloutCanary, Phase: promptopsv1.RolloutPromoted},
				"aborted":  {StableRevision: rolloutStable, CanaryRevision: rolloutCanary, Phase: promptopsv1.RolloutAborted, Message: "aborted by promptops.io/rollout-abort"},
			} {
				name := tc.verb + "-" + phase
				before := e.create(t, "team", name, r)
				code, out, errOut := runMain("rollout", tc.verb, name, "-n", "team", kc)
				if code != ExitFailed || out != "" || !strings.Contains(errOut, "PromptTemplate team/"+name+" has no rollout to "+tc.verb) || !strings.Contains(errOut, "nothing was changed") {
					t.Fatalf("%s: exit %d: %q %q", phase, code, out, errOut)
				}
				after := e.get(t, "team", name)
				if after.ResourceVersion != before.ResourceVersion || len(after.Annotations) != 0 {
					t.Fatalf("%s: the template was changed: %v", phase, after.Annotations)
				}
			}
		})
	}

	t.Run("stale annotation", func(t *testing.T) {
		// An annotation left from an earlier rollout names another
		// revision; promote replaces it with the running canary.
		pt := e.create(t, "team", "stale", inPhase(promptopsv1.RolloutPaused, 1, 10))
		pt.Annotations = map[string]string{promptopsv1.AnnotationRolloutPromote: rolloutStable, "keep": "me"}
		if err := e.c.Update(context.Background(), pt); err != nil {
			t.Fatal(err)
		}
		if code, _, errOut := runMain("rollout", "promote", "stale", "-n", "team", kc); code != ExitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		got := e.get(t, "team", "stale").Annotations
		if got[promptopsv1.AnnotationRolloutPromote] != rolloutCanary || got["keep"] != "me" {
			t.Fatalf("annotations %v", got)
		}
	})

	t.Run("missing", func(t *testing.T) {
		for _, verb := range []string{"status", "promote", "abort"} {
			code, out, errOut := runMain("rollout", verb, "nothing", "-n", "team", kc)
			if code != ExitFailed || out != "" || !strings.Contains(errOut, "PromptTemplate team/nothing not found") {
				t.Fatalf("%s: exit %d: %q %q", verb, code, out, errOut)
			}
		}
	})

	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"rollout"},
			{"rollout", "resume", "x"},
			{"rollout", "status", kc},
			{"rollout", "promote", "a", "b", kc},
			{"rollout", "status", "x", "-o", "yaml", kc},
			{"rollout", "promote", "../x", "-n", "team", kc},
			{"rollout", "abort", strings.Repeat("x", 300), "-n", "team", kc},
			{"rollout", "status", "x", "-n", "Team_1", kc},
		} {
			if code, _, _ := runMain(args...); code != ExitInvalid {
				t.Errorf("%v: exit %d, want %d", args, code, ExitInvalid)
			}
		}
		if code, _, errOut := runMain("rollout", "status", "x", "--kubeconfig", filepath.Join(t.TempDir(), "none")); code != ExitInvalid || !strings.Contains(errOut, "no cluster configuration") {
			t.Errorf("missing kubeconfig: exit %d: %s", code, errOut)
		}
		if code, out, _ := runMain("rollout", "promote", "-h"); code != ExitOK || !strings.Contains(out, promptopsv1.AnnotationRolloutPromote) {
			t.Errorf("help: exit %d: %s", code, out)
		}
	})
}
