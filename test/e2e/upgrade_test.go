//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/testenv"
)

// TestUpgradeWithARunInFlight puts the cluster's install back to the chart
// as it was before the last change of the CRDs (its CRDs too), creates
// templates and a bank whose consolidation run is in progress, upgrades the
// release to this chart while the run goes on, and checks that every
// object and status is intact, that the run finished once, and that a
// field only the new CRDs have is kept where the old ones pruned it. The
// release ends as make cluster installs it. Both charts run this image.
func TestUpgradeWithARunInFlight(t *testing.T) {
	previous, rev := testenv.PreviousChart(t)
	t.Logf("upgrading from the chart of %s", rev)
	image := os.Getenv("OPERATOR_IMAGE")
	repo, tag, _ := strings.Cut(image, ":")
	values := []string{"--namespace", opNS, "--set", "image.repository=" + repo, "--set", "image.tag=" + tag, "--set", "image.pullPolicy=Never",
		"--set", "webhook.enabled=true", "--set", "metrics.secure=true", "--wait", "--timeout", "180s"}
	helm := func(args ...string) string {
		t.Helper()
		bin := envOr("HELM", filepath.Join(root, "bin", "helm"))
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			// Whatever failed, the cluster's own install comes back.
			_, _ = exec.Command(envOr("HELM", filepath.Join(root, "bin", "helm")), append([]string{"upgrade", "--install", "promptops", filepath.Join(root, "charts/promptops"), "--take-ownership"}, values...)...).CombinedOutput()
		}
	})

	// The previous install: its CRDs, then its chart. A chart of before
	// 0.2.0 skips CRDs that exist; one that templates them (files/crds)
	// takes the replaced ones over, as its release owns them.
	helm("uninstall", "promptops", "--namespace", opNS, "--wait")
	install := append([]string{"install", "promptops", previous}, values...)
	crds, _ := filepath.Glob(filepath.Join(previous, "crds", "*.yaml"))
	if len(crds) == 0 {
		crds, _ = filepath.Glob(filepath.Join(previous, "files", "crds", "*.yaml"))
		install = append(install, "--take-ownership")
	}
	for _, f := range crds {
		mustK(t, "", "replace", "-f", f)
	}
	helm(install...)

	ns := namespace(t)
	for _, f := range []string{"ssa-prompts-configmap.yaml", "promptops_v1_prompttemplate_ssa.yaml", "promptops_v1_prompttemplate_support.yaml"} {
		mustK(t, "", "apply", "-n", ns, "-f", filepath.Join(root, "config/samples", f))
	}
	mustK(t, "", "wait", "-n", ns, "--for=condition=Ready", "--timeout=120s", "pt/ssa-pro", "pt/support-assistant")
	srv, dsn := runInFlight(t, ns, "upgraded")
	// A field only the new CRD has, written through the old one: pruned.
	patch := `{"spec":{"budget":{"minCacheableTokens":300}}}`
	mustK(t, "", "patch", "-n", ns, "pt/support-assistant", "--type=merge", "-p", patch)
	oldHas := false
	for _, f := range crds {
		data, _ := os.ReadFile(f)
		oldHas = oldHas || strings.Contains(string(data), "minCacheableTokens")
	}
	if got := jsonpath(t, ns, "pt/support-assistant", "{.spec.budget.minCacheableTokens}"); !oldHas && got != "" {
		t.Fatalf("the previous CRD, which lacks spec.budget.minCacheableTokens, kept it: %q", got)
	}
	before := map[string]string{}
	for _, o := range []string{"pt/ssa-pro", "pt/support-assistant", "mb/upgraded"} {
		before[o] = jsonpath(t, ns, o, "{.metadata.uid}")
	}

	// This chart over it, the run still going.
	helm(append([]string{"upgrade", "promptops", filepath.Join(root, "charts/promptops"), "--take-ownership"}, values...)...)
	restored = true
	for _, crd := range []string{"prompttemplates.promptops.io", "memorybanks.promptops.io"} {
		if got := mustK(t, "", "get", "crd", crd, "-o", `jsonpath={.metadata.annotations.helm\.sh/resource-policy}`); got != "keep" {
			t.Errorf("crd %s after the upgrade: resource-policy %q", crd, got)
		}
	}
	if len(srv.Requests()) == 0 {
		t.Fatal("the run was not in flight")
	}
	mustK(t, "", "patch", "-n", ns, "pt/support-assistant", "--type=merge", "-p", patch)
	if got := jsonpath(t, ns, "pt/support-assistant", "{.spec.budget.minCacheableTokens}"); got != "300" {
		t.Fatalf("after the upgrade spec.budget.minCacheableTokens is %q, want 300", got)
	}
	for o, uid := range before {
		if got := jsonpath(t, ns, o, "{.metadata.uid}"); got != uid {
			t.Errorf("%s was replaced (uid %s, was %s)", o, got, uid)
		}
	}
	mustK(t, "", "wait", "-n", ns, "--for=condition=Ready", "--timeout=120s", "pt/ssa-pro", "pt/support-assistant", "mb/upgraded")
	if got := jsonpath(t, ns, "pt/support-assistant", "{.status.intents[0].cacheableTokens}"); got == "" || got == "0" {
		t.Errorf("the new manager's status lacks cacheableTokens: %q", got)
	}
	waitLastRun(t, ns, "upgraded", 3*time.Minute)
	if n := observations(t, ns+"/upgraded", dsn); n == 0 {
		t.Error("the run consolidated nothing")
	}
	jobs := mustK(t, "", "get", "jobs", "-n", ns, "-l", "promptops.io/memorybank=upgraded", "-o", "name")
	if n := len(strings.Fields(jobs)); n != 1 {
		t.Fatalf("%d Jobs across the upgrade, want 1:\n%s", n, jobs)
	}
}
