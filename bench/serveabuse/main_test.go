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

// The abuse generator runs end to end against the built binary, briefly and
// small (the figures come from a full run: see the README).
func TestAbuseRuns(t *testing.T) {
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
	c := config{bin: bin, root: testenv.Root(), duration: 300 * time.Millisecond, slow: 2, hostile: 1, clients: 1, bodyBytes: 64 << 10, memoryLimit: "134217728"}
	if err := run(&out, c); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"RssAnon: idle", "server alive: true", "ordinary: ", "× 200"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
