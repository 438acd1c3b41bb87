//go:build e2e

package readmetest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/testenv"
)

// TestReadmeOnTheDemoCluster runs the blocks (docs/demo.md) marked
// <!-- readme-check cluster --> (no name), from `make demo KEEP=1` on, in a clean copy
// of the checkout (the files git tracks or would track, no bin/), against the
// one-node cluster of `make cluster`, which must be running. The copy reuses
// the checkout's built tools and the running cluster through the variables
// the Makefile documents (KUBEBUILDER_ASSETS, CLUSTER_BINARIES, HELM, KO,
// PROMPTOPS_CLUSTER_DIR), so nothing is rebuilt but bin/promptops; kubectl
// is the cluster's. At the end `make demo-down` removes the demo again.
func TestReadmeOnTheDemoCluster(t *testing.T) {
	root := testenv.Root()
	chunks := readmeChunks(t, root, true)
	if len(chunks) < 4 {
		t.Fatalf("%d cluster chunks in README.md and docs/; the marks were lost?", len(chunks))
	}
	c := newClusterCopy(t, root)
	work, env, state := c.work, c.env, c.state
	t.Cleanup(func() {
		down := exec.Command("make", "demo-down")
		down.Dir, down.Env = work, env
		if out, err := down.CombinedOutput(); err != nil {
			t.Errorf("make demo-down: %v\n%s", err, out)
		}
	})
	start := time.Now()
	runChunks(t, chunks, work, env, 12*time.Minute)
	t.Logf("the cluster blocks took %s", time.Since(start).Round(time.Second))

	// The last block is make demo-down: nothing of the demo runs
	// after it, and its files are gone.
	if pids := processesNaming(t, filepath.Join(state, "standin")); len(pids) > 0 {
		t.Errorf("after make demo-down, the demo's PostgreSQL and stand-in still run: pids %v", pids)
	}
	for _, f := range []string{"bin/demo/kubeconfig", "bin/demo/store"} {
		if _, err := os.Stat(filepath.Join(work, f)); err == nil {
			t.Errorf("after make demo-down, %s is still there", f)
		}
	}
}

// clusterCopy is a clean copy of the checkout and the environment of a
// newcomer's shell in it, on the cluster of `make cluster`.
type clusterCopy struct {
	root, work string
	state      string   // the cluster's directory (bin/cluster)
	kubectl    string   // the cluster's kubectl
	env        []string // for commands run in work
}

// newClusterCopy copies the checkout (the files git tracks or would track,
// no bin/) into a temporary directory and returns it with the environment
// for the docs' commands there: PATH with the copy's bin/ and the
// cluster's kubectl, a HOME of its own, the caches and built tools of the
// checkout, the cluster's directory.
func newClusterCopy(t *testing.T, root string) *clusterCopy {
	t.Helper()
	state := os.Getenv("PROMPTOPS_CLUSTER_DIR")
	if state == "" {
		state = filepath.Join(root, "bin", "cluster")
	}
	clusterEnv := readEnv(t, filepath.Join(state, "env"))
	kubectl := clusterEnv["KUBECTL"]
	if kubectl == "" {
		t.Fatalf("%s/env names no KUBECTL", state)
	}

	// TMPDIR stays the system's: go ignores a go.mod at its root, and the
	// demo's PostgreSQL runs as the postgres user, who cannot enter a
	// test's private temporary directories; for its working directory it
	// may enter the copy.
	work, home := t.TempDir(), t.TempDir()
	for _, d := range []string{filepath.Dir(work), work} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyCmd := `git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$1"`
	cp := exec.Command("bash", "-c", copyCmd, "copy", work)
	cp.Dir = root
	if out, err := cp.CombinedOutput(); err != nil {
		t.Fatalf("copying the checkout: %v\n%s", err, out)
	}

	or := func(name, def string) string {
		if v := os.Getenv(name); v != "" {
			return name + "=" + v
		}
		return name + "=" + def
	}
	goEnv := func(name string) string {
		out, err := exec.Command("go", "env", name).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", name, err)
		}
		return name + "=" + strings.TrimSpace(string(out))
	}
	// What a newcomer's shell has: PATH with the clone's bin/ and a
	// kubectl, a HOME of its own (no ~/.kube/config of the developer's),
	// no PROMPTOPS_* or OPENAI_API_KEY; and the caches of this checkout.
	env := []string{
		"PATH=" + strings.Join([]string{filepath.Join(work, "bin"), filepath.Dir(kubectl), os.Getenv("PATH")}, string(os.PathListSeparator)),
		"HOME=" + home, "LANG=C.UTF-8", or("TMPDIR", os.TempDir()),
		goEnv("GOCACHE"), goEnv("GOMODCACHE"), goEnv("GOPATH"),
		or("KUBEBUILDER_ASSETS", filepath.Join(root, "bin", "k8s")),
		"CLUSTER_BINARIES=" + filepath.Dir(kubectl),
		or("HELM", filepath.Join(root, "bin", "helm")),
		or("KO", filepath.Join(root, "bin", "ko")),
		"PROMPTOPS_CLUSTER_DIR=" + state,
	}
	return &clusterCopy{root: root, work: work, state: state, kubectl: kubectl, env: env}
}

// processesNaming returns the pids whose command line contains s.
func processesNaming(t *testing.T, s string) []string {
	t.Helper()
	paths, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(data), s) {
			pids = append(pids, filepath.Base(filepath.Dir(p)))
		}
	}
	return pids
}

// readEnv reads the KEY=value lines of bin/cluster/env.
func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no cluster (%v): run make cluster first (as root)", err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env
}
