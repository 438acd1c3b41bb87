package cli

import (
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

func TestHelpEverywhere(t *testing.T) {
	for _, args := range [][]string{
		{"-h"}, {"--help"}, {"help"}, {"version", "-h"},
		{"render", "-h"}, {"render", "--help"}, {"assemble", "-h"}, {"serve", "-h"}, {"consolidate", "-h"}, {"manager", "-h"},
		{"facts", "-h"}, {"facts", "--help"}, {"facts", "import", "-h"}, {"facts", "list", "--help"}, {"facts", "retry", "-h"},
		{"observations", "-h"}, {"observations", "list", "-h"},
		{"tokens", "-h"}, {"tokens", "count", "--help"},
		{"rollout", "-h"}, {"rollout", "status", "-h"}, {"rollout", "promote", "--help"}, {"rollout", "abort", "-h"},
	} {
		code, out, errOut := run(t, "", args...)
		if code != ExitOK || errOut != "" || !strings.Contains(out, "Usage: promptops") {
			t.Errorf("promptops %s: exit %d, stdout %q, stderr %q; want exit 0 and usage on stdout", strings.Join(args, " "), code, out, errOut)
		}
	}
	for name := range commands {
		if code, out, errOut := run(t, "", name, "-h"); code != ExitOK || errOut != "" || !strings.Contains(out, "Usage: promptops") {
			t.Errorf("promptops %s -h: exit %d, stdout %q, stderr %q", name, code, out, errOut)
		}
	}
	if code, _, errOut := run(t, "", "facts", "frobnicate"); code != ExitInvalid || !strings.Contains(errOut, `unknown subcommand "frobnicate"`) {
		t.Errorf("unknown subcommand: exit %d, %q", code, errOut)
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := run(t, "", "version")
	if code != ExitOK || !strings.HasPrefix(out, "promptops "+Version()) || !strings.Contains(out, "go1.") {
		t.Fatalf("version: exit %d, %q", code, out)
	}
	defer func(v string) { version = v }(version)
	version = "1.2.3"
	if _, out, _ := run(t, "", "version"); !strings.HasPrefix(out, "promptops 1.2.3") {
		t.Fatalf("link-time version not used: %q", out)
	}
}

func TestBuildInfoMetric(t *testing.T) {
	registerBuildInfo()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "promptops_build_info" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "version" && l.GetValue() == Version() && m.GetGauge().GetValue() == 1 {
					return
				}
			}
		}
	}
	t.Fatalf("no promptops_build_info{version=%q} 1", Version())
}
