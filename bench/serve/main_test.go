package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/testenv"
)

// The load generator runs end to end against the built binary (briefly; the
// figures come from `make bench-serve`).
func TestBenchRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "promptops")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = testenv.Root()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var out bytes.Buffer
	if err := run(&out, testenv.Root(), bin, "1", 100*time.Millisecond, 1, 1); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"8 KB, no cut, new content", "64 KB, cut, new content", "forking promptops assemble", "'中'", "emoji"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
