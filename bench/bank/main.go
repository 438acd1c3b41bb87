// Command bank measures the bank API of `promptops serve --bank` over
// loopback: it seeds a bank of 10,000 observations with vectors (SQLite
// and PostgreSQL), starts the built binary against it with a scripted
// embeddings server, and drives POST .../recall from 1, 2 and 8 keep-alive
// clients (p50/p99) and POST .../facts in batches of 100 (facts/second).
//
//	go build -o bin/promptops . && go run ./bench/bank
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
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
	"time"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/sqlstore"
	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/pgtest"
)

const bank = "bench/memory"

func main() {
	bin := flag.String("bin", "bin/promptops", "The promptops binary.")
	stores := flag.String("stores", "sqlite,postgres", "Stores to measure, comma-separated.")
	modes := flag.String("modes", "recall,retain", "What to drive, comma-separated: recall, retain (assemble comes with memory sections).")
	clients := flag.String("clients", "1,2,8", "Concurrent keep-alive clients of recall, comma-separated.")
	retainClients := flag.Int("retain-clients", 4, "Concurrent clients posting facts.")
	n := flag.Int("observations", 10000, "Observations seeded.")
	dims := flag.Int("dims", 1536, "Dimensions of the scripted embeddings.")
	duration := flag.Duration("duration", 5*time.Second, "How long each scenario runs.")
	flag.Parse()
	for _, st := range strings.Split(*stores, ",") {
		if err := run(os.Stdout, strings.TrimSpace(st), *bin, splitInts(*clients), *retainClients, *n, *dims, *duration, strings.Split(*modes, ",")); err != nil {
			fmt.Fprintln(os.Stderr, "bench/bank:", err)
			os.Exit(1)
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
	defer emb.Close()
	start := time.Now()
	if err := seed(ctx, url, n, dims, vectorFunc(dims)); err != nil {
		return fmt.Errorf("seeding: %w", err)
	}
	fmt.Fprintf(w, "store=%s observations=%d dims=%d seeded in %s\n", store, n, dims, time.Since(start).Round(time.Millisecond))

	addr, err := freeAddr()
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "serve", "--bank", bank, "--listen", addr, "--auth", "none", "--embeddings-model", "bench-embed")
	cmd.Env = append(os.Environ(), "PROMPTOPS_STORE="+url, "PROMPTOPS_EMBEDDINGS_BASE_URL="+emb.BaseURL())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	base := "http://" + addr
	if err := waitReady(base, 60*time.Second); err != nil {
		return fmt.Errorf("%w: %s", err, stderr.String())
	}
	for _, mode := range modes {
		switch strings.TrimSpace(mode) {
		case "recall":
			hits, total := 0, 0
			for i := 0; i < 50; i++ {
				items, err := recallOnce(http.DefaultClient, base, i*97%n)
				if err != nil {
					return err
				}
				total++
				if len(items) > 0 && items[0] == i*97%n {
					hits++
				}
			}
			fmt.Fprintf(w, "recall: the asked-about observation first in %d of %d queries\n", hits, total)
			for _, c := range clients {
				lat, errs := drive(c, duration, func(cl *http.Client, k int) error {
					_, err := recallOnce(cl, base, k%n)
					return err
				})
				report(w, fmt.Sprintf("recall clients=%d", c), lat, errs, duration, 1)
			}
		case "retain":
			var next atomic.Int64
			lat, errs := drive(retainClients, duration, func(cl *http.Client, _ int) error {
				return retainBatch(cl, base, int(next.Add(1)), 100)
			})
			report(w, fmt.Sprintf("retain clients=%d batch=100", retainClients), lat, errs, duration, 100)
		case "assemble":
			return assemble(w, base)
		default:
			return fmt.Errorf("unknown mode %q", mode)
		}
	}
	return nil
}

// assemble is the hook for POST /v1/assemble with a memory section.
func assemble(io.Writer, string) error {
	return errors.New("the assemble mode comes with memory sections in PromptTemplates")
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

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func waitReady(base string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if r, err := http.Get(base + "/readyz"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("the server did not get ready")
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
		facts[i] = map[string]any{"text": t + fmt.Sprintf(" r%d", batch*size+i), "entities": []string{person}, "tags": []string{"bench"}, "occurred_start": "2026-03-01"}
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

func report(w io.Writer, name string, lat []time.Duration, errs int, d time.Duration, per int) {
	slices.Sort(lat)
	pct := func(p float64) string {
		if len(lat) == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fms", float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds())/1000)
	}
	fmt.Fprintf(w, "%s requests=%d errors=%d per_second=%.0f items_per_second=%.0f p50=%s p99=%s\n",
		name, len(lat), errs, float64(len(lat))/d.Seconds(), float64(len(lat)*per)/d.Seconds(), pct(0.50), pct(0.99))
}
