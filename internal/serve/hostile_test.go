package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/go-logr/logr/funcr"
)

// syncBuffer collects log lines from the watch's goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) add(prefix, args string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.WriteString(prefix + " " + args + "\n")
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A tenant who may only create ConfigMaps in its own namespace puts plans
// claiming team-a's template there, with the operator's labels: without an
// owner, with a forged owner reference (a PromptTemplate that does not
// exist, or the UID of one that does but another name), and under the real
// rendered name of its own namespace's template. The shared server serves
// team-a's own plan only, and reports each refusal without its content.
func TestWatchIgnoresAHostileTenant(t *testing.T) {
	env, cfg, cs := apiServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := adminClient(t, cfg)
	sa := serveUser(t, ctx, env, cfg, cs)
	const teamA, tenant = "hijack-team-a", "hijack-a-tenant"
	createNamespaces(t, ctx, cs, teamA, tenant)

	// team-a's template, rendered as the operator does.
	ssaPT := promptTemplate(t, ctx, admin, teamA, "ssa-pro")
	genuine := claiming(t, fixture(t, "ssa-pro"), teamA, "ssa-pro")
	if _, err := cs.CoreV1().ConfigMaps(teamA).Create(ctx, rendered(ssaPT, genuine), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The tenant's own template exists too (the tenant can read its UID).
	ownPT := promptTemplate(t, ctx, admin, tenant, "ssa-pro")

	// The tenant: create ConfigMaps in its namespace, nothing else.
	if _, err := cs.RbacV1().Roles(tenant).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "configmap-creator"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(tenant).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "configmap-creator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmap-creator"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "a-tenant-user"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user, err := env.AddUser(envtest.User{Name: "a-tenant-user"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tcs, err := kubernetes.NewForConfig(user.Config())
	if err != nil {
		t.Fatal(err)
	}
	const marker = "HIJACKED-PROMPT-7a3f"
	forged := claiming(t, withInstruction(t, fixture(t, "ssa-pro"), marker), teamA, "ssa-pro")
	// The control: the tenant cannot write into team-a.
	if _, err := tcs.CoreV1().ConfigMaps(teamA).Create(ctx, renderedConfigMap(teamA, "x-prompts", "rendered", forged), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant creating in %s: %v, want forbidden", teamA, err)
	}
	attacks := []*corev1.ConfigMap{
		// No owner at all.
		renderedConfigMap(tenant, "orphan-prompts", "rendered", forged),
		// A forged owner: a PromptTemplate of its namespace that does not exist.
		ownedBy(renderedConfigMap(tenant, "ghost-prompts", "rendered", forged), "ghost", "00000000-0000-0000-0000-000000000001"),
		// The UID of a real template under another name.
		ownedBy(renderedConfigMap(tenant, "other-prompts", "rendered", forged), "other", string(ownPT.UID)),
		// A real owner in its own namespace, but the plan claims team-a's.
		ownedBy(renderedConfigMap(tenant, "ssa-pro-prompts", "rendered", forged), "ssa-pro", string(ownPT.UID)),
	}
	for _, cm := range attacks {
		if _, err := tcs.CoreV1().ConfigMaps(tenant).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the tenant creating %s: %v", cm.Name, err)
		}
	}

	logs := &syncBuffer{}
	s := New(Options{Log: funcr.New(logs.add, funcr.Options{})})
	if err := s.Watch(ctx, sa, nil); err != nil {
		t.Fatal(err)
	}
	// Every namespace is watched, as by the shared Deployment (other
	// tests' templates are there too).
	waitFor(t, "the four refusals", func() bool { return refused(s, tenant, attacks...) })
	snap := s.Snapshot()
	if p := snap.Plan(Key{teamA, "ssa-pro"}); p == nil || p.Revision != mustLoad(t, genuine).Revision || !slices.Equal(inNamespaces(snap, teamA, tenant), []Key{{teamA, "ssa-pro"}}) {
		t.Fatalf("serves %v; want team-a's own plan alone", snap.keys)
	}

	// Over HTTP, team-a's requests get team-a's prompt.
	ts := newServer(t, s.Handler())
	defer ts.Close()
	code, body := post(t, ts.URL, `{"namespace":"`+teamA+`","name":"ssa-pro","intent":"analyze","runtime":{}}`)
	var resp AssembleResponse
	if err := json.Unmarshal(body, &resp); err != nil || code != 200 || strings.Contains(resp.Prompt, marker) || resp.Revision != snap.Plan(Key{teamA, "ssa-pro"}).Revision {
		t.Fatalf("team-a's request: %d %s", code, body)
	}

	// A later forged plan in a new ConfigMap is refused too, and the
	// genuine one is still what team-a gets.
	late := ownedBy(renderedConfigMap(tenant, "late-prompts", "rendered", forged), "ssa-pro", string(ssaPT.UID))
	if _, err := tcs.CoreV1().ConfigMaps(tenant).Create(ctx, late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the fifth refusal", func() bool { return refused(s, tenant, append(attacks, late)...) })
	if p := s.Snapshot().Plan(Key{teamA, "ssa-pro"}); p == nil || p.Revision != mustLoad(t, genuine).Revision || !slices.Equal(inNamespaces(s.Snapshot(), teamA, tenant), []Key{{teamA, "ssa-pro"}}) {
		t.Fatalf("serves %v after a late forgery", s.Snapshot().keys)
	}

	out := logs.String()
	if strings.Count(out, "Plan source refused") != len(attacks)+1 || testutilValue(s.metrics.refused) != float64(len(attacks)+1) {
		t.Errorf("want %d refusals logged:\n%s", len(attacks)+1, out)
	}
	if strings.Contains(out, marker) {
		t.Errorf("the logs hold prompt content:\n%s", out)
	}
}

// withInstruction appends text to every intent's instruction.
func withInstruction(t *testing.T, data []byte, text string) []byte {
	t.Helper()
	p := mustLoad(t, data)
	for i := range p.Intents {
		p.Intents[i].Instruction += "\n" + text
	}
	p.Revision = p.Digest()
	out, _ := json.Marshal(p)
	return out
}

// refused says whether the loader holds each ConfigMap as a refused source.
func refused(s *Server, ns string, cms ...*corev1.ConfigMap) bool {
	s.loader.mu.Lock()
	defer s.loader.mu.Unlock()
	for _, cm := range cms {
		src, ok := s.loader.last["configmap "+ns+"/"+cm.Name]
		if !ok || (src.refused == "" && src.want == (Key{})) {
			return false
		}
		if _, bad := s.loader.bad["configmap "+ns+"/"+cm.Name]; !bad {
			return false
		}
	}
	return true
}

func inNamespaces(snap *Snapshot, namespaces ...string) []Key {
	var out []Key
	for _, k := range snap.keys {
		if slices.Contains(namespaces, k.Namespace) {
			out = append(out, k)
		}
	}
	return out
}
