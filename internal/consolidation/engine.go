package consolidation

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/promptops/promptops/internal/tokens"
)

// Engine runs consolidation for one bank.
type Engine struct {
	Store    Store
	LLM      LLM
	Settings Settings
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Progress receives one line per batch; nil discards them.
	Progress func(line string)
}

// messageOverhead is the tokens chat formatting adds per message.
const messageOverhead = 8

// Defaults fills unset settings.
func (s *Settings) Defaults() {
	if s.BatchSize <= 0 {
		s.BatchSize = 8
	}
	if s.MaxFacts <= 0 {
		s.MaxFacts = 200
	}
	if s.MaxPromptTokens <= 0 {
		s.MaxPromptTokens = 16000
	}
	if s.MaxAttempts <= 0 {
		s.MaxAttempts = 3
	}
	if s.Encoding == "" {
		s.Encoding = tokens.O200K
	}
	if s.RecallPerFact <= 0 {
		s.RecallPerFact = 5
	}
}

type run struct {
	*Engine
	enc          *tokens.Encoder
	system       string
	systemTokens int
	count        int
	sum          Summary
}

// Run consolidates up to MaxFacts pending facts. It returns an error only
// when the run itself failed (store or LLM unreachable, cancelled); facts of
// batches not yet applied stay pending. Facts that fail on their own are
// marked failed and counted in the summary.
func (e *Engine) Run(ctx context.Context) (Summary, error) {
	e.Settings.Defaults()
	s := e.Settings
	enc, err := tokens.Get(s.Encoding)
	if err != nil {
		return Summary{}, err
	}
	r := &run{Engine: e, enc: enc, system: SystemPrompt(s.Mission)}
	r.systemTokens = enc.Count(r.system) + messageOverhead
	r.sum.MissionHash = MissionHash(s.Mission)
	if err := e.Store.EnsureBank(ctx, s.Bank); err != nil {
		return r.sum, fmt.Errorf("store: %w", err)
	}
	facts, err := e.Store.PendingFacts(ctx, s.Bank, s.MaxFacts)
	if err != nil {
		return r.sum, fmt.Errorf("store: %w", err)
	}
	if r.count, err = e.Store.CountObservations(ctx, s.Bank); err != nil {
		return r.sum, fmt.Errorf("store: %w", err)
	}
	for start := 0; start < len(facts); start += s.BatchSize {
		batch := facts[start:min(start+s.BatchSize, len(facts))]
		if err := r.process(ctx, batch); err != nil {
			r.finish(ctx)
			return r.sum, err
		}
	}
	r.finish(ctx)
	return r.sum, nil
}

func (r *run) finish(ctx context.Context) {
	if n, err := r.Store.CountObservations(context.WithoutCancel(ctx), r.Settings.Bank); err == nil {
		r.sum.Observations = int64(n)
	} else {
		r.sum.Observations = int64(r.count)
	}
}

func (r *run) now() time.Time {
	if r.Now != nil {
		return r.Now().UTC()
	}
	return time.Now().UTC()
}

func (r *run) progress(format string, a ...any) {
	if r.Progress != nil {
		r.Progress(fmt.Sprintf(format, a...))
	}
}

// recall pools the observations related to each fact of the batch, best
// first, and records which fact recalled which observation.
func (r *run) recall(ctx context.Context, facts []Fact) ([]Candidate, map[string][]string, error) {
	type pooled struct {
		c    Candidate
		best int // rank of its best recall, for ordering
	}
	byID := map[string]*pooled{}
	recalledBy := map[string][]string{}
	for _, f := range facts {
		cands, err := r.Store.Recall(ctx, r.Settings.Bank, f, r.Settings.RecallPerFact*4)
		if err != nil {
			return nil, nil, err
		}
		for rank, c := range Rank(f, cands, r.Settings.RecallPerFact) {
			if p, ok := byID[c.ID]; ok {
				p.best = min(p.best, rank)
			} else {
				byID[c.ID] = &pooled{c: c, best: rank}
			}
			recalledBy[c.ID] = append(recalledBy[c.ID], f.ID)
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
	return out, recalledBy, nil
}

// process consolidates one batch: recall, fit the prompt, ask, validate,
// apply; on repeated invalid answers it splits the batch in halves, down to
// single facts, which are then marked failed.
func (r *run) process(ctx context.Context, facts []Fact) error {
	s := r.Settings
	pool, recalledBy, err := r.recall(ctx, facts)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	note := CapacityNote(s.MaxObservations, r.count)
	user := UserPrompt(note, facts, pool)
	// Trim the pool, least related first, until the prompt fits.
	for r.systemTokens+r.enc.Count(user)+messageOverhead > s.MaxPromptTokens && len(pool) > 0 {
		pool = pool[:len(pool)-max(1, len(pool)/4)]
		user = UserPrompt(note, facts, pool)
	}
	if r.systemTokens+r.enc.Count(user)+messageOverhead > s.MaxPromptTokens {
		if len(facts) > 1 {
			return r.split(ctx, facts)
		}
		return r.fail(ctx, facts, fmt.Sprintf("the fact alone does not fit maxPromptTokens (%d)", s.MaxPromptTokens))
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
	batch := Batch{Facts: facts, Pool: pool, RecalledBy: recalledBy, Remaining: Remaining(s.MaxObservations, r.count)}
	messages := []Message{{Role: "system", Content: r.system}, {Role: "user", Content: user}}
	exists := func(norm string) (bool, error) { return r.Store.HasObservationText(ctx, s.Bank, norm) }

	var lastErr error
	for attempt := 1; attempt <= s.MaxAttempts; attempt++ {
		comp, err := r.LLM.Complete(ctx, messages, ResponseSchema(batch.Remaining))
		r.sum.LLMCalls++
		if err != nil {
			return fmt.Errorf("llm: %w", err)
		}
		r.sum.PromptTokens += comp.PromptTokens
		r.sum.CompletionTokens += comp.CompletionTokens
		ans, err := ParseAnswer(comp.Content)
		if err != nil {
			lastErr = &InvalidAnswerError{Reason: err.Error()}
			r.progress("batch of %d facts: attempt %d: %v", len(facts), attempt, lastErr)
			continue
		}
		ops, dropped, err := Validate(ans, batch, exists)
		var invalid *InvalidAnswerError
		if errors.As(err, &invalid) {
			lastErr = err
			r.progress("batch of %d facts: attempt %d: %v", len(facts), attempt, err)
			continue
		}
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		ids := make([]string, len(facts))
		for i, f := range facts {
			ids[i] = f.ID
		}
		created, err := r.Store.Apply(ctx, s.Bank, ops, ids, r.now())
		if err != nil {
			return fmt.Errorf("store: applying a batch: %w", err)
		}
		r.sum.Batches++
		r.sum.FactsConsolidated += int64(len(facts))
		r.sum.Created += int64(len(created))
		r.sum.Updated += int64(len(ops.Updates))
		r.sum.Deleted += int64(len(ops.Deletes))
		r.count += len(created) - len(ops.Deletes)
		line := fmt.Sprintf("batch of %d facts: %d observations recalled, %d created, %d updated, %d deleted (attempt %d, %d prompt tokens)",
			len(facts), len(pool), len(created), len(ops.Updates), len(ops.Deletes), attempt, comp.PromptTokens)
		if len(dropped) > 0 {
			reasons := make([]string, len(dropped))
			for i, d := range dropped {
				reasons[i] = d.Item + ": " + d.Reason
			}
			line += "; dropped " + strings.Join(reasons, "; ")
		}
		r.progress("%s", line)
		return nil
	}
	if len(facts) > 1 {
		r.progress("batch of %d facts: no valid answer in %d attempts; splitting", len(facts), s.MaxAttempts)
		return r.split(ctx, facts)
	}
	return r.fail(ctx, facts, fmt.Sprintf("no valid answer in %d attempts: %v", s.MaxAttempts, lastErr))
}

func (r *run) split(ctx context.Context, facts []Fact) error {
	mid := len(facts) / 2
	if err := r.process(ctx, facts[:mid]); err != nil {
		return err
	}
	return r.process(ctx, facts[mid:])
}

func (r *run) fail(ctx context.Context, facts []Fact, reason string) error {
	ids := make([]string, len(facts))
	for i, f := range facts {
		ids[i] = f.ID
	}
	if err := r.Store.MarkFailed(ctx, r.Settings.Bank, ids, reason, r.now()); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	r.sum.FactsFailed += int64(len(facts))
	r.progress("fact %s marked failed: %s", strings.Join(ids, ","), reason)
	return nil
}
