package serve

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The bank API under --auth=kubernetes, against the API server's own
// TokenReview and SubjectAccessReview: anonymous 401; a ServiceAccount
// without a role 403 on both endpoints; the reader role (create
// memorybanks/recall) recalls but may not retain; the writer role (create
// memorybanks/facts, memorybanks/messages and memorybanks/recall) retains
// facts and messages; neither may erase or
// export a scope or delete a fact, which the eraser role (delete
// memorybanks/scopes and memorybanks/facts, get memorybanks/scopes) may.
func TestBankAuthKubernetes(t *testing.T) {
	env, cfg, cs := apiServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sa := serveUser(t, ctx, env, cfg, cs)
	const ns = "team-a"
	createNamespaces(t, ctx, cs, ns)
	for name, subs := range map[string][]string{
		"bank-test-reader": {"memorybanks/recall"},
		"bank-test-writer": {"memorybanks/facts", "memorybanks/messages", "memorybanks/recall"},
	} {
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"promptops.io"}, Resources: subs, Verbs: []string{"create"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "bank-test-eraser"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"promptops.io"}, Resources: []string{"memorybanks/scopes", "memorybanks/facts"}, Verbs: []string{"delete"}},
			{APIGroups: []string{"promptops.io"}, Resources: []string{"memorybanks/scopes"}, Verbs: []string{"get"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nosy := serviceAccountToken(t, ctx, cs, ns, "nosy")
	eraser := serviceAccountToken(t, ctx, cs, ns, "eraser")
	reader := serviceAccountToken(t, ctx, cs, ns, "reader")
	writer := serviceAccountToken(t, ctx, cs, ns, "writer")
	for sa, role := range map[string]string{"reader": "bank-test-reader", "writer": "bank-test-writer", "eraser": "bank-test-eraser"} {
		if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: sa},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	auth, err := NewKubernetesAuth(sa)
	if err != nil {
		t.Fatal(err)
	}
	b := newBankServer(t, "sqlite://"+filepath.Join(t.TempDir(), "bank.db"), nil, BankLimits{}, auth)
	retain := []byte(`{"facts": [{"text": "Alice moved to Lisbon"}, {"id": "f-ana", "scope": "user:ana", "text": "Ana moved to Porto"}]}`)
	recall := []byte(`{"query": "Alice", "maxTokens": 100}`)
	messages := []byte(`{"scope": "user:ana", "conversation": "c1", "messages": [{"role": "user", "content": "I moved to Porto", "at": "2026-03-01T09:00:00Z"}]}`)
	for _, tc := range []struct {
		who, token, endpoint string
		body                 []byte
		want                 int
		code                 Code
	}{
		{"anonymous", "", "facts", retain, http.StatusUnauthorized, CodeUnauthorized},
		{"anonymous", "", "recall", recall, http.StatusUnauthorized, CodeUnauthorized},
		{"a forged token", "bogus", "recall", recall, http.StatusUnauthorized, CodeUnauthorized},
		{"no role", nosy, "facts", retain, http.StatusForbidden, CodeForbidden},
		{"no role", nosy, "recall", recall, http.StatusForbidden, CodeForbidden},
		{"reader", reader, "facts", retain, http.StatusForbidden, CodeForbidden},
		{"anonymous", "", "messages", messages, http.StatusUnauthorized, CodeUnauthorized},
		{"no role", nosy, "messages", messages, http.StatusForbidden, CodeForbidden},
		{"reader", reader, "messages", messages, http.StatusForbidden, CodeForbidden},
		{"eraser", eraser, "messages", messages, http.StatusForbidden, CodeForbidden},
		{"writer", writer, "messages", messages, http.StatusOK, ""},
		{"reader", reader, "recall", recall, http.StatusOK, ""},
		{"writer", writer, "facts", retain, http.StatusOK, ""},
		{"writer", writer, "recall", recall, http.StatusOK, ""},
	} {
		code, body := b.post(t, tc.endpoint, tc.token, tc.body)
		if code != tc.want {
			t.Errorf("%s on %s: %d %s, want %d", tc.who, tc.endpoint, code, body, tc.want)
			continue
		}
		if tc.code != "" {
			if got, _ := errorCode(t, body); got != tc.code {
				t.Errorf("%s on %s: code %s, want %s", tc.who, tc.endpoint, got, tc.code)
			}
		}
	}
	if n := b.factCount(t); n != 2 {
		t.Errorf("%d facts stored, want the writer's 2", n)
	}
	for _, tc := range []struct {
		who, token, method, endpoint string
		want                         int
	}{
		{"anonymous", "", http.MethodGet, "scopes/user:ana/export", http.StatusUnauthorized},
		{"anonymous", "", http.MethodDelete, "scopes/user:ana", http.StatusUnauthorized},
		{"anonymous", "", http.MethodDelete, "facts/f-ana", http.StatusUnauthorized},
		{"reader", reader, http.MethodGet, "scopes/user:ana/export", http.StatusForbidden},
		{"reader", reader, http.MethodDelete, "scopes/user:ana", http.StatusForbidden},
		{"writer", writer, http.MethodGet, "scopes/user:ana/export", http.StatusForbidden},
		{"writer", writer, http.MethodDelete, "scopes/user:ana", http.StatusForbidden},
		{"writer", writer, http.MethodDelete, "facts/f-ana", http.StatusForbidden},
		{"eraser", eraser, http.MethodPost, "recall", http.StatusForbidden},
		{"eraser", eraser, http.MethodGet, "scopes/user:ana/export", http.StatusOK},
		{"eraser", eraser, http.MethodDelete, "scopes/user:ana", http.StatusOK},
		{"eraser", eraser, http.MethodDelete, "facts/f-ana", http.StatusNotFound}, // erased with its scope
	} {
		body := recall
		if tc.method != http.MethodPost {
			body = nil
		}
		if code, out := b.do(t, tc.method, tc.endpoint, tc.token, body); code != tc.want {
			t.Errorf("%s: %s %s: %d %s, want %d", tc.who, tc.method, tc.endpoint, code, out, tc.want)
		}
	}
	if n := b.factCount(t); n != 1 {
		t.Errorf("%d facts left after the scope's erasure, want 1", n)
	}
}
