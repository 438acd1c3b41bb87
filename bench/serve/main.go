// Command serve measures `promptops serve` over loopback: it renders the
// six-intent Chinese sample with `promptops render --out-dir`, starts the
// built binary as `promptops serve`, and drives POST /v1/assemble from N
// keep-alive clients with 8 KB of runtime content (no cut) and 64 KB (cut to
// the budget), reporting requests/second and p50/p99 latency; then the same
// requests by forking `promptops assemble`, for comparison. With -hostile N
// it also sends, one at a time, N requests whose one runtime value is 4 MiB
// of one repeated character (and 4 MiB of ordinary text, the anchor), and
// reports the server's CPU time per request (from /proc).
//
//	go build -o bin/promptops . && go run ./bench/serve
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/promptops/promptops/bench/internal/loopback"
)

func main() {
	bin := flag.String("bin", "bin/promptops", "The promptops binary.")
	clients := flag.String("clients", "1,2,8", "Concurrent keep-alive clients: a comma-separated list, each a run of every scenario.")
	duration := flag.Duration("duration", 5*time.Second, "How long each server scenario runs.")
	forks := flag.Int("forks", 20, "Runs of `promptops assemble` per scenario.")
	root := flag.String("root", ".", "The repository root (for config/samples).")
	hostile := flag.Int("hostile", 0, "Requests per kind of 4 MiB hostile runtime value, sent one at a time; 0 for none.")
	flag.Parse()
	if err := run(os.Stdout, *root, *bin, *clients, *duration, *forks, *hostile); err != nil {
		fmt.Fprintln(os.Stderr, "bench/serve:", err)
		os.Exit(1)
	}
}

// Sections of the sample that the application fills.
var runtimeSections = []string{"data_context", "variable_dictionary", "tool_outputs"}

// content is about size bytes of statistics output in Chinese, in lines,
// spread over the runtime sections; salt makes it new per request.
func content(size int, salt string) map[string]string {
	line := "变量 %d：描述性统计，均值 45.2，标准差 12.8，四分位数 33/44/57，缺失 0。\n"
	out := map[string]string{}
	per := size / len(runtimeSections)
	for i, name := range runtimeSections {
		var b strings.Builder
		b.WriteString(salt)
		for n := 0; b.Len() < per; n++ {
			fmt.Fprintf(&b, line, i*1000+n)
		}
		out[name] = b.String()
	}
	return out
}

type scenario struct {
	name    string
	size    int
	unique  bool // new content per request: nothing comes from the count cache
	wantCut bool
}

func run(w io.Writer, root, bin string, clientList string, duration time.Duration, forks, hostile int) error {
	var counts []int
	for _, f := range strings.Split(clientList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("bad -clients %q", clientList)
		}
		counts = append(counts, n)
	}
	work, err := os.MkdirTemp("", "promptops-bench-serve-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	plans := filepath.Join(work, "plans")
	render := exec.Command(bin, "render", "-f", filepath.Join(root, "config/samples/promptops_v1_prompttemplate_ssa.yaml"), "-f", filepath.Join(root, "config/samples/ssa-prompts-configmap.yaml"), "--out-dir", plans)
	if out, err := render.CombinedOutput(); err != nil {
		return fmt.Errorf("render: %v\n%s", err, out)
	}
	planFile := filepath.Join(plans, "default", "ssa-pro", "plan.json")

	addr, err := loopback.FreeAddr()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Bodies of a 4 MiB value and its JSON envelope: the hostile requests.
	srv := exec.CommandContext(ctx, bin, "serve", "--plans-dir", plans, "--listen", addr, "--max-body-bytes", strconv.Itoa(hostileBytes+64<<10))
	srv.Env = append(os.Environ(), "PROMPTOPS_MEMORY_LIMIT=134217728") // as in the sidecar sample (128Mi)
	var srvLog bytes.Buffer
	srv.Stderr = &srvLog
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() { _ = srv.Process.Signal(os.Interrupt); _ = srv.Wait() }()
	base := "http://" + addr
	if err := loopback.WaitReady(base+"/readyz", 30*time.Second); err != nil {
		return fmt.Errorf("%w\n%s", err, srvLog.String())
	}

	fmt.Fprintf(w, "promptops serve, six-intent Chinese sample (o200k_base, budget 4000), intent analyze, %s per scenario, %d cores\n\n", duration, runtime.NumCPU())
	fmt.Fprintf(w, "%-34s %7s %10s %10s %10s %8s\n", "scenario", "clients", "req/s", "p50", "p99", "tokens")
	for _, clients := range counts {
		for _, sc := range []scenario{
			{"8 KB, no cut, same content", 8 << 10, false, false},
			{"8 KB, no cut, new content", 8 << 10, true, false},
			{"64 KB, cut, same content", 64 << 10, false, true},
			{"64 KB, cut, new content", 64 << 10, true, true},
		} {
			r, err := load(base, sc, clients, duration)
			if err != nil {
				return fmt.Errorf("%s: %w", sc.name, err)
			}
			fmt.Fprintf(w, "%-34s %7d %10.0f %10s %10s %8d\n", sc.name, clients, r.rps, r.p50, r.p99, r.tokens)
		}
	}
	if hostile > 0 {
		fmt.Fprintf(w, "\n4 MiB runtime values, one request at a time, %d each: the server's CPU time per request\n\n", hostile)
		fmt.Fprintf(w, "%-34s %10s %10s %8s\n", "value", "cpu/req", "max wall", "tokens")
		for _, hc := range hostileCases {
			r, err := hostileRun(base, srv.Process.Pid, hc.value, hostile)
			if err != nil {
				return fmt.Errorf("hostile %s: %w", hc.name, err)
			}
			fmt.Fprintf(w, "%-34s %10s %10s %8d\n", hc.name, r.p50, r.p99, r.tokens)
		}
	}
	if forks <= 0 {
		return nil
	}
	fmt.Fprintf(w, "\nforking promptops assemble, sequentially, %d runs each\n\n", forks)
	for _, sc := range []scenario{{"8 KB, no cut", 8 << 10, true, false}, {"64 KB, cut", 64 << 10, true, true}} {
		r, err := fork(bin, planFile, sc, forks)
		if err != nil {
			return fmt.Errorf("fork %s: %w", sc.name, err)
		}
		fmt.Fprintf(w, "%-34s %7d %10.1f %10s %10s\n", sc.name, 1, r.rps, r.p50, r.p99)
	}
	return nil
}

type result struct {
	rps      float64
	p50, p99 time.Duration
	tokens   int
}

func summarize(lat []time.Duration, elapsed time.Duration) result {
	slices.Sort(lat)
	q := func(f float64) time.Duration {
		return lat[min(len(lat)-1, int(f*float64(len(lat))))].Round(10 * time.Microsecond)
	}
	return result{rps: float64(len(lat)) / elapsed.Seconds(), p50: q(0.50), p99: q(0.99)}
}

func body(sc scenario, salt string) []byte {
	b, _ := json.Marshal(map[string]any{"namespace": "default", "name": "ssa-pro", "intent": "analyze", "runtime": content(sc.size, salt)})
	return b
}

var (
	tokensRE = regexp.MustCompile(`"tokens":(\d+)`)
	cutRE    = regexp.MustCompile(`"truncatedTokens":[1-9]`)
)

// check looks at the answer without decoding the prompt, so that the load
// generator leaves the cores to the server.
func check(sc scenario, status int, data []byte) (int, error) {
	m := tokensRE.FindSubmatch(data)
	if status != 200 || m == nil || !bytes.Contains(data, []byte(`"withinBudget":true`)) {
		return 0, fmt.Errorf("status %d: %.200s", status, data)
	}
	if cut := cutRE.Match(data); cut != sc.wantCut {
		return 0, fmt.Errorf("cut %v, want %v", cut, sc.wantCut)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n, nil
}

func load(base string, sc scenario, clients int, duration time.Duration) (result, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: clients, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	same := body(sc, "")
	// Bodies are built before the clock starts; new content gets a salt.
	var bodies [][]byte
	if sc.unique {
		for i := 0; i < 2000; i++ {
			bodies = append(bodies, body(sc, fmt.Sprintf("请求 %d\n", i)))
		}
	}
	var (
		mu     sync.Mutex
		all    []time.Duration
		first  error
		tokens int
		wg     sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(duration)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			var lat []time.Duration
			for i := c; time.Now().Before(deadline); i += clients {
				b := same
				if sc.unique {
					b = bodies[i%len(bodies)]
				}
				t0 := time.Now()
				resp, err := hc.Post(base+"/v1/assemble", "application/json", bytes.NewReader(b))
				if err != nil {
					mu.Lock()
					first = errors.Join(first, err)
					mu.Unlock()
					return
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(t0))
				n, err := check(sc, resp.StatusCode, data)
				if err != nil {
					mu.Lock()
					first = errors.Join(first, err)
					mu.Unlock()
					return
				}
				mu.Lock()
				tokens = n
				mu.Unlock()
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		}(c)
	}
	wg.Wait()
	if first != nil {
		return result{}, first
	}
	r := summarize(all, time.Since(start))
	r.tokens = tokens
	return r, nil
}

func fork(bin, planFile string, sc scenario, n int) (result, error) {
	var lat []time.Duration
	start := time.Now()
	for i := 0; i < n; i++ {
		in, _ := json.Marshal(content(sc.size, fmt.Sprintf("请求 %d\n", i)))
		t0 := time.Now()
		cmd := exec.Command(bin, "assemble", "--plan", planFile, "--intent", "analyze")
		cmd.Stdin = bytes.NewReader(in)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		if err := cmd.Run(); err != nil {
			return result{}, fmt.Errorf("%v: %s", err, stderr.String())
		}
		lat = append(lat, time.Since(t0))
		if cut := !strings.Contains(stderr.String(), "nothing cut"); cut != sc.wantCut {
			return result{}, fmt.Errorf("cut %v, want %v: %s", cut, sc.wantCut, stderr.String())
		}
	}
	return summarize(lat, time.Since(start)), nil
}

// hostileBytes is the size of a hostile runtime value.
const hostileBytes = 4 << 20

// hostileCases are the values of -hostile: one character repeated, and
// ordinary text of the same size as the anchor.
var hostileCases = []struct {
	name  string
	value func(salt int) string
}{
	{"ordinary text (anchor)", func(salt int) string {
		return fmt.Sprintf("%d ", salt) + strings.Join(slices.Collect(func(yield func(string) bool) {
			for _, v := range content(hostileBytes, "") {
				if !yield(v) {
					return
				}
			}
		}), "")
	}},
	{"'!'", repeated("!")},
	{"space", repeated(" ")},
	{"'a'", repeated("a")},
	{"'7'", repeated("7")},
	{"'中'", repeated("中")},
	{"emoji", repeated("😀")},
}

// repeated fills a value with c; salt changes its first character, so that
// no answer comes from the count cache.
func repeated(c string) func(salt int) string {
	return func(salt int) string {
		body := strings.Repeat(c, hostileBytes/len(c))
		return string(rune('A'+salt%26)) + body[1:]
	}
}

// hostileRun sends n requests whose tool_outputs is value(i), one at a
// time, and reports the server's CPU time per request (its total over the
// requests, whose bodies are built before, divided by n) as p50, and the
// wall time of the slowest request as p99.
func hostileRun(base string, pid int, value func(int) string, n int) (result, error) {
	hc := &http.Client{Timeout: 5 * time.Minute}
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i], _ = json.Marshal(map[string]any{"namespace": "default", "name": "ssa-pro", "intent": "analyze", "runtime": map[string]string{"tool_outputs": value(i)}})
	}
	before, err := loopback.ProcCPU(pid)
	if err != nil {
		return result{}, err
	}
	var r result
	for _, b := range bodies {
		t0 := time.Now()
		resp, err := hc.Post(base+"/v1/assemble", "application/json", bytes.NewReader(b))
		if err != nil {
			return result{}, err
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return result{}, fmt.Errorf("status %d: %.200s", resp.StatusCode, data)
		}
		if m := tokensRE.FindSubmatch(data); m != nil {
			r.tokens, _ = strconv.Atoi(string(m[1]))
		}
		r.p99 = max(r.p99, time.Since(t0).Round(100*time.Microsecond))
	}
	after, err := loopback.ProcCPU(pid)
	if err != nil {
		return result{}, err
	}
	r.p50 = ((after - before) / time.Duration(n)).Round(100 * time.Microsecond)
	return r, nil
}
