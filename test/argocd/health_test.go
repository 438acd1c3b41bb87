// Package argocd tests the Argo CD health checks of promptops' resources
// (config/argocd/resource_customizations) with Argo CD's own Lua code, in a
// module of its own so that the operator's go.mod does not carry Argo CD.
package argocd

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appv1 "github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v3/util/lua"
	"github.com/argoproj/argo-cd/v3/util/settings"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

const root = "../../config/argocd/resource_customizations"

// healthTests is a health_test.yaml, in the layout of Argo CD's
// resource_customizations.
type healthTests struct {
	Tests []struct {
		InputPath    string `json:"inputPath"`
		HealthStatus struct {
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"healthStatus"`
	} `json:"tests"`
}

// TestHealth installs the checks as a user does, the kustomize Component
// config/argocd merged by kubectl into an argocd-cm, which Argo CD's
// settings manager reads; then runs each kind's health.lua through Argo CD's
// Lua VM as the application controller does (the override its settings
// give the object's group and kind; no open libraries) on every input its
// health_test.yaml lists, objects written by the API server in each state
// of the kstatus table (TestKstatusConformance in controllers), and checks
// the result against the expectation and against kstatus on the same
// object.
func TestHealth(t *testing.T) {
	scripts, err := filepath.Glob(filepath.Join(root, "*", "*", "health.lua"))
	if err != nil || len(scripts) != 2 {
		t.Fatalf("health checks: %v %v", scripts, err)
	}
	overrides := installed(t)
	for _, path := range scripts {
		dir := filepath.Dir(path)
		group, kind := filepath.Base(filepath.Dir(dir)), filepath.Base(dir)
		t.Run(kind, func(t *testing.T) {
			script := read(t, path)
			if got := overrides[group+"/"+kind].HealthLua; got != string(script) {
				t.Fatalf("argocd-cm's check for %s/%s is not %s:\n%s", group, kind, path, got)
			}
			vm := lua.VM{ResourceOverrides: overrides}
			var tests healthTests
			if err := yaml.UnmarshalStrict(read(t, filepath.Join(dir, "health_test.yaml")), &tests); err != nil {
				t.Fatal(err)
			}
			inputs, _ := filepath.Glob(filepath.Join(dir, "testdata", "*.yaml"))
			seen := map[string]bool{}
			for _, tc := range tests.Tests {
				seen[filepath.Join(dir, tc.InputPath)] = true
				t.Run(strings.TrimSuffix(filepath.Base(tc.InputPath), ".yaml"), func(t *testing.T) {
					obj := load(t, filepath.Join(dir, tc.InputPath))
					found, _, err := vm.GetHealthScript(obj)
					if err != nil || found != string(script) {
						t.Fatalf("Argo CD does not find the check for %s: %v", obj.GroupVersionKind(), err)
					}
					got, err := vm.ExecuteHealthLua(obj, found)
					if err != nil {
						t.Fatal(err)
					}
					if string(got.Status) != tc.HealthStatus.Status || got.Message != tc.HealthStatus.Message {
						t.Errorf("Argo CD: %s %q, want %s %q", got.Status, got.Message, tc.HealthStatus.Status, tc.HealthStatus.Message)
					}
					ks, err := status.Compute(obj)
					if err != nil {
						t.Fatal(err)
					}
					if want := fromKstatus(obj, ks.Status); string(got.Status) != want {
						t.Errorf("Argo CD %s where kstatus reads %s (%q): want %s", got.Status, ks.Status, ks.Message, want)
					}
				})
			}
			for _, in := range inputs {
				if !seen[in] {
					t.Errorf("%s is in no test of health_test.yaml", in)
				}
			}
			// Every kstatus status the resource can be in is tested.
			var statuses []string
			for in := range seen {
				ks, err := status.Compute(load(t, in))
				if err != nil {
					t.Fatal(err)
				}
				statuses = append(statuses, string(ks.Status))
			}
			for _, want := range []status.Status{status.CurrentStatus, status.InProgressStatus, status.FailedStatus, status.TerminatingStatus} {
				if !slices.Contains(statuses, string(want)) {
					t.Errorf("no input where kstatus reads %s", want)
				}
			}
		})
	}
}

// installed is the resource overrides Argo CD's settings manager reads from
// an argocd-cm that kubectl kustomize merged config/argocd into.
func installed(t *testing.T) map[string]appv1.ResourceOverride {
	dir := t.TempDir()
	component, err := filepath.Abs("../../config/argocd")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, component)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: argocd\nresources: [argocd-cm.yaml]\ncomponents: ["+rel+"]\n")
	write("argocd-cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: argocd-cm, labels: {app.kubernetes.io/part-of: argocd}}\ndata: {url: https://argocd.example.com}\n")
	out, err := exec.Command("kubectl", "kustomize", dir).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	cm := &corev1.ConfigMap{}
	if err := yaml.UnmarshalStrict(out, cm); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "argocd-secret", Namespace: "argocd", Labels: map[string]string{"app.kubernetes.io/part-of": "argocd"}}}
	mgr := settings.NewSettingsManager(t.Context(), fake.NewClientset(cm, secret), "argocd")
	overrides, err := mgr.GetResourceOverrides()
	if err != nil {
		t.Fatal(err)
	}
	return overrides
}

// fromKstatus is the Argo CD health that matches kstatus: Current is
// Healthy (Suspended for a bank whose consolidation is suspended),
// InProgress and Terminating Progressing (Suspended for a template whose
// rollout holds until promoted: Reconciling=True, reason RolloutPaused),
// Failed Degraded. An object with
// no conditions yet, which kstatus reads Current for want of anything to
// read, is Progressing: the manager has not seen it.
func fromKstatus(obj *unstructured.Unstructured, s status.Status) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	suspended, _, _ := unstructured.NestedBool(obj.Object, "spec", "consolidation", "suspend")
	switch {
	case s == status.CurrentStatus && len(conds) == 0:
		return "Progressing"
	case s == status.CurrentStatus && obj.GetKind() == "MemoryBank" && suspended:
		return "Suspended"
	case s == status.CurrentStatus:
		return "Healthy"
	case s == status.InProgressStatus && obj.GetKind() == "PromptTemplate" && reconcilingFor(conds, "RolloutPaused"):
		return "Suspended"
	case s == status.InProgressStatus, s == status.TerminatingStatus:
		return "Progressing"
	case s == status.FailedStatus:
		return "Degraded"
	}
	return "Unknown"
}

// reconcilingFor reports whether conds hold Reconciling=True with reason.
func reconcilingFor(conds []any, reason string) bool {
	return slices.ContainsFunc(conds, func(c any) bool {
		m, _ := c.(map[string]any)
		return m["type"] == "Reconciling" && m["status"] == "True" && m["reason"] == reason
	})
}

// load reads an object as the API server gives it (integers as int64).
func load(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	data, err := yaml.YAMLToJSON(read(t, path))
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	return obj
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
