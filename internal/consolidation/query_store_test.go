package consolidation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memQueryStore is a QueryStore in memory whose answers a test changes
// as it goes: the generation, the observations, their vectors, the
// pending facts and the errors of each read.
type memQueryStore struct {
	mu       sync.Mutex
	gen      int64
	genErr   error
	obs      []Observation
	tags     map[string][]string
	vecs     map[string][]float32
	pending  []Fact
	scanErr  error
	vecErr   error
	pendErr  error
	scans    int
	sinces   []time.Time
	limits   []int
	scanning chan struct{} // when set, LoadRecallable waits for it to close
	vecScans int
}

func (s *memQueryStore) BankGeneration(context.Context, ScopeKey) (Generation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Generation{Applied: s.gen}, s.genErr
}

// LoadRecallable answers as one read: the generation and the data as
// they were when the read began, handed over once scanning (when set) is
// closed.
func (s *memQueryStore) LoadRecallable(ctx context.Context, _ ScopeKey, sp Space, into RecallableSink) (Generation, error) {
	if err := ctx.Err(); err != nil {
		return Generation{}, err
	}
	s.mu.Lock()
	s.scans++
	if sp.Dims > 0 {
		s.vecScans++
	}
	wait, gen, obs, tags, vecs := s.scanning, s.gen, slices.Clone(s.obs), s.tags, s.vecs
	var err error
	switch {
	case s.genErr != nil:
		err = s.genErr
	case s.scanErr != nil:
		err = s.scanErr
	case sp.Dims > 0 && s.vecErr != nil:
		err = s.vecErr
	}
	s.mu.Unlock()
	if wait != nil {
		<-wait
	}
	if err != nil {
		return Generation{}, err
	}
	if gen < 0 {
		return Generation{Applied: -1}, nil
	}
	into.Grow(len(obs))
	for _, o := range obs {
		into.Observation(o, tags[o.ID])
		if v := vecs[o.ID]; sp.Dims > 0 && len(v) == sp.Dims {
			into.Vector(o.ID, v)
		}
	}
	return Generation{Applied: gen}, nil
}

func (s *memQueryStore) PendingFacts(_ context.Context, _ ScopeKey, since time.Time, limit int) ([]Fact, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sinces = append(s.sinces, since)
	s.limits = append(s.limits, limit)
	if s.pendErr != nil {
		return nil, s.pendErr
	}
	var out []Fact
	for _, f := range s.pending {
		if !f.CreatedAt.Before(since) && len(out) < limit {
			out = append(out, f)
		}
	}
	return out, nil
}

func (s *memQueryStore) set(fn func(s *memQueryStore)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s)
}

// scriptedEmbedder answers each text with its vector in vecs, or with err.
type scriptedEmbedder struct {
	vecs  map[string][]float32
	err   error
	errs  []error // when set, the answer's Errs
	calls atomic.Int64
	block chan struct{} // when set, Embed waits for it or the context
}

func (e *scriptedEmbedder) Model() string { return "scripted" }
func (e *scriptedEmbedder) Embed(ctx context.Context, texts []string) (Embeddings, error) {
	e.calls.Add(1)
	if e.block != nil {
		select {
		case <-e.block:
		case <-ctx.Done():
			return Embeddings{}, ctx.Err()
		}
	}
	if e.err != nil {
		return Embeddings{}, e.err
	}
	out := Embeddings{Vectors: make([][]float32, len(texts)), Errs: e.errs}
	for i, t := range texts {
		out.Vectors[i] = e.vecs[t]
	}
	return out, nil
}

// axis is a unit vector of dims dimensions: cos of angle a on axis i and
// sin of it on axis i+1.
func axis(dims, i int, a float64) []float32 {
	v := make([]float32, dims)
	v[i] = float32(math.Cos(a))
	v[(i+1)%dims] = float32(math.Sin(a))
	return v
}

func itemIDs(items []Recalled) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

// Generation is -1 until a load; Load reads the generation and fails with
// the store's error.
func TestRecallerLoadAndGeneration(t *testing.T) {
	ctx := context.Background()
	st := &memQueryStore{gen: 7, obs: []Observation{{ID: "a", Text: "alpha beta"}}}
	r := &Recaller{Store: st, Scope: "b"}
	if g := r.Generation(); g != -1 {
		t.Fatalf("generation before a load: %d", g)
	}
	if err := r.Load(ctx, Space{}); err != nil {
		t.Fatal(err)
	}
	if g := r.Generation(); g != 7 {
		t.Fatalf("generation after the load: %d, want 7", g)
	}
	st.set(func(s *memQueryStore) { s.genErr = errors.New("store down") })
	if err := r.Load(ctx, Space{}); err == nil || err.Error() != "loading the bank's memory: store down" {
		t.Fatalf("load with the store down: %v", err)
	}
	st.set(func(s *memQueryStore) { s.genErr, s.scanErr = nil, errors.New("scan broke") })
	st.set(func(s *memQueryStore) { s.gen = 8 })
	if err := r.Load(ctx, Space{}); err == nil || !strings.Contains(err.Error(), "loading the bank's memory: scan broke") {
		t.Fatalf("load with a failing scan: %v", err)
	}
	if g := r.Generation(); g != 7 {
		t.Fatalf("a failed load replaced the bank held: generation %d", g)
	}
}

// A new bank (generation 0) is read like any other; a Recaller without
// an embedder never reads vectors.
func TestRecallNewBankByWords(t *testing.T) {
	st := &memQueryStore{gen: 0, obs: []Observation{{ID: "a", Text: "alpha beta"}}, vecs: map[string][]float32{"a": axis(4, 0, 0)}}
	r := &Recaller{Store: st, Scope: "b"}
	items, semantic, err := r.Recall(context.Background(), Query{Text: "alpha beta", Limit: 5})
	if err != nil || semantic || !slices.Equal(itemIDs(items), []string{"a"}) {
		t.Fatalf("items %v, semantic %v, err %v", itemIDs(items), semantic, err)
	}
	if st.vecScans != 0 {
		t.Fatalf("vectors read %d times by words only", st.vecScans)
	}
}

// A query embedded in another space than the bank held is answered from
// that space, loaded then, whether or not the generation moved; one in the
// same space while the generation moved is answered from the bank held
// while the fresh one loads.
func TestRecallSpaces(t *testing.T) {
	ctx := context.Background()
	st := &memQueryStore{gen: 1,
		obs: []Observation{
			{ID: "eight", Text: "first observation"},
			{ID: "nine", Text: "second observation"},
		},
		vecs: map[string][]float32{"eight": axis(8, 0, 0), "nine": axis(9, 0, 0)},
	}
	emb := &scriptedEmbedder{vecs: map[string][]float32{"q8": axis(8, 0, 0.05), "q9": axis(9, 0, 0.05)}}
	r := &Recaller{Store: st, Scope: "b", Embedder: emb, Floor: 0.5}
	first := func(q string) (string, bool) {
		t.Helper()
		items, semantic, err := r.Recall(ctx, Query{Text: q, Limit: 5})
		if err != nil || len(items) == 0 {
			t.Fatalf("%s: %v %v", q, itemIDs(items), err)
		}
		return items[0].ID, semantic
	}
	if id, sem := first("q8"); id != "eight" || !sem {
		t.Fatalf("q8: %s %v", id, sem)
	}
	if id, sem := first("q9"); id != "nine" || !sem {
		t.Fatalf("q9 at the same generation: %s %v", id, sem)
	}
	st.set(func(s *memQueryStore) { s.gen = 2 })
	if id, sem := first("q8"); id != "eight" || !sem {
		t.Fatalf("q8 after the generation moved: %s %v", id, sem)
	}
	waitFor(t, func() bool { return r.Generation() == 2 })
	// The same space while the generation moves: the bank held answers.
	st.set(func(s *memQueryStore) {
		s.gen = 3
		s.vecs = map[string][]float32{"eight": axis(8, 4, 0), "nine": axis(9, 0, 0), "new": axis(8, 0, 0)}
		s.obs = append(s.obs, Observation{ID: "new", Text: "third observation"})
	})
	if id, _ := first("q8"); id != "eight" {
		t.Fatalf("q8 while generation 3 loads: %s, want the bank held", id)
	}
	waitFor(t, func() bool { return r.Generation() == 3 })
	if id, _ := first("q8"); id != "new" {
		t.Fatalf("q8 at generation 3: %s", id)
	}
	// Loading by words at a new generation replaces the bank held.
	st.set(func(s *memQueryStore) { s.gen = 4 })
	if err := r.Load(ctx, Space{}); err != nil || r.Generation() != 4 {
		t.Fatalf("load by words at generation 4: %v, holding %d", err, r.Generation())
	}
}

// Recalls that arrive while the bank loads wait for that load and use it:
// the bank is read once.
func TestRecallConcurrentLoadsShareOne(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	st := &memQueryStore{gen: 1, obs: []Observation{{ID: "a", Text: "alpha beta"}}, vecs: map[string][]float32{"a": axis(8, 0, 0)}, scanning: release}
	emb := &scriptedEmbedder{vecs: map[string][]float32{"alpha beta": axis(8, 0, 0)}}
	r := &Recaller{Store: st, Scope: "b", Embedder: emb}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = r.Recall(ctx, Query{Text: "alpha beta", Limit: 5})
		}()
		if i == 0 {
			waitFor(t, func() bool { st.mu.Lock(); defer st.mu.Unlock(); return st.scans == 1 })
		}
	}
	// The second has its query's vector: it goes on to wait for the
	// first's load.
	waitFor(t, func() bool { return emb.calls.Load() == 2 })
	close(release)
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if st.scans != 1 {
		t.Fatalf("the bank was read %d times", st.scans)
	}
}

// A bank the store does not know (generation -1) recalls nothing, and
// is not read again while it stays unknown.
func TestRecallUnknownBank(t *testing.T) {
	st := &memQueryStore{gen: -1, obs: []Observation{{ID: "a", Text: "alpha beta"}}}
	emb := &scriptedEmbedder{vecs: map[string][]float32{"alpha beta": axis(4, 0, 0)}}
	r := &Recaller{Store: st, Scope: "b", Embedder: emb}
	for range 2 {
		items, _, err := r.Recall(context.Background(), Query{Text: "alpha beta", Limit: 5})
		if err != nil || len(items) != 0 || st.scans != 1 {
			t.Fatalf("items %v, err %v, loads %d", items, err, st.scans)
		}
	}
	if g := r.Generation(); g != -1 {
		t.Fatalf("generation %d", g)
	}
}

// When the generation moves, recalls go on from the bank held while a
// fresh one loads in the background, then from the fresh one; a refresh
// that fails is reported and the bank held keeps answering.
func TestRecallRefreshesInTheBackground(t *testing.T) {
	ctx := context.Background()
	st := &memQueryStore{gen: 1, obs: []Observation{{ID: "old", Text: "green tea every morning"}}}
	var mu sync.Mutex
	var reported []string
	r := &Recaller{Store: st, Scope: "b", OnError: func(what string, err error) {
		mu.Lock()
		reported = append(reported, what+": "+err.Error())
		mu.Unlock()
	}}
	q := Query{Text: "green tea every morning", Limit: 5}
	if items, _, err := r.Recall(ctx, q); err != nil || !slices.Equal(itemIDs(items), []string{"old"}) {
		t.Fatalf("first recall: %v %v", itemIDs(items), err)
	}
	release := make(chan struct{})
	st.set(func(s *memQueryStore) {
		s.gen = 2
		s.obs = []Observation{{ID: "new", Text: "green tea every morning"}}
		s.scanning = release
	})
	// The load is held: the recall is answered from generation 1.
	if items, _, err := r.Recall(ctx, q); err != nil || !slices.Equal(itemIDs(items), []string{"old"}) {
		t.Fatalf("recall while loading: %v %v", itemIDs(items), err)
	}
	close(release)
	waitFor(t, func() bool { return r.Generation() == 2 })
	if items, _, err := r.Recall(ctx, q); err != nil || !slices.Equal(itemIDs(items), []string{"new"}) {
		t.Fatalf("recall after the load: %v %v", itemIDs(items), err)
	}
	st.set(func(s *memQueryStore) { s.gen, s.scanning, s.scanErr = 3, nil, errors.New("disk gone") })
	if items, _, err := r.Recall(ctx, q); err != nil || !slices.Equal(itemIDs(items), []string{"new"}) {
		t.Fatalf("recall while a refresh fails: %v %v", itemIDs(items), err)
	}
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reported) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if reported[0] != "refreshing the bank's indexes: loading the bank's memory: disk gone" {
		t.Fatalf("reported %q", reported)
	}
	if r.Generation() != 2 {
		t.Fatalf("the failed refresh replaced the bank: generation %d", r.Generation())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("timed out waiting")
}

// A bank not held yet is loaded in one read of the store, which gives
// its generation too; one held is checked with a read of the generation
// only. A recall that comes while a load that began before it is under
// way uses that load only when it is as of the generation read after the
// recall began: here the bank moved on meanwhile, so it loads again.
func TestRecallReadsOfTheStore(t *testing.T) {
	ctx := context.Background()
	st := &memQueryStore{gen: 1, obs: []Observation{{ID: "old", Text: "alpha beta gamma"}}}
	gens := 0
	r := &Recaller{Store: countingGens{st, &gens}, Scope: "b"}
	q := Query{Text: "alpha beta gamma", Limit: 5}
	if _, _, err := r.Recall(ctx, q); err != nil {
		t.Fatal(err)
	}
	if st.scans != 1 || gens != 0 {
		t.Fatalf("a first recall: %d loads and %d reads of the generation, want 1 and 0", st.scans, gens)
	}
	if _, _, err := r.Recall(ctx, q); err != nil {
		t.Fatal(err)
	}
	if st.scans != 1 || gens != 1 {
		t.Fatalf("a recall of the bank held: %d loads and %d reads of the generation, want 1 and 1", st.scans, gens)
	}

	release := make(chan struct{})
	st2 := &memQueryStore{gen: 1, obs: []Observation{{ID: "old", Text: "alpha beta gamma"}}, scanning: release}
	r = &Recaller{Store: st2, Scope: "b"}
	first := make(chan []Recalled)
	go func() {
		items, _, _ := r.Recall(ctx, q)
		first <- items
	}()
	waitFor(t, func() bool { st2.mu.Lock(); defer st2.mu.Unlock(); return st2.scans == 1 })
	st2.set(func(s *memQueryStore) {
		s.gen, s.scanning = 2, nil
		s.obs = []Observation{{ID: "new", Text: "alpha beta gamma"}}
	})
	second := make(chan []Recalled)
	go func() {
		items, _, _ := r.Recall(ctx, q)
		second <- items
	}()
	time.Sleep(20 * time.Millisecond) // the second waits for the first's load
	close(release)
	if got := itemIDs(<-first); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("the first recall: %v", got)
	}
	if got := itemIDs(<-second); !slices.Equal(got, []string{"new"}) {
		t.Fatalf("the second recall: %v, want the bank as of after it began", got)
	}
	if st2.scans != 2 {
		t.Fatalf("loads %d, want 2", st2.scans)
	}
}

// countingGens counts the reads of the generation.
type countingGens struct {
	*memQueryStore
	n *int
}

func (c countingGens) BankGeneration(ctx context.Context, key ScopeKey) (Generation, error) {
	c.mu.Lock()
	*c.n++
	c.mu.Unlock()
	return c.memQueryStore.BankGeneration(ctx, key)
}

// With an embedder, the nearest observation by meaning comes first even
// when it shares no word with the query, with its cosine as its score.
func TestRecallByMeaning(t *testing.T) {
	ctx := context.Background()
	const d = 8
	st := &memQueryStore{gen: 1,
		obs: []Observation{
			{ID: "twin", Text: "the cat sleeps on the sofa"},
			{ID: "far", Text: "quarterly revenue grew"},
			{ID: "words", Text: "what does the feline do"},
		},
		vecs: map[string][]float32{"twin": axis(d, 0, 0.1), "far": axis(d, 4, 0), "words": axis(d, 2, 0)},
	}
	emb := &scriptedEmbedder{vecs: map[string][]float32{"what does the feline do": axis(d, 0, 0)}}
	r := &Recaller{Store: st, Scope: "b", Embedder: emb, Floor: 0.5}
	items, semantic, err := r.Recall(ctx, Query{Text: "what does the feline do", Limit: 5})
	if err != nil || !semantic {
		t.Fatal(err, semantic)
	}
	if !slices.Equal(itemIDs(items), []string{"twin", "words"}) {
		t.Fatalf("items %v, want the twin by meaning, then the one by words; the far one under the floor", itemIDs(items))
	}
	if got, want := items[0].Score, math.Cos(0.1); math.Abs(got-want) > 0.02 {
		t.Fatalf("score %v, want the cosine %v", got, want)
	}
	if items[1].Score != 1 {
		t.Fatalf("the exact text scores %v by words, want 1", items[1].Score)
	}
	// A vector of other dimensions is compared with none of the bank's:
	// the recall is by words only.
	emb.vecs["what does the feline do"] = axis(d+1, 0, 0)
	items, semantic, err = r.Recall(ctx, Query{Text: "what does the feline do", Limit: 5})
	if err != nil || semantic || len(items) == 0 || items[0].ID != "words" {
		t.Fatalf("a query of other dimensions: %v %v %v", itemIDs(items), semantic, err)
	}
}

// A query that cannot be embedded is recalled by words, and the reason is
// reported: the server's error, the item's error, or no vector at all.
func TestRecallEmbeddingFailures(t *testing.T) {
	ctx := context.Background()
	st := &memQueryStore{gen: 1, obs: []Observation{{ID: "a", Text: "alpha beta gamma"}}, vecs: map[string][]float32{"a": axis(4, 0, 0)}}
	for _, tc := range []struct {
		name string
		emb  *scriptedEmbedder
		want string
	}{
		{"server error", &scriptedEmbedder{err: errors.New("503 from the server")}, "embedding a query: 503 from the server"},
		{"item refused", &scriptedEmbedder{errs: []error{errors.New("input is too long")}}, "embedding a query: input is too long"},
		{"no vector", &scriptedEmbedder{}, "embedding a query: the server returned no vector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			r := &Recaller{Store: st, Scope: "b", Embedder: tc.emb, OnError: func(what string, err error) { got = append(got, what+": "+err.Error()) }}
			items, semantic, err := r.Recall(ctx, Query{Text: "alpha beta gamma", Limit: 5})
			if err != nil || semantic || !slices.Equal(itemIDs(items), []string{"a"}) {
				t.Fatalf("%v %v %v", itemIDs(items), semantic, err)
			}
			if !slices.Equal(got, []string{tc.want}) {
				t.Fatalf("reported %q, want %q", got, tc.want)
			}
			// Without OnError the recall goes on all the same.
			r.OnError = nil
			if items, _, err := r.Recall(ctx, Query{Text: "alpha beta gamma", Limit: 5}); err != nil || len(items) != 1 {
				t.Fatalf("%v %v", itemIDs(items), err)
			}
		})
	}
}

// A recall whose context ends while its query is embedded stops with the
// context's error.
func TestRecallCancelledWhileEmbedding(t *testing.T) {
	st := &memQueryStore{gen: 1, obs: []Observation{{ID: "a", Text: "alpha beta gamma"}}}
	ctx, cancel := context.WithCancel(context.Background())
	emb := &scriptedEmbedder{block: make(chan struct{})}
	r := &Recaller{Store: st, Scope: "b", Embedder: emb}
	go func() {
		for emb.calls.Load() == 0 {
			runtime.Gosched()
		}
		cancel()
	}()
	if _, _, err := r.Recall(ctx, Query{Text: "alpha", Limit: 5}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
}

// Loading the vectors fails the recall with the reason.
func TestRecallVectorLoadFails(t *testing.T) {
	st := &memQueryStore{gen: 1, obs: []Observation{{ID: "a", Text: "alpha"}}, vecErr: errors.New("vectors unreadable")}
	r := &Recaller{Store: st, Scope: "b", Embedder: &scriptedEmbedder{vecs: map[string][]float32{"alpha": axis(4, 0, 0)}}}
	if _, _, err := r.Recall(context.Background(), Query{Text: "alpha", Limit: 5}); err == nil || err.Error() != "loading the bank's memory: vectors unreadable" {
		t.Fatalf("err %v", err)
	}
}

// Tags keep only items with one of them, and are looked for deeper in the
// ranking than a recall without tags looks (16 times the limit, at least
// 256 candidates): the only tagged observation, ranked 200th by words, is
// found.
func TestRecallTagsLookDeep(t *testing.T) {
	st := &memQueryStore{gen: 1, tags: map[string][]string{}}
	for i := 0; i < 300; i++ {
		// Fewer shared words the further down: o000 is the query's text.
		words := []string{"amber", "basil", "cedar", "dune", "ember", "fjord", "grove", "heath"}
		text := fmt.Sprintf("%s z%03d", strings.Join(words[:8-min(7, i/40)], " "), i)
		id := fmt.Sprintf("o%03d", i)
		st.obs = append(st.obs, Observation{ID: id, Text: text})
		st.tags[id] = []string{"other"}
	}
	st.tags["o200"] = []string{"wanted", "other"}
	st.tags["o290"] = []string{"deep"}
	r := &Recaller{Store: st, Scope: "b"}
	items, _, err := r.Recall(context.Background(), Query{Text: "amber basil cedar dune ember fjord grove heath", Limit: 1, Tags: []string{"wanted"}})
	if err != nil || !slices.Equal(itemIDs(items), []string{"o200"}) {
		t.Fatalf("items %v, err %v: the tagged observation must be found", itemIDs(items), err)
	}
	// 16 times a limit of 20 reaches past 256.
	items, _, err = r.Recall(context.Background(), Query{Text: "amber basil cedar dune ember fjord grove heath", Limit: 20, Tags: []string{"deep"}})
	if err != nil || !slices.Equal(itemIDs(items), []string{"o290"}) {
		t.Fatalf("items %v, err %v: o290 must be found", itemIDs(items), err)
	}
	// Without tags, the limit holds and the best comes first.
	items, _, err = r.Recall(context.Background(), Query{Text: "amber basil cedar dune ember fjord grove heath", Limit: 3})
	if err != nil || len(items) != 3 || items[0].ID != "o000" {
		t.Fatalf("items %v, err %v", itemIDs(items), err)
	}
	// MinScore drops exactly what scores under it.
	all, _, err := r.Recall(context.Background(), Query{Text: "amber basil cedar dune ember fjord grove heath", Limit: 300})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, it := range all {
		if it.Score >= all[40].Score {
			want = append(want, it.ID)
		}
	}
	items, _, err = r.Recall(context.Background(), Query{Text: "amber basil cedar dune ember fjord grove heath", Limit: 300, MinScore: all[40].Score})
	if err != nil || !slices.Equal(itemIDs(items), want) || len(want) == len(all) {
		t.Fatalf("MinScore %v kept %d of %d, want %d", all[40].Score, len(items), len(all), len(want))
	}
}

// Pending facts come as kind "fact", scored by words plus 0.25 per shared
// entity; they are read in full once per generation, then from the newest
// seen on (less pendingOverlap), at most MaxPending held.
func TestRecallPendingFacts(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := &memQueryStore{gen: 1,
		obs: []Observation{{ID: "o", Text: "alice likes green tea"}},
		pending: []Fact{
			{ID: "f1", Text: "alice drinks green tea daily", Entities: []string{"Alice"}, Tags: []string{"t"}, CreatedAt: t0},
			{ID: "f2", Text: "bob drinks coffee", CreatedAt: t0.Add(time.Minute)},
		},
	}
	r := &Recaller{Store: st, Scope: "b"}
	q := Query{Text: "alice green tea", Limit: 10, IncludePending: true}
	items, _, err := r.Recall(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	var fact *Recalled
	for i := range items {
		if items[i].ID == "f1" {
			fact = &items[i]
		}
	}
	if fact == nil || fact.Kind != KindFact || !slices.Equal(fact.SourceFactIDs, []string{"f1"}) || fact.ProofCount != 1 {
		t.Fatalf("items %+v: f1 must come as a fact", items)
	}
	want := min(1, Similarity(Trigrams(q.Text), Trigrams("alice drinks green tea daily"))+0.25)
	if fact.Score != want {
		t.Fatalf("f1 scores %v, want %v (words plus 0.25 for alice)", fact.Score, want)
	}
	for _, it := range items {
		if it.ID == "o" && it.Kind != KindObservation {
			t.Fatalf("o comes as %q", it.Kind)
		}
	}
	// The next read starts at the newest fact seen, less the overlap.
	st.set(func(s *memQueryStore) {
		s.pending = append(s.pending, Fact{ID: "f3", Text: "alice green tea again", CreatedAt: t0.Add(2 * time.Minute)})
	})
	items, _, err = r.Recall(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(itemIDs(items), "f3") {
		t.Fatalf("items %v: the new fact f3 is missing", itemIDs(items))
	}
	st.mu.Lock()
	sinces, limits := slices.Clone(st.sinces), slices.Clone(st.limits)
	st.mu.Unlock()
	if !sinces[0].IsZero() || !sinces[1].Equal(t0.Add(time.Minute-5*time.Second)) || limits[0] != 100000 {
		t.Fatalf("reads since %v, limits %v", sinces, limits)
	}
	// A moved generation reads them all again; MaxPending bounds what is held.
	st.set(func(s *memQueryStore) { s.gen = 2 })
	r2 := &Recaller{Store: st, Scope: "b", MaxPending: 2}
	items, _, err = r2.Recall(ctx, Query{Text: "alice green tea", Limit: 10, IncludePending: true, MinScore: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	facts := 0
	for _, it := range items {
		if it.Kind == KindFact {
			facts++
		}
	}
	if facts != 1 || slices.Contains(itemIDs(items), "f3") {
		t.Fatalf("items %v: MaxPending 2 holds f1 and f2 only", itemIDs(items))
	}
	st.mu.Lock()
	if l := st.limits[len(st.limits)-1]; l != 2 || !st.sinces[len(st.sinces)-1].IsZero() {
		t.Fatalf("limit %d since %v", l, st.sinces[len(st.sinces)-1])
	}
	st.mu.Unlock()
	// What MaxPending holds is not passed by later reads either.
	st.set(func(s *memQueryStore) {
		s.pending = append(s.pending, Fact{ID: "f4", Text: "alice green tea later", CreatedAt: t0.Add(3 * time.Minute)})
	})
	items, _, err = r2.Recall(ctx, Query{Text: "alice green tea", Limit: 10, IncludePending: true, MinScore: 0.01})
	if err != nil || slices.Contains(itemIDs(items), "f4") || slices.Contains(itemIDs(items), "f3") {
		t.Fatalf("items %v %v: MaxPending 2 is full", itemIDs(items), err)
	}
	// Tags and MinScore apply to facts too.
	items, _, err = r.Recall(ctx, Query{Text: "alice green tea", Limit: 10, IncludePending: true, Tags: []string{"t"}})
	if err != nil || !slices.Equal(itemIDs(items), []string{"f1"}) {
		t.Fatalf("items %v %v: only f1 has tag t", itemIDs(items), err)
	}
	// A store that cannot list them fails the recall.
	st.set(func(s *memQueryStore) { s.pendErr = errors.New("pending unreadable") })
	if _, _, err := r.Recall(ctx, q); err == nil || err.Error() != "pending unreadable" {
		t.Fatalf("err %v", err)
	}
}

// A pending fact scores 0.25 for each entity it shares with the query's
// words; a new bank's (generation 0) pending facts are read from the
// watermark on, as any bank's.
func TestRecallPendingEntities(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := &memQueryStore{gen: 0, pending: []Fact{{ID: "f", Text: "drinks green tea", Entities: []string{"Alice", "Bob", "Carol"}, CreatedAt: t0}}}
	r := &Recaller{Store: st, Scope: "b"}
	q := Query{Text: "do alice and bob drink tea", Limit: 5, IncludePending: true}
	for range 2 {
		items, _, err := r.Recall(ctx, q)
		if err != nil || len(items) != 1 {
			t.Fatalf("%v %v", itemIDs(items), err)
		}
		if want := min(1, Similarity(Trigrams(q.Text), Trigrams("drinks green tea"))+0.5); items[0].Score != want {
			t.Fatalf("score %v, want %v (words plus 0.25 for alice and for bob)", items[0].Score, want)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.sinces[0].IsZero() || !st.sinces[1].Equal(t0.Add(-5*time.Second)) {
		t.Fatalf("reads since %v: the second from the watermark", st.sinces)
	}
}

// A query's entities are its words and pairs of words, lower case, at most
// the first 64 words.
func TestQueryEntities(t *testing.T) {
	got := queryEntities("Alice's TEA-time, with Bob.")
	want := []string{"alice's", "alice's tea-time", "tea-time", "tea-time with", "with", "with bob", "bob"}
	if !slices.Equal(got, want) {
		t.Fatalf("%q, want %q", got, want)
	}
	long := strings.Repeat("w ", 100)
	if n := len(queryEntities(long)); n != 64+63 {
		t.Fatalf("%d entities of 100 words, want 127 (64 words, 63 pairs)", n)
	}
}

// TestRecallerBytes: what Bytes says a loaded bank holds is what its load
// adds to the heap, within a fifth, by words only and with vectors: 500
// scopes of 20 observations as users' scopes are (ten words a text, an
// entity, a source, a tag), each loaded by a Recaller of its own as serve
// holds them. The index cache of serve is bounded by this estimate, so a
// change that makes a loaded bank larger without counting it fails here.
func TestRecallerBytes(t *testing.T) {
	if r := (&Recaller{Store: &memQueryStore{}, Scope: "b"}); r.Bytes() != 0 {
		t.Fatalf("before a load: %d", r.Bytes())
	}
	for _, dims := range []int{0, 384} {
		rng := rand.New(rand.NewPCG(1, 2))
		words := madeUpWords(rng, 2000)
		const scopes, per = 500, 20
		stores := make([]*memQueryStore, scopes)
		for s := range stores {
			st := &memQueryStore{gen: 1, tags: map[string][]string{}, vecs: map[string][]float32{}}
			for j := 0; j < per; j++ {
				id := fmt.Sprintf("user-%05d-%02d", s, j)
				text := words[rng.IntN(len(words))]
				for range 9 {
					text += " " + words[rng.IntN(len(words))]
				}
				st.obs = append(st.obs, Observation{ID: id, Text: text, SourceFactIDs: []string{id}, Entities: []string{"Person " + words[rng.IntN(100)]}})
				st.tags[id] = []string{"seed"}
				if dims > 0 {
					v := make([]float32, dims)
					for i := range v {
						v[i] = float32(rng.NormFloat64())
					}
					st.vecs[id] = v
				}
			}
			stores[s] = st
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		rs := make([]*Recaller, scopes)
		var estimate int64
		for s := range rs {
			rs[s] = &Recaller{Store: stores[s], Scope: "b"}
			if err := rs[s].Load(context.Background(), Space{Model: "m", Dims: dims}); err != nil {
				t.Fatal(err)
			}
			estimate += rs[s].Bytes()
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(rs)
		heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		t.Logf("dims %d: %d bytes a scope on the heap, %d estimated", dims, heap/scopes, estimate/scopes)
		if r := float64(estimate) / float64(heap); r < 0.8 || r > 1.25 {
			t.Errorf("dims %d: the estimate is %.2f of the heap the loads took (%d and %d bytes a scope)", dims, r, estimate/scopes, heap/scopes)
		}
	}
}

// Recall marks each item trusted or not by the Recaller's Trust, an
// observation by its provenance and a pending fact by its source; with
// TrustedOnly it keeps the trusted ones alone, and looks as deep for them
// as tags do. The zero Trust trusts all.
func TestRecallTrust(t *testing.T) {
	ctx := context.Background()
	st := &memQueryStore{gen: 1, pending: []Fact{
		{ID: "f-crm", Text: "amber basil cedar pending from the crm", Source: "crm"},
		{ID: "f-user", Text: "amber basil cedar pending from the user", Source: "user"},
		{ID: "f-none", Text: "amber basil cedar pending without a source"},
	}}
	for i := 0; i < 300; i++ {
		words := []string{"amber", "basil", "cedar", "dune", "ember", "fjord", "grove", "heath"}
		prov := []string{"user"}
		if i == 290 {
			prov = []string{"crm"}
		}
		if i == 5 {
			prov = []string{"crm", "user"}
		}
		st.obs = append(st.obs, Observation{ID: fmt.Sprintf("o%03d", i), Text: fmt.Sprintf("%s z%03d", strings.Join(words[:8-min(7, i/40)], " "), i), Provenance: prov})
	}
	tr, err := NewTrust([]string{"crm"})
	if err != nil {
		t.Fatal(err)
	}
	r := &Recaller{Store: st, Scope: "b", Trust: tr}
	const query = "amber basil cedar dune ember fjord grove heath"
	items, _, err := r.Recall(ctx, Query{Text: query, Limit: 20, TrustedOnly: true, IncludePending: true})
	if got := itemIDs(items); err != nil || !slices.Equal(got, []string{"f-crm", "o290"}) && !slices.Equal(got, []string{"o290", "f-crm"}) {
		t.Fatalf("trustedOnly: %v, err %v; want o290 (found deep) and f-crm", got, err)
	}
	for _, it := range items {
		if !it.Trusted {
			t.Errorf("%s is not marked trusted", it.ID)
		}
	}
	all, _, err := r.Recall(ctx, Query{Text: query, Limit: 400, IncludePending: true})
	if err != nil || len(all) != 303 {
		t.Fatalf("%d items, err %v", len(all), err)
	}
	for _, it := range all {
		if want := it.ID == "o290" || it.ID == "f-crm"; it.Trusted != want {
			t.Errorf("%s: trusted %v, want %v", it.ID, it.Trusted, want)
		}
	}
	everyone := &Recaller{Store: st, Scope: "b"}
	all, _, err = everyone.Recall(ctx, Query{Text: query, Limit: 400, IncludePending: true, TrustedOnly: true})
	if err != nil || len(all) != 303 {
		t.Fatalf("every source trusted: %d items, err %v", len(all), err)
	}
	for _, it := range all {
		if !it.Trusted {
			t.Errorf("every source trusted: %s is not marked trusted", it.ID)
		}
	}
	if fresh := everyone.ForScope("b2"); !fresh.Trust.Everyone() {
		t.Error("ForScope dropped the trust")
	}
	if fresh := r.ForScope("b2"); !slices.Equal(fresh.Trust.Sources(), []string{"crm"}) {
		t.Error("ForScope dropped the trust")
	}
}
