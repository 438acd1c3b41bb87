// Command localcp runs a local control plane (kube-apiserver and etcd, the
// envtest binaries built by hack/build-envtest-binaries.sh) with the promptops
// CRDs installed, writes an admin kubeconfig, and runs until it is signalled.
// make demo uses it; there is no kubelet, so pods never start.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

func main() {
	assets := flag.String("assets", "bin/k8s", "Directory holding kube-apiserver and etcd.")
	crds := flag.String("crds", "config/crd/bases", "Directory of CRDs to install.")
	kubeconfig := flag.String("write-kubeconfig", "bin/demo/kubeconfig", "Where to write the admin kubeconfig.")
	flag.Parse()

	env := &envtest.Environment{
		BinaryAssetsDirectory: *assets,
		CRDDirectoryPaths:     []string{*crds},
		ErrorIfCRDPathMissing: true,
	}
	if _, err := env.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "localcp: starting the control plane:", err)
		_ = env.Stop()
		os.Exit(1)
	}
	code := run(env, *kubeconfig)
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "localcp: stopping:", err)
	}
	os.Exit(code)
}

func run(env *envtest.Environment, path string) int {
	user, err := env.AddUser(envtest.User{Name: "demo-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "localcp: adding the admin user:", err)
		return 1
	}
	data, err := user.KubeConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "localcp: writing the kubeconfig:", err)
		return 1
	}
	// Written to a temp name and renamed, so a reader never sees half a file.
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil || os.Rename(path+".tmp", path) != nil {
		fmt.Fprintln(os.Stderr, "localcp: writing", path, err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "localcp: control plane ready; KUBECONFIG="+path)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	_ = os.Remove(path)
	return 0
}
