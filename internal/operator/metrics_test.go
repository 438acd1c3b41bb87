package operator

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/promptops/promptops/internal/testenv"
)

// TestSecureMetrics runs the manager as the CLI builds it with
// --metrics-secure, as its own user bound to the generated ClusterRole, and
// scrapes it: nobody, a forged token and a ServiceAccount without the
// metrics-reader role are refused; one bound to it is served.
func TestSecureMetrics(t *testing.T) {
	env, cfg, admin, ctx, cancel := controlPlane(t)

	mgrCfg := bindUser(t, ctx, env, admin, "promptops-manager", readClusterRole(t, "role.yaml"))
	addr := freeAddr(t)
	mgr, err := NewManager(mgrCfg, Options{MetricsAddr: addr, SecureMetrics: true, ProbeAddr: "0"})
	if err != nil {
		t.Fatal(err)
	}
	runManager(t, ctx, cancel, mgr)

	reader := readClusterRole(t, "metrics_reader_role.yaml")
	if err := admin.Create(ctx, reader); err != nil {
		t.Fatal(err)
	}
	allowed := serviceAccountToken(t, ctx, cfg, admin, "scraper")
	if err := admin.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "scraper-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: "default"}},
	}); err != nil {
		t.Fatal(err)
	}
	other := serviceAccountToken(t, ctx, cfg, admin, "nosy")

	url := "https://" + addr + "/metrics"
	// The manager's serving certificate is its own self-signed one.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test scrape of a self-signed server
	scrape := func(token string) (int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), nil
	}
	// Wait for the server with the authorized scraper; then the refusals
	// are about authorization, not a server still starting.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := scrape(allowed)
		if err == nil && code == http.StatusOK {
			if len(body) == 0 {
				t.Fatal("empty metrics")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("authorized scrape: code %d, err %v, body %q", code, err, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"anonymous", "", http.StatusUnauthorized},
		// controller-runtime's filter answers 500 "Authentication failed"
		// when the TokenReview itself reports an error, as for a token
		// that is not a JWT.
		{"forged token", "bogus", http.StatusInternalServerError},
		{"ServiceAccount without metrics-reader", other, http.StatusForbidden},
	} {
		code, body, err := scrape(tc.token)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if code != tc.want {
			t.Errorf("%s: got %d (%q), want %d", tc.name, code, body, tc.want)
		}
	}
}

func readClusterRole(t *testing.T, file string) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "config", "rbac", file))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		t.Fatal(err)
	}
	return role
}

// bindUser makes an envtest user bound to role.
func bindUser(t *testing.T, ctx context.Context, env *envtest.Environment, c client.Client, name string, role *rbacv1.ClusterRole) *rest.Config {
	t.Helper()
	if err := c.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-test"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}},
	}); err != nil {
		t.Fatal(err)
	}
	user, err := env.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rest.CopyConfig(user.Config())
}

// serviceAccountToken creates a ServiceAccount in default and a token of
// it through the TokenRequest API.
func serviceAccountToken(t *testing.T, ctx context.Context, cfg *rest.Config, c client.Client, name string) string {
	t.Helper()
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s: %v", name, err)
	}
	return tr.Status.Token
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprintf("127.0.0.1:%d", l.Addr().(*net.TCPAddr).Port)
}
