package cli

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/promptops/promptops/plan"
)

// serveProcs runs `promptops serve` in the test's process, as many as a
// test needs (a bank's memory server and the plans' server that asks it,
// say), each on a free loopback port; one SIGTERM stops them all.
type serveProcs struct {
	t       *testing.T
	addrs   chan string
	done    chan int
	mu      sync.Mutex
	logs    strings.Builder
	running int
}

// newServes is ready to start serves; the test's cleanup stops those
// still running.
func newServes(t *testing.T) *serveProcs {
	t.Helper()
	s := &serveProcs{t: t, addrs: make(chan string, 8), done: make(chan int, 8)}
	serveReady = func(addr string) { s.addrs <- addr }
	t.Cleanup(func() {
		s.stop()
		serveReady = nil
	})
	return s
}

// start starts `serve --listen 127.0.0.1:0` with args and returns its
// address once it listens.
func (s *serveProcs) start(args ...string) string {
	s.t.Helper()
	s.running++
	go func() {
		s.done <- Main(append([]string{"serve", "--listen", "127.0.0.1:0"}, args...), strings.NewReader(""), io.Discard, &lockedWriter{&s.mu, &s.logs})
	}()
	select {
	case a := <-s.addrs:
		return a
	case <-time.After(60 * time.Second):
		s.t.Fatalf("serve did not start: %s", s.logged())
	}
	return ""
}

// stop ends every serve started and not stopped yet, with SIGTERM.
func (s *serveProcs) stop() {
	s.t.Helper()
	if s.running == 0 {
		return
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		s.t.Fatal(err)
	}
	for ; s.running > 0; s.running-- {
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			s.t.Fatal("serve did not stop on SIGTERM")
		}
	}
}

// logged is what the serves logged.
func (s *serveProcs) logged() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// renderPlans renders a PromptTemplate's YAML as `render --out-dir` does
// into dir/plans, and points its memory sections at the bank served at
// bankAddr (host:port, over HTTP; or a URL), as the operator writes a
// served bank's endpoint; it returns
// the plans' directory (for serve --plans-dir) and the plan.
func renderPlans(t *testing.T, dir, template, bankAddr string) (string, *plan.Plan) {
	t.Helper()
	tmpl := filepath.Join(dir, "template.yaml")
	if err := os.WriteFile(tmpl, []byte(template), 0o644); err != nil {
		t.Fatal(err)
	}
	plans := filepath.Join(dir, "plans")
	if code, _, e := run(t, "", "render", "-f", tmpl, "--out-dir", plans); code != ExitOK {
		t.Fatalf("render: %d %s", code, e)
	}
	files, err := filepath.Glob(filepath.Join(plans, "*", "*", "plan.json"))
	if err != nil || len(files) != 1 {
		t.Fatalf("render wrote %v (%v), want one plan", files, err)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := bankAddr
	if !strings.Contains(endpoint, "://") {
		endpoint = "http://" + bankAddr
	}
	for i := range p.Sections {
		if p.Sections[i].Memory != nil {
			p.Sections[i].Memory.Endpoint = endpoint
		}
	}
	p.Revision = p.Digest()
	data, _ = json.Marshal(p)
	if err := os.WriteFile(files[0], data, 0o644); err != nil {
		t.Fatal(err)
	}
	return plans, p
}
