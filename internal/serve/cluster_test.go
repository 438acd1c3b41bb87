package serve

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/testenv"
	"github.com/promptops/promptops/plan"
)

// Helpers of the envtest tests: templates, their rendered ConfigMaps, and
// the serve user bound to config/serve's RBAC.

func adminClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := promptopsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func createNamespaces(t *testing.T, ctx context.Context, cs *kubernetes.Clientset, names ...string) {
	t.Helper()
	for _, ns := range names {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// promptTemplate creates the support-assistant sample as ns/name; no
// controller runs, so it only exists, with its UID.
func promptTemplate(t *testing.T, ctx context.Context, c client.Client, ns, name string) *promptopsv1.PromptTemplate {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "config", "samples", "promptops_v1_prompttemplate_support.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pt := &promptopsv1.PromptTemplate{}
	if err := yaml.Unmarshal(data, pt); err != nil {
		t.Fatal(err)
	}
	pt.Namespace, pt.Name = ns, name
	if err := c.Create(ctx, pt); err != nil {
		t.Fatal(err)
	}
	return pt
}

// ownedBy makes cm controlled by a PromptTemplate, as the operator does.
func ownedBy(cm *corev1.ConfigMap, name string, uid string) *corev1.ConfigMap {
	cm.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "promptops.io/v1", Kind: "PromptTemplate", Name: name, UID: types.UID(uid), Controller: ptr.To(true),
	}}
	return cm
}

// rendered is what the operator writes for pt: <name>-prompts, labelled,
// controlled by pt.
func rendered(pt *promptopsv1.PromptTemplate, planJSON []byte) *corev1.ConfigMap {
	cm := renderedConfigMap(pt.Namespace, pt.Name+"-prompts", "rendered", planJSON)
	cm.Labels["promptops.io/prompttemplate"] = pt.Name
	return ownedBy(cm, pt.Name, string(pt.UID))
}

// claiming is a copy of a plan that names ns/name, with its digest.
func claiming(t testing.TB, data []byte, ns, name string) []byte {
	t.Helper()
	p := &plan.Plan{}
	if err := json.Unmarshal(data, p); err != nil {
		t.Fatal(err)
	}
	p.Namespace, p.Name = ns, name
	p.Revision = p.Digest()
	out, _ := json.Marshal(p)
	return out
}

func applyYAML(t *testing.T, ctx context.Context, cs *kubernetes.Clientset, files ...string) {
	t.Helper()
	for _, f := range files {
		for _, obj := range decodeYAML(t, filepath.Join(testenv.Root(), "config", "serve", f)) {
			var err error
			switch o := obj.(type) {
			case *rbacv1.ClusterRole:
				_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
			case *rbacv1.ClusterRoleBinding:
				_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
			default:
				t.Fatalf("%s: unexpected %T", f, obj)
			}
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
	}
}

// serveUser is the shared Deployment's ServiceAccount as an envtest user
// with config/serve's cluster-wide RBAC, authentication checks included.
func serveUser(t *testing.T, ctx context.Context, env *envtest.Environment, cfg *rest.Config, cs *kubernetes.Clientset) *rest.Config {
	t.Helper()
	applyYAML(t, ctx, cs, "cluster_role.yaml", "cluster_role_binding.yaml", "auth_cluster_role.yaml", "auth_cluster_role_binding.yaml")
	sa, err := env.AddUser(envtest.User{Name: "system:serviceaccount:promptops-system:promptops-serve", Groups: []string{"system:serviceaccounts"}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sa.Config()
}

// serviceAccountToken creates a ServiceAccount and a token of it.
func serviceAccountToken(t *testing.T, ctx context.Context, cs *kubernetes.Clientset, ns, name string) string {
	t.Helper()
	token, err := testenv.ServiceAccountToken(ctx, cs, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// waitFor polls ok until it holds, failing after a generous deadline.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
