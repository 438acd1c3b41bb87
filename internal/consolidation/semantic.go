package consolidation

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// vectors is a run's embedding state: the space the bank is compared in,
// the index of its observations in that space, and the batch facts'
// vectors already fetched or embedded.
type vectors struct {
	store RunStore
	sp    Space
	index *MemIndex
	facts map[string][]float32
	// unstored are the facts' vectors embedded by this run and not yet
	// stored: a batch's go to the store in its Apply, the rest when the
	// run ends.
	unstored map[string][]float32
	ready    bool
}

// embed embeds texts in one call and counts its tokens toward the run's
// budget: the server's usage, else the texts as counted here. With budget
// set, a call that would pass maxTokensPerRun is not made (errBudget).
func (r *run) embed(ctx context.Context, texts []string, budget bool) (Embeddings, error) {
	est := int64(0)
	for _, t := range texts {
		est += int64(r.enc.Count(t))
	}
	if budget {
		if !r.st.reserve(est, r.Settings.MaxTokensPerRun) {
			return Embeddings{}, errBudget
		}
		defer r.st.release(est)
	}
	emb, err := r.Embedder.Embed(ctx, r.redactTexts(texts))
	r.sum.EmbeddingCalls++
	if err != nil {
		return emb, fmt.Errorf("embeddings: %w", err)
	}
	if len(emb.Vectors) != len(texts) {
		return emb, fmt.Errorf("embeddings: the server returned %d vectors for %d inputs", len(emb.Vectors), len(texts))
	}
	if len(emb.Errs) != len(texts) {
		emb.Errs = make([]error, len(texts))
	}
	spent := est
	if emb.Tokens > 0 {
		spent = emb.Tokens
	}
	r.sum.EmbeddingTokens += spent
	r.st.spend(spent)
	for i, v := range emb.Vectors {
		if v == nil && emb.Errs[i] == nil {
			emb.Errs[i] = errors.New("the server returned no vector")
		}
		if v != nil && r.vec.ready && len(v) != r.vec.sp.Dims {
			return emb, fmt.Errorf("embeddings: the server returned a vector of %d dimensions in a bank compared at %d (%s)", len(v), r.vec.sp.Dims, r.vec.sp)
		}
	}
	return emb, nil
}

// factVectors returns the vectors of the batch's facts, embedding in one
// call those the run and the store do not have yet. A fact the server
// refused has no vector and is recalled lexically only. The new vectors
// are stored with the batch (or when the run ends), not in a write of
// their own.
func (r *run) factVectors(ctx context.Context, facts []Fact) (map[string][]float32, error) {
	v := r.vec
	var need []Fact
	for _, f := range facts {
		if _, ok := v.facts[f.ID]; !ok {
			need = append(need, f)
		}
	}
	if len(need) > 0 && v.ready {
		stored, err := v.store.FactVectors(ctx, r.key, v.sp, ids(need))
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		rest := need[:0:0]
		for _, f := range need {
			if vec, ok := stored[f.ID]; ok {
				v.facts[f.ID] = vec
			} else {
				rest = append(rest, f)
			}
		}
		need = rest
	}
	if len(need) > 0 {
		texts := make([]string, len(need))
		for i, f := range need {
			texts[i] = f.Text
		}
		emb, err := r.embed(ctx, texts, true)
		if err != nil {
			return nil, err
		}
		for i, f := range need {
			vec := emb.Vectors[i]
			if vec == nil {
				r.progress("fact %s (id hash) not embedded: %v", LogID(f.ID), emb.Errs[i])
				v.facts[f.ID] = nil
				continue
			}
			if !v.ready {
				if err := r.initVectors(ctx, len(vec)); err != nil {
					return nil, err
				}
			}
			if len(vec) != v.sp.Dims {
				return nil, fmt.Errorf("embeddings: the server returned vectors of %d and %d dimensions", v.sp.Dims, len(vec))
			}
			v.facts[f.ID] = vec
			v.unstored[f.ID] = vec
		}
	}
	out := make(map[string][]float32, len(facts))
	for _, f := range facts {
		if vec := v.facts[f.ID]; vec != nil {
			out[f.ID] = vec
		}
	}
	return out, nil
}

// storeFactVectors writes the vectors the run embedded and no batch
// stored (facts failed, retried or left pending), so that a later run
// need not embed them again; a failure costs only that.
func (r *run) storeFactVectors(ctx context.Context) {
	if r.vec == nil || len(r.vec.unstored) == 0 {
		return
	}
	if err := r.vec.store.PutFactVectors(ctx, r.key, r.vec.sp, r.vec.unstored); err != nil {
		r.progress("storing %d fact vectors: %v (a later run embeds them again)", len(r.vec.unstored), err)
		return
	}
	clear(r.vec.unstored)
}

// initVectors pins the run to (model, dims), loads the bank's vectors of
// that space into the index in one streaming pass, and embeds observations
// that have none in it (a new bank, a changed model or dimensions), at most
// MaxReembedPerRun and within the run's token budget.
func (r *run) initVectors(ctx context.Context, dims int) error {
	v := r.vec
	v.sp = Space{Model: r.Embedder.Model(), Dims: dims}
	if v.index == nil {
		idx := NewMemIndex(dims)
		idx.Grow(r.count)
		v.index = idx
	}
	if err := v.store.ScanObservationQuantized(ctx, r.key, v.sp, v.index.PutQuantized, v.index.Put); err != nil {
		return fmt.Errorf("store: loading vectors: %w", err)
	}
	v.ready = true
	if v.index.Len() >= r.count {
		// Every observation counted at the start has its vector (one a
		// concurrent run left without is embedded by a later run).
		return nil
	}
	after := ""
	for left := r.Settings.MaxReembedPerRun; left > 0; {
		obs, err := v.store.ObservationsWithoutVector(ctx, r.key, v.sp, after, min(left, r.Settings.EmbedBatchSize))
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if len(obs) == 0 {
			return nil
		}
		after = obs[len(obs)-1].ID
		left -= len(obs)
		texts := make([]string, len(obs))
		for i, o := range obs {
			texts[i] = o.Text
		}
		emb, err := r.embed(ctx, texts, true)
		if errors.Is(err, errBudget) {
			r.progress("re-embedding stopped at maxTokensPerRun; the next run goes on")
			return nil
		}
		if err != nil {
			return err
		}
		put := map[string][]float32{}
		for i, o := range obs {
			if vec := emb.Vectors[i]; vec != nil && len(vec) == dims {
				put[o.ID] = vec
			} else {
				r.progress("observation %s (id hash) not embedded: %v", LogID(o.ID), emb.Errs[i])
			}
		}
		if err := v.store.PutObservationVectors(ctx, r.key, v.sp, put); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		for id, vec := range put {
			v.index.Put(id, vec)
		}
		r.sum.Reembedded += int64(len(put))
	}
	if r.Settings.MaxReembedPerRun > 0 {
		r.progress("re-embedded up to %d observations (maxReembedPerRun); the rest are recalled lexically until a later run", r.Settings.MaxReembedPerRun)
	}
	return nil
}

// semantic returns, per fact, the observations nearest by cosine above the
// floor, nearest first, as candidates; one pass over the index for the
// whole batch.
func (r *run) semantic(ctx context.Context, facts []Fact, limit int) (map[string][]Candidate, error) {
	fv, err := r.factVectors(ctx, facts)
	if err != nil {
		return nil, err
	}
	return r.semanticNear(ctx, facts, fv, limit)
}

// semanticNear is semantic's search and load, for the fact vectors fv.
func (r *run) semanticNear(ctx context.Context, facts []Fact, fv map[string][]float32, limit int) (map[string][]Candidate, error) {
	if !r.vec.ready || r.vec.index.Len() == 0 || len(fv) == 0 {
		return nil, nil
	}
	queries := make([][]float32, len(facts))
	for i, f := range facts {
		queries[i] = fv[f.ID]
	}
	near := r.vec.index.Nearest(queries, limit, r.Settings.SemanticFloor)
	var want []string
	seen := map[string]bool{}
	for _, hits := range near {
		for _, h := range hits {
			if !seen[h.ID] {
				seen[h.ID] = true
				want = append(want, h.ID)
			}
		}
	}
	cands, err := r.Store.Candidates(ctx, r.key, want)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	byID := make(map[string]Candidate, len(cands))
	for _, c := range cands {
		byID[c.ID] = c
	}
	out := map[string][]Candidate{}
	for i, f := range facts {
		for _, h := range near[i] {
			if c, ok := byID[h.ID]; ok {
				out[f.ID] = append(out[f.ID], c)
			}
		}
	}
	return out, nil
}

// fuse interleaves the semantic and lexical rankings of one fact, nearest
// twin first, without repeats: neither arm can bury the other's best.
func fuse(sem, lex []Candidate) []Candidate {
	out := make([]Candidate, 0, len(sem)+len(lex))
	seen := map[string]bool{}
	for i := 0; i < len(sem) || i < len(lex); i++ {
		for _, arm := range [][]Candidate{sem, lex} {
			if i < len(arm) && !seen[arm[i].ID] {
				seen[arm[i].ID] = true
				out = append(out, arm[i])
			}
		}
	}
	return out
}

// mergeDuplicates, the duplicate guard, embeds the answer's new texts in
// one call and turns every create or update within DuplicateSimilarity of
// an observation of the bank (or of another new text of the answer) into
// a merge of its sources into that one, so that no fact is lost and no
// near-identical twin is stored. The texts kept carry their vectors to the
// store.
//
// Trust is kept (Settings.Trust): sources join an observation, or another
// new text, only of the same trust. Untrusted sources near a trusted
// observation are refused (it says the same already); trusted sources
// near an untrusted one are kept apart, so trusted recall finds them.
func (r *run) mergeDuplicates(ctx context.Context, b Batch, ops *Ops, dropped *[]Dropped) error {
	if len(ops.Creates)+len(ops.Updates) == 0 {
		return nil
	}
	texts := make([]string, 0, len(ops.Creates)+len(ops.Updates))
	for _, u := range ops.Updates {
		texts = append(texts, u.Text)
	}
	for _, c := range ops.Creates {
		texts = append(texts, c.Text)
	}
	// Not held back by the budget: the answer is already paid for.
	emb, err := r.embed(ctx, texts, false)
	if err != nil {
		return err
	}
	if !r.vec.ready {
		for _, vec := range emb.Vectors {
			if vec != nil {
				if err := r.initVectors(ctx, len(vec)); err != nil {
					return err
				}
				break
			}
		}
	}
	if !r.vec.ready {
		return nil
	}
	ops.Space = r.vec.sp
	dup := r.Settings.DuplicateSimilarity
	changing := map[string]bool{}
	for _, d := range ops.Deletes {
		changing[d.ObservationID] = true
	}
	for _, u := range ops.Updates {
		changing[u.ObservationID] = true
	}
	near := r.vec.index.Nearest(emb.Vectors, 4, dup)
	twin := func(hits []Scored) (Scored, bool) {
		for _, h := range hits {
			if !changing[h.ID] {
				return h, true
			}
		}
		return Scored{}, false
	}
	trusted, err := r.twinTrust(ctx, b, near)
	if err != nil {
		return err
	}
	untrusted := map[string]bool{}
	for _, f := range b.Facts {
		if !b.Trust.Fact(f) {
			untrusted[f.ID] = true
		}
	}
	allTrusted := func(ids []string) bool {
		return !slices.ContainsFunc(ids, func(id string) bool { return untrusted[id] })
	}
	// merge joins srcs to the observation into, or refuses them, and says
	// whether the item is done with; trusted sources near an untrusted
	// observation are not, and stay an item of their own.
	merge := func(item, into string, sim float64, srcs []string) bool {
		switch by, target := allTrusted(srcs), trusted(into); {
		case by == target:
			ops.Merges = append(ops.Merges, Merge{ObservationID: into, SourceFactIDs: srcs})
			*dropped = append(*dropped, Dropped{Item: item, Code: DropDuplicate, Facts: srcs,
				Reason: fmt.Sprintf("within cosine %.3f of observation %s (duplicateSimilarity %.3f); its sources joined that observation", sim, into, dup)})
			return true
		case target:
			*dropped = append(*dropped, Dropped{Item: item, Code: RefusedByTrust, Facts: srcs,
				Reason: fmt.Sprintf("within cosine %.3f of trusted observation %s, which its untrusted sources may not join; it says the same already", sim, into)})
			return true
		}
		return false
	}
	noVector := func(item string, err error) {
		r.progress("%s not embedded, stored without a vector or duplicate check: %v", item, err)
	}
	var updates []Update
	for i, u := range ops.Updates {
		vec := emb.Vectors[i]
		if vec == nil {
			noVector("update of "+u.ObservationID, emb.Errs[i])
			updates = append(updates, u)
			continue
		}
		if h, ok := twin(near[i]); ok && merge("update of "+u.ObservationID, h.ID, h.Similarity, u.SourceFactIDs) {
			continue
		}
		u.Vector = vec
		updates = append(updates, u)
	}
	ops.Updates = updates
	var creates []Create
	for i, c := range ops.Creates {
		k := len(texts) - len(ops.Creates) + i
		item := fmt.Sprintf("create %d", i+1)
		vec := emb.Vectors[k]
		if vec == nil {
			noVector(item, emb.Errs[k])
			creates = append(creates, c)
			continue
		}
		if h, ok := twin(near[k]); ok && merge(item, h.ID, h.Similarity, c.SourceFactIDs) {
			continue
		}
		joined := false
		for j := range ops.Updates {
			if sim := Cosine(vec, ops.Updates[j].Vector); ops.Updates[j].Vector != nil && sim >= dup && allTrusted(ops.Updates[j].SourceFactIDs) == allTrusted(c.SourceFactIDs) {
				ops.Updates[j].SourceFactIDs = appendNew(ops.Updates[j].SourceFactIDs, c.SourceFactIDs)
				*dropped = append(*dropped, Dropped{Item: item, Code: DropDuplicate, Facts: c.SourceFactIDs,
					Reason: fmt.Sprintf("within cosine %.3f of the update of %s; its sources joined it", sim, ops.Updates[j].ObservationID)})
				joined = true
				break
			}
		}
		for j := 0; !joined && j < len(creates); j++ {
			if sim := Cosine(vec, creates[j].Vector); creates[j].Vector != nil && sim >= dup && allTrusted(creates[j].SourceFactIDs) == allTrusted(c.SourceFactIDs) {
				creates[j].SourceFactIDs = appendNew(creates[j].SourceFactIDs, c.SourceFactIDs)
				*dropped = append(*dropped, Dropped{Item: item, Code: DropDuplicate, Facts: c.SourceFactIDs,
					Reason: fmt.Sprintf("within cosine %.3f of another new observation of this answer; its sources joined it", sim)})
				joined = true
			}
		}
		if joined {
			continue
		}
		c.Vector = vec
		creates = append(creates, c)
	}
	ops.Creates = creates
	return nil
}

// twinTrust tells, for the observations the duplicate guard found near
// the answer's texts, whether each is trusted: from the batch's pool, and
// the others read from the store in one call. With every source trusted
// it reads nothing.
func (r *run) twinTrust(ctx context.Context, b Batch, near [][]Scored) (func(id string) bool, error) {
	if b.Trust.Everyone() {
		return func(string) bool { return true }, nil
	}
	trusted := map[string]bool{}
	for i := range b.Pool {
		trusted[b.Pool[i].ID] = b.Trust.Observation(b.Pool[i].Observation)
	}
	var missing []string
	for _, hits := range near {
		for _, h := range hits {
			if _, ok := trusted[h.ID]; !ok {
				trusted[h.ID] = false
				missing = append(missing, h.ID)
			}
		}
	}
	if len(missing) > 0 {
		cands, err := r.Store.Candidates(ctx, r.key, missing)
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		for i := range cands {
			trusted[cands[i].ID] = b.Trust.Observation(cands[i].Observation)
		}
	}
	// An observation gone meanwhile is untrusted: nothing joins it.
	return func(id string) bool { return trusted[id] }, nil
}

func appendNew(to, from []string) []string {
	for _, id := range from {
		found := false
		for _, x := range to {
			found = found || x == id
		}
		if !found {
			to = append(to, id)
		}
	}
	return to
}

// applied keeps the index in step with a batch the store applied.
func (r *run) applied(ops Ops, created []string) {
	if r.vec == nil || !r.vec.ready {
		return
	}
	for _, d := range ops.Deletes {
		r.vec.index.Remove(d.ObservationID)
	}
	for _, u := range ops.Updates {
		if u.Vector != nil {
			r.vec.index.Put(u.ObservationID, u.Vector)
		} else {
			r.vec.index.Remove(u.ObservationID)
		}
	}
	for i, id := range created {
		if i < len(ops.Creates) && ops.Creates[i].Vector != nil {
			r.vec.index.Put(id, ops.Creates[i].Vector)
		}
	}
}

// recallMode names the run's recall for the summary.
func recallMode(e *Engine) string {
	if e.Embedder != nil {
		return "hybrid"
	}
	return "lexical"
}
