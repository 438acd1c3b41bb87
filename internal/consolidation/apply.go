package consolidation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Applying a batch's validated answer in one transaction.

// apply writes a usable answer's valid items and marks the facts it carried
// consolidated, in one transaction.
func (r *run) apply(ctx context.Context, c call, ops Ops, consolidate []string, dropped []Dropped, attempt int, reported int64) error {
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
			created, err = r.Store.Apply(ctx, r.key, r.id, ops, consolidate, r.now())
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
