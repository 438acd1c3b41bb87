package operator

import (
	"context"
	"testing"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/promptops/promptops/controllers"
	"github.com/promptops/promptops/internal/testenv"
)

// controlPlane starts a kube-apiserver and etcd for one test, stopped when
// it ends, and returns them with an admin client and the test's context
// (cancelled when it ends).
func controlPlane(t *testing.T) (*envtest.Environment, *rest.Config, client.Client, context.Context, context.CancelFunc) {
	t.Helper()
	env, cfg, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	admin, err := client.New(cfg, client.Options{Scheme: controllers.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	return env, cfg, admin, ctx, cancel
}

// runManager starts mgr until the test ends: then it cancels ctx and fails
// the test if the manager returned an error.
func runManager(t *testing.T, ctx context.Context, cancel context.CancelFunc, mgr ctrl.Manager) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}
