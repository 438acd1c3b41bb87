package main

// The scoped case (-modes scoped): a bank whose facts and observations
// belong to scopes (one per user of a product, say).
//
// The bank larger than a pod of the scale issue:
//
//	go run ./bench/bank -modes scoped -stores postgres -scopes 50000 -per-scope 20 -dims 384 \
//	    -consolidate-facts 10000 -consolidate-scopes 2500 -parallelism 4
//	go run ./bench/bank -modes scoped -stores sqlite -scopes 10000 -per-scope 20 -dims 384 \
//	    -consolidate-facts 10000 -consolidate-scopes 2500 -parallelism 4
//
//  1. Recall within a scope: 10,000 scopes of 10 observations each (with
//     the scripted embeddings' vectors) are served by the built binary;
//     POST .../recall with "scope" set, the scope drawn uniformly from all
//     of them, from 8 keep-alive clients. Every answer is checked: each
//     item's source facts must be the queried scope's. Then the same over
//     the first -hot-scopes scopes (100), loaded before the timing; and
//     serve's peak resident set.
//  2. Consolidation of 2,000 pending facts over 500 scopes (4 a scope) by
//     the Engine in this process with a scripted LLM (llmtest.OnePerFact),
//     at each -parallelism, on fresh data each time. The time the LLM's
//     handler was running is measured around the handler (a front server
//     of our own that calls the scripted server's handler) and taken off
//     the wall time: what is left is the engine's (store, prompts,
//     parsing, the HTTP client). The peak resident set of this process
//     during the run (with the scripted servers) is reported.
//  3. Erasure of one scope: DELETE .../scopes/{scope} of distinct scopes of
//     the bank of 1., one after another, against the served binary (served
//     with --auth none, as every case of this benchmark: the eraser verb
//     is not checked then).

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/bench/internal/loopback"
	"github.com/promptops/promptops/bench/internal/proc"
	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/llm"
	"github.com/promptops/promptops/internal/consolidation/sqlstore"
	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/pgtest"
	"github.com/promptops/promptops/internal/tokens"
)

// scopedConfig is what the scoped case measures.
type scopedConfig struct {
	bin      string
	dims     int
	duration time.Duration
	// scopes of perScope observations each are served; clients drive
	// recall.
	scopes, perScope, clients int
	// erasures scopes are erased one after another.
	erasures int
	// consFacts pending facts over consScopes scopes are consolidated in
	// batches of batch, at each parallelism.
	consFacts, consScopes, batch int
	// hot scopes (the first) are recalled in a second timed phase.
	hot int
	// maxFacts is the run's MaxFacts; 0 is consFacts.
	maxFacts    int
	parallelism []int
	// embed gives the consolidation an embedder (the scripted embeddings
	// server), as a bank with embeddings runs.
	embed bool
}

// scopeName is scope sc's name; factID is the id of its j-th fact, so
// that a fact's scope is its id's prefix.
func scopeName(sc int) string { return fmt.Sprintf("user-%05d", sc) }

func factID(sc, j int) string { return fmt.Sprintf("%s-%02d", scopeName(sc), j) }

// asked is the observation (seed index) the query of scope sc asks about.
func asked(sc, perScope int) int { return sc*perScope + sc*3%perScope }

// mix spreads k over the 64-bit range (splitmix64), so that k mod n is
// uniform.
func mix(k uint64) uint64 {
	k += 0x9e3779b97f4a7c15
	k = (k ^ k>>30) * 0xbf58476d1ce4e5b9
	k = (k ^ k>>27) * 0x94d049bb133111eb
	return k ^ k>>31
}

func runScoped(w io.Writer, store string, cfg scopedConfig) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bench-bank-scoped")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// newURL makes a fresh database of the store.
	var newURL func(name string) (string, error)
	switch store {
	case "sqlite":
		newURL = func(name string) (string, error) { return "sqlite://" + filepath.Join(dir, name+".db"), nil }
	case "postgres":
		pg, err := pgtest.Start()
		if err != nil {
			return err
		}
		defer pg.Stop()
		newURL = func(string) (string, error) { return pg.NewDatabase(ctx) }
	default:
		return fmt.Errorf("unknown store %q", store)
	}

	url, err := newURL("scoped")
	if err != nil {
		return err
	}
	start := time.Now()
	if err := seedScoped(ctx, url, cfg.scopes, cfg.perScope, cfg.dims); err != nil {
		return fmt.Errorf("seeding: %w", err)
	}
	fmt.Fprintf(w, "store=%s scoped: scopes=%d observations=%d dims=%d seeded in %s\n", store, cfg.scopes, cfg.scopes*cfg.perScope, cfg.dims, time.Since(start).Round(time.Millisecond))
	if err := servedScopes(w, url, cfg); err != nil {
		return err
	}
	// The encoding's vocabulary is loaded once a process, before the
	// first run is timed.
	if _, err := tokens.Get(string(promptopsv1.DefaultEncoding)); err != nil {
		return err
	}
	for r, p := range cfg.parallelism {
		url, err := newURL(fmt.Sprintf("consolidate-%d", r))
		if err != nil {
			return err
		}
		if err := consolidateScopes(ctx, w, url, cfg, p, 20_000+r*cfg.consFacts); err != nil {
			return fmt.Errorf("consolidation at parallelism %d: %w", p, err)
		}
	}
	return nil
}

// seedScoped stores scopes x perScope facts, fact j of scope sc being
// text(sc*perScope+j), and consolidates each into one observation of its
// scope with its vector, as an engine run would, without an LLM: the
// store's own write paths (ImportFacts, ClaimFacts, Apply), from a few
// goroutines (PostgreSQL takes them at once; SQLite one after another,
// while the others compute vectors).
func seedScoped(ctx context.Context, url string, scopes, perScope, dims int) error {
	s, err := sqlstore.Open(ctx, url)
	if err != nil {
		return err
	}
	defer s.Close()
	vec := vectorFunc(dims)
	sp := consolidation.Space{Model: "bench-embed", Dims: dims}
	const workers = 4
	const importScopes = 500 // scopes a transaction of ImportFacts
	each := func(n int, fn func(i int) error) error {
		var next atomic.Int64
		var first error
		var once sync.Once
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
					if err := fn(i); err != nil {
						once.Do(func() { first = err })
						return
					}
				}
			}()
		}
		wg.Wait()
		return first
	}
	err = each((scopes+importScopes-1)/importScopes, func(c int) error {
		var facts []consolidation.Fact
		for sc := c * importScopes; sc < min(scopes, (c+1)*importScopes); sc++ {
			for j := 0; j < perScope; j++ {
				person, t := text(sc*perScope + j)
				facts = append(facts, consolidation.Fact{ID: factID(sc, j), Scope: scopeName(sc), Text: t, Entities: []string{person}, Tags: []string{"seed"}})
			}
		}
		_, err := s.ImportFacts(ctx, bank, facts)
		return err
	})
	if err != nil {
		return err
	}
	err = each(scopes, func(sc int) error {
		key := consolidation.BankID(bank).Scope(scopeName(sc))
		now := time.Now()
		claimed, err := s.ClaimFacts(ctx, key, "seed", perScope, now, now.Add(time.Hour))
		if err != nil {
			return err
		}
		if len(claimed) != perScope {
			return fmt.Errorf("scope %s: claimed %d facts, want %d", scopeName(sc), len(claimed), perScope)
		}
		ops := consolidation.Ops{Space: sp}
		ids := make([]string, len(claimed))
		for i, f := range claimed {
			v, _ := vec(f.Text, dims)
			ops.Creates = append(ops.Creates, consolidation.Create{Text: f.Text, SourceFactIDs: []string{f.ID}, Vector: v})
			ids[i] = f.ID
		}
		_, err = s.Apply(ctx, key, "seed", ops, ids, now)
		return err
	})
	if err != nil {
		return err
	}
	// The bank is measured as it runs, not as it is right after a bulk
	// load: vacuumed and analysed, so that autovacuum does not run during
	// the timed recall (SQLite has none).
	if strings.HasPrefix(url, "postgres") {
		_, err = s.DB().ExecContext(ctx, "VACUUM ANALYZE")
	}
	return err
}

// scopedItem is what the scoped case reads of a recalled item.
type scopedItem struct {
	ID            string   `json:"id"`
	Kind          string   `json:"kind"`
	SourceFactIDs []string `json:"sourceFactIds"`
}

// recallScopeOnce asks scope sc about observation i.
func recallScopeOnce(cl *http.Client, base string, sc, i int) ([]scopedItem, error) {
	body, _ := json.Marshal(map[string]any{"query": query(i), "maxTokens": 500, "maxItems": 10, "scope": scopeName(sc)})
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
		Items []scopedItem `json:"items"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// scopeCheck counts the answers checked and the items that are not the
// queried scope's (a source fact of another scope, or none).
type scopeCheck struct {
	answers, items, violations, hits, empty atomic.Int64
	first                                   atomic.Value
}

func (c *scopeCheck) check(sc, i, perScope int, items []scopedItem) {
	c.answers.Add(1)
	c.items.Add(int64(len(items)))
	if len(items) == 0 {
		c.empty.Add(1)
	}
	prefix := scopeName(sc) + "-"
	for k, it := range items {
		if k == 0 && len(it.SourceFactIDs) > 0 && it.SourceFactIDs[0] == factID(sc, i%perScope) {
			c.hits.Add(1)
		}
		bad := len(it.SourceFactIDs) == 0
		for _, id := range it.SourceFactIDs {
			if !strings.HasPrefix(id, prefix) {
				bad = true
			}
		}
		if bad {
			if c.violations.Add(1) == 1 {
				c.first.Store(fmt.Sprintf("scope %s answered item %s (%s) with source facts %v", scopeName(sc), it.ID, it.Kind, it.SourceFactIDs))
			}
		}
	}
}

func (c *scopeCheck) String() string {
	s := fmt.Sprintf("answers=%d items=%d scope_violations=%d empty_answers=%d asked_first=%d", c.answers.Load(), c.items.Load(), c.violations.Load(), c.empty.Load(), c.hits.Load())
	if v, ok := c.first.Load().(string); ok {
		s += "; first violation: " + v
	}
	return s
}

// servedScopes serves the bank of url and measures scoped recall, then
// erasure.
func servedScopes(w io.Writer, url string, cfg scopedConfig) error {
	emb := llmtest.NewEmbeddings(vectorFunc(cfg.dims))
	emb.Remember = true
	defer emb.Close()
	addr, err := loopback.FreeAddr()
	if err != nil {
		return err
	}
	base := "http://" + addr
	// Served as the bank's Deployment serves it: with the default pod's
	// memory limit, from which serve sets the Go runtime's.
	res := promptopsv1.DefaultServingResources()
	limit := res.Limits.Memory().Value()
	cmd, err := startServe(cfg.bin, base, []string{"PROMPTOPS_STORE=" + url, "PROMPTOPS_EMBEDDINGS_BASE_URL=" + emb.BaseURL(), fmt.Sprintf("PROMPTOPS_MEMORY_LIMIT=%d", limit)},
		"--bank", bank, "--embeddings-model", "bench-embed")
	if err != nil {
		return err
	}
	defer stopServe(cmd)

	// Every scope's query once, from as many clients as are timed: each
	// answer checked, and the embeddings server's answers remembered
	// before anything is timed (10,000 distinct queries, within what it
	// remembers).
	warm := &scopeCheck{}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var warmErr atomic.Value
	for range cfg.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			for sc := int(next.Add(1) - 1); sc < cfg.scopes; sc = int(next.Add(1) - 1) {
				i := asked(sc, cfg.perScope)
				items, err := recallScopeOnce(cl, base, sc, i)
				if err != nil {
					warmErr.CompareAndSwap(nil, err)
					return
				}
				warm.check(sc, i, cfg.perScope, items)
			}
		}()
	}
	wg.Wait()
	if err, _ := warmErr.Load().(error); err != nil {
		return err
	}
	fmt.Fprintf(w, "scoped recall, every scope once (%s): %s\n", time.Since(start).Round(time.Millisecond), warm)

	timed := &scopeCheck{}
	cpu := cpuMeter(cmd.Process.Pid)
	lat, errs := drive(cfg.clients, cfg.duration, func(cl *http.Client, k int) error {
		sc := int(mix(uint64(k)) % uint64(cfg.scopes))
		i := asked(sc, cfg.perScope)
		items, err := recallScopeOnce(cl, base, sc, i)
		if err == nil {
			timed.check(sc, i, cfg.perScope, items)
		}
		return err
	})
	report(w, fmt.Sprintf("scoped recall scopes=%d clients=%d", cfg.scopes, cfg.clients), lat, errs, cfg.duration, 1, cpu())
	fmt.Fprintf(w, "  checked: %s\n", timed)

	// The same over a few hot scopes, loaded once before the timing.
	if hot := min(cfg.hot, cfg.scopes); hot > 0 {
		cl := &http.Client{}
		for sc := range hot {
			if _, err := recallScopeOnce(cl, base, sc, asked(sc, cfg.perScope)); err != nil {
				return err
			}
		}
		hotCheck := &scopeCheck{}
		cpu = cpuMeter(cmd.Process.Pid)
		lat, errs = drive(cfg.clients, cfg.duration, func(cl *http.Client, k int) error {
			sc := int(mix(uint64(k)) % uint64(hot))
			i := asked(sc, cfg.perScope)
			items, err := recallScopeOnce(cl, base, sc, i)
			if err == nil {
				hotCheck.check(sc, i, cfg.perScope, items)
			}
			return err
		})
		report(w, fmt.Sprintf("scoped recall hot scopes=%d clients=%d", hot, cfg.clients), lat, errs, cfg.duration, 1, cpu())
		fmt.Fprintf(w, "  checked: %s\n", hotCheck)
	}
	hwm, _ := proc.Status(cmd.Process.Pid, "VmHWM")
	anon, _ := proc.Status(cmd.Process.Pid, "RssAnon")
	fmt.Fprintf(w, "serve peak RSS (VmHWM) %s, RssAnon now %s, with --index-cache-bytes at its default and PROMPTOPS_MEMORY_LIMIT=%s (the default pod's limit)\n", proc.MiB(hwm), proc.MiB(anon), proc.MiB(limit))

	return eraseScopes(w, base, cfg)
}

// eraseScopes erases cfg.erasures distinct scopes, spread over the bank,
// one after another, and checks that each took its facts and
// observations and that an erased scope recalls nothing.
func eraseScopes(w io.Writer, base string, cfg scopedConfig) error {
	n := min(cfg.erasures, cfg.scopes)
	if n == 0 {
		return nil
	}
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	step := cfg.scopes / n
	var lat []time.Duration
	wrong := 0
	var erased []int
	for e := 0; e < n; e++ {
		sc := e*step + step/2
		req, _ := http.NewRequest(http.MethodDelete, base+"/v1/banks/"+bank+"/scopes/"+scopeName(sc), nil)
		t0 := time.Now()
		resp, err := cl.Do(req)
		if err != nil {
			return err
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(t0)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("erasing scope %s: %d %s", scopeName(sc), resp.StatusCode, data)
		}
		lat = append(lat, d)
		erased = append(erased, sc)
		var out consolidation.Erasure
		if err := json.Unmarshal(data, &out); err != nil {
			return fmt.Errorf("erasing scope %s: %w: %s", scopeName(sc), err, data)
		}
		if out.Facts != int64(cfg.perScope) || out.Observations != int64(cfg.perScope) {
			if wrong++; wrong == 1 {
				fmt.Fprintf(w, "  erasure of %s removed %s, want %d facts and %d observations\n", scopeName(sc), data, cfg.perScope, cfg.perScope)
			}
		}
	}
	slices.Sort(lat)
	pct := func(p float64) string {
		return fmt.Sprintf("%.2fms", float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds())/1000)
	}
	fmt.Fprintf(w, "erase scope (sequential) scopes=%d p50=%s p99=%s max=%s wrong_counts=%d\n", len(lat), pct(0.50), pct(0.99), pct(1), wrong)
	// The erased scopes recall nothing; their neighbours still do.
	left, kept := 0, 0
	for _, sc := range erased[:min(20, len(erased))] {
		items, err := recallScopeOnce(cl, base, sc, asked(sc, cfg.perScope))
		if err != nil {
			return err
		}
		left += len(items)
		nb := sc + 1
		if items, err = recallScopeOnce(cl, base, nb, asked(nb, cfg.perScope)); err != nil {
			return err
		}
		if len(items) > 0 {
			kept++
		}
	}
	fmt.Fprintf(w, "  after erasure: %d items recalled from %d erased scopes (want 0); %d of their %d neighbours still recall\n",
		left, min(20, len(erased)), kept, min(20, len(erased)))
	return nil
}

// spans records when something was running (a handler, a call).
type spans struct {
	mu   sync.Mutex
	list [][2]time.Time
}

func (s *spans) add(from, to time.Time) {
	s.mu.Lock()
	s.list = append(s.list, [2]time.Time{from, to})
	s.mu.Unlock()
}

// total is the spans' durations added up; busy the time at least one of
// them was running (their union); n how many there were.
func (s *spans) total() (total, busy time.Duration, n int) {
	s.mu.Lock()
	list := slices.Clone(s.list)
	s.mu.Unlock()
	slices.SortFunc(list, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	var end time.Time
	for _, sp := range list {
		total += sp[1].Sub(sp[0])
		switch {
		case sp[0].After(end):
			busy += sp[1].Sub(sp[0])
			end = sp[1]
		case sp[1].After(end):
			busy += sp[1].Sub(end)
			end = sp[1]
		}
	}
	return total, busy, len(list)
}

// timedHandler records the time h spends on each request.
func timedHandler(h http.Handler, s *spans) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		h.ServeHTTP(w, r)
		s.add(t0, time.Now())
	})
}

// timedLLM records, on the engine's side, the time each completion takes
// (the HTTP round trip and the client's encoding and decoding included).
type timedLLM struct {
	consolidation.LLM
	calls *spans
}

func (t timedLLM) Complete(ctx context.Context, req consolidation.Request) (consolidation.Completion, error) {
	t0 := time.Now()
	c, err := t.LLM.Complete(ctx, req)
	t.calls.add(t0, time.Now())
	return c, err
}

// consolidateScopes consolidates cfg.consFacts facts over cfg.consScopes
// scopes of a fresh store at url at parallelism p. The facts' texts are
// text(first) on: each run's its own, so that none finds its token counts
// cached by the run before.
func consolidateScopes(ctx context.Context, w io.Writer, url string, cfg scopedConfig, p, first int) error {
	s, err := sqlstore.Open(ctx, url)
	if err != nil {
		return err
	}
	defer s.Close()
	// The facts interleaved over the scopes, as users talk at once.
	perScope := map[string]int{}
	facts := make([]consolidation.Fact, cfg.consFacts)
	for k := range facts {
		sc, j := k%cfg.consScopes, k/cfg.consScopes
		person, t := text(first + k)
		facts[k] = consolidation.Fact{ID: factID(sc, j), Scope: scopeName(sc), Text: t, Entities: []string{person}}
		perScope[scopeName(sc)]++
	}
	if _, err := s.ImportFacts(ctx, bank, facts); err != nil {
		return err
	}
	batch := cfg.batch
	if batch <= 0 {
		batch = consolidation.DefaultBatchSize
	}
	var want int64
	for _, n := range perScope {
		want += int64((n + batch - 1) / batch)
	}

	// The scripted servers, each behind a front of ours that times its
	// handler.
	handlers := &spans{}
	chat := llmtest.New(llmtest.OnePerFact)
	defer chat.Close()
	chatFront := httptest.NewServer(timedHandler(chat.Config.Handler, handlers))
	defer chatFront.Close()
	calls := &spans{}
	e := &consolidation.Engine{
		Store: s,
		Settings: consolidation.Settings{Bank: bank, BatchSize: batch, MaxFacts: cmp.Or(cfg.maxFacts, cfg.consFacts), Parallelism: p,
			MaxTokensPerRun: 1 << 40},
		LLM: timedLLM{LLM: llm.New(llm.Config{BaseURL: chatFront.URL + "/v1", Model: "bench-chat", Timeout: 60 * time.Second, MaxRetries: 2}), calls: calls},
	}
	embHandlers := &spans{}
	var emb *llmtest.EmbedServer
	if cfg.embed {
		emb = llmtest.NewEmbeddings(vectorFunc(cfg.dims))
		defer emb.Close()
		embFront := httptest.NewServer(timedHandler(emb.Config.Handler, embHandlers))
		defer embFront.Close()
		e.Embedder = llm.NewEmbeddings(llm.EmbeddingsConfig{BaseURL: embFront.URL + "/v1", Model: "bench-embed", Timeout: 60 * time.Second, MaxRetries: 1})
	}

	// The peak resident set of this process (the engine, with the
	// scripted servers) from here on.
	debug.FreeOSMemory()
	if err := proc.ResetPeak(os.Getpid()); err != nil {
		return err
	}
	t0 := time.Now()
	sum, err := e.Run(ctx)
	wall := time.Since(t0)
	if err != nil {
		return err
	}
	hwm, _ := proc.Status(os.Getpid(), "VmHWM")
	hTotal, hBusy, _ := handlers.total()
	cTotal, cBusy, _ := calls.total()
	eTotal, eBusy, _ := embHandlers.total()
	// Out of the wall time goes the time a scripted server's handler was
	// running (the union over the calls: at parallelism > 1 they
	// overlap), the chat's and the embeddings' together.
	outside := &spans{}
	for _, sp := range [][][2]time.Time{handlers.list, embHandlers.list} {
		for _, x := range sp {
			outside.add(x[0], x[1])
		}
	}
	_, busy, _ := outside.total()
	// The same measured on the engine's side: around its chat calls
	// (with the embeddings handler's time, when there is one).
	around := &spans{}
	for _, sp := range [][][2]time.Time{calls.list, embHandlers.list} {
		for _, x := range sp {
			around.add(x[0], x[1])
		}
	}
	_, aroundBusy, _ := around.total()
	reqs := chat.Requests()
	mixed := 0
	for _, r := range reqs {
		seen := map[string]bool{}
		for _, f := range llmtest.Facts(r.User) {
			seen[f.ID[:strings.LastIndexByte(f.ID, '-')]] = true
		}
		if len(seen) > 1 {
			mixed++
		}
	}
	per := func(d time.Duration) string {
		return fmt.Sprintf("%.3fms", float64(d.Microseconds())/1000/float64(cfg.consFacts))
	}
	fmt.Fprintf(w, "consolidate parallelism=%d facts=%d scopes=%d batch=%d embeddings=%t wall=%s engine_per_fact=%s llm_calls=%d server_requests=%d sum_ceil_facts_per_batch=%d batches=%d retries=%d calls_with_several_scopes=%d consolidated=%d failed=%d pending_after=%d peak_rss=%s%s\n",
		p, cfg.consFacts, len(perScope), batch, cfg.embed, wall.Round(time.Millisecond), per(wall-busy), sum.LLMCalls, len(reqs), want, sum.Batches, sum.Retries, mixed,
		sum.FactsConsolidated, sum.FactsFailed, sum.PendingFacts, proc.MiB(hwm), cond(sum.CutShort != "", " cut short: "+sum.CutShort, ""))
	fmt.Fprintf(w, "  llm handler: sum=%s busy=%s (%s a fact); client side around calls: sum=%s busy=%s, engine_per_fact by it=%s%s\n",
		hTotal.Round(time.Microsecond), hBusy.Round(time.Microsecond), per(hBusy), cTotal.Round(time.Microsecond), cBusy.Round(time.Microsecond), per(wall-aroundBusy),
		cond(cfg.embed, fmt.Sprintf("; embeddings handler: sum=%s busy=%s, calls=%d", eTotal.Round(time.Microsecond), eBusy.Round(time.Microsecond), sum.EmbeddingCalls), ""))
	return nil
}
