package consolidation

import (
	"context"
	"fmt"
	"sort"

	"go.opentelemetry.io/otel/trace"

	"github.com/promptops/promptops/internal/telemetry"
)

// A batch: its facts that fit a call, the observations they recall
// (pooled, best first) and the prompt fitted to the budget.

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
	var lex map[string][]Candidate
	var lexErr error
	lexical := func() {
		lex, lexErr = r.Store.Recall(ctx, r.key, facts, r.Settings.RecallPerFact*4)
	}
	var sem map[string][]Candidate
	var err error
	if r.vec != nil {
		// The lexical recall runs while the semantic one waits on the
		// store or searches.
		done := make(chan struct{})
		go func() {
			defer close(done)
			lexical()
		}()
		sem, err = r.semantic(ctx, facts, r.Settings.RecallPerFact*4)
		<-done
		if err != nil {
			return nil, nil, err
		}
	} else {
		lexical()
	}
	if err = lexErr; err != nil {
		return nil, nil, fmt.Errorf("store: %w", err)
	}
	for _, f := range facts {
		ranked := lex[f.ID]
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
	if len(out) > 0 {
		// Sources only for the observations that reach the pool.
		poolIDs := make([]string, len(out))
		for i, c := range out {
			poolIDs[i] = c.ID
		}
		srcIDs, srcFacts, err := r.Store.CandidateSources(ctx, r.key, poolIDs)
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
	messages     []ChatMessage
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
	pool = r.redactPool(pool)
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
		batch:        Batch{Facts: facts, Pool: pool, RecalledBy: recalledBy, Remaining: remaining, Trust: s.Trust},
		messages:     []ChatMessage{{Role: "system", Content: r.system}, {Role: "user", Content: user}},
		promptTokens: r.systemTokens + n + messageOverhead,
	}, true, nil
}
