package sqlstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
)

// TestQuantizedVectorsLoadLikeFloats: a bank loaded from qvec (and from
// vec for a row written before qvec) searches exactly as one loaded from
// the float vectors.
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
			if _, err := s.db.ExecContext(ctx, s.q(`INSERT INTO promptops_observations (bank, id, text, text_norm, proof_count, created_at, updated_at) VALUES ($1, $2, $2, $2, 1, $3, $3)`), bank, id, s.t(&now)); err != nil {
				t.Fatal(err)
			}
			vecs[id] = vec()
		}
		if err := s.PutObservationVectors(ctx, bank, sp, vecs); err != nil {
			t.Fatal(err)
		}
		if _, err := s.db.ExecContext(ctx, s.q("UPDATE promptops_observation_vectors SET qvec = NULL WHERE observation_id = $1"), "o2"); err != nil {
			t.Fatal(err)
		}
		fromFloats, fromStore := consolidation.NewMemIndex(dims), consolidation.NewMemIndex(dims)
		if err := s.ScanObservationVectors(ctx, bank, sp, fromFloats.Put); err != nil {
			t.Fatal(err)
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
