package charttest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/controllers"
	"github.com/promptops/promptops/internal/testenv"
)

// TestChartUpgradeCarriesTheCRDs installs the chart of the previous commit
// that changed it with helm into an API server of its own (no CRDs but the
// chart's), writes a PromptTemplate and a MemoryBank with the old CRDs,
// upgrades the release to this chart, and checks that the CRDs are this
// chart's (a field only they have is kept, where the old ones pruned it),
// that the objects and their status are intact, and that helm uninstall
// leaves the CRDs and the objects (crds.keep).
func TestChartUpgradeCarriesTheCRDs(t *testing.T) {
	previous, rev := testenv.PreviousChart(t)
	dir, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: dir, ControlPlaneStartTimeout: 3 * time.Minute}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin, err := env.AddUser(envtest.User{Name: "helm", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	scheme := controllers.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := "upgrade"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	release := func(args ...string) {
		t.Helper()
		args = append(args, "--kubeconfig", kc, "--namespace", namespace)
		if out, err := helm(t, args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}

	// The previous chart, and objects written under its CRDs.
	release("install", "promptops", previous, "--create-namespace", "--set", "webhook.enabled=false")
	established(t, c)
	newOnly := newSpecFields(t, c)
	t.Logf("the previous chart is %s's; fields only this chart's CRDs have: %v", rev, newOnly)
	pt := sampleObject(t, "promptops_v1_prompttemplate_support.yaml", ns)
	mb := sampleObject(t, "promptops_v1_memorybank.yaml", ns)
	for _, o := range []*unstructured.Unstructured{pt, mb} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// A status as a manager wrote it.
	pt.Object["status"] = map[string]any{"observedGeneration": int64(1), "revision": "sha256:before", "conditions": []any{map[string]any{
		"type": "Ready", "status": "True", "reason": "Succeeded", "message": "Rendered.", "observedGeneration": int64(1), "lastTransitionTime": "2026-12-06T10:00:00Z"}}}
	if err := c.Status().Update(ctx, pt); err != nil {
		t.Fatal(err)
	}
	// The field only the new CRDs have, written through the old ones: pruned.
	const field = "minCacheableTokens"
	withField := slices.Contains(newOnly, "PromptTemplate spec.budget."+field)
	if withField {
		setField(t, c, pt, 900)
		if got := getField(t, c, pt); got != nil {
			t.Fatalf("the previous CRD kept spec.budget.%s = %v", field, got)
		}
	}

	// This chart, over it.
	release("upgrade", "promptops", chartDir(), "--take-ownership", "--set", "webhook.enabled=false")
	for _, name := range []string{"prompttemplates.promptops.io", "memorybanks.promptops.io"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			t.Fatal(err)
		}
		if crd.Annotations["helm.sh/resource-policy"] != "keep" || crd.Annotations["meta.helm.sh/release-name"] != "promptops" {
			t.Errorf("%s after the upgrade: annotations %v", name, crd.Annotations)
		}
		want := crdFile(t, filepath.Join(chartDir(), "files", "crds", "promptops.io_"+strings.TrimSuffix(name, ".promptops.io")+".yaml"))
		if !bytes.Equal(schemaJSON(t, crd), schemaJSON(t, want)) {
			t.Errorf("%s: the upgrade left the previous schema", name)
		}
	}
	established(t, c)
	if withField {
		setField(t, c, pt, 900)
		if got := getField(t, c, pt); got != int64(900) {
			t.Fatalf("after the upgrade spec.budget.%s = %v, want 900", field, got)
		}
	}
	for _, o := range []*unstructured.Unstructured{pt, mb} {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			t.Fatalf("%s after the upgrade: %v", o.GetKind(), err)
		}
		if got.GetUID() != o.GetUID() {
			t.Errorf("%s was replaced", o.GetKind())
		}
		if o.GetKind() == "PromptTemplate" {
			if rev, _, _ := unstructured.NestedString(got.Object, "status", "revision"); rev != "sha256:before" {
				t.Errorf("the status went: revision %q", rev)
			}
		}
	}

	// Uninstall keeps the CRDs and so every object.
	release("uninstall", "promptops")
	for _, o := range []*unstructured.Unstructured{pt, mb} {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			t.Errorf("%s after helm uninstall: %v", o.GetKind(), err)
		}
	}
}

// established waits until both CRDs serve.
func established(t *testing.T, c client.Client) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := func() error {
			for _, l := range []client.ObjectList{&promptopsv1.PromptTemplateList{}, &promptopsv1.MemoryBankList{}} {
				if err := c.List(context.Background(), l); err != nil {
					return err
				}
			}
			return nil
		}()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the CRDs do not serve: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// newSpecFields lists the spec fields of this chart's CRDs that the
// installed ones lack, as "Kind spec.a.b".
func newSpecFields(t *testing.T, c client.Client) []string {
	var out []string
	for _, kind := range []string{"PromptTemplate", "MemoryBank"} {
		name := strings.ToLower(kind) + "s.promptops.io"
		old := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, old); err != nil {
			t.Fatal(err)
		}
		cur := crdFile(t, filepath.Join(chartDir(), "files", "crds", "promptops.io_"+strings.ToLower(kind)+"s.yaml"))
		have := map[string]bool{}
		walk(old.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"], "spec", func(p string) { have[p] = true })
		walk(cur.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"], "spec", func(p string) {
			if !have[p] {
				out = append(out, kind+" "+p)
			}
		})
	}
	slices.Sort(out)
	return out
}

func walk(s apiextensionsv1.JSONSchemaProps, path string, f func(string)) {
	f(path)
	for name, p := range s.Properties {
		walk(p, path+"."+name, f)
	}
	if s.Items != nil && s.Items.Schema != nil {
		walk(*s.Items.Schema, path+"[]", f)
	}
}

func crdFile(t *testing.T, path string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

func schemaJSON(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) []byte {
	t.Helper()
	data, err := yaml.Marshal(crd.Spec.Versions[0].Schema)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func sampleObject(t *testing.T, file, ns string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "config", "samples", file))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := testenv.DecodeObjects(data)
	if err != nil || len(objs) != 1 {
		t.Fatalf("%s: %d objects, %v", file, len(objs), err)
	}
	objs[0].SetNamespace(ns)
	return objs[0]
}

func setField(t *testing.T, c client.Client, pt *unstructured.Unstructured, v int64) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"budget":{"minCacheableTokens":%d}}}`, v))
	if err := c.Patch(context.Background(), pt, client.RawPatch("application/merge-patch+json", patch)); err != nil && !apierrors.IsBadRequest(err) {
		t.Fatal(err)
	}
}

func getField(t *testing.T, c client.Client, pt *unstructured.Unstructured) any {
	t.Helper()
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(pt.GroupVersionKind())
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(pt), got); err != nil {
		t.Fatal(err)
	}
	v, _, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", "budget", "minCacheableTokens")
	return v
}
