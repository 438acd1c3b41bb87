package sqlstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
)

// loaded is what a LoadRecallable hands over.
type loaded struct {
	grow    []int
	obs     map[string]consolidation.Observation
	tags    map[string][]string
	vectors map[string][]float32 // dequantized
	floats  []string             // ids of vectors stored unquantized
}

func (l *loaded) Grow(n int) { l.grow = append(l.grow, n) }
func (l *loaded) Observation(o consolidation.Observation, tags []string) {
	l.obs[o.ID], l.tags[o.ID] = o, tags
}
func (l *loaded) Quantized(id string, q []int8, scale float32) {
	v := make([]float32, len(q))
	for i, x := range q {
		v[i] = float32(x) * scale
	}
	l.vectors[id] = v
}
func (l *loaded) Vector(id string, vec []float32) {
	l.vectors[id] = slices.Clone(vec)
	l.floats = append(l.floats, id)
}

// TestLoadRecallable: one statement reads what a Recaller holds of a
// scope: its generation (and its bank's erasures), every observation with
// its source fact ids (newest fact first) and their distinct tags, and
// the vectors of the space asked, quantized or not; none of another
// scope's, none of another space's. A key the store does not know is
// generation -1, with nothing.
func TestLoadRecallable(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		key, other := consolidation.BankID(bank).Scope("user-1"), consolidation.BankID(bank).Scope("user-2")
		for _, k := range []consolidation.ScopeKey{bank, key, other} {
			ensureScope(t, s, k)
		}
		exec := func(q string, args ...any) {
			t.Helper()
			if _, err := s.db.ExecContext(ctx, s.rebind(q), args...); err != nil {
				t.Fatal(err)
			}
		}
		exec("UPDATE promptops_banks SET generation = 5 WHERE id = $1", string(key))
		exec("UPDATE promptops_banks SET erasures = 2 WHERE id = $1", bank)
		d1, d2, d3 := day("2026-01-01"), day("2026-01-02"), day("2026-01-03")
		for _, f := range []struct {
			k        consolidation.ScopeKey
			id, tags string
			at       *time.Time
		}{{key, "f1", `["a","b"]`, d1}, {key, "f2", `["b","c"]`, d2}, {key, "f3", `[]`, d3}, {other, "f9", `["x"]`, d1}} {
			exec("INSERT INTO promptops_facts (bank, id, text, tags, created_at) VALUES ($1, $2, $2, $3, $4)", string(f.k), f.id, f.tags, s.timeArg(f.at))
		}
		for _, o := range []struct {
			k  consolidation.ScopeKey
			id string
		}{{key, "o0"}, {key, "o1"}, {key, "o2"}, {other, "o9"}} {
			exec(`INSERT INTO promptops_observations (bank, id, text, text_norm, proof_count, occurred_start, entities_norm, created_at, updated_at)
				VALUES ($1, $2, $3, $3, 2, $4, '["Ana"]', $5, $6)`, string(o.k), o.id, "text of "+o.id, s.timeArg(d1), s.timeArg(d2), s.timeArg(d3))
		}
		for _, src := range [][3]string{{string(key), "o0", "f1"}, {string(key), "o0", "f2"}, {string(key), "o1", "f3"}, {string(other), "o9", "f9"}} {
			exec("INSERT INTO promptops_observation_sources (bank, observation_id, fact_id) VALUES ($1, $2, $3)", src[0], src[1], src[2])
		}
		sp := consolidation.Space{Model: "m", Dims: 4}
		vecs := map[string][]float32{"o0": {1, 0, 0, 0}, "o1": {0, 0.6, 0.8, 0}}
		if err := s.PutObservationVectors(ctx, key, sp, vecs); err != nil {
			t.Fatal(err)
		}
		if err := s.PutObservationVectors(ctx, key, consolidation.Space{Model: "other", Dims: 4}, map[string][]float32{"o2": {0, 0, 0, 1}}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutObservationVectors(ctx, other, sp, map[string][]float32{"o9": {0, 1, 0, 0}}); err != nil {
			t.Fatal(err)
		}
		exec("UPDATE promptops_observation_vectors SET qvec = NULL, vec = $3 WHERE bank = $1 AND observation_id = $2", string(key), "o1", floatBytes(vecs["o1"]))

		load := func(k consolidation.ScopeKey, sp consolidation.Space) (consolidation.Generation, *loaded) {
			t.Helper()
			l := &loaded{obs: map[string]consolidation.Observation{}, tags: map[string][]string{}, vectors: map[string][]float32{}}
			gen, err := s.LoadRecallable(ctx, k, sp, l)
			if err != nil {
				t.Fatal(err)
			}
			return gen, l
		}
		gen, l := load(key, sp)
		if want, err := s.BankGeneration(ctx, key); err != nil || gen != want || gen != (consolidation.Generation{Applied: 5, Erasures: 2}) {
			t.Fatalf("generation %+v, BankGeneration %+v %v", gen, want, err)
		}
		if !slices.Equal(l.grow, []int{3}) {
			t.Errorf("grow %v, want [3]", l.grow)
		}
		if got := slices.Sorted(maps.Keys(l.obs)); !slices.Equal(got, []string{"o0", "o1", "o2"}) {
			t.Fatalf("observations %v", got)
		}
		o0 := l.obs["o0"]
		if !slices.Equal(o0.SourceFactIDs, []string{"f2", "f1"}) || !slices.Equal(l.tags["o0"], []string{"b", "c", "a"}) {
			t.Errorf("o0: sources %v tags %v, want the newest fact first and each tag once", o0.SourceFactIDs, l.tags["o0"])
		}
		if !slices.Equal(l.obs["o1"].SourceFactIDs, []string{"f3"}) || l.tags["o1"] != nil || l.obs["o2"].SourceFactIDs != nil {
			t.Errorf("o1 %v %v, o2 %v", l.obs["o1"].SourceFactIDs, l.tags["o1"], l.obs["o2"].SourceFactIDs)
		}
		if o0.Text != "text of o0" || o0.ProofCount != 2 || o0.Scope != "user-1" || !slices.Equal(o0.Entities, []string{"Ana"}) ||
			o0.OccurredStart == nil || !o0.OccurredStart.Equal(*d1) || o0.OccurredEnd != nil || !o0.CreatedAt.Equal(*d2) || !o0.UpdatedAt.Equal(*d3) {
			t.Errorf("o0 %+v", o0)
		}
		if got := slices.Sorted(maps.Keys(l.vectors)); !slices.Equal(got, []string{"o0", "o1"}) || !slices.Equal(l.floats, []string{"o1"}) {
			t.Fatalf("vectors of %v (unquantized %v), want o0 and o1 (o1 unquantized)", got, l.floats)
		}
		if v := l.vectors["o0"]; fmt.Sprintf("%.2f", v) != "[1.00 0.00 0.00 0.00]" {
			t.Errorf("o0's vector %v", v)
		}

		// Without a space: no vectors.
		if _, l := load(key, consolidation.Space{}); len(l.vectors) != 0 || len(l.obs) != 3 {
			t.Errorf("by words only: %d vectors, %d observations", len(l.vectors), len(l.obs))
		}
		// A key the store does not know.
		if gen, l := load(consolidation.BankID(bank).Scope("nobody"), sp); gen.Applied != -1 || len(l.obs) != 0 || len(l.grow) != 0 {
			t.Errorf("unknown key: %+v %d", gen, len(l.obs))
		}
	})
}
