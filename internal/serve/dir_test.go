package serve

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
)

// readDir finds plans in render --out-dir output and in a tree of mounted
// ConfigMaps, once each, skipping the kubelet's ..data and ..<timestamp>,
// and names each template from its place.
func TestReadDirLayouts(t *testing.T) {
	root := t.TempDir()
	ssa := fixture(t, "ssa-pro")
	// render --out-dir: DIR/<ns>/<name>/plan.json
	if err := os.MkdirAll(filepath.Join(root, "default", "ssa-pro"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "default", "ssa-pro", "plan.json"), ssa, 0o644)
	// a mounted ConfigMap in the same tree
	kd := &kubeletDir{t: t, dir: filepath.Join(root, "default", "support-assistant")}
	os.MkdirAll(kd.dir, 0o755)
	kd.swap(map[string][]byte{"plan.json": fixture(t, "support-assistant")})
	got, err := readDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[filepath.Join(kd.dir, "plan.json")].want != (Key{"default", "support-assistant"}) ||
		got[filepath.Join(root, "default", "ssa-pro", "plan.json")].want != (Key{"default", "ssa-pro"}) {
		t.Fatalf("found %d plans: %v", len(got), got)
	}
	if _, err := readDir(filepath.Join(root, "missing")); err == nil {
		t.Fatal("a missing directory is an error")
	}
}

// The directory's layout names the template; a plan claiming another, one
// outside the layouts and a root plan beside others are refused, counted
// and never served.
func TestDirLayoutNamesTheTemplate(t *testing.T) {
	ssa, support := fixture(t, "ssa-pro"), fixture(t, "support-assistant")
	write := func(root, rel string, data []byte) {
		t.Helper()
		path := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		files   map[string][]byte
		want    []Key
		refused float64
	}{
		{"one mounted ConfigMap names itself", map[string][]byte{"plan.json": ssa}, []Key{{"default", "ssa-pro"}}, 0},
		{"out-dir", map[string][]byte{"default/ssa-pro/plan.json": ssa, "default/support-assistant/plan.json": support}, []Key{{"default", "ssa-pro"}, {"default", "support-assistant"}}, 0},
		{"a claim of another namespace", map[string][]byte{"a-tenant/ssa-pro/plan.json": ssa, "default/support-assistant/plan.json": support}, []Key{{"default", "support-assistant"}}, 1},
		{"a claim of another name", map[string][]byte{"default/support-assistant/plan.json": ssa}, nil, 1},
		{"outside the layouts", map[string][]byte{"mounts/default/ssa-pro/plan.json": ssa, "ssa-pro/plan.json": ssa}, nil, 2},
		{"a root plan beside others", map[string][]byte{"plan.json": ssa, "default/support-assistant/plan.json": support}, []Key{{"default", "support-assistant"}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for rel, data := range tc.files {
				write(root, rel, data)
			}
			s := New(Options{Log: logr.Discard()})
			sources, err := readDir(root)
			if err != nil {
				t.Fatal(err)
			}
			s.loader.load(sources)
			snap := s.Snapshot()
			if snap.Len() != len(tc.want) {
				t.Errorf("serves %v, want %v", snap.keys, tc.want)
			}
			for _, k := range tc.want {
				if snap.Plan(k) == nil {
					t.Errorf("%s not served", k)
				}
			}
			if got := testutilValue(s.metrics.refused); got != tc.refused {
				t.Errorf("refused %v, want %v", got, tc.refused)
			}
		})
	}
}
