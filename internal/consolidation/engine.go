package consolidation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/telemetry"
)

// Engine runs consolidation for one bank.
type Engine struct {
	Store    Store
	LLM      LLM
	Settings Settings
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Progress receives one line per LLM call; nil discards them. Lines
	// name facts by id and never quote their text.
	Progress func(line string)
	// Embedder turns on hybrid recall and the duplicate guard; nil keeps
	// recall lexical. The Store must then be a VectorStore too.
	Embedder Embedder
	// Index searches the bank's vectors; nil is a MemIndex loaded at the
	// run's first batch.
	Index VectorIndex
}

// Defaults of the settings a run leaves zero: a MemoryBank's, defined in
// api/v1, and the engine's own.
const (
	DefaultBatchSize           = int(promptopsv1.DefaultBatchSize)
	DefaultMaxFacts            = int(promptopsv1.DefaultMaxFactsPerRun)
	DefaultMaxPromptTokens     = int(promptopsv1.DefaultMaxPromptTokens)
	DefaultMaxAttempts         = int(promptopsv1.DefaultMaxAttempts)
	DefaultRecallPerFact       = 5
	DefaultMaxTokensPerRun     = promptopsv1.DefaultMaxTokensPerRun
	DefaultMaxCompletionTokens = 16384
	DefaultClaimLease          = 10 * time.Minute
	DefaultDuplicateSimilarity = float64(promptopsv1.DefaultDuplicateSimilarityPerMille) / 1000
	DefaultSemanticFloor       = float64(promptopsv1.DefaultRecallSimilarityPerMille) / 1000
	DefaultMaxReembedPerRun    = int(promptopsv1.DefaultMaxReembedPerRun)
	DefaultEmbedBatchSize      = int(promptopsv1.DefaultEmbeddingsBatchSize)
)

// messageOverhead is the tokens chat formatting adds per message.
const messageOverhead = 8

// Defaults fills unset settings.
func (s *Settings) Defaults() {
	if s.BatchSize <= 0 {
		s.BatchSize = DefaultBatchSize
	}
	if s.MaxFacts <= 0 {
		s.MaxFacts = DefaultMaxFacts
	}
	if s.MaxPromptTokens <= 0 {
		s.MaxPromptTokens = DefaultMaxPromptTokens
	}
	if s.MaxAttempts <= 0 {
		s.MaxAttempts = DefaultMaxAttempts
	}
	if s.Encoding == "" {
		s.Encoding = string(promptopsv1.DefaultEncoding)
	}
	if s.RecallPerFact <= 0 {
		s.RecallPerFact = DefaultRecallPerFact
	}
	if s.MaxTokensPerRun <= 0 {
		s.MaxTokensPerRun = DefaultMaxTokensPerRun
	}
	if s.MaxCompletionTokens <= 0 {
		s.MaxCompletionTokens = DefaultMaxCompletionTokens
	}
	if s.ClaimLease <= 0 {
		s.ClaimLease = DefaultClaimLease
	}
	if s.DuplicateSimilarity <= 0 {
		s.DuplicateSimilarity = DefaultDuplicateSimilarity
	}
	if s.SemanticFloor <= 0 {
		s.SemanticFloor = DefaultSemanticFloor
	}
	if s.MaxReembedPerRun <= 0 {
		s.MaxReembedPerRun = DefaultMaxReembedPerRun
	}
	if s.EmbedBatchSize <= 0 {
		s.EmbedBatchSize = DefaultEmbedBatchSize
	}
}

// CompletionTokens is the max_tokens of a call for n facts: room for an
// observation of each fact and for updates of what they recalled, within
// the cap.
func CompletionTokens(n, limit int) int {
	return min(limit, 1024+1024*n)
}

// batch fails at once the facts too large for any call, then consolidates
// the rest.
func (r *run) batch(ctx context.Context, facts []Fact) error {
	ctx, span := telemetry.Tracer().Start(ctx, "consolidate batch", trace.WithAttributes(telemetry.BatchFacts.Int(len(facts))))
	defer span.End()
	note, _ := r.capacity()
	var fit []Fact
	var tooBig []string
	for _, f := range facts {
		ok, known := r.alone[f.ID]
		if !known {
			// A budget check: counting stops soon after the limit, so a huge
			// fact costs no more than one that just fits.
			limit := r.Settings.MaxPromptTokens - r.systemTokens - messageOverhead
			_, over := r.enc.CountUpTo(UserPrompt(note, []Fact{f}, nil), max(limit, 0))
			ok = limit >= 0 && !over
			r.alone[f.ID] = ok
		}
		if ok {
			fit = append(fit, f)
		} else {
			tooBig = append(tooBig, f.ID)
		}
	}
	if len(tooBig) > 0 {
		if err := r.fail(ctx, tooBig, fmt.Sprintf("the fact alone does not fit maxPromptTokens (%d)", r.Settings.MaxPromptTokens)); err != nil {
			return err
		}
	}
	if len(fit) == 0 {
		return nil
	}
	return r.process(ctx, fit)
}

// recall pools the observations related to each fact of the batch, best
// first, and records which fact recalled which observation. A fact's
// RecallPerFact best go to the pool; every observation the store recalled
// for it and that is related at all counts as recalled by it, so an update
// of a pooled observation is judged by what its own fact recalled, not by
// which fact happened to bring it into the top of the pool.
func (r *run) recall(ctx context.Context, facts []Fact) ([]Candidate, map[string][]string, error) {
	type pooled struct {
		c    Candidate
		best int // rank of its best recall, for ordering
	}
	byID := map[string]*pooled{}
	recalledBy := map[string][]string{}
	sl, lazy := r.Store.(SourceLoader)
	var lex map[string][]Candidate
	var lexErr error
	lexical := func() {
		if lazy {
			lex, lexErr = sl.RecallBare(ctx, r.Settings.Bank, facts, r.Settings.RecallPerFact*4)
		} else {
			lex, lexErr = r.Store.Recall(ctx, r.Settings.Bank, facts, r.Settings.RecallPerFact*4)
		}
	}
	var sem map[string][]Candidate
	var err error
	if r.vec != nil {
		// A SourceLoader is safe for concurrent use: the lexical recall
		// runs while the semantic one waits on the store or searches.
		var done chan struct{}
		if lazy {
			done = make(chan struct{})
			go func() {
				defer close(done)
				lexical()
			}()
		}
		sem, err = r.semantic(ctx, facts, r.Settings.RecallPerFact*4)
		if done != nil {
			<-done
		} else if err == nil {
			lexical()
		}
		if err != nil {
			return nil, nil, err
		}
	} else {
		lexical()
	}
	err = lexErr
	if err != nil {
		return nil, nil, fmt.Errorf("store: %w", err)
	}
	for _, f := range facts {
		ranked := lex[f.ID]
		if !lazy {
			ranked = Rank(f, ranked, len(ranked))
		}
		if s := sem[f.ID]; len(s) > 0 {
			ranked = fuse(s, ranked)
		}
		for rank, c := range ranked {
			recalledBy[c.ID] = append(recalledBy[c.ID], f.ID)
			if rank >= r.Settings.RecallPerFact {
				continue
			}
			if p, ok := byID[c.ID]; ok {
				p.best = min(p.best, rank)
			} else {
				byID[c.ID] = &pooled{c: c, best: rank}
			}
		}
	}
	pool := make([]*pooled, 0, len(byID))
	for _, p := range byID {
		pool = append(pool, p)
	}
	sort.Slice(pool, func(i, j int) bool {
		if pool[i].best != pool[j].best {
			return pool[i].best < pool[j].best
		}
		return pool[i].c.ID < pool[j].c.ID
	})
	out := make([]Candidate, len(pool))
	for i, p := range pool {
		out[i] = p.c
	}
	if lazy && len(out) > 0 {
		// Sources only for the observations that reach the pool.
		poolIDs := make([]string, len(out))
		for i, c := range out {
			poolIDs[i] = c.ID
		}
		srcIDs, srcFacts, err := sl.CandidateSources(ctx, r.Settings.Bank, poolIDs)
		if err != nil {
			return nil, nil, fmt.Errorf("store: %w", err)
		}
		for i := range out {
			out[i].SourceFactIDs = srcIDs[out[i].ID]
			out[i].Sources = srcFacts[out[i].ID]
		}
	}
	return out, recalledBy, nil
}

// call is one prepared LLM call.
type call struct {
	batch        Batch
	messages     []Message
	promptTokens int
}

// prepare recalls the pool and builds a prompt that fits maxPromptTokens,
// trimming the least related observations first. ok is false when the
// facts do not fit together even with an empty pool.
func (r *run) prepare(ctx context.Context, facts []Fact, correction string) (call, bool, error) {
	s := r.Settings
	pool, recalledBy, err := r.recall(ctx, facts)
	if err != nil {
		return call{}, false, err
	}
	note, remaining := r.capacity()
	build := func(pool []Candidate) string {
		u := UserPrompt(note, facts, pool)
		if correction != "" {
			u += "\n\n" + correction
		}
		return u
	}
	// Size the pool from per-observation counts (each cached by the
	// tokenizer across batches), then check the whole prompt exactly once
	// or twice rather than re-tokenizing it for every trimmed size.
	room := s.MaxPromptTokens - r.systemTokens - messageOverhead - r.enc.Count(build(nil))
	if room < 0 {
		return call{}, false, nil
	}
	keep := 0
	for used := 0; keep < len(pool); keep++ {
		used += r.enc.Count(FormatObservations(pool[keep : keep+1]))
		if used > room {
			break
		}
	}
	pool = pool[:keep]
	user := build(pool)
	n := r.enc.Count(user)
	for r.systemTokens+n+messageOverhead > s.MaxPromptTokens && len(pool) > 0 {
		pool = pool[:len(pool)-max(1, len(pool)/4)]
		user = build(pool)
		n = r.enc.Count(user)
	}
	if r.systemTokens+n+messageOverhead > s.MaxPromptTokens {
		return call{}, false, nil
	}
	kept := map[string]bool{}
	for _, c := range pool {
		kept[c.ID] = true
	}
	for id := range recalledBy {
		if !kept[id] {
			delete(recalledBy, id)
		}
	}
	return call{
		batch:        Batch{Facts: facts, Pool: pool, RecalledBy: recalledBy, Remaining: remaining},
		messages:     []Message{{Role: "system", Content: r.system}, {Role: "user", Content: user}},
		promptTokens: r.systemTokens + n + messageOverhead,
	}, true, nil
}

// process consolidates a batch in at most maxAttempts calls. An answer that
// cannot be used at all is asked again with the reason; a usable one is
// applied without its invalid items, and only the facts every item of which
// was invalid are asked again. After the attempts, facts still without a
// usable answer are split in halves (when the answers were unusable) or
// marked failed with the reasons.
func (r *run) process(ctx context.Context, facts []Fact) error {
	s := r.Settings
	pending := facts
	var correction string
	var unusable error
	lost := map[string][]string{} // fact id -> why its items were dropped
	for attempt := 1; attempt <= s.MaxAttempts && len(pending) > 0; attempt++ {
		c, ok, err := r.prepare(ctx, pending, correction)
		if err != nil {
			return err
		}
		if !ok {
			if len(pending) > 1 {
				return r.split(ctx, pending)
			}
			return r.fail(ctx, ids(pending), fmt.Sprintf("the fact alone does not fit maxPromptTokens (%d)", s.MaxPromptTokens))
		}
		maxTokens := CompletionTokens(len(pending), s.MaxCompletionTokens)
		reserved := int64(c.promptTokens) + int64(maxTokens)
		if !r.st.reserve(reserved, s.MaxTokensPerRun) {
			return errBudget
		}
		// The claims are renewed while the LLM call starts: the renewal's
		// round trip hides behind the call, and a renewal that fails
		// cancels the call.
		callCtx, cancelCall := context.WithCancel(ctx)
		renewed := make(chan error, 1)
		until := r.now().Add(s.ClaimLease)
		go func() {
			err := r.Store.ExtendClaims(ctx, s.Bank, r.id, until)
			if err != nil {
				cancelCall()
			}
			renewed <- err
		}()
		comp, err := r.LLM.Complete(callCtx, Request{Messages: c.messages, Schema: ResponseSchema(c.batch.Remaining), MaxTokens: maxTokens})
		renewErr := <-renewed
		cancelCall()
		r.st.release(reserved)
		r.sum.LLMCalls++
		if attempt > 1 {
			r.sum.Retries++
		}
		r.account(comp, err, c.promptTokens, maxTokens)
		if renewErr != nil {
			return fmt.Errorf("store: renewing claims: %w", renewErr)
		}
		var ans *Answer
		switch {
		case errors.Is(err, ErrAnswerTooLarge):
			unusable = err
		case err != nil:
			return fmt.Errorf("llm: %w", err)
		default:
			if ans, err = ParseAnswer(comp.Content); err != nil {
				if comp.Truncated {
					err = fmt.Errorf("the answer stopped at max_tokens (%d) before its JSON ended", maxTokens)
				}
				unusable = err
			}
		}
		if ans == nil {
			r.progress("batch of %d facts: attempt %d: invalid answer: %v", len(pending), attempt, unusable)
			correction = rejectedNote(unusable)
			continue
		}
		unusable = nil
		exists := func(norm string) (bool, error) { return r.Store.HasObservationText(ctx, s.Bank, norm) }
		if tc, ok := r.Store.(TextChecker); ok {
			// One look for every text Validate will ask about: a dry run
			// collects them; one it did not ask about is looked up alone.
			var norms []string
			if _, _, err := Validate(ans, c.batch, func(norm string) (bool, error) { norms = append(norms, norm); return false, nil }); err != nil {
				return fmt.Errorf("store: %w", err)
			}
			known, err := tc.HasObservationTexts(ctx, s.Bank, norms)
			if err != nil {
				return fmt.Errorf("store: %w", err)
			}
			asked := map[string]bool{}
			for _, n := range norms {
				asked[n] = true
			}
			exists = func(norm string) (bool, error) {
				if asked[norm] {
					return known[norm], nil
				}
				return r.Store.HasObservationText(ctx, s.Bank, norm)
			}
		}
		ops, dropped, err := Validate(ans, c.batch, exists)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if r.vec != nil {
			if err := r.guard(ctx, &ops, &dropped); err != nil {
				return err
			}
		}
		again := retryFacts(pending, ops, dropped)
		consolidate := make([]string, 0, len(pending))
		for _, f := range pending {
			if _, retry := again[f.ID]; !retry {
				consolidate = append(consolidate, f.ID)
			}
		}
		for _, d := range dropped {
			if r.sum.DroppedItems == nil {
				r.sum.DroppedItems = map[string]int64{}
			}
			r.sum.DroppedItems[d.Code]++
		}
		if err := r.apply(ctx, c, ops, consolidate, dropped, attempt, comp.PromptTokens); err != nil {
			if errors.Is(err, ErrClaimLost) {
				r.progress("batch of %d facts: %v", len(pending), err)
				return nil
			}
			return err
		}
		var next []Fact
		for _, f := range pending {
			if reasons, retry := again[f.ID]; retry {
				next = append(next, f)
				lost[f.ID] = reasons
			}
		}
		pending = next
		correction = droppedNote(dropped)
	}
	if len(pending) == 0 {
		return nil
	}
	if unusable != nil {
		if len(pending) > 1 {
			r.progress("batch of %d facts: no usable answer in %d attempts; splitting", len(pending), s.MaxAttempts)
			return r.split(ctx, pending)
		}
		return r.fail(ctx, ids(pending), fmt.Sprintf("no usable answer in %d attempts: %v", s.MaxAttempts, unusable))
	}
	// Facts that got usable answers whose every item about them was invalid.
	byReason := map[string][]string{}
	var order []string
	for _, f := range pending {
		why := "every item about it was invalid in " + fmt.Sprint(s.MaxAttempts) + " attempts: " + strings.Join(lost[f.ID], "; ")
		if _, ok := byReason[why]; !ok {
			order = append(order, why)
		}
		byReason[why] = append(byReason[why], f.ID)
	}
	for _, why := range order {
		if err := r.fail(ctx, byReason[why], why); err != nil {
			return err
		}
	}
	return nil
}

// account adds a call's tokens to the run: the usage the server reported,
// or, when it reported none, the prompt as counted and the answer's bytes
// over three (a cap when the answer was too large to read).
func (r *run) account(comp Completion, err error, promptTokens, maxTokens int) {
	p, c := comp.PromptTokens, comp.CompletionTokens
	if p <= 0 {
		p = int64(promptTokens)
	}
	if c <= 0 {
		switch {
		case errors.Is(err, ErrAnswerTooLarge):
			c = int64(maxTokens)
		case err == nil:
			c = int64(len(comp.Content)/3 + 1)
		}
	}
	r.sum.PromptTokens += p
	r.sum.CompletionTokens += c
	r.st.spend(p + c)
}

// retryFacts returns the pending facts an answer said nothing usable about
// although it tried: named only by items dropped for a reason that loses
// them, with those reasons. Facts no item names were left out by the model
// on purpose (ephemeral) and count as consolidated.
func retryFacts(pending []Fact, ops Ops, dropped []Dropped) map[string][]string {
	carried := map[string]bool{}
	for _, c := range ops.Creates {
		for _, id := range c.SourceFactIDs {
			carried[id] = true
		}
	}
	for _, u := range ops.Updates {
		for _, id := range u.SourceFactIDs {
			carried[id] = true
		}
	}
	for _, m := range ops.Merges {
		for _, id := range m.SourceFactIDs {
			carried[id] = true
		}
	}
	for _, d := range dropped {
		if !d.Lossy() {
			for _, id := range d.Facts {
				carried[id] = true
			}
		}
	}
	again := map[string][]string{}
	for _, d := range dropped {
		if !d.Lossy() {
			continue
		}
		for _, id := range d.Facts {
			if !carried[id] && len(again[id]) < 5 {
				again[id] = append(again[id], d.Item+": "+d.Reason)
			}
		}
	}
	inBatch := map[string]bool{}
	for _, f := range pending {
		inBatch[f.ID] = true
	}
	for id := range again {
		if !inBatch[id] {
			delete(again, id)
		}
	}
	return again
}

// apply writes a usable answer's valid items and marks the facts it carried
// consolidated, in one transaction.
func (r *run) apply(ctx context.Context, c call, ops Ops, consolidate []string, dropped []Dropped, attempt int, reported int64) error {
	s := r.Settings
	var created []string
	if len(consolidate) > 0 || len(ops.Creates)+len(ops.Updates)+len(ops.Deletes)+len(ops.Merges) > 0 {
		if r.vec != nil && len(r.vec.unstored) > 0 {
			for _, id := range consolidate {
				if vec, ok := r.vec.unstored[id]; ok {
					if ops.FactVectors == nil {
						ops.FactVectors = map[string][]float32{}
					}
					ops.FactVectors[id] = vec
				}
			}
			ops.Space = r.vec.sp
		}
		var err error
		for {
			created, err = r.Store.Apply(ctx, s.Bank, r.id, ops, consolidate, r.now())
			var gone *GoneError
			if !errors.As(err, &gone) {
				break
			}
			// Erased while the call was under way: what the erased facts
			// support, or what names an erased observation, is not
			// written; the rest is applied.
			n := withoutErased(&ops, &consolidate, gone)
			if r.sum.DroppedItems == nil {
				r.sum.DroppedItems = map[string]int64{}
			}
			r.sum.DroppedItems[DropErased] += int64(n)
			r.progress("batch of %d facts: %v; %d items dropped", len(c.batch.Facts), gone, n)
			if len(consolidate)+len(ops.Creates)+len(ops.Updates)+len(ops.Deletes)+len(ops.Merges) == 0 {
				created, err = nil, nil
				break
			}
		}
		if errors.Is(err, ErrClaimLost) {
			return err
		}
		if err != nil {
			return fmt.Errorf("store: applying a batch: %w", err)
		}
		r.sum.Batches++
		r.applied(ops, created)
		for id := range ops.FactVectors {
			delete(r.vec.unstored, id)
		}
	}
	r.sum.FactsConsolidated += int64(len(consolidate))
	r.sum.Created += int64(len(created))
	r.sum.Updated += int64(len(ops.Updates))
	r.sum.Deleted += int64(len(ops.Deletes))
	r.count += len(created) - len(ops.Deletes)
	r.st.counted(len(created) - len(ops.Deletes))
	line := fmt.Sprintf("batch of %d facts: %d observations recalled, %d created, %d updated, %d deleted, %d merged, %d consolidated (attempt %d, %d prompt tokens)",
		len(c.batch.Facts), len(c.batch.Pool), len(created), len(ops.Updates), len(ops.Deletes), len(ops.Merges), len(consolidate), attempt, max(reported, int64(c.promptTokens)))
	if len(dropped) > 0 {
		reasons := make([]string, 0, min(len(dropped), 10))
		for i, d := range dropped {
			if i == 10 {
				reasons = append(reasons, fmt.Sprintf("and %d more", len(dropped)-10))
				break
			}
			reasons = append(reasons, d.Item+": "+d.Reason)
		}
		line += "; dropped " + strings.Join(reasons, "; ")
	}
	r.progress("%s", line)
	return nil
}

// withoutErased leaves out of a batch the facts gone and every item
// that cites one or names a gone observation; it returns how many items
// it left out.
func withoutErased(ops *Ops, consolidate *[]string, gone *GoneError) int {
	facts := map[string]bool{}
	for _, id := range gone.Facts {
		facts[id] = true
	}
	obs := map[string]bool{}
	for _, id := range gone.Observations {
		obs[id] = true
	}
	cites := func(ids []string) bool {
		for _, id := range ids {
			if facts[id] {
				return true
			}
		}
		return false
	}
	n := 0
	keep := func(drop bool) bool {
		if drop {
			n++
		}
		return !drop
	}
	ops.Creates = slices.DeleteFunc(ops.Creates, func(c Create) bool { return !keep(cites(c.SourceFactIDs)) })
	ops.Updates = slices.DeleteFunc(ops.Updates, func(u Update) bool { return !keep(obs[u.ObservationID] || cites(u.SourceFactIDs)) })
	ops.Merges = slices.DeleteFunc(ops.Merges, func(m Merge) bool { return !keep(obs[m.ObservationID] || cites(m.SourceFactIDs)) })
	ops.Deletes = slices.DeleteFunc(ops.Deletes, func(d Delete) bool { return !keep(obs[d.ObservationID]) })
	for id := range facts {
		delete(ops.FactVectors, id)
	}
	*consolidate = slices.DeleteFunc(*consolidate, func(id string) bool { return facts[id] })
	if len(gone.Facts)+len(gone.Observations) == 0 {
		// Nothing named: nothing left to take out would loop; the caller's
		// next Apply fails the same way only if the store misbehaves.
		*consolidate = nil
		*ops = Ops{}
	}
	return n
}

// rejectedNote tells the model, on the next attempt, why its answer could
// not be used: the same prompt at temperature 0 would repeat the mistake.
func rejectedNote(err error) string {
	return "## YOUR PREVIOUS ANSWER WAS REJECTED\nIt could not be used: " + clip(err.Error(), 400) +
		"\nAnswer again with exactly one JSON object with the keys \"creates\", \"updates\" and \"deletes\", each once, ids copied exactly as shown."
}

// droppedNote lists the invalid items of a usable answer for the attempt
// that asks again about their facts.
func droppedNote(dropped []Dropped) string {
	var b strings.Builder
	b.WriteString("## ITEMS OF YOUR PREVIOUS ANSWER WERE REJECTED\nThe facts above are those whose items were invalid; the rest of that answer was applied. The rejected items:\n")
	n := 0
	for _, d := range dropped {
		if !d.Lossy() {
			continue
		}
		if n == 10 || b.Len() > 2000 {
			b.WriteString("- and more\n")
			break
		}
		b.WriteString("- " + d.Item + ": " + clip(d.Reason, 300) + "\n")
		n++
	}
	b.WriteString("Answer again for these facts, using only the observation ids shown above.")
	return b.String()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

func ids(facts []Fact) []string {
	out := make([]string, len(facts))
	for i, f := range facts {
		out[i] = f.ID
	}
	return out
}

func (r *run) split(ctx context.Context, facts []Fact) error {
	mid := len(facts) / 2
	if err := r.process(ctx, facts[:mid]); err != nil {
		return err
	}
	return r.process(ctx, facts[mid:])
}

func (r *run) fail(ctx context.Context, ids []string, reason string) error {
	if err := r.Store.MarkFailed(ctx, r.Settings.Bank, r.id, ids, reason, r.now()); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	r.sum.FactsFailed += int64(len(ids))
	hashed := make([]string, len(ids))
	for i, id := range ids {
		hashed[i] = LogID(id)
	}
	r.progress("facts %s (id hashes) marked failed: %s", strings.Join(hashed, ","), reason)
	return nil
}
