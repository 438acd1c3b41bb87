//go:build e2e

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/certs"
)

// TestSharedServeTLS runs config/samples/serve/shared.yaml, the shared
// serve, as the sample says to: config/serve's RBAC, and the Secret
// promptops-serve-tls with a certificate for the Service's name (here
// from a CA of the test's own, as `kubectl create secret tls` would make
// it). The serve answers an assemble over HTTPS, verified against that
// CA, for a caller whose token may get the template; plain HTTP gets no
// answer.
func TestSharedServeTLS(t *testing.T) {
	ns := namespace(t)
	const sys = "promptops-system"
	host := "promptops-serve." + sys + ".svc"
	pair, err := certs.Issue("e2e shared serve CA", host, []string{host, "promptops-serve"}, 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(crt, pair.Cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pair.Key, 0o600); err != nil {
		t.Fatal(err)
	}
	mustK(t, "", "apply", "-k", filepath.Join(root, "config/serve"))
	mustK(t, "", "create", "secret", "tls", "promptops-serve-tls", "-n", sys, "--cert", crt, "--key", key)
	b, err := os.ReadFile(filepath.Join(root, "config/samples/serve/shared.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The sample names the image make cluster imported: never pulled; one
	// replica is enough here.
	manifest := strings.Replace(string(b), "image: "+strings.TrimPrefix(os.Getenv("OPERATOR_IMAGE"), "docker.io/"), "image: "+os.Getenv("OPERATOR_IMAGE")+"\n        imagePullPolicy: Never", 1)
	if manifest == string(b) {
		t.Fatalf("the shared sample does not name the image %s", os.Getenv("OPERATOR_IMAGE"))
	}
	manifest = strings.Replace(manifest, "replicas: 2", "replicas: 1", 1)
	t.Cleanup(func() {
		_, _ = k(t, manifest, "delete", "--ignore-not-found", "-f", "-")
		_, _ = k(t, "", "delete", "secret", "-n", sys, "promptops-serve-tls", "--ignore-not-found")
		_, _ = k(t, "", "delete", "-k", filepath.Join(root, "config/serve"), "--ignore-not-found")
	})
	mustK(t, manifest, "apply", "-f", "-")
	mustK(t, "", "rollout", "status", "-n", sys, "deployment/promptops-serve", "--timeout=180s")

	for _, f := range []string{"ssa-prompts-configmap.yaml", "promptops_v1_prompttemplate_ssa.yaml"} {
		mustK(t, "", "apply", "-n", ns, "-f", filepath.Join(root, "config/samples", f))
	}
	mustK(t, "", "wait", "-n", ns, "--for=condition=Ready", "--timeout=120s", "pt/ssa-pro")
	mustK(t, fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: app}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: app-viewer}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: promptops-viewer}
subjects: [{kind: ServiceAccount, name: app, namespace: %s}]
`, ns), "apply", "-n", ns, "-f", "-")
	token := strings.TrimSpace(mustK(t, "", "create", "token", "-n", ns, "app", "--duration=1h"))

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pair.CA) {
		t.Fatal("no CA")
	}
	pf := &restartingForward{t: t, ns: sys, target: "service/promptops-serve", port: 8089,
		tls: &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}}
	t.Cleanup(pf.close)
	body := `{"namespace": "` + ns + `", "name": "ssa-pro", "intent": "analyze", "runtime": {"data_context": "200 rows, 12 variables.", "tool_outputs": "mean 45.2"}}`
	var got struct {
		Prompt string `json:"prompt"`
		Tokens int    `json:"tokens"`
	}
	// The watch may not have read the new template's ConfigMap yet.
	eventually(t, 90*time.Second, func() string {
		code, out := pf.post("/v1/assemble", token, body)
		if code != http.StatusOK {
			return fmt.Sprintf("assemble: %d %s", code, out)
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil || got.Prompt == "" {
			return "no prompt: " + out
		}
		return ""
	})
	t.Logf("the shared serve assembled a prompt of %d tokens over HTTPS, verified against the Secret's CA", got.Tokens)
	if code, _ := pf.post("/v1/assemble", "", body); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	if resp, err := http.Get(strings.Replace(pf.url(), "https://", "http://", 1) + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("the shared serve answered plain HTTP")
		}
	}
}
