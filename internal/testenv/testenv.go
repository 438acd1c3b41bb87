// Package testenv starts a real kube-apiserver and etcd (envtest) with the
// promptops CRDs installed, for the controller tests, the demo and the
// benchmarks. The binaries come from hack/build-envtest-binaries.sh.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Root is the repository root, found from this file's location.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// AssetsDir is where kube-apiserver and etcd are: $KUBEBUILDER_ASSETS, else
// bin/k8s of the repository. It fails with a message saying how to build
// them when they are missing, so that a test run never silently skips.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(Root(), "bin", "k8s")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("envtest binary %s not found in %s: run 'make envtest' (builds them from the Go module proxy) or set KUBEBUILDER_ASSETS", b, dir)
		}
	}
	return dir, nil
}

// Start starts the control plane with the CRDs of config/crd/bases installed.
// Each option changes the environment before it starts (webhooks to
// install, more API server flags).
func Start(opts ...func(*envtest.Environment)) (*envtest.Environment, *rest.Config, error) {
	dir, err := AssetsDir()
	if err != nil {
		return nil, nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDDirectoryPaths:     []string{filepath.Join(Root(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	// go test runs packages side by side, each with its own control plane;
	// on a busy 2-core machine kube-apiserver takes well over envtest's
	// default 20 s to answer (KUBEBUILDER_CONTROLPLANE_START_TIMEOUT still
	// wins when set).
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		env.ControlPlaneStartTimeout = 3 * time.Minute
	}
	// As on OpenShift: setting blockOwnerDeletion on a child needs update
	// on the owner's finalizers, so the tests prove the RBAC grants it.
	env.ControlPlane.GetAPIServer().Configure().Append("enable-admission-plugins", "OwnerReferencesPermissionEnforcement")
	for _, o := range opts {
		o(env)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("starting envtest: %w", err), env.Stop())
	}
	return env, cfg, nil
}
