package serve

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
)

// A FIFO named plan.json neither blocks the poller nor stops the other
// plans from reloading: it is reported once, in the log and in
// promptops_serve_plan_load_errors_total, while the plan beside it keeps
// reloading.
func TestFIFOPlanDoesNotHangReload(t *testing.T) {
	root := t.TempDir()
	good := filepath.Join(root, "default", "ssa-pro", PlanFile) // the layout names the template
	fifo := filepath.Join(root, "default", "fifo", PlanFile)
	for _, d := range []string{filepath.Dir(good), filepath.Dir(fifo)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	v1 := fixture(t, "ssa-pro")
	writeAtomic(t, good, v1)
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}

	var (
		mu  sync.Mutex
		log bytes.Buffer
	)
	s := New(Options{Log: funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		log.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{})})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.WatchDir(ctx, root, 5*time.Millisecond) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // a guard, not a measurement: today it never returns
		t.Fatal("the first read of a directory holding a FIFO never returned")
	}
	k := Key{"default", "ssa-pro"}
	first := s.Snapshot().Plan(k)
	if first == nil {
		t.Fatal("the regular plan beside the FIFO did not load")
	}

	// The good plan changes; the poller must still be running to see it.
	writeAtomic(t, good, secondVersion(t, v1))
	for p := s.Snapshot().Plan(k); p == nil || p.Revision == first.Revision; p = s.Snapshot().Plan(k) {
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
	if got := testutilValue(s.metrics.loadErrors); got != 1 {
		t.Fatalf("load errors %v, want 1 (the FIFO, reported once)", got)
	}
	mu.Lock()
	logged := log.String()
	mu.Unlock()
	// The log names the source and why it could not be read.
	if !strings.Contains(logged, fifo) || !strings.Contains(logged, "does not load") || !strings.Contains(logged, "not a regular file") {
		t.Fatalf("the FIFO is not reported in the log:\n%s", logged)
	}
}

func writeAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestReadRegularFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	os.WriteFile(small, []byte("{}"), 0o644)
	if data, err := readRegularFile(small, 2); err != nil || string(data) != "{}" {
		t.Fatalf("got %q, %v", data, err)
	}
	big := filepath.Join(dir, "big")
	os.WriteFile(big, make([]byte, 3), 0o644)
	if _, err := readRegularFile(big, 2); err == nil || !strings.Contains(err.Error(), "larger than 2 bytes") {
		t.Fatalf("a file over the limit: %v", err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink("small", link) // a ConfigMap mount's plan.json is a link
	if data, err := readRegularFile(link, 2); err != nil || string(data) != "{}" {
		t.Fatalf("through a link: %q, %v", data, err)
	}
	for _, p := range []string{dir, "/dev/zero"} {
		if _, err := readRegularFile(p, 2); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("%s: %v", p, err)
		}
	}
}
