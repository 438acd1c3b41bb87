package operator

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/controllers"
	"github.com/promptops/promptops/internal/testenv"
	"github.com/promptops/promptops/internal/webhook"
)

type warningLog struct {
	mu   sync.Mutex
	list []string
}

func (w *warningLog) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	w.list = append(w.list, text)
	w.mu.Unlock()
}

// TestSelfSignedWebhook runs the manager as `make demo` does, without
// cert-manager: it writes its own certificate, sets the caBundle of the
// webhook configuration with only the hand-written promptops-webhook-cabundle
// role besides the generated one, and the API server then trusts it: an
// apply of the over-budget sample gets the budget warnings.
func TestSelfSignedWebhook(t *testing.T) {
	env, cfg, admin, ctx, cancel := controlPlane(t)
	mgrCfg := bindUser(t, ctx, env, admin, "promptops-manager", readClusterRole(t, "role.yaml"))
	cabundle := cabundleRole(t)
	if err := admin.Create(ctx, cabundle); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "promptops-webhook-cabundle-test"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cabundle.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "promptops-manager"}},
	}); err != nil {
		t.Fatal(err)
	}

	addr := freeAddr(t)
	host, portStr, _ := net.SplitHostPort(addr)
	var port int
	fmt.Sscan(portStr, &port)
	path := generatedWebhookPath(t)
	url := "https://" + addr + path
	fail := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "promptops-validating-webhook"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "vprompttemplate.promptops.io", AdmissionReviewVersions: []string{"v1"},
			ClientConfig:  admissionregistrationv1.WebhookClientConfig{URL: &url},
			FailurePolicy: &fail, SideEffects: &none,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"promptops.io"}, APIVersions: []string{"v1"}, Resources: []string{"prompttemplates"}},
			}},
		}},
	}
	if err := admin.Create(ctx, vwc); err != nil {
		t.Fatal(err)
	}

	certDir := filepath.Join(t.TempDir(), "certs")
	mgr, err := NewManager(mgrCfg, Options{MetricsAddr: "0", ProbeAddr: "0", Webhook: &WebhookServerOptions{
		Host: host, Port: port, CertDir: certDir,
		SelfSigned:        &webhook.SelfSigned{Hosts: []string{host}},
		ConfigurationName: vwc.Name,
	}})
	if err != nil {
		t.Fatal(err)
	}
	runManager(t, ctx, cancel, mgr)

	ca, err := os.ReadFile(filepath.Join(certDir, webhook.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "config", "samples", "promptops_v1_prompttemplate_overbudget.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pt := &promptopsv1.PromptTemplate{}
	if err := yaml.UnmarshalStrict(data, pt); err != nil {
		t.Fatal(err)
	}
	pt.Namespace = "default"
	// Until the caBundle is set and the server answers, failurePolicy:
	// Ignore lets a dry run through without warnings.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(vwc), got); err != nil {
			t.Fatal(err)
		}
		w := &warningLog{}
		wcfg := rest.CopyConfig(cfg)
		wcfg.WarningHandlerWithContext = w
		wc, err := client.New(wcfg, client.Options{Scheme: controllers.NewScheme()})
		if err != nil {
			t.Fatal(err)
		}
		if err := wc.Create(ctx, pt.DeepCopy(), client.DryRunAll); err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(got.Webhooks[0].ClientConfig.CABundle, ca) && len(w.list) == 2 && strings.HasPrefix(w.list[0], "intent chat needs ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("caBundle set: %v; warnings %q", bytes.Equal(got.Webhooks[0].ClientConfig.CABundle, ca), w.list)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func cabundleRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "config", "webhook", "cabundle_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		role := &rbacv1.ClusterRole{}
		if err := dec.Decode(role); err != nil {
			t.Fatalf("no ClusterRole in config/webhook/cabundle_role.yaml: %v", err)
		}
		if role.Kind == "ClusterRole" {
			return role
		}
	}
}

func generatedWebhookPath(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "config", "webhook", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	gen := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := yaml.Unmarshal(data, gen); err != nil {
		t.Fatal(err)
	}
	return *gen.Webhooks[0].ClientConfig.Service.Path
}
