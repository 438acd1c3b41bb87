package cli

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestServeFlags(t *testing.T) {
	for _, args := range [][]string{
		{"serve"},
		{"serve", "--plans-dir", "x", "--watch"},
		{"serve", "--plans-dir", "x", "--namespace", "ns"},
		{"serve", "--plans-dir", "x", "--max-inflight-bytes", "1048576"},
		{"serve", "--plans-dir", "x", "--max-facts-per-request", "0"},
		{"serve", "--plans-dir", "x", "--max-messages-per-request", "0"},
		{"serve", "--plans-dir", "x", "--max-messages-per-request", "-3"},
	} {
		if code, _, _ := run(t, "", args...); code != ExitInvalid {
			t.Errorf("%v: exit %d, want %d", args, code, ExitInvalid)
		}
	}
	if code, _, e := run(t, "", "serve", "--plans-dir", "x", "--max-messages-per-request", "0"); !strings.Contains(e, "--max-messages-per-request and --max-retain-bytes positive") {
		t.Errorf("--max-messages-per-request 0: exit %d %s", code, e)
	}
	if _, e, _ := run(t, "", "serve", "-h"); !strings.Contains(e, "-max-messages-per-request int") || !strings.Contains(e, "POST .../messages may carry; more get 413. (default 1000)") || !strings.Contains(e, "POST /v1/banks/NS/NAME/messages") {
		t.Errorf("serve -h does not show --max-messages-per-request: %s", e)
	}
	if code, _, e := run(t, "", "serve", "--plans-dir", filepath.Join(t.TempDir(), "missing")); code != ExitInvalid || !strings.Contains(e, "missing") {
		t.Errorf("a missing plans dir: exit %d %s", code, e)
	}
	// Without authentication, only on loopback: refused before anything is
	// read or listened on.
	for _, listen := range []string{":8089", "0.0.0.0:8089", "10.1.2.3:8089", "[::]:8089"} {
		if code, _, e := run(t, "", "serve", "--plans-dir", t.TempDir(), "--listen", listen); code != ExitInvalid || !strings.Contains(e, "--auth=none") || !strings.Contains(e, "--auth=kubernetes") {
			t.Errorf("--auth=none on %s: exit %d %s", listen, code, e)
		}
	}
	for _, args := range [][]string{
		{"serve", "--plans-dir", "x", "--auth", "basic"},
		{"serve", "--watch", "--namespace", "a,Not_A_Namespace"},
	} {
		if code, _, _ := run(t, "", args...); code != ExitInvalid {
			t.Errorf("%v: exit %d, want %d", args, code, ExitInvalid)
		}
	}
}

func TestServeAddresses(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8089": true, "localhost:0": true, "[::1]:8089": true, "127.1.2.3:1": true,
		":8089": false, "0.0.0.0:8089": false, "[::]:1": false, "10.0.0.1:8089": false, "example.com:80": false, "nonsense": false,
	} {
		if got := loopback(addr); got != want {
			t.Errorf("loopback(%q) = %v", addr, got)
		}
	}
	got, err := splitNamespaces("team-a, team-b,team-a")
	if err != nil || !slices.Equal(got, []string{"team-a", "team-b"}) {
		t.Errorf("splitNamespaces: %q %v", got, err)
	}
}

// The verb end to end: render --out-dir output served, then SIGTERM stops it
// cleanly (exit 0).
func TestServeRenderOutputAndShutdown(t *testing.T) {
	out := t.TempDir()
	if code, _, e := run(t, "", "render", "-f", filepath.Join(samplesDir(), "promptops_v1_prompttemplate_ssa.yaml"), "-f", filepath.Join(samplesDir(), "ssa-prompts-configmap.yaml"), "--out-dir", out); code != ExitOK {
		t.Fatalf("render: %d %s", code, e)
	}
	addrs := make(chan string, 1)
	serveReady = func(addr string) { addrs <- addr }
	defer func() { serveReady = nil }()
	var stderr bytes.Buffer
	var mu sync.Mutex
	done := make(chan int, 1)
	go func() {
		code := Main([]string{"serve", "--plans-dir", out, "--listen", "127.0.0.1:0"}, strings.NewReader(""), io.Discard, &lockedWriter{&mu, &stderr})
		done <- code
	}()
	var addr string
	select {
	case addr = <-addrs:
	case code := <-done:
		t.Fatalf("serve exited %d: %s", code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start")
	}
	secret := "数据概览：机密数据 7a3f"
	resp, err := http.Post("http://"+addr+"/v1/assemble", "application/json", strings.NewReader(`{"namespace":"default","name":"ssa-pro","intent":"analyze","runtime":{"data_context":"`+secret+`"}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte(secret)) {
		t.Fatalf("%d %.300s", resp.StatusCode, body)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		mu.Lock()
		defer mu.Unlock()
		if code != ExitOK || !strings.Contains(stderr.String(), "Shutting down") {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		if strings.Contains(stderr.String(), "7a3f") {
			t.Fatal("runtime content reached the log")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop on SIGTERM")
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// The server's test fixtures are the samples as render writes them today.
func TestServeFixturesAreCurrent(t *testing.T) {
	out := t.TempDir()
	if code, _, e := run(t, "", "render", "-f", samplesDir(), "--out-dir", out); code == ExitInvalid {
		t.Fatalf("render: %s", e)
	}
	for _, name := range []string{"ssa-pro", "support-assistant"} {
		want, err := os.ReadFile(filepath.Join(out, "default", name, "plan.json"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join("..", "serve", "testdata", name+".plan.json"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("internal/serve/testdata/%s.plan.json is stale: copy %s/default/%s/plan.json there", name, "render --out-dir", name)
		}
	}
}

// serve's memory limit: GOMEMLIMIT when set, else the container's limit
// from the downward API's env or the cgroup less 80 MiB (a fifth of it
// when more, half at most), else none.
func TestServeMemoryLimit(t *testing.T) {
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(name string) ([]byte, error) {
			if v, ok := m[name]; ok {
				return []byte(v), nil
			}
			return nil, os.ErrNotExist
		}
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	v2, v1 := "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"
	for _, c := range []struct {
		env   map[string]string
		files map[string]string
		limit int64
		from  string
	}{
		{map[string]string{"PROMPTOPS_MEMORY_LIMIT": "134217728"}, map[string]string{v2: "268435456\n"}, 64 << 20, "PROMPTOPS_MEMORY_LIMIT"},
		{nil, map[string]string{v2: "268435456\n"}, 160 << 20, v2},
		{nil, map[string]string{v2: "max\n", v1: "1073741824\n"}, 1<<30 - 1<<30/5, v1},
		{nil, map[string]string{v1: "9223372036854771712\n"}, 0, ""},
		{map[string]string{"PROMPTOPS_MEMORY_LIMIT": "128Mi"}, nil, 0, ""},
		{nil, nil, 0, ""},
	} {
		limit, from := memoryLimit(env(c.env), files(c.files))
		if limit != c.limit || from != c.from {
			t.Errorf("%v %v: %d from %q, want %d from %q", c.env, c.files, limit, from, c.limit, c.from)
		}
	}
	if _, from := memoryLimit(env(map[string]string{"GOMEMLIMIT": "100MiB", "PROMPTOPS_MEMORY_LIMIT": "1"}), files(nil)); from != "GOMEMLIMIT" {
		t.Errorf("GOMEMLIMIT set: from %q", from)
	}
}

// serve --bank alone: ready without plans, retains and recalls, and writes
// neither facts nor queries to the log.
func TestServeBankAlone(t *testing.T) {
	if code, _, e := run(t, "", "serve", "--bank", "team-a/support"); code != ExitInvalid || !strings.Contains(e, "--store") {
		t.Errorf("--bank without a store: exit %d %s", code, e)
	}
	addrs := make(chan string, 1)
	serveReady = func(addr string) { addrs <- addr }
	defer func() { serveReady = nil }()
	var stderr bytes.Buffer
	var mu sync.Mutex
	done := make(chan int, 1)
	store := "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
	go func() {
		done <- Main([]string{"serve", "--bank", "team-a/support", "--store", store, "--listen", "127.0.0.1:0", "--max-messages-per-request", "2"}, strings.NewReader(""), io.Discard, &lockedWriter{&mu, &stderr})
	}()
	var addr string
	select {
	case addr = <-addrs:
	case code := <-done:
		t.Fatalf("serve exited %d: %s", code, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not start")
	}
	post := func(path, body string) (int, string) {
		t.Helper()
		resp, err := http.Post("http://"+addr+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	if resp, err := http.Get("http://" + addr + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz: %v %v", resp, err)
	}
	if code, body := post("/v1/banks/team-a/support/facts", `{"facts": [{"text": "Alice keeps the vault code 7a3f"}]}`); code != http.StatusOK || !strings.Contains(body, `"stored":1`) {
		t.Fatalf("retain: %d %s", code, body)
	}
	// --max-messages-per-request reaches the bank API.
	msg := `{"role": "user", "content": "hello", "at": "2026-03-01T09:00:00Z"}`
	if code, body := post("/v1/banks/team-a/support/messages", `{"conversation": "c1", "messages": [`+msg+`, `+msg+`]}`); code != http.StatusOK || !strings.Contains(body, `"stored":1`) {
		t.Fatalf("two messages: %d %s", code, body)
	}
	if code, body := post("/v1/banks/team-a/support/messages", `{"conversation": "c1", "messages": [`+msg+`, `+msg+`, `+msg+`]}`); code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "messages: 3 items, at most 2 per request (--max-messages-per-request)") {
		t.Fatalf("three messages: %d %s", code, body)
	}
	if code, body := post("/v1/banks/team-a/support/recall", `{"query": "vault code 7a3f", "maxTokens": 100, "includePending": true}`); code != http.StatusOK || !strings.Contains(body, `"kind":"fact"`) {
		t.Fatalf("recall: %d %s", code, body)
	}
	if code, body := post("/v1/assemble", `{"namespace":"default","name":"ssa-pro","intent":"analyze"}`); code != http.StatusNotFound {
		t.Fatalf("assemble without plans: %d %s", code, body)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		mu.Lock()
		defer mu.Unlock()
		if code != ExitOK || strings.Contains(stderr.String(), "7a3f") || strings.Contains(stderr.String(), "vault") {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop on SIGTERM")
	}
}
