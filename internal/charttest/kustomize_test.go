package charttest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/promptops/promptops/internal/testenv"
)

// kustomize builds config/default with components, as kubectl apply -k
// does, from a copy of config/ whose default kustomization lists them.
func kustomize(t *testing.T, components ...string) []*unstructured.Unstructured {
	t.Helper()
	fs := configFS(t)
	if len(components) > 0 {
		k, _ := fs.ReadFile("/config/default/kustomization.yaml")
		k = append(k, []byte("components:\n- ../"+strings.Join(components, "\n- ../")+"\n")...)
		if err := fs.WriteFile("/config/default/kustomization.yaml", k); err != nil {
			t.Fatal(err)
		}
	}
	return build(t, fs, "/config/default")
}

// configFS is an in-memory copy of config/.
func configFS(t *testing.T) filesys.FileSystem {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	root := filepath.Join(testenv.Root(), "config")
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		return fs.WriteFile(filepath.Join("/config", rel), data)
	})
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func build(t *testing.T, fs filesys.FileSystem, dir string) []*unstructured.Unstructured {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	data, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, data)
}

func TestKustomizeComponents(t *testing.T) {
	objs := kustomize(t)
	_, c := managerContainer(t, objs)
	for _, a := range []string{"--metrics-secure", "--metrics-bind-address=:8443", "--leader-elect"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("config/default args %q lack %s", c.Args, a)
		}
	}
	for _, k := range [][2]string{{"Service", "promptops-metrics"}, {"ClusterRole", "promptops-metrics-reader"}, {"ClusterRole", "promptops-editor"}, {"ClusterRole", "promptops-viewer"}} {
		if !find(t, objs, k[0], k[1], nil) {
			t.Errorf("config/default has no %s %s", k[0], k[1])
		}
	}

	objs = kustomize(t, "components/webhook")
	d, c := managerContainer(t, objs)
	if !slices.Contains(c.Args, "--enable-webhook") || !slices.Contains(c.Args, "--webhook-self-signed") || d.Spec.Template.Spec.Volumes[0].EmptyDir == nil {
		t.Errorf("webhook component: args %q, volumes %+v", c.Args, d.Spec.Template.Spec.Volumes)
	}

	objs = kustomize(t, "components/webhook", "certmanager", "prometheus")
	d, c = managerContainer(t, objs)
	// The last --webhook-self-signed wins.
	if c.Args[len(c.Args)-1] != "--webhook-self-signed=false" || d.Spec.Template.Spec.Volumes[0].Secret == nil {
		t.Errorf("certmanager component: args %q, volumes %+v", c.Args, d.Spec.Template.Spec.Volumes)
	}
	for _, k := range [][2]string{{"Certificate", "promptops-webhook"}, {"ServiceMonitor", "promptops-metrics"}} {
		if !find(t, objs, k[0], k[1], nil) {
			t.Errorf("no %s %s", k[0], k[1])
		}
	}
}

// TestKustomizeAppliesToTheAPIServer applies kubectl apply -k config/default,
// with and without the webhook, server-side with dry run.
func TestKustomizeAppliesToTheAPIServer(t *testing.T) {
	c := controlPlane(t)
	ctx := context.Background()
	for _, comps := range [][]string{nil, {"components/webhook"}} {
		for _, u := range kustomize(t, comps...) {
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.DryRunAll, client.ForceOwnership, client.FieldOwner("kubectl")); err != nil {
				t.Errorf("%v: %s %s: %v", comps, u.GetKind(), u.GetName(), err)
			}
		}
	}
}

// config/serve, the shared serve's RBAC, builds and applies: reading
// ConfigMaps and PromptTemplates, and checking callers.
func TestKustomizeServeAppliesToTheAPIServer(t *testing.T) {
	c := controlPlane(t)
	objs := build(t, configFS(t), "/config/serve")
	for _, k := range [][2]string{{"ServiceAccount", "promptops-serve"}, {"ClusterRole", "promptops-serve"}, {"ClusterRoleBinding", "promptops-serve"}, {"ClusterRole", "promptops-serve-auth"}, {"ClusterRoleBinding", "promptops-serve-auth"}} {
		if !find(t, objs, k[0], k[1], nil) {
			t.Errorf("no %s %s", k[0], k[1])
		}
	}
	for _, u := range objs {
		if err := c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u), client.DryRunAll, client.ForceOwnership, client.FieldOwner("kubectl")); err != nil {
			t.Errorf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}
