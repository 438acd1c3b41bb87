package controllers

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/promptops/promptops/internal/testenv"
)

// The suite runs against a real kube-apiserver and etcd with the generated
// CRDs installed, and a real manager running both controllers. It fails,
// never skips, when the binaries are missing.
var (
	cfg       *rest.Config
	k8sClient client.Client
	// managerCfg is the manager's own user, bound to config/rbac/role.yaml.
	managerCfg *rest.Config
	// writes counts the manager's write requests (POST, PUT, PATCH, DELETE)
	// by resource path, at the HTTP level.
	writes = &writeCounter{byPath: map[string]int{}}
	// mgrCache is the manager's cache, for what it holds; mgrClient its
	// client (reads from that cache, with the controllers' indexes).
	mgrCache  cache.Cache
	mgrClient client.Client
	// testClock is the MemoryBank controller's clock.
	testClock = &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
)

type writeCounter struct {
	mu     sync.Mutex
	total  atomic.Int64
	byPath map[string]int
	// fullConfigMapReads are the manager's lists and watches of
	// ConfigMaps that asked for whole objects, not metadata only.
	fullConfigMapReads []string
	// metaConfigMapReads counts those that asked for metadata only.
	metaConfigMapReads int
}

func (w *writeCounter) count(req *http.Request) {
	if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/configmaps") {
		w.mu.Lock()
		if strings.Contains(req.Header.Get("Accept"), "as=PartialObjectMetadata") {
			w.metaConfigMapReads++
		} else {
			w.fullConfigMapReads = append(w.fullConfigMapReads, req.URL.String())
		}
		w.mu.Unlock()
	}
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		w.total.Add(1)
		w.mu.Lock()
		w.byPath[req.Method+" "+req.URL.Path]++
		w.mu.Unlock()
	}
}

// matching counts writes whose method and path contain every part.
func (w *writeCounter) matching(parts ...string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for k, v := range w.byPath {
		ok := true
		for _, p := range parts {
			if !strings.Contains(k, p) {
				ok = false
			}
		}
		if ok {
			n += v
		}
	}
	return n
}

type countingTransport struct{ next http.RoundTripper }

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	writes.count(req)
	return t.next.RoundTrip(req)
}

// TestMain starts the control plane and the manager only when a test
// needs them (newNamespace calls startEnv), so that the table tests of
// pure decisions (go test -run Table) run without them.
func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapLevel())))
	code := m.Run()
	if suite.stop != nil {
		suite.stop()
	}
	os.Exit(code)
}

// suite is the control plane and manager the envtest tests share, started
// once by the first test that needs them.
var suite struct {
	once sync.Once
	err  error
	stop func()
}

// startEnv starts the suite's kube-apiserver, etcd and manager if no test
// did yet, and fails t when they could not start.
func startEnv(t *testing.T) {
	t.Helper()
	suite.once.Do(func() { suite.err = start() })
	if suite.err != nil {
		t.Fatalf("starting envtest: %v", suite.err)
	}
}

func start() error {
	env, c, err := testenv.Start()
	if err != nil {
		return err
	}
	cfg = c
	stopEnv := func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}
	suite.stop = stopEnv
	k8sClient, err = client.New(cfg, client.Options{Scheme: NewScheme()})
	if err != nil {
		return err
	}
	// The manager runs as its own user with only the generated ClusterRole,
	// so the tests prove the RBAC is sufficient.
	mgrCfg, err := managerConfig(env)
	if err != nil {
		return err
	}
	managerCfg = rest.CopyConfig(mgrCfg)
	mgrCfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt} }
	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{
		Scheme:                 NewScheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Objects labelled unmanagedLabel are left to a test's own
		// reconciler, as another shard's would be.
		Cache: CacheOptions(labels.SelectorFromSet(nil).Add(mustRequirement(unmanagedLabel, selection.DoesNotExist))),
	})
	if err != nil {
		return err
	}
	mgrCache, mgrClient = mgr.GetCache(), mgr.GetClient()
	if err := Setup(mgr, Options{JobImage: "promptops:test", MaxConcurrentReconciles: 2, Clock: testClock, PerTemplateMetrics: true, TokenizerRetry: time.Second}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	suite.stop = func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
		stopEnv()
	}
	return nil
}

// managerConfig binds config/rbac/role.yaml to a user of its own.
func managerConfig(env *envtest.Environment) (*rest.Config, error) {
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "config", "rbac", "role.yaml"))
	if err != nil {
		return nil, err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		return nil, err
	}
	if err := k8sClient.Create(context.Background(), role); err != nil {
		return nil, err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "promptops-manager-test"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: "rbac.authorization.k8s.io", Name: "promptops-manager"}},
	}
	if err := k8sClient.Create(context.Background(), binding); err != nil {
		return nil, err
	}
	user, err := env.AddUser(envtest.User{Name: "promptops-manager"}, nil)
	if err != nil {
		return nil, err
	}
	return rest.CopyConfig(user.Config()), nil
}

func zapLevel() zapcore.Level {
	if os.Getenv("PROMPTOPS_TEST_LOG") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

// newNamespace creates a namespace of its own for one test, starting the
// suite's control plane and manager if no test did yet.
func newNamespace(t *testing.T) string {
	t.Helper()
	startEnv(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// eventually polls f until it returns nil, failing the test after timeout
// with f's last error. Time here bounds waiting, it is never asserted.
func eventually(t *testing.T, f func() error) {
	t.Helper()
	waitLong(t, 30*time.Second, f)
}

// waitLong is eventually with its own bound on the wait (many objects).
func waitLong(t *testing.T, limit time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("condition not met: %v", err)
}

// fakeClock is an injectable clock for schedules.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// unmanagedLabel takes an object away from the suite's manager (its watch
// label selector excludes it), for tests that drive a reconciler of their
// own without the manager acting on the same object meanwhile.
const unmanagedLabel = "test.promptops.io/unmanaged"

func mustRequirement(key string, op selection.Operator, vals ...string) labels.Requirement {
	r, err := labels.NewRequirement(key, op, vals)
	if err != nil {
		panic(err)
	}
	return *r
}
