package sqlstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
)

// TestQuantizedVectorsLoadLikeFloats: a bank loaded from qvec (and from
// vec for a row written before vectors were stored quantized only)
// searches exactly as one built from the float vectors.
func TestQuantizedVectorsLoadLikeFloats(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		const dims = 96
		sp := consolidation.Space{Model: "m", Dims: dims}
		if err := s.EnsureBank(ctx, bank); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(3, 4))
		vec := func() []float32 {
			v := make([]float32, dims)
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			return v
		}
		now := time.Now()
		vecs := map[string][]float32{}
		for i := 0; i < 5; i++ {
			id := fmt.Sprintf("o%d", i)
			if _, err := s.db.ExecContext(ctx, s.rebind(`INSERT INTO promptops_observations (bank, id, text, text_norm, proof_count, created_at, updated_at) VALUES ($1, $2, $2, $2, 1, $3, $3)`), bank, id, s.timeArg(&now)); err != nil {
				t.Fatal(err)
			}
			vecs[id] = vec()
		}
		if err := s.PutObservationVectors(ctx, bank, sp, vecs); err != nil {
			t.Fatal(err)
		}
		if _, err := s.db.ExecContext(ctx, s.rebind("UPDATE promptops_observation_vectors SET qvec = NULL, vec = $2 WHERE observation_id = $1"), "o2", floatBytes(vecs["o2"])); err != nil {
			t.Fatal(err)
		}
		fromFloats, fromStore := consolidation.NewMemIndex(dims), consolidation.NewMemIndex(dims)
		for id, v := range vecs {
			fromFloats.Put(id, v)
		}
		var quantized, floats []string
		err := s.ScanObservationQuantized(ctx, bank, sp,
			func(id string, q []int8, scale float32) {
				quantized = append(quantized, id)
				fromStore.PutQuantized(id, q, scale)
			},
			func(id string, v []float32) { floats = append(floats, id); fromStore.Put(id, v) })
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(quantized)
		if !slices.Equal(quantized, []string{"o0", "o1", "o3", "o4"}) || !slices.Equal(floats, []string{"o2"}) {
			t.Fatalf("quantized %v, floats %v", quantized, floats)
		}
		queries := [][]float32{vec(), vecs["o2"], vecs["o4"]}
		if got, want := fromStore.Nearest(queries, 5, -1), fromFloats.Nearest(queries, 5, -1); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("loaded from qvec %v, from vec %v", got, want)
		}
	})
}

// floatBytes is v as vec held it before vectors were stored quantized
// only: little-endian float32.
func floatBytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// TestStoredVectorsKeepTheirCosines: vectors are stored quantized; what
// FactVectors and ScanObservationQuantized give back points where the
// vector did (cosine at least 0.9999 at 1,536 dimensions) and keeps the
// cosines between vectors to within 1e-3 (the duplicate guard's 0.97 is
// compared in the same int8 form), and a row written before, float32 in
// vec, is read back as it was.
func TestStoredVectorsKeepTheirCosines(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		const dims = 1536
		sp := consolidation.Space{Model: "m", Dims: dims}
		rng := rand.New(rand.NewPCG(5, 6))
		base := make([]float32, dims)
		for i := range base {
			base[i] = float32(rng.NormFloat64())
		}
		// Vectors around one direction (cosines near 0.97, the guard's
		// range) and one far from it, of lengths other than 1.
		vecs := map[string][]float32{}
		var ids []string
		for k := 0; k < 6; k++ {
			v := make([]float32, dims)
			for i := range v {
				v[i] = float32(float64(k+1) * (float64(base[i]) + 0.17*float64(k)*rng.NormFloat64()))
			}
			id := fid(k + 1)
			vecs[id], ids = v, append(ids, id)
		}
		var facts []consolidation.Fact
		for _, id := range ids {
			facts = append(facts, consolidation.Fact{ID: id, Text: "fact " + id})
		}
		importFacts(t, s, facts...)
		if err := s.PutFactVectors(ctx, bank, sp, vecs); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		for _, id := range ids {
			if _, err := s.db.ExecContext(ctx, s.rebind(`INSERT INTO promptops_observations (bank, id, text, text_norm, proof_count, created_at, updated_at) VALUES ($1, $2, $2, $2, 1, $3, $3)`), bank, id, s.timeArg(&now)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PutObservationVectors(ctx, bank, sp, vecs); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM promptops_fact_vectors WHERE vec IS NULL AND length(qvec) = 1540").Scan(&n); err != nil || n != len(ids) {
			t.Fatalf("fact vectors stored quantized only: %d of %d (%v)", n, len(ids), err)
		}
		if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM promptops_observation_vectors WHERE vec IS NULL AND length(qvec) = 1540").Scan(&n); err != nil || n != len(ids) {
			t.Fatalf("observation vectors stored quantized only: %d of %d (%v)", n, len(ids), err)
		}
		// A fact vector written before: float32 in vec, no qvec.
		legacy := ids[len(ids)-1]
		if _, err := s.db.ExecContext(ctx, s.rebind("UPDATE promptops_fact_vectors SET qvec = NULL, vec = $2 WHERE fact_id = $1"), legacy, floatBytes(vecs[legacy])); err != nil {
			t.Fatal(err)
		}
		got, err := s.FactVectors(ctx, bank, sp, ids)
		if err != nil || len(got) != len(ids) {
			t.Fatalf("%d fact vectors of %d: %v", len(got), len(ids), err)
		}
		if !slices.Equal(got[legacy], vecs[legacy]) {
			t.Fatal("a float32 vec written before is read back as it was")
		}
		scanned := map[string][]float32{}
		if err := scanObservationVectors(ctx, s, bank, sp, func(id string, v []float32) { scanned[id] = slices.Clone(v) }); err != nil || len(scanned) != len(ids) {
			t.Fatalf("%d observation vectors of %d: %v", len(scanned), len(ids), err)
		}
		worst, worstPair := 1.0, 0.0
		for _, back := range []map[string][]float32{got, scanned} {
			for _, a := range ids {
				worst = min(worst, consolidation.Cosine(back[a], vecs[a]))
				for _, b := range ids {
					worstPair = max(worstPair, math.Abs(consolidation.Cosine(back[a], back[b])-consolidation.Cosine(vecs[a], vecs[b])))
				}
			}
		}
		t.Logf("worst cosine to the float vector %.6f; worst change of a cosine between two %.2e", worst, worstPair)
		if worst < 0.9999 || worstPair > 1e-3 {
			t.Fatalf("worst cosine to the float vector %.6f, worst change of a cosine between two %.2e", worst, worstPair)
		}
	})
}

// TestUpgradeKeepsFloatVectors: a store written before vectors were stored
// quantized only (float32 vec, and qvec for observations) is migrated with
// its rows as they were and read from them; a vector written again is
// quantized only.
func TestUpgradeKeepsFloatVectors(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []string{"postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			const dims = 64
			sp := consolidation.Space{Model: "m", Dims: dims}
			old, url := storeAtVersion(t, kind, 5, 6)
			db := old.db
			rng := rand.New(rand.NewPCG(9, 10))
			v := make([]float32, dims)
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			now := time.Now()
			for _, q := range []struct {
				query string
				args  []any
			}{
				// Written as that version's import wrote them: the
				// store's write paths now write later columns too.
				{`INSERT INTO promptops_banks (id, created_at) VALUES ($1, $2)`, []any{bank, old.timeArg(&now)}},
				{`INSERT INTO promptops_facts (bank, id, text, created_at) VALUES ($1, $2, 'a fact', $3)`, []any{bank, fid(1), old.timeArg(&now)}},
				{`INSERT INTO promptops_observations (bank, id, text, text_norm, proof_count, created_at, updated_at) VALUES ($1, 'o1', 'o1', 'o1', 1, $2, $2)`, []any{bank, old.timeArg(&now)}},
				{`INSERT INTO promptops_observations (bank, id, text, text_norm, proof_count, created_at, updated_at) VALUES ($1, 'o2', 'o2', 'o2', 1, $2, $2)`, []any{bank, old.timeArg(&now)}},
				{`INSERT INTO promptops_fact_vectors (bank, fact_id, model, dims, vec) VALUES ($1, $2, 'm', $3, $4)`, []any{bank, fid(1), dims, floatBytes(v)}},
				{`INSERT INTO promptops_observation_vectors (bank, observation_id, model, dims, vec, qvec) VALUES ($1, 'o1', 'm', $2, $3, $4)`, []any{bank, dims, floatBytes(v), encodeQuantized(v)}},
				{`INSERT INTO promptops_observation_vectors (bank, observation_id, model, dims, vec) VALUES ($1, 'o2', 'm', $2, $3)`, []any{bank, dims, floatBytes(v)}},
			} {
				if _, err := db.ExecContext(ctx, old.rebind(q.query), q.args...); err != nil {
					t.Fatal(err)
				}
			}
			_ = db.Close()

			s, err := Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			fv, err := s.FactVectors(ctx, bank, sp, []string{fid(1)})
			if err != nil || !slices.Equal(fv[fid(1)], v) {
				t.Fatalf("the fact's float vector after the upgrade: %v %v", fv, err)
			}
			fromStore, want := consolidation.NewMemIndex(dims), consolidation.NewMemIndex(dims)
			want.Put("o1", v)
			want.Put("o2", v)
			if err := s.ScanObservationQuantized(ctx, bank, sp, fromStore.PutQuantized, fromStore.Put); err != nil {
				t.Fatal(err)
			}
			if got, w := fromStore.Nearest([][]float32{v}, 5, -1), want.Nearest([][]float32{v}, 5, -1); fromStore.Len() != 2 || !slices.EqualFunc(got, w, slices.Equal) {
				t.Fatalf("observations after the upgrade: %v, want %v", got, w)
			}
			if err := s.PutObservationVectors(ctx, bank, sp, map[string][]float32{"o2": v}); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := s.db.QueryRowContext(ctx, s.rebind("SELECT count(*) FROM promptops_observation_vectors WHERE observation_id = 'o2' AND vec IS NULL AND qvec IS NOT NULL")).Scan(&n); err != nil || n != 1 {
				t.Fatalf("a vector written again is quantized only: %d %v", n, err)
			}
		})
	}
}

// scanObservationVectors calls fn with every observation vector of the
// scope in sp, dequantized; vec is valid only during the call.
func scanObservationVectors(ctx context.Context, s *Store, key consolidation.ScopeKey, sp consolidation.Space, fn func(id string, vec []float32)) error {
	buf := make([]float32, sp.Dims)
	return s.ScanObservationQuantized(ctx, key, sp, func(id string, q []int8, scale float32) {
		for i, x := range q {
			buf[i] = float32(x) * scale
		}
		fn(id, buf)
	}, fn)
}
