package serve

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/go-logr/logr"

	"github.com/promptops/promptops/internal/testenv"
)

var (
	envOnce sync.Once
	env     *envtest.Environment
	envCfg  *rest.Config
	envErr  error
)

// apiServer starts envtest once for the tests that need it.
func apiServer(t *testing.T) (*envtest.Environment, *rest.Config, *kubernetes.Clientset) {
	t.Helper()
	envOnce.Do(func() { env, envCfg, envErr = testenv.Start() })
	if envErr != nil {
		t.Fatal(envErr)
	}
	cs, err := kubernetes.NewForConfig(envCfg)
	if err != nil {
		t.Fatal(err)
	}
	return env, envCfg, cs
}

func TestMain(m *testing.M) {
	code := m.Run()
	stopPG()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

// decodeYAML reads the objects of a multi-document YAML file.
func decodeYAML(t *testing.T, path string) []runtime.Object {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []runtime.Object
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err != nil {
			break
		}
		if len(raw.Raw) == 0 || strings.TrimSpace(string(raw.Raw)) == "null" {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw.Raw, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, obj)
	}
	return out
}

func renderedConfigMap(ns, name, role string, planJSON []byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			"app.kubernetes.io/managed-by": "promptops", "promptops.io/prompttemplate": "ssa-pro", "promptops.io/role": role,
		}},
		Data: map[string]string{"plan.json": string(planJSON), "analyze.txt": "static"},
	}
}

// The shared Deployment's watch: with only config/serve's RBAC it serves the
// live rendered ConfigMaps (not history copies, not unlabelled ones), follows
// updates and deletes, and keeps the previous plan when one breaks.
func TestWatchServesRenderedConfigMaps(t *testing.T) {
	env, cfg, cs := apiServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := adminClient(t, cfg)
	sa := serveUser(t, ctx, env, cfg, cs)
	const nsA, nsB = "watch-team-a", "watch-team-b"
	createNamespaces(t, ctx, cs, nsA, nsB)
	ssaPT := promptTemplate(t, ctx, admin, nsA, "ssa-pro")
	supportPT := promptTemplate(t, ctx, admin, nsB, "support-assistant")
	v1 := claiming(t, fixture(t, "ssa-pro"), nsA, "ssa-pro")
	v2 := secondVersion(t, v1)
	support := claiming(t, fixture(t, "support-assistant"), nsB, "support-assistant")
	create := func(cm *corev1.ConfigMap) {
		t.Helper()
		if _, err := cs.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(rendered(ssaPT, v1))
	create(ownedBy(renderedConfigMap(nsA, "ssa-pro-prompts-0badc0de", "history", v2), "ssa-pro", string(ssaPT.UID)))
	unlabelled := rendered(supportPT, support)
	unlabelled.Labels = nil
	create(unlabelled)

	s := New(Options{Log: logr.Discard()})
	if err := s.Watch(ctx, sa, []string{nsA, nsB}); err != nil {
		t.Fatal(err)
	}
	wait := func(what string, ok func(*Snapshot) bool) {
		t.Helper()
		waitFor(t, what, func() bool { snap := s.Snapshot(); return snap != nil && ok(snap) })
	}
	rev := func(data []byte) string { return mustLoad(t, data).Revision }
	ssa := Key{nsA, "ssa-pro"}
	wait("the live plan", func(s *Snapshot) bool { p := s.Plan(ssa); return p != nil && p.Revision == rev(v1) && s.Len() == 1 })

	// The operator re-renders: the live ConfigMap gets a new plan.
	cm, err := cs.CoreV1().ConfigMaps(nsA).Get(ctx, "ssa-pro-prompts", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["plan.json"] = string(v2)
	if _, err := cs.CoreV1().ConfigMaps(nsA).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("the new revision", func(s *Snapshot) bool { p := s.Plan(ssa); return p != nil && p.Revision == rev(v2) })

	// A second namespace's template appears: its ConfigMap gets the labels.
	cm, err = cs.CoreV1().ConfigMaps(nsB).Get(ctx, "support-assistant-prompts", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Labels = rendered(supportPT, nil).Labels
	if _, err := cs.CoreV1().ConfigMaps(nsB).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("the second template", func(s *Snapshot) bool { return s.Plan(Key{nsB, "support-assistant"}) != nil })
	// What is loaded is not held twice: the bytes went with the load.
	if n := s.heldPlans(); n != 0 {
		t.Errorf("%d plan.json still held after their loads", n)
	}
	// Read again, with serve's RBAC, when the loader needs it: the
	// ConfigMap's plan.json, or why not.
	sacs, err := kubernetes.NewForConfig(sa)
	if err != nil {
		t.Fatal(err)
	}
	if files, err := fetchPlan(ctx, sacs, nsA, "ssa-pro-prompts")(); err != nil || string(files.plan) != string(v2) || files.canary != nil || files.rollout != nil {
		t.Errorf("fetching the plan: %d bytes, %v", len(files.plan), err)
	}
	if _, err := fetchPlan(ctx, sacs, nsA, "nothing-prompts")(); err == nil || !strings.Contains(err.Error(), "reading the ConfigMap again") {
		t.Errorf("fetching a plan that is not there: %v", err)
	}

	// A broken plan keeps the previous version.
	cm, _ = cs.CoreV1().ConfigMaps(nsA).Get(ctx, "ssa-pro-prompts", metav1.GetOptions{})
	cm.Data["plan.json"] = `{"kind": "PromptPlan"}`
	if _, err := cs.CoreV1().ConfigMaps(nsA).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the load error", func() bool { return testutilValue(s.metrics.loadErrors) > 0 })
	if p := s.Snapshot().Plan(ssa); testutilValue(s.metrics.loadErrors) != 1 || p == nil || p.Revision != rev(v2) {
		t.Fatal("a broken plan must be reported and the previous version kept")
	}

	// Deleting the ConfigMap removes the template.
	if err := cs.CoreV1().ConfigMaps(nsB).Delete(ctx, "support-assistant-prompts", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("the deleted template to go", func(s *Snapshot) bool { return s.Plan(Key{nsB, "support-assistant"}) == nil })

	// The RBAC grants reading ConfigMaps and templates and nothing more.
	if _, err := sacs.CoreV1().Secrets(nsA).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing secrets: %v, want forbidden", err)
	}
	if err := sacs.CoreV1().ConfigMaps(nsA).Delete(ctx, "ssa-pro-prompts", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("deleting a ConfigMap: %v, want forbidden", err)
	}
}

// The sample pods pass the API server's Restricted Pod Security admission;
// a pod that does not is refused, so the check is live.
func TestServeSamplesAreRestricted(t *testing.T) {
	_, _, cs := apiServer(t)
	ctx := context.Background()
	const ns = "restricted-serve"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
	}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dryRun := func(name string, spec corev1.PodSpec) error {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	found := 0
	for _, file := range []string{"sidecar.yaml", "shared.yaml"} {
		for _, obj := range decodeYAML(t, filepath.Join(testenv.Root(), "config", "samples", "serve", file)) {
			d, ok := obj.(*appsv1.Deployment)
			if !ok {
				continue
			}
			found++
			spec := d.Spec.Template.Spec
			if err := dryRun(d.Name, spec); err != nil {
				t.Errorf("%s: the pod of %s violates the Restricted profile: %v", file, d.Name, err)
			}
			if file == "sidecar.yaml" && (len(spec.InitContainers) != 1 || spec.InitContainers[0].RestartPolicy == nil || *spec.InitContainers[0].RestartPolicy != corev1.ContainerRestartPolicyAlways) {
				t.Errorf("the sidecar must be a native sidecar (an init container with restartPolicy Always)")
			}
			for _, c := range append(spec.InitContainers, spec.Containers...) {
				if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
					t.Errorf("%s/%s: readOnlyRootFilesystem must be true", d.Name, c.Name)
				}
			}
			// The control: the same pod with privilege escalation is refused.
			bad := *spec.DeepCopy()
			bad.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
			if err := dryRun(d.Name+"-bad", bad); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
				t.Errorf("%s: a non-restricted pod was accepted: %v", d.Name, err)
			}
		}
	}
	if found != 2 {
		t.Fatalf("want two sample Deployments, found %d", found)
	}
}

// heldPlans counts the plan.json bytes the watch holds, not loaded yet.
func (s *Server) heldPlans() int {
	if s.held == nil {
		return 0
	}
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	return len(s.held.by)
}

// heldPlans keeps the newest version of each plan.json until it is
// released at that version, and drops what is no longer listed.
func TestHeldPlans(t *testing.T) {
	h := &heldPlans{by: map[string]heldPlan{}}
	h.hold("a/x", "1", heldPlan{plan: "one"})
	if d, ok := h.get("a/x", "1"); !ok || d.plan != "one" {
		t.Fatalf("get at 1: %q %v", d.plan, ok)
	}
	if _, ok := h.get("a/x", "2"); ok {
		t.Fatal("held at another version")
	}
	if _, ok := h.get("a/y", "1"); ok {
		t.Fatal("held for another ConfigMap")
	}
	h.hold("a/x", "2", heldPlan{plan: "two"})
	h.release("a/x", "1") // read at 1; 2 came since and stays
	if d, ok := h.get("a/x", "2"); !ok || d.plan != "two" {
		t.Fatalf("a newer version went with the release of an older one: %q %v", d.plan, ok)
	}
	h.release("a/x", "2")
	if len(h.by) != 0 {
		t.Fatalf("released, still held: %v", h.by)
	}
	h.hold("a/x", "3", heldPlan{plan: "three"})
	h.hold("a/gone", "1", heldPlan{plan: "old"})
	h.prune(map[string]bool{"a/x": true})
	if _, ok := h.get("a/x", "3"); !ok || len(h.by) != 1 {
		t.Fatalf("prune kept %v", h.by)
	}
}
