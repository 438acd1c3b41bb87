package testenv

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PreviousChart extracts the chart as it was before the last change of the
// CRDs (the last commit's, or the working tree's when it changes them), so
// that the upgrade carries new fields, and returns its directory and the
// commit. It needs the repository's history: in a shallow clone the test
// is skipped, saying so.
func PreviousChart(t testing.TB) (string, string) {
	git := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", Root()}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %s: %v: %s (the test needs the repository's history)", strings.Join(args, " "), err, stderr.String())
		}
		return out
	}
	// A shallow clone has not the commit before: said, not failed.
	if strings.TrimSpace(string(git("rev-parse", "--is-shallow-repository"))) == "true" {
		t.Skip("the repository is a shallow clone: the previous chart is not in it (clone without --depth)")
	}
	last := strings.TrimSpace(string(git("log", "-n", "1", "--format=%H", "--", "config/crd/bases")))
	if last == "" {
		t.Fatal("no commit changed config/crd/bases (a shallow clone? the test needs the history)")
	}
	rev := last + "^"
	if len(git("status", "--porcelain", "--", "config/crd/bases")) > 0 {
		rev = last
	}
	rev = strings.TrimSpace(string(git("rev-parse", rev)))
	dir := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(git("archive", "--format=tar", rev, "charts/promptops")))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		dst := filepath.Join(dir, filepath.FromSlash(h.Name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "charts", "promptops"), rev[:min(12, len(rev))]
}
