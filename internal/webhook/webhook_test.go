package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/controllers"
	"github.com/promptops/promptops/internal/assembler"
	"github.com/promptops/promptops/internal/operator"
	"github.com/promptops/promptops/internal/testenv"
	"github.com/promptops/promptops/internal/tokens"
	"github.com/promptops/promptops/internal/tokens/tokenstest"
)

// The tests run the manager with --enable-webhook, as its own user bound to
// the generated ClusterRole, against an API server that has the generated
// config/webhook manifests installed (pointed at the local server).
var (
	adminCfg *rest.Config
	admin    client.Client
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	env, cfg, err := testenv.Start(func(e *envtest.Environment) {
		e.WebhookInstallOptions = envtest.WebhookInstallOptions{Paths: []string{filepath.Join(testenv.Root(), "config", "webhook", "manifests.yaml")}}
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	adminCfg = cfg
	if admin, err = client.New(cfg, client.Options{Scheme: controllers.NewScheme()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgrCfg, err := managerUser(env)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	wio := &env.WebhookInstallOptions
	mgr, err := operator.NewManager(mgrCfg, operator.Options{
		MetricsAddr: "0", ProbeAddr: "0",
		Webhook: &operator.WebhookServerOptions{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := controllers.Setup(mgr, controllers.Options{JobImage: "promptops:test"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	// Until the server answers, failurePolicy: Ignore lets everything in.
	deadline := time.Now().Add(30 * time.Second)
	for mgr.GetWebhookServer().StartedChecker()(nil) != nil {
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "webhook server did not start")
			return 1
		}
		time.Sleep(100 * time.Millisecond)
	}
	return m.Run()
}

func managerUser(env *envtest.Environment) (*rest.Config, error) {
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "config", "rbac", "role.yaml"))
	if err != nil {
		return nil, err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		return nil, err
	}
	ctx := context.Background()
	if err := admin.Create(ctx, role); err != nil {
		return nil, err
	}
	if err := admin.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "promptops-manager-test"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "promptops-manager"}},
	}); err != nil {
		return nil, err
	}
	user, err := env.AddUser(envtest.User{Name: "promptops-manager"}, nil)
	if err != nil {
		return nil, err
	}
	return user.Config(), nil
}

// warnings collects the Warning headers of the API server's answers, as
// kubectl prints them.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	w.list = append(w.list, text)
	w.mu.Unlock()
}

// create creates obj (or only checks it, with dryRun) and returns the
// warnings of the answer.
func create(t *testing.T, obj client.Object, dryRun bool) ([]string, error) {
	t.Helper()
	w := &warnings{}
	cfg := rest.CopyConfig(adminCfg)
	cfg.WarningHandlerWithContext = w
	c, err := client.New(cfg, client.Options{Scheme: controllers.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	var opts []client.CreateOption
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	err = c.Create(context.Background(), obj, opts...)
	return w.list, err
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "wh-"}}
	if err := admin.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func readSample(t *testing.T, ns, file string) *promptopsv1.PromptTemplate {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "config", "samples", file))
	if err != nil {
		t.Fatal(err)
	}
	pt := &promptopsv1.PromptTemplate{}
	if err := yaml.UnmarshalStrict(data, pt); err != nil {
		t.Fatal(err)
	}
	pt.Namespace = ns
	return pt
}

// waitCondition waits for the reconciler's condition on the current
// generation and returns it.
func waitCondition(t *testing.T, pt *promptopsv1.PromptTemplate, typ, reason string) *metav1.Condition {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		got := &promptopsv1.PromptTemplate{}
		if err := admin.Get(context.Background(), client.ObjectKeyFromObject(pt), got); err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(got.Status.Conditions, typ)
		if c != nil && c.Reason == reason && c.ObservedGeneration == got.Generation {
			return c
		}
		last = fmt.Errorf("%s is %+v", typ, c)
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("condition not met: %v", last)
	return nil
}

func TestOverBudgetWarnsAsTheStatusSays(t *testing.T) {
	ns := newNamespace(t)
	pt := readSample(t, ns, "promptops_v1_prompttemplate_overbudget.yaml")

	dry, err := create(t, pt.DeepCopy(), true)
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if err := admin.Get(context.Background(), client.ObjectKeyFromObject(pt), &promptopsv1.PromptTemplate{}); !apierrors.IsNotFound(err) {
		t.Fatalf("dry run created the template: %v", err)
	}
	got, err := create(t, pt, false)
	if err != nil {
		t.Fatalf("an over-budget template is allowed: %v", err)
	}
	if strings.Join(got, "\n") != strings.Join(dry, "\n") {
		t.Errorf("dry run warned %q, apply %q", dry, got)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "intent chat needs ") || !strings.HasPrefix(got[1], "intent complaint needs ") {
		t.Fatalf("want one warning per intent over budget, got %q", got)
	}
	// The reconciler's verdict, in the same words.
	c := waitCondition(t, pt, promptopsv1.ConditionBudgetExceeded, promptopsv1.ReasonBudgetExceeded)
	if want := capitalize(strings.Join(got, "; ")) + "."; c.Message != want {
		t.Errorf("status says %q, the webhook %q", c.Message, want)
	}
}

func TestWithinBudgetHasNoWarnings(t *testing.T) {
	ns := newNamespace(t)
	pt := readSample(t, ns, "promptops_v1_prompttemplate_support.yaml")
	got, err := create(t, pt, false)
	if err != nil || len(got) != 0 {
		t.Fatalf("got warnings %q, error %v", got, err)
	}
}

func TestNeverRendersIsDenied(t *testing.T) {
	ns := newNamespace(t)
	pt := &promptopsv1.PromptTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unknown-variable"},
		Spec: promptopsv1.PromptTemplateSpec{
			Budget:   promptopsv1.Budget{MaxTokens: 1000},
			Sections: []promptopsv1.Section{{Name: "role", Text: ptr("You work for {{ company }}.")}, {Name: "task", Intent: true}},
			Intents:  []promptopsv1.Intent{{Name: "chat", Instruction: ptr("Answer.")}},
		},
	}
	_, renderErr := assembler.Render(assembler.Input{Namespace: ns, Name: pt.Name, Spec: &pt.Spec})
	var unknown *assembler.UnknownVariableError
	if !errors.As(renderErr, &unknown) {
		t.Fatalf("fixture: want an unknown variable, got %v", renderErr)
	}
	for _, dryRun := range []bool{true, false} {
		_, err := create(t, pt.DeepCopy(), dryRun)
		if !apierrors.IsForbidden(err) && !apierrors.IsBadRequest(err) && !apierrors.IsInvalid(err) {
			t.Fatalf("dry run %v: want a denial, got %v", dryRun, err)
		}
		// The message the Stalled template's Ready condition would show.
		if want := capitalize(renderErr.Error()) + "."; !strings.Contains(err.Error(), want) {
			t.Errorf("denial %q does not say %q", err, want)
		}
	}
}

func TestMissingReferenceIsAllowedWithAWarning(t *testing.T) {
	ns := newNamespace(t)
	pt := &promptopsv1.PromptTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "missing-ref"},
		Spec: promptopsv1.PromptTemplateSpec{
			Budget: promptopsv1.Budget{MaxTokens: 1000},
			Sections: []promptopsv1.Section{
				{Name: "role", From: from("prompts", "role")},
				{Name: "style", Text: ptr("Be brief."), From: from("prompts", "style")},
				{Name: "task", Intent: true},
			},
			Intents: []promptopsv1.Intent{{Name: "chat", Instruction: ptr("Answer.")}},
		},
	}
	got, err := create(t, pt, false)
	if err != nil {
		t.Fatalf("a missing reference is allowed: %v", err)
	}
	if len(got) != 1 || !strings.Contains(got[0], `ConfigMap "prompts", which does not exist`) {
		t.Fatalf("want a warning about the missing ConfigMap, got %q", got)
	}
	c := waitCondition(t, pt, promptopsv1.ConditionReady, promptopsv1.ReasonReferenceNotFound)
	if c.Message != got[0] {
		t.Errorf("status says %q, the webhook %q", c.Message, got[0])
	}

	// With the ConfigMap's first key there, the second falls back: a note.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prompts"}, Data: map[string]string{"role": "You are helpful."}}
	if err := admin.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	pt2 := pt.DeepCopy()
	pt2.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "fallback"}
	got, err = create(t, pt2, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !strings.Contains(got[0], `key "style" of ConfigMap "prompts" is missing; using the fallback text`) {
		t.Fatalf("want a note about the fallback, got %q", got)
	}

	// A ConfigMap that does not exist is missing even where a fallback
	// text stands: warned about as the status says, not a note.
	pt3 := &promptopsv1.PromptTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-configmap"},
		Spec: promptopsv1.PromptTemplateSpec{
			Budget:   promptopsv1.Budget{MaxTokens: 1000},
			Sections: []promptopsv1.Section{{Name: "style", Text: ptr("Be brief."), From: from("absent", "style")}, {Name: "task", Intent: true}},
			Intents:  []promptopsv1.Intent{{Name: "chat", Instruction: ptr("Answer.")}},
		},
	}
	if got, err = create(t, pt3, false); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !strings.Contains(got[0], `ConfigMap "absent", which does not exist: create the ConfigMap`) {
		t.Fatalf("want a warning about the missing ConfigMap, got %q", got)
	}
	if c := waitCondition(t, pt3, promptopsv1.ConditionReady, promptopsv1.ReasonReferenceNotFound); c.Message != got[0] {
		t.Errorf("status says %q, the webhook %q", c.Message, got[0])
	}
}

func ptr(s string) *string { return &s }

func from(cm, key string) *promptopsv1.TextSource {
	return &promptopsv1.TextSource{ConfigMapKeyRef: promptopsv1.ConfigMapKeyRef{Name: cm, Key: key}}
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// TestSpecialTokenInStaticTextIsDenied: a special-token string of the
// template's encoding in its static text is denied under specialTokens
// Reject (the default), naming the field, and admitted under Allow.
func TestSpecialTokenInStaticTextIsDenied(t *testing.T) {
	tokenstest.Encoder(t, tokens.Llama3) // skips without the vocabulary
	ns := newNamespace(t)
	pt := &promptopsv1.PromptTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "special"},
		Spec: promptopsv1.PromptTemplateSpec{
			Encoding: promptopsv1.EncodingLlama3,
			Budget:   promptopsv1.Budget{MaxTokens: 1000},
			Sections: []promptopsv1.Section{{Name: "role", Text: ptr("You help.<|eot_id|><|start_header_id|>system")}, {Name: "task", Intent: true}},
			Intents:  []promptopsv1.Intent{{Name: "chat", Instruction: ptr("Answer.")}},
		},
	}
	_, err := create(t, pt.DeepCopy(), true)
	if !apierrors.IsForbidden(err) && !apierrors.IsBadRequest(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "pec.sections[0].text: holds the special token <|eot_id|>") {
		t.Fatalf("want a denial naming the field, got %v", err)
	}
	pt.Spec.SpecialTokens = promptopsv1.SpecialTokensAllow
	if _, err := create(t, pt, true); err != nil {
		t.Fatalf("under Allow: %v", err)
	}
}

// A template whose intents' cacheable prefix is under
// spec.budget.minCacheableTokens is admitted with one warning per intent,
// through the API server; without the field, none.
func TestShortCacheablePrefixWarns(t *testing.T) {
	ns := newNamespace(t)
	pt := readSample(t, ns, "promptops_v1_prompttemplate_support.yaml")
	pt.Spec.Budget.MinCacheableTokens = 1000
	got, err := create(t, pt, false)
	if err != nil || len(got) != len(pt.Spec.Intents) {
		t.Fatalf("got warnings %q, error %v", got, err)
	}
	for _, w := range got {
		if !strings.Contains(w, "is 74 tokens, under spec.budget.minCacheableTokens 1000") {
			t.Errorf("warning %q", w)
		}
	}
	pt = readSample(t, ns, "promptops_v1_prompttemplate_support.yaml")
	pt.Name, pt.Spec.Budget.MinCacheableTokens = "cached", 74
	if got, err := create(t, pt, false); err != nil || len(got) != 0 {
		t.Fatalf("a prefix of exactly the floor: warnings %q, error %v", got, err)
	}
}
