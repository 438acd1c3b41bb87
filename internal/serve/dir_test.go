package serve

import (
	"os"
	"path/filepath"
	"testing"
)

// readDir finds plans in render --out-dir output and in a tree of mounted
// ConfigMaps, once each, skipping the kubelet's ..data and ..<timestamp>.
func TestReadDirLayouts(t *testing.T) {
	root := t.TempDir()
	ssa := fixture(t, "ssa-pro")
	// render --out-dir: DIR/<ns>/<name>/plan.json
	if err := os.MkdirAll(filepath.Join(root, "default", "ssa-pro"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "default", "ssa-pro", "plan.json"), ssa, 0o644)
	// a mounted ConfigMap below it
	kd := &kubeletDir{t: t, dir: filepath.Join(root, "mounts", "support")}
	os.MkdirAll(kd.dir, 0o755)
	kd.swap(map[string][]byte{"plan.json": fixture(t, "support-assistant")})
	got, err := readDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[filepath.Join(kd.dir, "plan.json")] == nil || got[filepath.Join(root, "default", "ssa-pro", "plan.json")] == nil {
		t.Fatalf("found %d plans: %v", len(got), keys(got))
	}
	if _, err := readDir(filepath.Join(root, "missing")); err == nil {
		t.Fatal("a missing directory is an error")
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
