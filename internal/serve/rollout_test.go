package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/assembler"
	"github.com/promptops/promptops/plan"
)

// renderedFiles is what the operator writes for a template spec whose role
// section says role: plan.json and chat.txt, rendered by the assembler.
func renderedFiles(t *testing.T, ns, name, role string) map[string][]byte {
	t.Helper()
	spec := &promptopsv1.PromptTemplateSpec{}
	if err := yaml.UnmarshalStrict([]byte(`
budget: {maxTokens: 500}
sections:
- name: role
  text: "`+role+`"
- name: question
  runtime: {reserveTokens: 50}
- name: task
  intent: true
intents: [{name: chat, instruction: Answer briefly.}]
`), spec); err != nil {
		t.Fatal(err)
	}
	r, err := assembler.Render(assembler.Input{Namespace: ns, Name: name, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	data, err := assembler.ConfigMapData(r)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for k, v := range data {
		out[k] = []byte(v)
	}
	return out
}

// rolloutFiles are a ConfigMap's files during a rollout from stable to
// canary at weight: plan.json and chat.txt of stable, canary.plan.json
// and canary.chat.txt of canary, and rollout.json.
func rolloutFiles(t *testing.T, stable, canary map[string][]byte, weight int) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for k, v := range stable {
		out[k] = v
	}
	for k, v := range canary {
		out["canary."+k] = v
	}
	out[plan.RolloutFile] = rolloutJSON(mustLoad(t, stable[PlanFile]).Revision, mustLoad(t, canary[PlanFile]).Revision, weight)
	return out
}

func rolloutJSON(stable, canary string, weight int) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"promptops.io/v1","kind":"PromptRollout","stableRevision":%q,"canaryRevision":%q,"weight":%d}`, stable, canary, weight)
}

// assignment is a key's revision in serve's answer.
type assignment struct {
	Revision string
	Canary   bool
}

// assignKeys asks h for a prompt of ns/name with each key as the
// assignment key, and returns each key's revision.
func assignKeys(t *testing.T, h http.Handler, ns, name string, keys []string) map[string]assignment {
	t.Helper()
	out := make(map[string]assignment, len(keys))
	for _, key := range keys {
		body := fmt.Sprintf(`{"namespace":%q,"name":%q,"intent":"chat","runtime":{"question":"Hi"},"assignmentKey":%q}`, ns, name, key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/assemble", strings.NewReader(body)))
		var resp AssembleResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || rec.Code != http.StatusOK {
			t.Fatalf("key %q: %d %s", key, rec.Code, rec.Body)
		}
		out[key] = assignment{resp.Revision, resp.Canary}
	}
	return out
}

func distinctKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	return keys
}

// checkSplit checks that serve gave each key what plan's Revisions.Choose
// gives it in-process, that the canary's share is weight +- tolerance
// points, and returns the keys on the canary.
func checkSplit(t *testing.T, got map[string]assignment, revs *plan.Revisions, weight, tolerance float64) map[string]bool {
	t.Helper()
	onCanary := map[string]bool{}
	for key, a := range got {
		p, canary := revs.Choose(key)
		if a.Revision != p.Revision || a.Canary != canary {
			t.Fatalf("key %q: serve gave %s (canary %v), plan.Revisions.Choose %s (canary %v)", key, a.Revision, a.Canary, p.Revision, canary)
		}
		if canary {
			onCanary[key] = true
		}
	}
	share := float64(len(onCanary)) * 100 / float64(len(got))
	if share < weight-tolerance || share > weight+tolerance {
		t.Errorf("%.2f%% of %d keys on the canary, want %v +- %v", share, len(got), weight, tolerance)
	}
	return onCanary
}

// loadedRevisions is the plan set of one template as its files are: the
// in-process side of the comparison.
func loadedRevisions(t *testing.T, files map[string][]byte, weight int) *plan.Revisions {
	t.Helper()
	return &plan.Revisions{Stable: mustLoad(t, files[PlanFile]), Canary: mustLoad(t, files[plan.CanaryPlanFile]), Weight: weight}
}

// The sidecar (a mounted ConfigMap in --plans-dir) serves a rollout: of
// 4,000 keys 10% +- 1.5 get the canary, each as plan's Revisions.Choose
// gives it, a repeated key keeps its revision; a greater weight on disk
// moves more keys to the canary and none back; an inconsistent
// rollout.json and a promotion serve one revision.
func TestSidecarServesARollout(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stable := renderedFiles(t, "shop", "support", "You are the support assistant.")
	canary := renderedFiles(t, "shop", "support", "You are the support assistant of Acme. Be kind.")
	kd := &kubeletDir{t: t, dir: t.TempDir()}
	kd.swap(rolloutFiles(t, stable, canary, 10))

	logs := &syncBuffer{}
	s := New(Options{Log: funcr.New(logs.add, funcr.Options{})})
	if err := s.WatchDir(ctx, kd.dir, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	k := Key{"shop", "support"}
	if revs := s.Snapshot().Revisions(k); revs == nil || revs.Canary == nil || revs.Weight != 10 {
		t.Fatalf("the rollout is not loaded: %+v", revs)
	}
	h := s.Handler()
	keys := distinctKeys(4000)
	first := assignKeys(t, h, "shop", "support", keys)
	onCanary := checkSplit(t, first, loadedRevisions(t, kd.files(), 10), 10, 1.5)
	// Repeated keys keep their revision.
	for key, a := range assignKeys(t, h, "shop", "support", keys[:1000]) {
		if a != first[key] {
			t.Fatalf("key %q moved from %v to %v", key, first[key], a)
		}
	}
	// The scope assigns as the same assignment key does.
	for _, key := range keys[:50] {
		_, body := postHandler(t, h, fmt.Sprintf(`{"namespace":"shop","name":"support","intent":"chat","scope":%q}`, key))
		var resp AssembleResponse
		if err := json.Unmarshal(body, &resp); err != nil || (assignment{resp.Revision, resp.Canary}) != first[key] {
			t.Fatalf("scope %q: %s, want %v", key, body, first[key])
		}
	}

	// The weight grows on disk: after the reload the split follows, and no
	// key leaves the canary.
	kd.swap(rolloutFiles(t, stable, canary, 50))
	waitFor(t, "weight 50", func() bool { return s.Snapshot().Revisions(k).Weight == 50 })
	grown := checkSplit(t, assignKeys(t, h, "shop", "support", keys), loadedRevisions(t, kd.files(), 50), 50, 4)
	for key := range onCanary {
		if !grown[key] {
			t.Fatalf("key %q went from the canary back to stable as the weight grew", key)
		}
	}

	// rollout.json names another canary revision: stable only, logged
	// once, without content.
	bad := rolloutFiles(t, stable, canary, 50)
	bad[plan.RolloutFile] = rolloutJSON(mustLoad(t, stable[PlanFile]).Revision, "sha256:other", 50)
	kd.swap(bad)
	waitFor(t, "stable only", func() bool { return s.Snapshot().Revisions(k).Canary == nil })
	checkSplit(t, assignKeys(t, h, "shop", "support", keys[:500]), &plan.Revisions{Stable: mustLoad(t, stable[PlanFile])}, 0, 0)
	// Logged before the load is published; that polls of the same files
	// log nothing more is TestRolloutNotServedLogged's.
	if n := strings.Count(logs.String(), "Rollout not served"); n != 1 {
		t.Errorf("the inconsistent rollout was logged %d times:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "Acme") || strings.Contains(logs.String(), "user-") {
		t.Errorf("a log holds content or a key:\n%s", logs.String())
	}

	// Promoted: plan.json is the canary's, the rollout's files are gone.
	kd.swap(canary)
	promoted := mustLoad(t, canary[PlanFile]).Revision
	waitFor(t, "the promotion", func() bool { return s.Snapshot().Plan(k).Revision == promoted })
	checkSplit(t, assignKeys(t, h, "shop", "support", keys[:500]), &plan.Revisions{Stable: mustLoad(t, canary[PlanFile])}, 0, 0)
}

// files are the files of the mount as they are now.
func (k *kubeletDir) files() map[string][]byte {
	k.t.Helper()
	at, _ := dataDir(k.dir)
	f, err := readPlanFilesIn(at)
	if err != nil {
		k.t.Fatal(err)
	}
	return map[string][]byte{PlanFile: f.plan, plan.CanaryPlanFile: f.canary, plan.RolloutFile: f.rollout}
}

// The canary's files or rollout.json alone, a canary of another template,
// rollout.json with another stable revision or that does not parse: the
// loader serves the stable plan only.
func TestInconsistentRolloutServesStable(t *testing.T) {
	stable := renderedFiles(t, "shop", "support", "You are the support assistant.")
	canary := renderedFiles(t, "shop", "support", "You are the support assistant of Acme.")
	other := renderedFiles(t, "shop", "billing", "You are the billing assistant.")
	sRev, cRev := mustLoad(t, stable[PlanFile]).Revision, mustLoad(t, canary[PlanFile]).Revision
	for _, tc := range []struct {
		name            string
		canary, rollout []byte
	}{
		{"canary.plan.json alone", canary[PlanFile], nil},
		{"rollout.json alone", nil, rolloutJSON(sRev, cRev, 50)},
		{"another stable revision", canary[PlanFile], rolloutJSON("sha256:other", cRev, 50)},
		{"another canary revision", canary[PlanFile], rolloutJSON(sRev, sRev, 50)},
		{"a canary of another template", other[PlanFile], rolloutJSON(sRev, mustLoad(t, other[PlanFile]).Revision, 50)},
		{"a weight out of range", canary[PlanFile], rolloutJSON(sRev, cRev, 101)},
		{"rollout.json not JSON", canary[PlanFile], []byte("weight: 50")},
		{"a canary that does not load", []byte(`{"kind":"PromptPlan"}`), rolloutJSON(sRev, cRev, 50)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Options{Log: logr.Discard()})
			s.loader.load(map[string]source{"dir": {data: stable[PlanFile], canary: tc.canary, rollout: tc.rollout, want: Key{"shop", "support"}}})
			revs := s.Snapshot().Revisions(Key{"shop", "support"})
			if revs == nil || revs.Stable.Revision != sRev || revs.Canary != nil {
				t.Fatalf("revisions %+v, want stable only", revs)
			}
		})
	}
	// The same files in order: the canary at its weight.
	s := New(Options{Log: logr.Discard()})
	s.loader.load(map[string]source{"dir": {data: stable[PlanFile], canary: canary[PlanFile], rollout: rolloutJSON(sRev, cRev, 50), want: Key{"shop", "support"}}})
	if revs := s.Snapshot().Revisions(Key{"shop", "support"}); revs == nil || revs.Canary == nil || revs.Canary.Revision != cRev || revs.Weight != 50 {
		t.Fatalf("revisions %+v, want the canary at 50", revs)
	}
}

// The shared Deployment's watch serves a rollout from the ConfigMap's
// keys: the same split as the plan package, and every key back on stable
// once the canary's keys are removed (an abort).
func TestWatchServesARollout(t *testing.T) {
	env, cfg, cs := apiServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := adminClient(t, cfg)
	sa := serveUser(t, ctx, env, cfg, cs)
	const ns = "watch-rollout"
	createNamespaces(t, ctx, cs, ns)
	pt := promptTemplate(t, ctx, admin, ns, "support")
	stable := renderedFiles(t, ns, "support", "You are the support assistant.")
	canary := renderedFiles(t, ns, "support", "You are the support assistant of Acme. Be kind.")
	files := rolloutFiles(t, stable, canary, 10)
	cm := rendered(pt, nil)
	cm.Data = map[string]string{}
	for k, v := range files {
		cm.Data[k] = string(v)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := New(Options{Log: logr.Discard()})
	if err := s.Watch(ctx, sa, []string{ns}); err != nil {
		t.Fatal(err)
	}
	k := Key{ns, "support"}
	waitFor(t, "the rollout", func() bool { r := s.Snapshot().Revisions(k); return r != nil && r.Canary != nil })
	h := s.Handler()
	keys := distinctKeys(4000)
	first := assignKeys(t, h, ns, "support", keys)
	checkSplit(t, first, loadedRevisions(t, files, 10), 10, 1.5)
	for key, a := range assignKeys(t, h, ns, "support", keys[:1000]) {
		if a != first[key] {
			t.Fatalf("key %q moved from %v to %v", key, first[key], a)
		}
	}
	if n := s.heldPlans(); n != 0 {
		t.Errorf("%d ConfigMaps' files still held after their loads", n)
	}

	// Aborted: the manager removes the canary's keys and rollout.json.
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for key := range cm.Data {
		if strings.HasPrefix(key, "canary.") || key == plan.RolloutFile {
			delete(cm.Data, key)
		}
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the abort", func() bool { return s.Snapshot().Revisions(k).Canary == nil })
	checkSplit(t, assignKeys(t, h, ns, "support", keys), &plan.Revisions{Stable: mustLoad(t, stable[PlanFile])}, 0, 0)
}

// An assignmentKey is 1 to 1024 bytes of UTF-8, or left out (null too);
// otherwise the answer is 400 naming the field.
func TestAssignmentKeyBounds(t *testing.T) {
	s, ts := newTestServer(t, 0)
	stable := renderedFiles(t, "shop", "support", "You are the support assistant.")
	s.Apply(map[string][]byte{"support": stable[PlanFile]})
	base := `{"namespace":"shop","name":"support","intent":"chat"`
	for _, tc := range []struct {
		name, field string
		status      int
	}{
		{"left out", ``, 200},
		{"null", `,"assignmentKey":null`, 200},
		{"one byte", `,"assignmentKey":"a"`, 200},
		{"1024 bytes", `,"assignmentKey":"` + strings.Repeat("é", 512) + `"`, 200},
		{"empty", `,"assignmentKey":""`, 400},
		{"1025 bytes", `,"assignmentKey":"` + strings.Repeat("a", 1025) + `"`, 400},
		{"a lone surrogate", `,"assignmentKey":"\udc00"`, 400},
		{"a number", `,"assignmentKey":7`, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := post(t, ts.URL, base+tc.field+`}`)
			if status != tc.status {
				t.Fatalf("status %d: %s", status, body)
			}
			if status == 400 {
				if code, msg := errorCode(t, body); code != CodeMalformed || !strings.Contains(msg, "assignmentKey") {
					t.Fatalf("%s %q does not name assignmentKey", code, msg)
				}
			}
		})
	}
}

func postHandler(t *testing.T, h http.Handler, body string) (int, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/assemble", strings.NewReader(body)))
	return rec.Code, rec.Body.Bytes()
}

// A request a rollout assigns to the canary: its span's
// gen_ai.prompt.version is the canary's revision, the tokens counter's
// revision_role is canary, and neither span, metrics nor logs hold the key.
func TestCanaryRequestSpanAndMetrics(t *testing.T) {
	rec := recordSpans(t)
	logs := &syncBuffer{}
	s := New(Options{Log: funcr.New(logs.add, funcr.Options{})})
	stable := renderedFiles(t, "shop", "support", "You are the support assistant.")
	canary := renderedFiles(t, "shop", "support", "You are the support assistant of Acme.")
	files := rolloutFiles(t, stable, canary, 100)
	s.loader.load(map[string]source{"dir": {data: files[PlanFile], canary: files[plan.CanaryPlanFile], rollout: files[plan.RolloutFile], want: Key{"shop", "support"}}})
	const key = "tenant-secret-4711"
	status, body := postHandler(t, s.Handler(), `{"namespace":"shop","name":"support","intent":"chat","assignmentKey":"`+key+`"}`)
	var resp AssembleResponse
	if err := json.Unmarshal(body, &resp); err != nil || status != 200 || !resp.Canary || resp.Revision != mustLoad(t, canary[PlanFile]).Revision {
		t.Fatalf("at weight 100: %d %s", status, body)
	}
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	if v, ok := spanAttr(spans[0], "gen_ai.prompt.version"); !ok || v.AsString() != resp.Revision {
		t.Errorf("gen_ai.prompt.version = %v, want the canary's %s", v.Emit(), resp.Revision)
	}
	for _, kv := range spans[0].Attributes() {
		if strings.Contains(kv.Value.Emit(), key) {
			t.Errorf("span attribute %s holds the key", kv.Key)
		}
	}
	rec2 := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec2, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	metrics := rec2.Body.String()
	for _, want := range []string{
		`promptops_serve_prompt_tokens_total{intent="chat",name="support",namespace="shop",revision_role="canary"}`,
		`promptops_serve_template_revision{name="support",namespace="shop",revision="` + resp.Revision + `"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(metrics, key) || strings.Contains(logs.String(), key) {
		t.Error("metrics or logs hold the assignment key")
	}
}

// "Plan loaded" is logged again when only the rollout moves: a new canary
// revision, or the same canary at another weight; not for the same files.
func TestPlanLoadedLoggedOnRolloutChange(t *testing.T) {
	stable := renderedFiles(t, "shop", "support", "You are the support assistant.")
	canary := renderedFiles(t, "shop", "support", "You are the support assistant of Acme.")
	canary2 := renderedFiles(t, "shop", "support", "You are the support assistant of Acme Cloud.")
	sRev, cRev, c2Rev := mustLoad(t, stable[PlanFile]).Revision, mustLoad(t, canary[PlanFile]).Revision, mustLoad(t, canary2[PlanFile]).Revision
	logs := &syncBuffer{}
	s := New(Options{Log: funcr.New(logs.add, funcr.Options{})})
	load := func(c []byte, rollout []byte) {
		s.loader.load(map[string]source{"dir": {data: stable[PlanFile], canary: c, rollout: rollout, want: Key{"shop", "support"}}})
	}
	count := func() int { return strings.Count(logs.String(), `"Plan loaded"`) }
	load(canary[PlanFile], rolloutJSON(sRev, cRev, 10))
	load(canary[PlanFile], rolloutJSON(sRev, cRev, 10))
	if n := count(); n != 1 {
		t.Fatalf("%d Plan loaded for the same files twice:\n%s", n, logs.String())
	}
	load(canary[PlanFile], rolloutJSON(sRev, cRev, 50))
	if n := count(); n != 2 {
		t.Fatalf("%d Plan loaded after the weight moved:\n%s", n, logs.String())
	}
	load(canary2[PlanFile], rolloutJSON(sRev, c2Rev, 50))
	if n := count(); n != 3 {
		t.Fatalf("%d Plan loaded after a new canary:\n%s", n, logs.String())
	}
}

// "Rollout not served" is logged for a half rollout (one of the two files
// alone), once however often the same files are read, never for a plan
// outside a rollout.
func TestRolloutNotServedLogged(t *testing.T) {
	stable := renderedFiles(t, "shop", "support", "You are the support assistant.")
	canary := renderedFiles(t, "shop", "support", "You are the support assistant of Acme.")
	sRev, cRev := mustLoad(t, stable[PlanFile]).Revision, mustLoad(t, canary[PlanFile]).Revision
	logs := &syncBuffer{}
	s := New(Options{Log: funcr.New(logs.add, funcr.Options{})})
	count := func() int { return strings.Count(logs.String(), `"Rollout not served`) }
	for i, tc := range []struct {
		canary, rollout []byte
		want            int
	}{
		{nil, nil, 0},
		{canary[PlanFile], nil, 1},
		{canary[PlanFile], nil, 1}, // the same files again: not again
		{nil, rolloutJSON(sRev, cRev, 10), 2},
		{nil, nil, 2},
	} {
		s.loader.load(map[string]source{"dir": {data: stable[PlanFile], canary: tc.canary, rollout: tc.rollout, want: Key{"shop", "support"}}})
		if n := count(); n != tc.want {
			t.Fatalf("step %d: %d Rollout not served, want %d:\n%s", i, n, tc.want, logs.String())
		}
	}
}
