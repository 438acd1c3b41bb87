//go:build e2e

package readmetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/testenv"
)

// deployOrder is the order TestReadmeDeploying runs the named
// blocks in (Deploying): the image, then each install with the samples on
// it and its removal, Helm first (the cluster's own install is a Helm
// release, whose removal the test makes itself), then kustomize.
var deployOrder = []string{
	"image",
	"helm", "samples", "samples-delete", "helm-delete",
	"kustomize", "samples", "samples-delete", "kustomize-delete",
}

// removeInstalls removes what the Deploying blocks (docs/deploying.md) or the
// cluster's install leave on the cluster, whatever the state a run stopped
// in: the samples' namespace (while an operator still runs to remove a
// served bank's finalizer; without one, the finalizers are dropped), a
// Helm release promptops, a kustomize install of config/default.
const removeInstalls = `set -u
if kubectl get namespace my-namespace >/dev/null 2>&1; then
  if ! kubectl delete namespace my-namespace --timeout=90s; then
    for mb in $(kubectl -n my-namespace get mb -o name); do
      kubectl -n my-namespace patch "$mb" --type=merge -p '{"metadata":{"finalizers":null}}'
    done
    kubectl delete namespace my-namespace --timeout=90s
  fi
fi
helm uninstall promptops -n promptops-system --ignore-not-found --wait
if kubectl -n promptops-system get deployment promptops-manager >/dev/null 2>&1; then
  kubectl delete -k config/default --ignore-not-found --timeout=3m
fi
`

// TestReadmeDeploying runs docs/deploying.md, the blocks
// marked <!-- readme-check cluster NAME -->, in a clean copy of the
// checkout against the cluster of `make cluster`, as a user whose kubectl
// and helm (bin/helm) are on PATH and whose KUBECONFIG is the cluster's:
// `make image`, whose image (with docker or podman absent, ko's tarball)
// the test loads into the node's containerd, as docs/deploying.md tells a user to
// load it; then the Helm recipe, the samples on it and their removal, and
// the same with kustomize, in deployOrder.
//
// The cluster runs its own install of the operator (a Helm release with
// the webhook on), which the docs' recipes would collide with: the test
// removes it first and installs it again at the end (hack/cluster.sh
// install), also when a block fails, so that make e2e and the demo's
// blocks find it as make cluster left it.
func TestReadmeDeploying(t *testing.T) {
	root := testenv.Root()
	blocks := namedBlocks(t, root)
	for name := range blocks {
		if !slices.Contains(deployOrder, name) {
			t.Fatalf("docs block <!-- readme-check cluster %s -->: no test runs it (deployOrder)", name)
		}
	}
	for _, name := range deployOrder {
		if len(blocks[name]) == 0 {
			t.Fatalf("no block of README.md or docs/ marked <!-- readme-check cluster %s -->; the mark was lost?", name)
		}
	}
	c := newClusterCopy(t, root)
	// helm on PATH as a user has it, and the cluster's kubeconfig.
	tools := t.TempDir()
	helm := os.Getenv("HELM")
	if helm == "" {
		helm = filepath.Join(root, "bin", "helm")
	}
	if err := os.Symlink(helm, filepath.Join(tools, "helm")); err != nil {
		t.Fatal(err)
	}
	env := append(slices.Clone(c.env), "KUBECONFIG="+filepath.Join(c.state, "kubeconfig.yaml"))
	for i, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			env[i] = "PATH=" + tools + string(os.PathListSeparator) + v
		}
	}
	if out, err := exec.Command(c.kubectl, "--kubeconfig", filepath.Join(c.state, "kubeconfig.yaml"),
		"get", "namespace", "promptops-demo", "--ignore-not-found", "-o", "name").CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("a demo runs on the cluster (%s%v): make demo-down first", out, err)
	}

	remove := func(what string) bool {
		t.Helper()
		cmd := exec.Command("bash", "-c", removeInstalls)
		cmd.Dir, cmd.Env = c.work, env
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", what, err, out)
			return false
		}
		t.Logf("%s (%s):\n%s", what, time.Since(start).Round(time.Second), out)
		return true
	}
	// Registered before anything changes, so that it runs whatever fails
	// (and after nothing but the removal of the copy): the cluster's own
	// install again.
	t.Cleanup(func() {
		remove("removing what the docs' blocks installed")
		install := exec.Command(filepath.Join(root, "hack", "cluster.sh"), "install")
		install.Dir, install.Env = root, append(os.Environ(), "PROMPTOPS_CLUSTER_DIR="+c.state)
		start := time.Now()
		out, err := install.CombinedOutput()
		if err != nil {
			t.Errorf("hack/cluster.sh install: the cluster's own install is not restored: %v\n%s", err, out)
			return
		}
		t.Logf("hack/cluster.sh install (%s):\n%s", time.Since(start).Round(time.Second), out)
	})
	if !remove("removing the cluster's own install (helm release promptops)") {
		t.FailNow()
	}

	start := time.Now()
	for _, name := range deployOrder {
		blockStart := time.Now()
		out := runChunks(t, blocks[name], c.work, env, 6*time.Minute)
		t.Logf("block %q (line %d, %s):\n%s", name, blocks[name][0].Line, time.Since(blockStart).Round(time.Second),
			regexp.MustCompile(`@@readme-check-\d+@@\n`).ReplaceAllString(out, ""))
		if name == "image" {
			loadImage(t, c)
		}
	}
	t.Logf("the Deploying blocks took %s", time.Since(start).Round(time.Second))
}

// loadImage imports the image tarball of make image into the node's
// containerd, as docs/deploying.md tells a user without docker or podman to: the
// docs' installs then run the image its make image built. With docker
// or podman, make image leaves the image in their store, which the node
// does not see: the node keeps make cluster's build.
func loadImage(t *testing.T, c *clusterCopy) {
	t.Helper()
	tarball := filepath.Join(c.work, "bin", "promptops-image.tar")
	if _, err := os.Stat(tarball); err != nil {
		t.Logf("make image wrote no %s (docker or podman built it): the node keeps make cluster's image", tarball)
		return
	}
	out, err := exec.Command("ctr", "--address", filepath.Join(c.state, "run", "containerd.sock"),
		"-n", "k8s.io", "images", "import", tarball).CombinedOutput()
	if err != nil {
		t.Fatalf("ctr -n k8s.io images import %s: %v\n%s", tarball, err, out)
	}
	t.Logf("ctr -n k8s.io images import bin/promptops-image.tar:\n%s", out)
}
