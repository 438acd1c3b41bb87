// Command bank measures the bank API of `promptops serve --bank` over
// loopback: it seeds a bank of 10,000 observations with vectors (SQLite
// and PostgreSQL), starts the built binary against it with a scripted
// embeddings server, and drives POST .../recall from 1, 2 and 8 keep-alive
// clients (p50/p99), POST /v1/assemble of a plan with one memory section
// of that bank (query from the request) from as many, and POST .../facts
// in batches of 100 (facts/second). Assemble is measured twice: served by
// the bank's own process (--bank with --plans-dir: recall in-process) and
// by a second process with --plans-dir only (recall over HTTP, as a
// sidecar calls a served bank).
//
// -modes scoped (scoped.go) measures a bank of scopes instead: recall
// within a scope of 10,000 (10 observations each), consolidation of 2,000
// facts over 500 scopes in this process with a scripted LLM, and the
// erasure of one scope.
//
//	go build -o bin/promptops . && go run ./bench/bank
//	go run ./bench/bank -modes scoped -duration 5s
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/promptops/promptops/bench/internal/loopback"
	"github.com/promptops/promptops/bench/internal/proc"
	"github.com/promptops/promptops/internal/assembler"
	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/sqlstore"
	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/pgtest"
	"github.com/promptops/promptops/internal/promptfit"
	"github.com/promptops/promptops/plan"
)

const bank = "bench/memory"

func main() {
	bin := flag.String("bin", "bin/promptops", "The promptops binary.")
	stores := flag.String("stores", "sqlite,postgres", "Stores to measure, comma-separated.")
	modes := flag.String("modes", "recall,assemble,retain", "What to drive, comma-separated: recall, assemble, retain, scoped (a bank of scopes of its own: scoped recall, consolidation, erasure).")
	clients := flag.String("clients", "1,2,8", "Concurrent keep-alive clients of recall, comma-separated.")
	retainClients := flag.Int("retain-clients", 4, "Concurrent clients posting facts.")
	n := flag.Int("observations", 10000, "Observations seeded.")
	dims := flag.Int("dims", 1536, "Dimensions of the scripted embeddings.")
	duration := flag.Duration("duration", 5*time.Second, "How long each scenario runs.")
	sc := scopedConfig{}
	flag.IntVar(&sc.scopes, "scopes", 10000, "scoped: scopes served.")
	flag.IntVar(&sc.perScope, "per-scope", 10, "scoped: observations of each scope served.")
	flag.IntVar(&sc.clients, "scoped-clients", 8, "scoped: concurrent keep-alive clients of scoped recall.")
	flag.IntVar(&sc.hot, "hot-scopes", 100, "scoped: scopes of the second timed recall, the hot ones (0: none).")
	flag.IntVar(&sc.erasures, "erasures", 200, "scoped: scopes erased, one after another.")
	flag.IntVar(&sc.consFacts, "consolidate-facts", 2000, "scoped: pending facts consolidated.")
	flag.IntVar(&sc.consScopes, "consolidate-scopes", 500, "scoped: scopes the consolidated facts are spread over.")
	flag.IntVar(&sc.maxFacts, "max-facts", 0, "scoped: the consolidation run's MaxFacts; 0 is -consolidate-facts.")
	flag.IntVar(&sc.batch, "batch-size", 0, "scoped: facts a consolidation batch; 0 is the default batch size.")
	parallelism := flag.String("parallelism", "1,4", "scoped: consolidation parallelisms, comma-separated, each on fresh data.")
	flag.BoolVar(&sc.embed, "consolidate-embeddings", false, "scoped: consolidate with the scripted embeddings server too (its handler time is taken off as the LLM's).")
	flag.Parse()
	sc.bin, sc.dims, sc.duration, sc.parallelism = *bin, *dims, *duration, splitInts(*parallelism)
	var served []string
	scoped := false
	for _, m := range strings.Split(*modes, ",") {
		switch m = strings.TrimSpace(m); m {
		case "scoped":
			scoped = true
		case "":
		default:
			served = append(served, m)
		}
	}
	for _, st := range strings.Split(*stores, ",") {
		st = strings.TrimSpace(st)
		if len(served) > 0 {
			if err := run(os.Stdout, st, *bin, splitInts(*clients), *retainClients, *n, *dims, *duration, served); err != nil {
				fmt.Fprintln(os.Stderr, "bench/bank:", err)
				os.Exit(1)
			}
		}
		if scoped {
			if err := runScoped(os.Stdout, st, sc); err != nil {
				fmt.Fprintln(os.Stderr, "bench/bank:", err)
				os.Exit(1)
			}
		}
	}
}

func splitInts(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if v, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && v > 0 {
			out = append(out, v)
		}
	}
	return out
}

// words is a vocabulary of made-up words, so that texts share trigrams
// about as real words do.
var words = func() []string {
	rng := rand.New(rand.NewPCG(7, 8))
	out := make([]string, 3000)
	for i := range out {
		w := make([]byte, 4+rng.IntN(6))
		for k := range w {
			w[k] = byte('a' + rng.IntN(26))
		}
		out[i] = string(w)
	}
	return out
}()

var people = []string{"Alice", "Bob", "Carol", "Dmitri", "Eve", "Farid", "Grace", "Hiro", "Ines", "Jun"}

// text is observation i: a person and eight words, distinct for i below
// 10,007.
func text(i int) (string, string) {
	person := fmt.Sprintf("%s%d", people[i%len(people)], (i*7919)%10007) // distinct below 10,007
	t := person
	for w := 0; w < 8; w++ {
		t += " " + words[(i*31+w*977+w*w*i)%len(words)]
	}
	return person, t
}

// query i asks about observation i in other words: "q<i>" embeds near it.
func query(i int) string {
	return fmt.Sprintf("what about q%d and the %s", i, words[(i*31+977)%len(words)])
}

// queryPool is how many distinct queries the timed runs ask, spread over
// the bank: few enough for the scripted embeddings server to answer each
// from memory after the first time (Remember), as a server on a machine
// of its own costs the machine under test nothing.
const queryPool = 2000

// pooled is the observation the k-th query of the pool asks about.
func pooled(k, n int) int {
	if n <= queryPool {
		return k % n
	}
	return k % queryPool * (n / queryPool)
}

// vectorFunc scripts the embeddings server: a query "what about q<i> ..."
// lands near observation i. The server remembers its answers (Remember),
// so each query of the pool is computed once.
func vectorFunc(dims int) llmtest.VectorFunc {
	return func(t string, _ int) ([]float32, error) {
		if rest, ok := strings.CutPrefix(t, "what about q"); ok {
			i, _ := strconv.Atoi(strings.Fields(rest)[0])
			_, target := text(i)
			return llmtest.TopicVector(dims, []string{target, "asked"}, []float64{1, 0.5}), nil
		}
		return llmtest.TopicVector(dims, []string{t}, []float64{1}), nil
	}
}

func run(w io.Writer, store, bin string, clients []int, retainClients, n, dims int, duration time.Duration, modes []string) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bench-bank")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var url string
	switch store {
	case "sqlite":
		url = "sqlite://" + filepath.Join(dir, "bank.db")
	case "postgres":
		pg, err := pgtest.Start()
		if err != nil {
			return err
		}
		defer pg.Stop()
		if url, err = pg.NewDatabase(ctx); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown store %q", store)
	}
	emb := llmtest.NewEmbeddings(vectorFunc(dims))
	emb.Remember = true
	defer emb.Close()
	start := time.Now()
	if err := seed(ctx, url, n, dims, vectorFunc(dims)); err != nil {
		return fmt.Errorf("seeding: %w", err)
	}
	fmt.Fprintf(w, "store=%s observations=%d dims=%d seeded in %s\n", store, n, dims, time.Since(start).Round(time.Millisecond))

	addr, err := loopback.FreeAddr()
	if err != nil {
		return err
	}
	base := "http://" + addr
	plans := filepath.Join(dir, "plans")
	if err := writePlan(plans, base); err != nil {
		return err
	}
	cmd, err := startServe(bin, base, []string{"PROMPTOPS_STORE=" + url, "PROMPTOPS_EMBEDDINGS_BASE_URL=" + emb.BaseURL()},
		"--bank", bank, "--plans-dir", plans, "--embeddings-model", "bench-embed")
	if err != nil {
		return err
	}
	defer stopServe(cmd)
	// Every query of the pool, once: whether it finds its observation
	// first, and the embeddings server's answer remembered before
	// anything is timed.
	hits, total := 0, 0
	for k := 0; k < min(queryPool, n); k++ {
		i := pooled(k, n)
		items, err := recallOnce(http.DefaultClient, base, i)
		if err != nil {
			return err
		}
		total++
		if len(items) > 0 && items[0] == i {
			hits++
		}
	}
	fmt.Fprintf(w, "recall: the asked-about observation first in %d of %d queries\n", hits, total)
	for _, mode := range modes {
		switch strings.TrimSpace(mode) {
		case "recall":
			for _, c := range clients {
				cpu := cpuMeter(cmd.Process.Pid)
				lat, errs := drive(c, duration, func(cl *http.Client, k int) error {
					_, err := recallOnce(cl, base, pooled(k, n))
					return err
				})
				report(w, fmt.Sprintf("recall clients=%d", c), lat, errs, duration, 1, cpu())
			}
		case "retain":
			var next atomic.Int64
			cpu := cpuMeter(cmd.Process.Pid)
			lat, errs := drive(retainClients, duration, func(cl *http.Client, _ int) error {
				return retainBatch(cl, base, int(next.Add(1)), 100)
			})
			report(w, fmt.Sprintf("retain clients=%d batch=100", retainClients), lat, errs, duration, 100, cpu())
		case "assemble":
			// The bank's own process, then a second one that recalls
			// over HTTP.
			if err := assemble(w, "in-process", base, []int{cmd.Process.Pid}, clients, n, duration); err != nil {
				return err
			}
			addr2, err := loopback.FreeAddr()
			if err != nil {
				return err
			}
			side, err := startServe(bin, "http://"+addr2, []string{"PROMPTOPS_STORE="}, "--plans-dir", plans)
			if err != nil {
				return err
			}
			err = assemble(w, "http", "http://"+addr2, []int{side.Process.Pid, cmd.Process.Pid}, clients, n, duration)
			stopServe(side)
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown mode %q", mode)
		}
	}
	return nil
}

// startServe starts `promptops serve` on base's address without
// authentication and waits until it is ready.
func startServe(bin, base string, env []string, args ...string) (*exec.Cmd, error) {
	if err := proc.Evict(bin); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"serve", "--listen", strings.TrimPrefix(base, "http://"), "--auth", "none"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if err := loopback.WaitReady(base+"/readyz", 60*time.Second); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("%w: %s", err, stderr.String())
	}
	return cmd, nil
}

// stopServe stops a server as a pod's would be, and waits for it.
func stopServe(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// writePlan writes plans/bench/support/plan.json, as `promptops render
// --out-dir` lays it out: a template of 1,000 tokens with one memory
// section of the bank (300 tokens, 10 items, query from the request)
// served at endpoint.
func writePlan(plans, endpoint string) error {
	p := &plan.Plan{
		APIVersion: plan.PlanAPIVersion, Kind: plan.PlanKind, Namespace: "bench", Name: "support",
		Encoding: "cl100k_base", MaxTokens: 1000, OnExceed: plan.OnExceedReject, Separator: plan.Separator,
		Sections: []plan.Section{
			{Name: "role", Kind: plan.KindStatic, Text: "You are the support assistant. Answer from what we know.", Policy: plan.PolicyNever},
			{Name: "question", Kind: plan.KindRuntime, Heading: "## Question", ReserveTokens: 100, Policy: plan.PolicyNever},
			{Name: "memory", Kind: plan.KindMemory, Heading: "## What we know", ReserveTokens: 300, Policy: plan.PolicyPriority, Priority: 10,
				Memory: &plan.MemorySource{Bank: plan.BankRef{Namespace: "bench", Name: "memory"}, Endpoint: endpoint, Query: plan.MemoryQuery{FromRequest: true}, MaxItems: 10}},
			{Name: "task", Kind: plan.KindIntent, Heading: "## Task", Policy: plan.PolicyNever},
		},
		Intents: []plan.Intent{{Name: "chat", Instruction: "Answer briefly."}},
		Runtime: plan.RuntimeSummary{Placeholder: promptfit.Placeholder("NAME"), MemoryPlaceholder: promptfit.MemoryPlaceholder("NAME")},
	}
	if _, err := assembler.Seal(context.Background(), p, false); err != nil {
		return err
	}
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	d := filepath.Join(plans, "bench", "support")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(d, "plan.json"), data, 0o644)
}

// assemble drives POST /v1/assemble with a query from 1, 2 and 8
// clients and reports the share of answers with memory items and of
// timed-out recalls.
func assemble(w io.Writer, how, base string, pids []int, clients []int, n int, duration time.Duration) error {
	for _, c := range clients {
		var withItems, timedOut, answers atomic.Int64
		var firstCode atomic.Value
		cpu := cpuMeter(pids...)
		lat, errs := drive(c, duration, func(cl *http.Client, k int) error {
			items, to, code, err := assembleOnce(cl, base, pooled(k, n))
			if code != "" {
				firstCode.CompareAndSwap(nil, code)
			}
			if err == nil {
				answers.Add(1)
				if items > 0 {
					withItems.Add(1)
				}
				if to {
					timedOut.Add(1)
				}
			}
			return err
		})
		report(w, fmt.Sprintf("assemble(%s) clients=%d", how, c), lat, errs, duration, 1, cpu())
		code, _ := firstCode.Load().(string)
		fmt.Fprintf(w, "  answers with memory items: %d of %d, timed out: %d%s\n", withItems.Load(), answers.Load(), timedOut.Load(), cond(code != "", ", memory error "+code, ""))
	}
	return nil
}

func cond(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

// assembleOnce asks with query i; it returns the memory section's items,
// whether its recall timed out, and its error code.
func assembleOnce(cl *http.Client, base string, i int) (items int, timedOut bool, code string, err error) {
	body, _ := json.Marshal(map[string]any{"namespace": "bench", "name": "support", "intent": "chat",
		"runtime": map[string]string{"question": "What do we know?"}, "query": query(i)})
	resp, err := cl.Post(base+"/v1/assemble", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, false, "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, false, "", fmt.Errorf("assemble: %d %s", resp.StatusCode, data)
	}
	var out struct {
		Memory []struct {
			Items    []json.RawMessage `json:"items"`
			TimedOut bool              `json:"timedOut"`
			Error    string            `json:"error"`
		} `json:"memory"`
	}
	if err := json.Unmarshal(data, &out); err != nil || len(out.Memory) != 1 {
		return 0, false, "", fmt.Errorf("assemble: no memory section in %.200s", data)
	}
	m := out.Memory[0]
	return len(m.Items), m.TimedOut, m.Error, nil
}

// cpuMeter returns a function that gives the CPU time the processes
// used since cpuMeter was called.
func cpuMeter(pids ...int) func() time.Duration {
	total := func() time.Duration {
		var t time.Duration
		for _, pid := range pids {
			c, _ := loopback.ProcCPU(pid)
			t += c
		}
		return t
	}
	before := total()
	return func() time.Duration { return total() - before }
}

// seed stores n facts and consolidates each into one observation with its
// vector, as an engine run would, without an LLM.
func seed(ctx context.Context, url string, n, dims int, vec llmtest.VectorFunc) error {
	s, err := sqlstore.Open(ctx, url)
	if err != nil {
		return err
	}
	defer s.Close()
	facts := make([]consolidation.Fact, n)
	for i := range facts {
		person, t := text(i)
		facts[i] = consolidation.Fact{ID: fmt.Sprintf("seed-%06d", i), Text: t, Entities: []string{person}, Tags: []string{"seed"}}
	}
	if _, err := s.ImportFacts(ctx, bank, facts); err != nil {
		return err
	}
	sp := consolidation.Space{Model: "bench-embed", Dims: dims}
	for {
		now := time.Now()
		claimed, err := s.ClaimFacts(ctx, bank, "seed", 1000, now, now.Add(time.Hour))
		if err != nil {
			return err
		}
		if len(claimed) == 0 {
			return nil
		}
		ops := consolidation.Ops{Space: sp}
		ids := make([]string, len(claimed))
		for i, f := range claimed {
			v, _ := vec(f.Text, dims)
			ops.Creates = append(ops.Creates, consolidation.Create{Text: f.Text, SourceFactIDs: []string{f.ID}, Vector: v})
			ids[i] = f.ID
		}
		if _, err := s.Apply(ctx, bank, "seed", ops, ids, now); err != nil {
			return err
		}
	}
}

// recallOnce asks about observation i and returns the seed indexes of the
// items, best first.
func recallOnce(cl *http.Client, base string, i int) ([]int, error) {
	body, _ := json.Marshal(map[string]any{"query": query(i), "maxTokens": 500, "maxItems": 10})
	resp, err := cl.Post(base+"/v1/banks/"+bank+"/recall", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("recall: %d %s", resp.StatusCode, data)
	}
	var out struct {
		Items []struct {
			SourceFactIDs []string `json:"sourceFactIds"`
		}
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	var idx []int
	for _, it := range out.Items {
		if len(it.SourceFactIDs) > 0 {
			k, _ := strconv.Atoi(strings.TrimPrefix(it.SourceFactIDs[0], "seed-"))
			idx = append(idx, k)
		}
	}
	return idx, nil
}

func retainBatch(cl *http.Client, base string, batch, size int) error {
	facts := make([]map[string]any, size)
	for i := range facts {
		person, t := text(1_000_000 + batch*size + i)
		facts[i] = map[string]any{"text": t + fmt.Sprintf(" r%d", batch*size+i), "entities": []string{person}, "tags": []string{"bench"}, "occurredStart": "2026-03-01"}
	}
	body, _ := json.Marshal(map[string]any{"facts": facts})
	resp, err := cl.Post(base+"/v1/banks/"+bank+"/facts", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("retain: %d %s", resp.StatusCode, data)
	}
	return nil
}

// drive runs fn from c keep-alive clients for d and returns the latencies.
func drive(c int, d time.Duration, fn func(cl *http.Client, k int) error) ([]time.Duration, int) {
	var mu sync.Mutex
	var all []time.Duration
	var errs atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for j := 0; j < c; j++ {
		wg.Add(1)
		go func(j int) {
			defer wg.Done()
			cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			var lat []time.Duration
			for k := j * 7919; time.Now().Before(stop); k++ {
				t0 := time.Now()
				if err := fn(cl, k); err != nil {
					if errs.Add(1) == 1 {
						fmt.Fprintln(os.Stderr, "bench/bank:", err)
					}
					continue
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		}(j)
	}
	wg.Wait()
	return all, int(errs.Load())
}

// report prints the scenario's rate and latencies, and the servers' CPU
// time per request.
func report(w io.Writer, name string, lat []time.Duration, errs int, d time.Duration, per int, cpu time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) string {
		if len(lat) == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fms", float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds())/1000)
	}
	cpuPer := "-"
	if len(lat) > 0 {
		cpuPer = fmt.Sprintf("%.2fms", float64(cpu.Microseconds())/1000/float64(len(lat)))
	}
	fmt.Fprintf(w, "%s requests=%d errors=%d per_second=%.0f items_per_second=%.0f p50=%s p99=%s server_cpu_per_request=%s\n",
		name, len(lat), errs, float64(len(lat))/d.Seconds(), float64(len(lat)*per)/d.Seconds(), pct(0.50), pct(0.99), cpuPer)
}
