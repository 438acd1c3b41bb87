package serve

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/go-logr/logr"
)

// A shared server with --auth=kubernetes, against the API server's own
// TokenReview and SubjectAccessReview: 401 without a token or with a
// forged one, 403 to a ServiceAccount that may not get the template, 200 to
// one that may; the template list shows each caller its own; probes stay
// open and /metrics needs the metrics-reader permission.
func TestAuthKubernetes(t *testing.T) {
	env, cfg, cs := apiServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := adminClient(t, cfg)
	sa := serveUser(t, ctx, env, cfg, cs)
	const nsA, nsB = "auth-team-a", "auth-team-b"
	createNamespaces(t, ctx, cs, nsA, nsB)
	for _, k := range []Key{{nsA, "ssa-pro"}, {nsA, "support-assistant"}, {nsB, "ssa-pro"}} {
		pt := promptTemplate(t, ctx, admin, k.Namespace, k.Name)
		fx := "ssa-pro"
		if k.Name == "support-assistant" {
			fx = k.Name
		}
		if _, err := cs.CoreV1().ConfigMaps(k.Namespace).Create(ctx, rendered(pt, claiming(t, fixture(t, fx), k.Namespace, k.Name)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// reader may get nsA's ssa-pro only; viewer every template of nsB;
	// nosy nothing; scraper /metrics.
	if _, err := cs.RbacV1().Roles(nsA).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "ssa-pro-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"promptops.io"}, Resources: []string{"prompttemplates"}, ResourceNames: []string{"ssa-pro"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind := func(ns, name string, ref rbacv1.RoleRef, saName string) {
		t.Helper()
		subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: saName, Namespace: nsA}}
		var err error
		if ns == "" {
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: ref, Subjects: subjects}, metav1.CreateOptions{})
		} else {
			_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: ref, Subjects: subjects}, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "auth-test-template-viewer"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"promptops.io"}, Resources: []string{"prompttemplates"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "auth-test-metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reader := serviceAccountToken(t, ctx, cs, nsA, "reader")
	viewer := serviceAccountToken(t, ctx, cs, nsA, "viewer")
	nosy := serviceAccountToken(t, ctx, cs, nsA, "nosy")
	scraper := serviceAccountToken(t, ctx, cs, nsA, "scraper")
	bind(nsA, "reader", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "ssa-pro-reader"}, "reader")
	bind(nsB, "viewer", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "auth-test-template-viewer"}, "viewer")
	bind("", "auth-test-scraper", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "auth-test-metrics-reader"}, "scraper")

	auth, err := NewKubernetesAuth(sa)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Log: logr.Discard(), Auth: auth})
	if err := s.Watch(ctx, sa, []string{nsA, nsB}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three templates", func() bool { snap := s.Snapshot(); return snap != nil && snap.Len() == 3 })
	ts := newServer(t, s.Handler())
	defer ts.Close()

	do := func(method, path, token, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, ts.URL+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	assemble := func(ns, name string) string {
		return `{"namespace":"` + ns + `","name":"` + name + `","intent":"analyze","runtime":{}}`
	}
	for _, tc := range []struct {
		name, token, body string
		want              int
		code              Code
	}{
		{"no token", "", assemble(nsA, "ssa-pro"), http.StatusUnauthorized, CodeUnauthorized},
		{"a forged token", "bogus", assemble(nsA, "ssa-pro"), http.StatusUnauthorized, CodeUnauthorized},
		{"a ServiceAccount without the permission", nosy, assemble(nsA, "ssa-pro"), http.StatusForbidden, CodeForbidden},
		{"another template of the namespace", reader, assemble(nsA, "support-assistant"), http.StatusForbidden, CodeForbidden},
		{"the same name in another namespace", reader, assemble(nsB, "ssa-pro"), http.StatusForbidden, CodeForbidden},
		// Forbidden, not TemplateNotFound: a caller learns nothing of what is loaded.
		{"a template that is not loaded", reader, assemble(nsA, "missing"), http.StatusForbidden, CodeForbidden},
		{"allowed by resource name", reader, assemble(nsA, "ssa-pro"), http.StatusOK, ""},
		{"allowed by a namespace role", viewer, assemble(nsB, "ssa-pro"), http.StatusOK, ""},
	} {
		code, body := do(http.MethodPost, "/v1/assemble", tc.token, tc.body)
		if code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.want)
			continue
		}
		if tc.code != "" {
			if got, _ := errorCode(t, body); got != tc.code {
				t.Errorf("%s: code %s, want %s", tc.name, got, tc.code)
			}
		} else if !strings.Contains(string(body), `"prompt"`) {
			t.Errorf("%s: %s", tc.name, body)
		}
	}

	list := func(token string) []Key {
		t.Helper()
		code, body := do(http.MethodGet, "/v1/templates", token, "")
		if code != http.StatusOK {
			t.Fatalf("templates: %d %s", code, body)
		}
		var out struct{ Templates []TemplateSummary }
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatal(err)
		}
		var keys []Key
		for _, ts := range out.Templates {
			keys = append(keys, Key{ts.Namespace, ts.Name})
		}
		return keys
	}
	for _, tc := range []struct {
		name, token string
		want        []Key
	}{
		{"reader", reader, []Key{{nsA, "ssa-pro"}}},
		{"viewer", viewer, []Key{{nsB, "ssa-pro"}}},
		{"nosy", nosy, nil},
	} {
		if got := list(tc.token); !slices.Equal(got, tc.want) {
			t.Errorf("%s lists %v, want %v", tc.name, got, tc.want)
		}
	}
	if code, body := do(http.MethodGet, "/v1/templates", "", ""); code != http.StatusUnauthorized {
		t.Errorf("templates without a token: %d %s", code, body)
	}

	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", http.StatusOK},
		{"/readyz", "", http.StatusOK},
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", reader, http.StatusForbidden},
		{"/metrics", scraper, http.StatusOK},
	} {
		if code, body := do(http.MethodGet, tc.path, tc.token, ""); code != tc.want {
			t.Errorf("%s with a token %v: %d %s, want %d", tc.path, tc.token != "", code, body, tc.want)
		}
	}
}
