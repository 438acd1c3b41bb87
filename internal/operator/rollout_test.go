package operator

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/controllers"
	"github.com/promptops/promptops/internal/serve"
	"github.com/promptops/promptops/plan"
)

// The done-when test of rollouts, on a real control plane with the manager
// and a shared serve (the Deployment's --watch, in process): a template
// whose rollout holds at 10% and then goes to 100%. After a change, of
// 4,000 distinct keys 10% +- 1.5 points get the new revision and every
// repeated key keeps its revision; the plan package, in process, from the
// same ConfigMap, gives each key the same revision; promote takes every key
// to it, and after another change abort takes every key back. The time
// from each annotation to serve answering the new split is logged (one
// reconcile plus serve's reload), not asserted. A serve started anew
// mid-rollout gives every key the revision it had; kstatus reads the live
// object as InProgress while paused, Current once promoted and Failed once
// aborted.
func TestRolloutThroughServe(t *testing.T) {
	_, cfg, c, ctx, cancel := controlPlane(t)
	mgr, err := NewManager(cfg, Options{MetricsAddr: "0", ProbeAddr: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := controllers.Setup(mgr, controllers.Options{}); err != nil {
		t.Fatal(err)
	}
	runManager(t, ctx, cancel, mgr)

	const ns, name = "rollouts", "support"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	pt := &promptopsv1.PromptTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: promptopsv1.PromptTemplateSpec{
			Budget: promptopsv1.Budget{MaxTokens: 400},
			Sections: []promptopsv1.Section{
				{Name: "role", Text: ptr("You are the support assistant, first edition.")},
				{Name: "task", Heading: "## Task", Intent: true},
			},
			Intents: []promptopsv1.Intent{{Name: "chat", Instruction: ptr("Answer briefly.")}},
			Rollout: &promptopsv1.Rollout{Steps: []promptopsv1.RolloutStep{
				{Weight: 10, Pause: &promptopsv1.RolloutPause{}},
				{Weight: 100},
			}},
		},
	}
	if err := c.Create(ctx, pt); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: name}
	get := func() *promptopsv1.PromptTemplate {
		t.Helper()
		var got promptopsv1.PromptTemplate
		if err := c.Get(ctx, key, &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}
	// kstatus reads the live object as Flux's health checks do.
	kstatus := func() status.Status {
		t.Helper()
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(promptopsv1.GroupVersion.WithKind("PromptTemplate"))
		if err := c.Get(ctx, key, u); err != nil {
			t.Fatal(err)
		}
		res, err := status.Compute(u)
		if err != nil {
			t.Fatal(err)
		}
		return res.Status
	}
	waitFor(t, "the first revision", func() bool { s := get().Status; return s.Revision != "" && s.ObservedGeneration == get().Generation })
	first := get().Status.Revision

	s := serve.New(serve.Options{Log: logr.Discard()})
	if err := s.Watch(ctx, cfg, []string{ns}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	target := srv.URL // the serve assemble asks
	type answer struct {
		Revision string `json:"revision"`
		Canary   bool   `json:"canary"`
		Prompt   string `json:"prompt"`
	}
	assemble := func(k string) answer {
		t.Helper()
		body := fmt.Sprintf(`{"namespace": %q, "name": %q, "intent": "chat", "assignmentKey": %q}`, ns, name, k)
		resp, err := http.Post(target+"/v1/assemble", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var a answer
		if resp.StatusCode != http.StatusOK || json.Unmarshal(data, &a) != nil {
			t.Fatalf("assemble: %d %s", resp.StatusCode, data)
		}
		return a
	}
	waitFor(t, "serve to load the first revision", func() bool { return assemble("k").Revision == first })

	// A change: the rollout holds at 10%.
	change := func(text string) {
		t.Helper()
		p := get()
		p.Spec.Sections[0].Text = &text
		if err := c.Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	change("You are the support assistant, second edition.")
	waitFor(t, "the rollout to pause at 10%", func() bool {
		r := get().Status.Rollout
		return r != nil && r.Phase == promptopsv1.RolloutPaused && r.Weight == 10 && r.StableRevision == first
	})
	second := get().Status.Rollout.CanaryRevision
	if st := kstatus(); st != status.InProgressStatus {
		t.Errorf("paused at 10%%: kstatus %s, want InProgress", st)
	}
	waitFor(t, "serve to load the canary", func() bool {
		for i := 0; i < 200; i++ {
			if assemble(fmt.Sprintf("probe-%d", i)).Revision == second {
				return true
			}
		}
		return false
	})

	const n = 4000
	keys := make([]string, n)
	got := make(map[string]string, n)
	onCanary := 0
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d@example.com", i)
		a := assemble(keys[i])
		if a.Revision != first && a.Revision != second || a.Canary != (a.Revision == second) {
			t.Fatalf("key %d: revision %q canary %v", i, a.Revision, a.Canary)
		}
		got[keys[i]] = a.Revision
		if a.Canary {
			onCanary++
		}
	}
	share := float64(onCanary) * 100 / n
	t.Logf("at weight 10, %d of %d keys (%.2f%%) got the canary", onCanary, n, share)
	if share < 8.5 || share > 11.5 {
		t.Errorf("%.2f%% of keys on the canary at weight 10, want 10 +- 1.5", share)
	}
	for i := 0; i < n; i += 7 {
		if a := assemble(keys[i]); a.Revision != got[keys[i]] {
			t.Fatalf("key %d moved from %s to %s", i, got[keys[i]], a.Revision)
		}
	}
	// A serve started anew (a restart, another replica) gives every key
	// the revision it had.
	s2 := serve.New(serve.Options{Log: logr.Discard()})
	if err := s2.Watch(ctx, cfg, []string{ns}); err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(s2.Handler())
	t.Cleanup(srv2.Close)
	target = srv2.URL
	waitFor(t, "the new serve to load both revisions", func() bool {
		for i := 0; i < 200; i++ {
			if assemble(keys[i]).Revision != got[keys[i]] {
				return false
			}
		}
		return true
	})
	for _, k := range keys {
		if a := assemble(k); a.Revision != got[k] {
			t.Fatalf("after a serve restart key %q moved from %s to %s", k, got[k], a.Revision)
		}
	}
	target = srv.URL

	// The plan package in process, from the same ConfigMap, agrees key by key.
	var cm corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-prompts"}, &cm); err != nil {
		t.Fatal(err)
	}
	stable, err := plan.Load([]byte(cm.Data["plan.json"]))
	if err != nil {
		t.Fatal(err)
	}
	canary, err := plan.Load([]byte(cm.Data["canary.plan.json"]))
	if err != nil {
		t.Fatal(err)
	}
	state, err := plan.ParseRollout([]byte(cm.Data["rollout.json"]))
	if err != nil {
		t.Fatal(err)
	}
	revs := &plan.Revisions{Stable: stable, Canary: canary, Weight: state.Weight}
	for _, k := range keys {
		if p, _ := revs.Choose(k); p.Revision != got[k] {
			t.Fatalf("key %q: the plan package gives %s, serve gave %s", k, p.Revision, got[k])
		}
	}

	// Promote: every key gets the new revision.
	annotate := func(ann, value string) time.Time {
		t.Helper()
		p := get()
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[ann] = value
		if err := c.Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		return time.Now()
	}
	all := func(rev string) bool {
		for i := 0; i < n; i += 40 {
			if assemble(keys[i]).Revision != rev {
				return false
			}
		}
		return true
	}
	at := annotate(promptopsv1.AnnotationRolloutPromote, second)
	waitFor(t, "promote to reach serve", func() bool { return all(second) })
	t.Logf("promote: every key on the new revision %v after the annotation", time.Since(at))
	if r := get().Status.Rollout; r == nil || r.Phase != promptopsv1.RolloutPromoted || get().Status.Revision != second {
		t.Errorf("after promote: %+v", r)
	}
	waitFor(t, "kstatus Current after promote", func() bool { return kstatus() == status.CurrentStatus })

	// Another change, then abort: every key back on the stable revision.
	change("You are the support assistant, third edition.")
	waitFor(t, "the second rollout to pause", func() bool {
		r := get().Status.Rollout
		return r != nil && r.Phase == promptopsv1.RolloutPaused && r.StableRevision == second && r.CanaryRevision != second
	})
	third := get().Status.Rollout.CanaryRevision
	waitFor(t, "serve to load the third revision", func() bool {
		for i := 0; i < 200; i++ {
			if assemble(keys[i]).Revision == third {
				return true
			}
		}
		return false
	})
	at = annotate(promptopsv1.AnnotationRolloutAbort, third)
	waitFor(t, "abort to reach serve", func() bool { return all(second) })
	t.Logf("abort: every key back on the stable revision %v after the annotation", time.Since(at))
	if r := get().Status.Rollout; r == nil || r.Phase != promptopsv1.RolloutAborted || r.CanaryRevision != third {
		t.Errorf("after abort: %+v", r)
	}
	waitFor(t, "kstatus Failed after abort", func() bool { return kstatus() == status.FailedStatus })
}

func ptr[T any](v T) *T { return &v }

// waitFor polls ok until it holds, for at most two minutes.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
