package consolidation

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
)

// QueryStore is what recall for a query reads from a store, all of one
// scope: its generation (moved by every applied batch), its observations
// and their vectors once per generation, and its pending facts.
type QueryStore interface {
	// BankGeneration is a scope's generation (Applied -1 for a scope the
	// store does not know) and its bank's erasures.
	BankGeneration(ctx context.Context, key ScopeKey) (Generation, error)
	// LoadRecallable reads what a Recaller holds of a scope, as of one
	// generation, which it answers (Applied -1 for a scope the store does
	// not know): the scope's observations with their source fact ids and
	// those facts' distinct tags, and their vectors in sp (none when
	// sp.Dims is 0), into into.
	LoadRecallable(ctx context.Context, key ScopeKey, sp Space, into RecallableSink) (Generation, error)
	// PendingFacts returns up to limit facts of the scope not consolidated
	// yet, created at or after since, oldest first.
	PendingFacts(ctx context.Context, key ScopeKey, since time.Time, limit int) ([]Fact, error)
}

// RecallableSink receives what QueryStore.LoadRecallable reads; the
// vectors may come before or after their observations.
type RecallableSink interface {
	// Grow hears how many observations are coming, when the store knows
	// it before the first.
	Grow(n int)
	// Observation is an observation with its source fact ids, and the
	// distinct tags of those facts.
	Observation(o Observation, tags []string)
	// Quantized is an observation's vector as Quantize made it; q is
	// valid only during the call.
	Quantized(id string, q []int8, scale float32)
	// Vector is an observation's vector stored unquantized; vec is valid
	// only during the call.
	Vector(id string, vec []float32)
}

// Query asks a bank what it remembers about a text.
type Query struct {
	Text string
	// Limit is how many items to return at most.
	Limit int
	// MinScore drops items scoring below it (0..1).
	MinScore float64
	// Tags, when set, keeps only items with one of them: a fact's own
	// tags, an observation's source facts' tags.
	Tags []string
	// IncludePending adds facts not consolidated yet, as kind "fact".
	IncludePending bool
	// TrustedOnly keeps only trusted items (Recaller.Trust): observations
	// whose every source is trusted, pending facts of a trusted source.
	TrustedOnly bool
}

// Recalled is one item of a query's answer.
type Recalled struct {
	Observation
	// Kind is "observation" or "fact" (a pending fact).
	Kind string
	// Score is 0..1: the cosine where the item was found by meaning, the
	// trigram similarity plus 0.25 per shared entity (at most 1) where it
	// was found by its words, the greater of the two when both.
	Score float64
	// Trusted tells whether the item is trusted (Recaller.Trust).
	Trusted bool
}

// Item kinds of Recalled.
const (
	KindObservation = "observation"
	KindFact        = "fact"
)

// Recaller answers queries over one bank from indexes held in memory: the
// lexical index (LexIndex) and, with an Embedder, the vector index
// (MemIndex) of the bank's pinned space, with the observations themselves.
// They are loaded once and again only when the bank's generation moves;
// meanwhile the previous ones keep answering. Safe for concurrent use.
type Recaller struct {
	Store QueryStore
	// Scope is the key of the bank's scope the Recaller answers for
	// (BankID.Scope; the bank's own id for its shared scope).
	Scope ScopeKey
	// Embedder embeds queries with the bank's embeddings settings; nil
	// recalls by words and entities only.
	Embedder Embedder
	// Floor is the least cosine of an item found by meaning.
	Floor float64
	// MaxPending bounds the pending facts held for IncludePending.
	MaxPending int
	// Trust is the bank's trusted sources; the zero Trust trusts every
	// source.
	Trust Trust
	// OnError hears of a refresh that failed in the background and of a
	// query that could not be embedded (recall then goes on by words).
	OnError func(what string, err error)

	loading sync.Mutex
	cur     atomic.Pointer[bankMemory]
	pend    pendingFacts
	gens    genGate
}

// ForScope is a new Recaller like r (store, embedder, floor, bounds,
// trust, error handler) for another scope of r's bank.
func (r *Recaller) ForScope(key ScopeKey) *Recaller {
	return &Recaller{Store: r.Store, Scope: key, Embedder: r.Embedder, Floor: r.Floor, MaxPending: r.MaxPending, Trust: r.Trust, OnError: r.OnError}
}

// genGate coalesces the reads of the bank's generation that concurrent
// recalls make: at most one is in flight, and the callers that arrive
// meanwhile share the next one, which starts after they arrived, so each
// caller sees a generation read after its call began.
type genGate struct {
	mu      sync.Mutex
	running bool
	next    *genCall
}

type genCall struct {
	done chan struct{}
	gen  Generation
	err  error
}

// genReadTimeout bounds one shared read of the generation.
const genReadTimeout = 30 * time.Second

// startGeneration starts a read of the bank's generation, or joins the
// next one, shared with the concurrent callers; waitGeneration waits for it.
func (r *Recaller) startGeneration() *genCall {
	g := &r.gens
	g.mu.Lock()
	if g.next == nil {
		g.next = &genCall{done: make(chan struct{})}
	}
	c := g.next
	if !g.running {
		g.running, g.next = true, nil
		go r.readGenerations(c)
	}
	g.mu.Unlock()
	return c
}

func waitGeneration(ctx context.Context, c *genCall) (Generation, error) {
	if err := ctx.Err(); err != nil {
		return Generation{}, err
	}
	select {
	case <-c.done:
		return c.gen, c.err
	case <-ctx.Done():
		return Generation{}, ctx.Err()
	}
}

// readGenerations reads for c, then for the callers that came while it
// read, until none is waiting.
func (r *Recaller) readGenerations(c *genCall) {
	g := &r.gens
	for {
		ctx, cancel := context.WithTimeout(context.Background(), genReadTimeout)
		c.gen, c.err = r.Store.BankGeneration(ctx, r.Scope)
		cancel()
		close(c.done)
		g.mu.Lock()
		if c = g.next; c == nil {
			g.running = false
			g.mu.Unlock()
			return
		}
		g.next = nil
		g.mu.Unlock()
	}
}

// bankMemory is a bank as of a generation.
type bankMemory struct {
	gen   Generation
	sp    Space // Dims 0 without vectors
	obs   map[string]*memObs
	lexMu sync.Mutex // LexIndex.Search reuses scratch space
	lex   *LexIndex
	vec   *MemIndex
	// bytes estimates what it holds (Recaller.Bytes).
	bytes int64
	// bulk builds the lexical index in bulk (Grow told a small count).
	bulk bool
}

// Estimates of what a loaded observation holds beside its text and its
// lexical postings (LexIndex.bytes): the record, its map entry and ids;
// a vector holds its int8 row, its signs and its id.
const (
	memObsBytes    = 320
	memSourceBytes = 64
	memVectorBytes = 100
)

// estimate sets m.bytes from what m holds.
func (m *bankMemory) estimate() {
	n := m.lex.bytes()
	for _, o := range m.obs {
		n += memObsBytes + int64(len(o.Text)) + int64(len(o.SourceFactIDs))*memSourceBytes
		for _, t := range o.tags {
			n += int64(len(t)) + 16
		}
	}
	if m.vec != nil {
		n += int64(m.vec.rows()) * int64(m.vec.dims+8*m.vec.words+memVectorBytes)
	}
	m.bytes = n
}

// Bytes estimates the memory the Recaller's loaded copy of its bank holds
// (0 before the first recall): its observations, their lexical index and
// their vectors.
func (r *Recaller) Bytes() int64 {
	if m := r.cur.Load(); m != nil {
		return m.bytes
	}
	return 0
}

func (m *bankMemory) Grow(n int) {
	if len(m.obs) == 0 {
		m.obs = make(map[string]*memObs, n)
		m.bulk = n <= maxBulkLexical
	}
	if m.vec != nil {
		m.vec.Grow(n)
	}
}

func (m *bankMemory) Observation(o Observation, tags []string) {
	m.obs[o.ID] = &memObs{Observation: o, tags: tags}
	if m.bulk {
		m.lex.Add(o.ID, o.Text, o.Entities)
	} else {
		m.lex.Put(o.ID, o.Text, o.Entities)
	}
}

// maxBulkLexical is the most observations whose lexical index is built
// in bulk (LexIndex.Add): 16 bytes a gram until it is frozen, four times
// the postings' own, where a growing index holds about 90 in many small
// objects. A larger bank grows its index, then freezes it.
const maxBulkLexical = 4096

func (m *bankMemory) Quantized(id string, q []int8, scale float32) {
	if m.vec != nil {
		m.vec.PutQuantized(id, q, scale)
	}
}

func (m *bankMemory) Vector(id string, vec []float32) {
	if m.vec != nil {
		m.vec.Put(id, vec)
	}
}

type memObs struct {
	Observation
	tags []string
}

// pendingFacts are the bank's facts not consolidated yet, read again in
// full when the generation moves and otherwise from a watermark on.
type pendingFacts struct {
	mu    sync.Mutex
	gen   Generation
	since time.Time
	facts map[string]Fact
	lex   *LexIndex
}

// pendingOverlap re-reads facts this much older than the newest seen: a
// writer's clock or a transaction that commits late may place a fact
// before the watermark.
const pendingOverlap = 5 * time.Second

// Generation is the generation of the bank the Recaller holds; -1 before
// the first load.
func (r *Recaller) Generation() int64 {
	if m := r.cur.Load(); m != nil {
		return m.gen.Applied
	}
	return -1
}

// Load loads the bank now (for the lexical index, and for the vectors of
// sp when sp.Dims > 0).
func (r *Recaller) Load(ctx context.Context, sp Space) error {
	r.loading.Lock()
	defer r.loading.Unlock()
	_, err := r.loadLocked(ctx, sp)
	return err
}

// memory returns the bank's memory. Without gc (nothing was held when the
// recall began) it is loaded now. Else, as of the generation gc reads:
// the one held when the generation and space match; else, when one for
// sp is held, that one while a fresh one loads in the background; else a
// fresh one.
func (r *Recaller) memory(ctx context.Context, sp Space, gc *genCall) (*bankMemory, error) {
	if gc == nil {
		return r.load(ctx, sp, nil)
	}
	gen, err := waitGeneration(ctx, gc)
	if err != nil {
		return nil, err
	}
	m := r.cur.Load()
	if m != nil && m.gen == gen && (sp.Dims == 0 || m.sp == sp) {
		return m, nil
	}
	// A copy behind the store is served while a fresh one loads, unless
	// something was erased since it was made: erased data is never served.
	if m != nil && gen.Applied >= 0 && m.gen.Erasures == gen.Erasures && (sp.Dims == 0 || m.sp == sp) {
		if r.loading.TryLock() {
			go func() {
				defer r.loading.Unlock()
				bctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				if _, err := r.loadLocked(bctx, m.sp); err != nil && r.OnError != nil {
					r.OnError("refreshing the bank's indexes", err)
				}
			}()
		}
		return m, nil
	}
	return r.load(ctx, sp, gc)
}

// load loads the bank, or waits for the load under way and uses it when
// it is as of the generation gc reads (one is read when gc is nil): the
// generation read after the recall began, so never a copy older than the
// recall.
func (r *Recaller) load(ctx context.Context, sp Space, gc *genCall) (*bankMemory, error) {
	if !r.loading.TryLock() {
		if gc == nil {
			gc = r.startGeneration()
		}
		r.loading.Lock()
		if m := r.cur.Load(); m != nil && (sp.Dims == 0 || m.sp == sp) {
			if gen, err := waitGeneration(ctx, gc); err == nil && m.gen == gen {
				r.loading.Unlock()
				return m, nil
			}
		}
	}
	defer r.loading.Unlock()
	return r.loadLocked(ctx, sp)
}

// loadLocked reads the bank in full, in one read of the store; call with
// r.loading held.
func (r *Recaller) loadLocked(ctx context.Context, sp Space) (*bankMemory, error) {
	m := &bankMemory{sp: sp, obs: map[string]*memObs{}, lex: NewLexIndex()}
	if sp.Dims > 0 {
		m.vec = NewMemIndex(sp.Dims)
	}
	gen, err := r.Store.LoadRecallable(ctx, r.Scope, sp, m)
	if err != nil {
		return nil, fmt.Errorf("loading the bank's memory: %w", err)
	}
	m.gen = gen
	m.lex.Freeze()
	if old := r.cur.Load(); old != nil && old.sp.Dims > 0 && sp.Dims == 0 && old.gen == gen {
		return old, nil
	}
	m.estimate()
	r.cur.Store(m)
	return m, nil
}

// Recall answers q: the bank's observations nearest the query by meaning
// (when the Recaller has an Embedder and the query embeds) and by words
// and entities, the two rankings interleaved as consolidation's recall
// interleaves them, then filtered by tags, MinScore and TrustedOnly and
// cut to Limit; each item says whether it is trusted (Recaller.Trust).
// semantic says whether the meaning arm took part.
func (r *Recaller) Recall(ctx context.Context, q Query) (items []Recalled, semantic bool, err error) {
	// The generation is read while the query is embedded; a bank not held
	// yet is loaded at once, its generation read with it.
	var gc *genCall
	if r.cur.Load() != nil {
		gc = r.startGeneration()
	}
	var qvec []float32
	sp := Space{}
	if r.Embedder != nil {
		emb, eerr := r.Embedder.Embed(ctx, []string{q.Text})
		switch {
		case eerr == nil && len(emb.Vectors) == 1 && emb.Vectors[0] != nil:
			qvec = emb.Vectors[0]
			sp = Space{Model: r.Embedder.Model(), Dims: len(qvec)}
		case r.OnError != nil:
			if eerr == nil && len(emb.Errs) == 1 && emb.Errs[0] != nil {
				eerr = emb.Errs[0]
			}
			if eerr == nil {
				eerr = fmt.Errorf("the server returned no vector")
			}
			r.OnError("embedding a query", eerr)
		}
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
	}
	m, err := r.memory(ctx, sp, gc)
	if err != nil {
		return nil, false, err
	}
	k := max(4*q.Limit, 32)
	if len(q.Tags) > 0 {
		k = max(16*q.Limit, 256)
	}
	if q.TrustedOnly && !r.Trust.Everyone() {
		// Kept only in part, as with tags: look as deep.
		k = max(16*q.Limit, 256)
	}
	grams := Trigrams(q.Text)
	ents := queryEntities(q.Text)
	// sharedEntities' count, with the query's set built once.
	entSet := make(map[string]bool, len(ents))
	for _, e := range ents {
		entSet[strings.ToLower(strings.TrimSpace(e))] = true
	}
	// One set, cleared, holds each candidate's trigrams in turn.
	cand := make(map[string]struct{}, 2*len(grams)+16)
	lexScore := func(text string, entities []string) float64 {
		clear(cand)
		eachGram(text, func(g []byte) { cand[string(g)] = struct{}{} })
		shared := 0
		for _, e := range entities {
			if entSet[strings.ToLower(strings.TrimSpace(e))] {
				shared++
			}
		}
		return min(1, Similarity(grams, cand)+0.25*float64(shared))
	}
	score := map[string]float64{}
	var sem, lex []Candidate
	if qvec != nil && m.vec != nil && m.vec.Len() > 0 && len(qvec) == m.sp.Dims {
		semantic = true
		for _, h := range m.vec.Nearest([][]float32{qvec}, k, r.Floor)[0] {
			if o, ok := m.obs[h.ID]; ok {
				sem = append(sem, Candidate{Observation: o.Observation})
				score[h.ID] = min(1, max(0, h.Similarity))
			}
		}
	}
	m.lexMu.Lock()
	hits := m.lex.search(Fact{Text: q.Text, Entities: ents}, k)
	m.lexMu.Unlock()
	for _, h := range hits {
		if o, ok := m.obs[h.id]; ok {
			lex = append(lex, Candidate{Observation: o.Observation})
			score[h.id] = max(score[h.id], min(1, h.s))
		}
	}
	keep := func(s float64, tags []string, o Observation) bool {
		return s >= q.MinScore && (len(q.Tags) == 0 || slices.ContainsFunc(tags, func(t string) bool { return slices.Contains(q.Tags, t) })) &&
			(!q.TrustedOnly || r.Trust.Observation(o))
	}
	var obsHits []Candidate
	for _, c := range fuse(sem, lex) {
		if keep(score[c.ID], m.obs[c.ID].tags, c.Observation) {
			obsHits = append(obsHits, c)
		}
	}
	var factHits []Candidate
	if q.IncludePending {
		facts, err := r.pending(ctx, m.gen, Fact{Text: q.Text, Entities: ents}, k)
		if err != nil {
			return nil, false, err
		}
		for _, f := range facts {
			s := lexScore(f.Text, f.Entities)
			o := Observation{ID: f.ID, Text: f.Text, ProofCount: 1, OccurredStart: f.OccurredStart, OccurredEnd: f.OccurredEnd,
				Entities: f.Entities, SourceFactIDs: []string{f.ID}, Provenance: []string{SourceOf(f)}}
			if keep(s, f.Tags, o) {
				score[f.ID] = s
				factHits = append(factHits, Candidate{Observation: o})
			}
		}
	}
	isFact := map[string]bool{}
	for _, c := range factHits {
		isFact[c.ID] = true
	}
	for _, c := range fuse(obsHits, factHits) {
		if len(items) == q.Limit {
			break
		}
		kind := KindObservation
		if isFact[c.ID] {
			kind = KindFact
		}
		items = append(items, Recalled{Observation: c.Observation, Kind: kind, Score: score[c.ID], Trusted: r.Trust.Observation(c.Observation)})
	}
	return items, semantic, nil
}

// pending searches the bank's pending facts by words and entities,
// reading them again in full when the generation moved (a batch applied
// consolidates facts) and otherwise only those newer than the watermark.
func (r *Recaller) pending(ctx context.Context, gen Generation, f Fact, limit int) ([]Fact, error) {
	p := &r.pend
	p.mu.Lock()
	defer p.mu.Unlock()
	since := p.since.Add(-pendingOverlap)
	if p.lex == nil || p.gen != gen || gen.Applied < 0 {
		p.facts, p.lex, p.gen, since = map[string]Fact{}, NewLexIndex(), gen, time.Time{}
	}
	maxPending := r.MaxPending
	if maxPending <= 0 {
		maxPending = 100000
	}
	facts, err := r.Store.PendingFacts(ctx, r.Scope, since, maxPending)
	if err != nil {
		return nil, err
	}
	for _, pf := range facts {
		if _, ok := p.facts[pf.ID]; !ok && len(p.facts) < maxPending {
			p.facts[pf.ID] = pf
			p.lex.Put(pf.ID, pf.Text, pf.Entities)
		}
		if pf.CreatedAt.After(p.since) {
			p.since = pf.CreatedAt
		}
	}
	var out []Fact
	for _, id := range p.lex.Search(f, limit) {
		out = append(out, p.facts[id])
	}
	return out, nil
}

// queryEntities are the words of a query and their pairs, lower case, as
// candidate entity names: an observation's entity matches when one of
// them is its name.
func queryEntities(text string) []string {
	words := strings.FieldsFunc(strings.ToLower(text), func(c rune) bool {
		return !unicode.IsLetter(c) && !unicode.IsDigit(c) && c != '-' && c != '_' && c != '.' && c != '\''
	})
	if len(words) > 64 {
		words = words[:64]
	}
	out := make([]string, 0, 2*len(words))
	for i, w := range words {
		w = strings.Trim(w, ".'-_")
		if w == "" {
			continue
		}
		out = append(out, w)
		if i+1 < len(words) {
			out = append(out, w+" "+strings.Trim(words[i+1], ".'-_"))
		}
	}
	return out
}
