package consolidation

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/promptops/promptops/internal/textclip"
)

// The attempts of a batch: ask the model, validate its answer, retry
// with the reasons, split the batch in halves, and fail a single fact
// still without a usable answer.

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
		maxTokens := CompletionBudget(len(pending), s.MaxCompletionTokens)
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
			err := r.Store.ExtendClaims(ctx, r.key, r.id, until)
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
		// One look for every text Validate will ask about: a dry run
		// collects them; one it did not ask about is looked up alone.
		var norms []string
		if _, _, err := Validate(ans, c.batch, func(norm string) (bool, error) { norms = append(norms, norm); return false, nil }); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		known, err := r.Store.HasObservationTexts(ctx, r.key, norms)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		asked := make(map[string]bool, len(norms))
		for _, n := range norms {
			asked[n] = true
		}
		exists := func(norm string) (bool, error) {
			if asked[norm] {
				return known[norm], nil
			}
			one, err := r.Store.HasObservationTexts(ctx, r.key, []string{norm})
			return one[norm], err
		}
		ops, dropped, err := Validate(ans, c.batch, exists)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if r.vec != nil {
			if err := r.mergeDuplicates(ctx, c.batch, &ops, &dropped); err != nil {
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
			if d.Code == RefusedByTrust {
				r.sum.RefusedByTrust++
				continue
			}
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

// rejectedNote tells the model, on the next attempt, why its answer could
// not be used: the same prompt at temperature 0 would repeat the mistake.
func rejectedNote(err error) string {
	return "## YOUR PREVIOUS ANSWER WAS REJECTED\nIt could not be used: " + textclip.Head(err.Error(), 400, "...") +
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
		b.WriteString("- " + d.Item + ": " + textclip.Head(d.Reason, 300, "...") + "\n")
		n++
	}
	b.WriteString("Answer again for these facts, using only the observation ids shown above.")
	return b.String()
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
	if err := r.Store.MarkFailed(ctx, r.key, r.id, ids, reason, r.now()); err != nil {
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
