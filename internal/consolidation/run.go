package consolidation

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/promptops/promptops/internal/telemetry"
	"github.com/promptops/promptops/internal/tokens"
)

// A run works through the bank's scopes: each scope's facts are claimed,
// recalled against, sent to the LLM and applied only with that scope's
// observations, so one call never carries two scopes. The scopes with
// pending facts take turns, a batch each (round robin), so a scope with
// 10,000 pending facts does not starve the others; Parallelism of them are
// worked on at once. What the scopes share (the token budget, MaxFacts,
// the bank's count, the summary) is a runState.

// run is a run's work on one scope.
type run struct {
	*Engine
	st *runState
	// key is the scope's: every read and write of the run's work on the
	// scope is of its rows. scope is its name, "" the shared scope.
	key          ScopeKey
	scope        string
	id           string
	enc          *tokens.Encoder
	system       string
	systemTokens int
	// count is the scope's observations.
	count int
	// sum is this scope's share of the run's summary, added to the run's
	// after every batch.
	sum Summary
	// alone caches whether a fact fits a call on its own, so a fact too
	// large is failed once, not re-tokenized at every split level.
	alone map[string]bool
	// vec is the embedding state; nil when recall is lexical only.
	vec *vectors
	// seen are the facts this run claimed in the scope.
	seen map[string]bool
	// next is the scope's next batch, claimed while the current one is
	// worked on when no other scope waits.
	next *nextClaim
	// counted says whether count was read.
	counted bool
}

// runState is what a run's scopes share.
type runState struct {
	mu sync.Mutex
	// sum is the run's summary: the scopes' sums added up.
	sum Summary
	// tokens are the tokens used, every scope's; reserved those of the
	// calls under way, at their caps.
	tokens, reserved int64
	// taken counts the facts claimed toward MaxFacts, booked those of the
	// claims under way (at their limits); settled is signalled when a
	// booking settles or the run stops.
	taken, booked int
	settled       *sync.Cond
	// bankCount is the bank's observations, every scope's.
	bankCount int
	// stopped is set when the run must start nothing more: the budget
	// was reached or a scope failed.
	stopped bool

	// progress serialises the progress lines of the scopes.
	progress sync.Mutex
}

// reserve books n tokens for a call when they fit max with what was used
// and booked; release gives the booking back once the call's tokens are
// spent.
func (st *runState) reserve(n, max int64) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.tokens+st.reserved+n > max {
		return false
	}
	st.reserved += n
	return true
}

func (st *runState) release(n int64) {
	st.mu.Lock()
	st.reserved -= n
	st.mu.Unlock()
}

func (st *runState) spend(n int64) {
	st.mu.Lock()
	st.tokens += n
	st.mu.Unlock()
}

func (st *runState) used() int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.tokens
}

func (st *runState) counted(delta int) {
	st.mu.Lock()
	st.bankCount += delta
	st.mu.Unlock()
}

// take books up to n facts toward max for a claim; 0 when the run has
// taken its share or stopped. While claims under way may still give back
// part of their bookings, it waits for them to settle rather than answer 0
// (a scope is not dropped from the run, nor its batch split, because
// others booked whole batches). Every booking settles in the goroutine that claims, so the
// wait never depends on a scope's turn.
func (st *runState) take(n, max int) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	for {
		if st.stopped {
			return 0
		}
		// A part of a batch only when no claim may give facts back: a
		// scope's batch is not split because others' are under way.
		if free := max - st.taken - st.booked; free >= n || (free > 0 && st.booked == 0) {
			n = min(n, free)
			st.booked += n
			return n
		}
		if st.booked == 0 {
			return 0
		}
		st.settled.Wait()
	}
}

// claimed settles a booking of n facts with the got the claim found.
func (st *runState) claimed(n, got int) {
	st.mu.Lock()
	st.booked -= n
	st.taken += got
	st.settled.Broadcast()
	st.mu.Unlock()
}

// unclaim gives back n claimed facts the run did not work on (released at
// its end).
func (st *runState) unclaim(n int) {
	st.mu.Lock()
	st.taken -= n
	st.settled.Broadcast()
	st.mu.Unlock()
}

func (st *runState) stop() {
	st.mu.Lock()
	st.stopped = true
	st.settled.Broadcast()
	st.mu.Unlock()
}

// add adds a scope's summary to the run's and clears it.
func (st *runState) add(s *Summary) {
	st.mu.Lock()
	defer st.mu.Unlock()
	t := &st.sum
	t.FactsConsolidated += s.FactsConsolidated
	t.FactsFailed += s.FactsFailed
	t.Created += s.Created
	t.Updated += s.Updated
	t.Deleted += s.Deleted
	t.PromptTokens += s.PromptTokens
	t.CompletionTokens += s.CompletionTokens
	t.Batches += s.Batches
	t.LLMCalls += s.LLMCalls
	t.Retries += s.Retries
	t.EmbeddingCalls += s.EmbeddingCalls
	t.EmbeddingTokens += s.EmbeddingTokens
	t.Reembedded += s.Reembedded
	t.RefusedByTrust += s.RefusedByTrust
	for k, v := range s.Redacted {
		if t.Redacted == nil {
			t.Redacted = map[string]int64{}
		}
		t.Redacted[k] += v
	}
	for k, v := range s.DroppedItems {
		if t.DroppedItems == nil {
			t.DroppedItems = map[string]int64{}
		}
		t.DroppedItems[k] += v
	}
	*s = Summary{}
}

// runBudget is the run's token budget as an Extractor books it.
type runBudget struct {
	st  *runState
	max int64
}

func (b runBudget) Reserve(n int64) bool { return b.st.reserve(n, b.max) }
func (b runBudget) Release(n int64)      { b.st.release(n) }
func (b runBudget) Spend(n int64)        { b.st.spend(n) }

// errBudget stops a run that reached MaxTokensPerRun.
var errBudget = errors.New("maxTokensPerRun reached")

// Run consolidates up to MaxFacts pending facts, scope by scope, claiming a
// batch at a time so that overlapping runs share the work and never
// consolidate a fact twice. It returns an error only when the run itself
// failed (store or LLM unreachable, cancelled); the facts it had not
// finished stay pending. Facts that fail on their own are marked failed
// with the reason.
func (e *Engine) Run(ctx context.Context) (sum Summary, err error) {
	e.Settings.SetDefaults()
	s := e.Settings
	// The run's span, the parent of its batches' and of their LLM and
	// embeddings calls; the bank is its memory store, no scope is named.
	ctx, span := telemetry.Tracer().Start(ctx, "consolidate "+string(s.Bank), trace.WithAttributes(
		telemetry.OperationName.String(telemetry.OpUpdateMemory), telemetry.MemoryStoreID.String(string(s.Bank))))
	defer func() {
		span.SetAttributes(telemetry.FactsConsolidated.Int64(sum.FactsConsolidated),
			telemetry.InputTokens.Int64(sum.PromptTokens), telemetry.OutputTokens.Int64(sum.CompletionTokens))
		if err != nil {
			span.SetStatus(codes.Error, "the run failed")
		}
		span.End()
	}()
	st := &runState{}
	st.settled = sync.NewCond(&st.mu)
	st.sum.MissionHash = MissionHash(s.Mission)
	st.sum.Recall = recallMode(e)
	enc, err := tokens.Get(s.Encoding)
	if err != nil {
		return Summary{}, err
	}
	id := s.RunID
	if id == "" {
		id = newRunID()
	}
	if err := e.Store.EnsureBank(ctx, s.Bank); err != nil {
		return st.sum, fmt.Errorf("store: %w", err)
	}
	// What has expired goes first, before the run counts, claims or
	// recalls anything.
	st.sum.ExpiredFacts, err = e.expire(ctx)
	if st.sum.ExpiredFacts > 0 {
		e.progressLine(st, fmt.Sprintf("erased %d facts stored more than %s ago", st.sum.ExpiredFacts, s.RetentionMaxAge))
	}
	if err != nil {
		return st.sum, fmt.Errorf("store: erasing expired facts: %w", err)
	}
	st.sum.ExpiredMessages, err = e.expireMessages(ctx)
	if st.sum.ExpiredMessages > 0 {
		e.progressLine(st, fmt.Sprintf("erased %d messages stored more than %s ago", st.sum.ExpiredMessages, s.RetentionMaxAge))
	}
	if err != nil {
		return st.sum, fmt.Errorf("store: erasing expired messages: %w", err)
	}
	if e.Extractor != nil {
		// Messages become pending facts first, so that this run
		// consolidates them.
		x, err := e.Extractor.Extract(ctx, runBudget{st: st, max: s.MaxTokensPerRun})
		st.sum.Extraction = &x
		st.sum.LLMCalls += x.LLMCalls
		st.sum.Retries += x.Retries
		st.sum.PromptTokens += x.PromptTokens
		st.sum.CompletionTokens += x.CompletionTokens
		for k, n := range x.Redacted {
			if st.sum.Redacted == nil {
				st.sum.Redacted = map[string]int64{}
			}
			st.sum.Redacted[k] += n
		}
		if x.MessagesExtracted+x.MessagesFailed > 0 {
			e.progressLine(st, fmt.Sprintf("extracted %d messages into %d facts (%d new) in %d calls; %d messages failed",
				x.MessagesExtracted, x.FactsExtracted, x.FactsStored, x.LLMCalls, x.MessagesFailed))
		}
		if x.CutShort {
			st.sum.CutShort = fmt.Sprintf("maxTokensPerRun (%d) reached while extracting messages after %d tokens: the remaining messages stay pending for the next run",
				s.MaxTokensPerRun, st.used())
			e.progressLine(st, st.sum.CutShort)
		}
		if err != nil {
			return st.sum, err
		}
	}
	if st.bankCount, err = e.Store.CountObservations(ctx, s.Bank); err != nil {
		return st.sum, fmt.Errorf("store: %w", err)
	}
	keys, err := e.Store.PendingScopes(ctx, s.Bank, e.now())
	if err != nil {
		return st.sum, fmt.Errorf("store: %w", err)
	}
	if len(keys) > 0 {
		// The first scope's first recall waits for this load instead of
		// starting its own; a failure is left for that recall to report.
		warmed := make(chan struct{})
		go func() {
			defer close(warmed)
			_ = e.Store.WarmRecall(ctx, keys[0])
		}()
		defer func() { <-warmed }()
	}
	system := SystemPrompt(s.Mission)
	systemTokens := enc.Count(system) + messageOverhead
	newRun := func(key ScopeKey) *run {
		r := &run{Engine: e, st: st, key: key, scope: key.Name(), id: id, enc: enc, system: system, systemTokens: systemTokens,
			alone: map[string]bool{}, seen: map[string]bool{}}
		if e.Embedder != nil {
			r.vec = &vectors{store: e.Store, facts: map[string][]float32{}, unstored: map[string][]float32{}}
		}
		return r
	}
	err = e.work(ctx, st, keys, newRun)
	e.finish(ctx, st, id)
	return st.sum, err
}

// work runs the scopes of keys in turns, Parallelism at a time, until
// they have no pending facts, the run has taken MaxFacts, the budget is
// reached or a scope fails (the first error is returned).
func (e *Engine) work(ctx context.Context, st *runState, keys []ScopeKey, newRun func(ScopeKey) *run) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A scope's turn: its run is made when the scope is first worked on.
	type turn struct {
		key ScopeKey
		r   *run
	}
	var mu sync.Mutex // guards queue and firstErr
	queue := make([]turn, 0, len(keys))
	for _, k := range keys {
		queue = append(queue, turn{key: k})
	}
	var firstErr error
	pop := func() *run {
		mu.Lock()
		defer mu.Unlock()
		if len(queue) == 0 || firstErr != nil {
			return nil
		}
		t := queue[0]
		queue[0] = turn{}
		queue = queue[1:]
		if t.r == nil {
			t.r = newRun(t.key)
		}
		return t.r
	}
	waiting := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(queue) > 0
	}
	var wg sync.WaitGroup
	for range min(max(1, e.Settings.Parallelism), len(keys)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := pop(); r != nil; r = pop() {
				more, err := r.step(ctx, waiting)
				if more && err == nil {
					mu.Lock()
					queue = append(queue, turn{r: r})
					mu.Unlock()
					continue
				}
				r.done(ctx)
				if err != nil {
					st.stop()
					mu.Lock()
					if firstErr == nil {
						firstErr = err
						cancel()
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, t := range queue {
		if t.r != nil {
			t.r.done(ctx)
		}
	}
	return firstErr
}

// step claims and consolidates one batch of the scope; more says the
// scope may have more pending facts for its next turn.
func (r *run) step(ctx context.Context, othersWaiting func() bool) (more bool, err error) {
	s := r.Settings
	if r.st.used() >= s.MaxTokensPerRun {
		r.cutShort()
		return false, nil
	}
	if !r.counted {
		if r.count, err = r.Store.CountScopeObservations(ctx, r.key); err != nil {
			return false, fmt.Errorf("store: %w", err)
		}
		r.counted = true
	}
	var facts []Fact
	limit := 0
	if r.next != nil {
		limit = r.next.limit
		facts, err = r.next.wait()
		r.next = nil
	} else {
		if limit = r.st.take(s.BatchSize, s.MaxFacts); limit == 0 {
			return false, nil
		}
		now := r.now()
		facts, err = r.Store.ClaimFacts(ctx, r.key, r.id, limit, now, now.Add(s.ClaimLease))
		r.st.claimed(limit, len(facts))
	}
	if err != nil {
		return false, fmt.Errorf("store: claiming facts: %w", err)
	}
	if len(facts) == 0 {
		return false, nil
	}
	for i, f := range facts {
		if r.seen[f.ID] {
			// Claimed again by this run (its lease ran out while it
			// worked): the run is done with what it can do here.
			return false, nil
		}
		r.seen[f.ID] = true
		facts[i].Scope = r.scope
	}
	r.redactFacts(facts)
	more = len(facts) == limit
	if more && !othersWaiting() {
		// No other scope waits: the scope's next batch is claimed while
		// this one is worked on, its round trip hidden behind the work.
		r.next = r.claimNext(ctx)
	}
	err = r.batch(ctx, facts)
	r.st.add(&r.sum)
	if errors.Is(err, errBudget) {
		r.cutShort()
		return false, nil
	}
	return more, err
}

// done ends the run's work on the scope: a claim under way is waited for
// (finish releases it) and the vectors the scope embedded and did not
// store are stored.
func (r *run) done(ctx context.Context) {
	if r.next != nil {
		facts, _ := r.next.wait()
		r.st.unclaim(len(facts))
		r.next = nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	r.storeFactVectors(sctx)
	r.st.add(&r.sum)
	if r.scope != "" {
		// A run over many scopes holds one scope's index at a time.
		r.Store.ReleaseRecall(r.key)
	}
}

// nextClaim is a claim of facts under way in its own goroutine.
type nextClaim struct {
	done  chan struct{}
	limit int
	facts []Fact
	err   error
}

// claimNext starts claiming the scope's next batch in its own goroutine
// (the RunStore is safe for concurrent use); nil when the run may take no
// more facts.
func (r *run) claimNext(ctx context.Context) *nextClaim {
	s := r.Settings
	limit := r.st.take(s.BatchSize, s.MaxFacts)
	if limit == 0 {
		return nil
	}
	c := &nextClaim{done: make(chan struct{}), limit: limit}
	now := r.now()
	go func() {
		defer close(c.done)
		c.facts, c.err = r.Store.ClaimFacts(ctx, r.key, r.id, limit, now, now.Add(s.ClaimLease))
		r.st.claimed(limit, len(c.facts))
	}()
	return c
}

func (c *nextClaim) wait() ([]Fact, error) {
	<-c.done
	return c.facts, c.err
}

// cutShort records, once, that the budget stopped the run.
func (r *run) cutShort() {
	st := r.st
	st.mu.Lock()
	st.stopped = true
	st.settled.Broadcast()
	first := st.sum.CutShort == ""
	if first {
		st.sum.CutShort = fmt.Sprintf("maxTokensPerRun (%d) reached after %d tokens: no further LLM call was started and the remaining facts stay pending for the next run",
			r.Settings.MaxTokensPerRun, st.tokens)
	}
	line := st.sum.CutShort
	st.mu.Unlock()
	if first {
		r.progress("%s", line)
	}
}

// capacity is the capacity note of the scope's next call and how many
// observations it may create (-1: any number): the tighter of the bank's
// cap and, for a scope other than the shared one, the scope's.
func (r *run) capacity() (string, int) {
	s := r.Settings
	r.st.mu.Lock()
	bank := r.st.bankCount
	r.st.mu.Unlock()
	note, left := CapacityNote(s.MaxObservations, bank), Remaining(s.MaxObservations, bank)
	if r.scope != "" && s.MaxObservationsPerScope > 0 {
		if l := Remaining(s.MaxObservationsPerScope, r.count); left < 0 || l < left {
			note, left = ScopeCapacityNote(s.MaxObservationsPerScope, r.count), l
		}
	}
	return note, left
}

// finish releases the run's claims and counts what the bank holds, even
// when the run was cancelled.
func (e *Engine) finish(ctx context.Context, st *runState, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	bank := e.Settings.Bank
	if err := e.Store.ReleaseClaims(ctx, bank, id); err != nil {
		e.progressLine(st, fmt.Sprintf("releasing the run's claims: %v (they expire at their lease)", err))
	}
	if n, err := e.Store.CountObservations(ctx, bank); err == nil {
		st.sum.Observations = int64(n)
	} else {
		st.sum.Observations = int64(st.bankCount)
	}
	if counts, err := e.Store.CountFacts(ctx, bank); err == nil {
		st.sum.PendingFacts, st.sum.FailedFacts = counts[FactPending], counts[FactFailed]
	}
}

func newRunID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now().UTC()
	}
	return time.Now().UTC()
}

func (r *run) progress(format string, a ...any) {
	r.progressLine(r.st, fmt.Sprintf(format, a...))
}

// progressLine hands a line to Progress, one scope at a time.
func (e *Engine) progressLine(st *runState, line string) {
	if e.Progress != nil {
		st.progress.Lock()
		defer st.progress.Unlock()
		e.Progress(line)
	}
}
