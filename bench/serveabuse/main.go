// Command serveabuse measures what abusive clients cost `promptops serve`
// in memory, over loopback only: it renders the six-intent Chinese sample,
// starts the built binary with the memory environment of the sidecar sample
// (a 128Mi limit), and for a bounded time, all at once,
//
//   - holds -slow connections that send the headers of a POST with a
//     4 MiB Content-Length and then nothing (reopened when the server
//     closes one);
//   - sends -hostile concurrent requests whose runtime value is one
//     character repeated to fill -body-bytes (after a short prefix, new
//     each time, so that no count is cached);
//   - runs -clients ordinary 8 KB requests in a loop.
//
// It samples the server's RssAnon from /proc/PID/status every 10 ms and
// prints the peak, with the ordinary requests' successes and p50/p99.
//
//	go build -o bin/promptops . && go run ./bench/serveabuse -bin bin/promptops
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/promptops/promptops/bench/internal/loopback"
	"github.com/promptops/promptops/bench/internal/proc"
)

type config struct {
	bin, root   string
	duration    time.Duration
	drain       time.Duration
	slow        int
	hostile     int
	clients     int
	bodyBytes   int
	memoryLimit string // PROMPTOPS_MEMORY_LIMIT, as the samples set it from limits.memory
	goMemLimit  string // GOMEMLIMIT, when set
	extraArgs   []string
}

func main() {
	var c config
	var extra string
	flag.StringVar(&c.bin, "bin", "bin/promptops", "The promptops binary.")
	flag.StringVar(&c.root, "root", ".", "The repository root (for config/samples).")
	flag.DurationVar(&c.duration, "duration", 20*time.Second, "How long the abuse and the ordinary requests run.")
	flag.DurationVar(&c.drain, "drain", 5*time.Second, "How long RssAnon is still sampled after the clients stop (work the server goes on with).")
	flag.IntVar(&c.slow, "slow", 100, "Connections that send a 4 MiB Content-Length and then nothing.")
	flag.IntVar(&c.hostile, "hostile", 8, "Concurrent hostile requests (one character repeated to fill the body).")
	flag.IntVar(&c.clients, "clients", 2, "Concurrent clients of ordinary 8 KB requests.")
	flag.IntVar(&c.bodyBytes, "body-bytes", 4<<20, "Size of the slow connections' Content-Length and of a hostile body.")
	flag.StringVar(&c.memoryLimit, "memory-limit", "134217728", "PROMPTOPS_MEMORY_LIMIT for the server (bytes; the sidecar sample's limits.memory, 128Mi); empty to leave it unset.")
	flag.StringVar(&c.goMemLimit, "gomemlimit", "", "GOMEMLIMIT for the server; empty to leave it unset.")
	flag.StringVar(&extra, "args", "", "Extra arguments for promptops serve, space-separated.")
	flag.Parse()
	c.extraArgs = strings.Fields(extra)
	if err := run(os.Stdout, c); err != nil {
		fmt.Fprintln(os.Stderr, "bench/serveabuse:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, c config) error {
	work, err := os.MkdirTemp("", "promptops-bench-serveabuse-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	plans := filepath.Join(work, "plans")
	render := exec.Command(c.bin, "render", "-f", filepath.Join(c.root, "config/samples/promptops_v1_prompttemplate_ssa.yaml"), "-f", filepath.Join(c.root, "config/samples/ssa-prompts-configmap.yaml"), "--out-dir", plans)
	if out, err := render.CombinedOutput(); err != nil {
		return fmt.Errorf("render: %v\n%s", err, out)
	}
	addr, err := loopback.FreeAddr()
	if err != nil {
		return err
	}
	srv := exec.Command(c.bin, append([]string{"serve", "--plans-dir", plans, "--listen", addr}, c.extraArgs...)...)
	srv.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "GOMEMLIMIT=") || strings.HasPrefix(kv, "GOGC=") || strings.HasPrefix(kv, "PROMPTOPS_MEMORY_LIMIT=")
	})
	if c.memoryLimit != "" {
		srv.Env = append(srv.Env, "PROMPTOPS_MEMORY_LIMIT="+c.memoryLimit)
	}
	if c.goMemLimit != "" {
		srv.Env = append(srv.Env, "GOMEMLIMIT="+c.goMemLimit)
	}
	var srvLog lockedBuffer
	srv.Stderr = &srvLog
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	base := "http://" + addr
	if err := loopback.WaitReady(base+"/readyz", 30*time.Second); err != nil {
		return fmt.Errorf("%w\n%s", err, srvLog.String())
	}
	pid := srv.Process.Pid
	idle, _ := proc.Status(pid, "RssAnon")

	var peak atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := proc.Status(pid, "RssAnon"); err == nil && v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), c.duration)
	defer cancel()
	var wg sync.WaitGroup
	var reopened, slowOpen atomic.Int64
	for i := 0; i < c.slow; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				if n > 0 {
					reopened.Add(1)
				}
				slowloris(ctx, addr, c.bodyBytes, &slowOpen)
			}
		}()
	}
	hostile := newCounts()
	for i := 0; i < c.hostile; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			for n := 0; ctx.Err() == nil; n++ {
				// A new prefix each time: the server's count cache must not answer.
				body := hostileBody(c.bodyBytes, fmt.Sprintf("%d-%d ", i, n), "!")
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/assemble", bytes.NewReader(body))
				t0 := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						hostile.add("error", time.Since(t0))
					}
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				hostile.add(strconv.Itoa(resp.StatusCode), time.Since(t0))
				if resp.StatusCode == http.StatusServiceUnavailable {
					wait(ctx, resp.Header.Get("Retry-After"))
				}
			}
		}(i)
	}
	ordinary := newCounts()
	for i := 0; i < c.clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
			for n := 0; ctx.Err() == nil; n++ {
				body := ordinaryBody(8<<10, fmt.Sprintf("请求 %d-%d\n", i, n))
				t0 := time.Now()
				resp, err := hc.Post(base+"/v1/assemble", "application/json", bytes.NewReader(body))
				if err != nil {
					ordinary.add("error", time.Since(t0))
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ordinary.add(strconv.Itoa(resp.StatusCode), time.Since(t0))
			}
		}(i)
	}
	<-ctx.Done()
	duringPeak := peak.Load()
	wg.Wait()
	time.Sleep(c.drain)
	close(stopSampling)
	<-sampled
	hwm, _ := proc.Status(pid, "VmHWM")
	after, _ := proc.Status(pid, "RssAnon")
	alive := srv.ProcessState == nil && srv.Process.Signal(syscall.Signal(0)) == nil

	fmt.Fprintf(w, "promptops serve (%s) %s, PROMPTOPS_MEMORY_LIMIT=%q GOMEMLIMIT=%q\n", c.bin, strings.Join(c.extraArgs, " "), c.memoryLimit, c.goMemLimit)
	fmt.Fprintf(w, "%s of: %d connections sending a %d-byte Content-Length and nothing (%d reopened), %d hostile %d-byte bodies, %d ordinary 8 KB clients\n\n",
		c.duration, c.slow, c.bodyBytes, reopened.Load(), c.hostile, c.bodyBytes, c.clients)
	fmt.Fprintf(w, "RssAnon: idle %s, peak %s during the load, %s including %s after it, %s at the end; VmHWM (anon+file) %s; server alive: %v\n",
		proc.MiB(idle), proc.MiB(duringPeak), proc.MiB(peak.Load()), c.drain, proc.MiB(after), proc.MiB(hwm), alive)
	fmt.Fprintf(w, "ordinary: %s\n", ordinary.summary())
	fmt.Fprintf(w, "hostile:  %s\n", hostile.summary())
	if n := strings.Count(srvLog.String(), "\n"); n > 0 {
		fmt.Fprintf(w, "server log: %d lines\n", n)
	}
	return nil
}

// slowloris opens a connection, sends the headers of a POST with a large
// Content-Length and then nothing, until ctx ends or the server closes it.
func slowloris(ctx context.Context, addr string, contentLength int, open *atomic.Int64) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
		return
	}
	defer conn.Close()
	open.Add(1)
	defer open.Add(-1)
	fmt.Fprintf(conn, "POST /v1/assemble HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", addr, contentLength)
	closed := make(chan struct{})
	go func() { io.Copy(io.Discard, conn); close(closed) }()
	select {
	case <-ctx.Done():
	case <-closed:
	}
}

func hostileBody(size int, prefix, char string) []byte {
	envelope, _ := json.Marshal(map[string]any{"namespace": "default", "name": "ssa-pro", "intent": "analyze", "runtime": map[string]string{"data_context": prefix}})
	value := prefix + strings.Repeat(char, size-len(envelope))
	b, _ := json.Marshal(map[string]any{"namespace": "default", "name": "ssa-pro", "intent": "analyze", "runtime": map[string]string{"data_context": value}})
	return b
}

func ordinaryBody(size int, salt string) []byte {
	line := "变量 %d：描述性统计，均值 45.2，标准差 12.8，四分位数 33/44/57，缺失 0。\n"
	var b strings.Builder
	b.WriteString(salt)
	for n := 0; b.Len() < size; n++ {
		fmt.Fprintf(&b, line, n)
	}
	out, _ := json.Marshal(map[string]any{"namespace": "default", "name": "ssa-pro", "intent": "analyze", "runtime": map[string]string{"data_context": b.String()}})
	return out
}

// wait honours a Retry-After of whole seconds, at most until ctx ends.
func wait(ctx context.Context, retryAfter string) {
	s, err := strconv.Atoi(retryAfter)
	if err != nil || s < 0 {
		s = 1
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(s) * time.Second):
	}
}

type counts struct {
	mu  sync.Mutex
	by  map[string]int
	lat []time.Duration // of 200s
}

func newCounts() *counts { return &counts{by: map[string]int{}} }

func (c *counts) add(code string, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.by[code]++
	if code == "200" {
		c.lat = append(c.lat, d)
	}
}

func (c *counts) summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for _, k := range slices.Sorted(mapKeys(c.by)) {
		parts = append(parts, fmt.Sprintf("%d × %s", c.by[k], k))
	}
	s := strings.Join(parts, ", ")
	if len(parts) == 0 {
		s = "no answer"
	}
	if len(c.lat) > 0 {
		slices.Sort(c.lat)
		q := func(f float64) time.Duration {
			return c.lat[min(len(c.lat)-1, int(f*float64(len(c.lat))))].Round(100 * time.Microsecond)
		}
		s += fmt.Sprintf("; 200s p50 %s, p99 %s, max %s", q(0.5), q(0.99), c.lat[len(c.lat)-1].Round(time.Millisecond))
	}
	return s
}

func mapKeys(m map[string]int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// status reads a "kB" field of /proc/PID/status, in bytes.

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
