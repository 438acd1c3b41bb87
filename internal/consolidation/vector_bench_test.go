package consolidation

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// BenchmarkMemIndex is the vector side of a batch of 8 facts: one search
// for the facts' recall and one for the duplicate guard of up to 8 new
// texts, over banks of 10,000 and 100,000 observations at 1,536
// dimensions. It reports the search time per fact and the heap the index
// holds.
func BenchmarkMemIndex(b *testing.B) {
	const d, batch = 1536, 8
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("observations=%d", n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(5, 6))
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			idx := NewMemIndex(d)
			idx.Grow(n)
			v := make([]float32, d)
			for i := 0; i < n; i++ {
				for x := range v {
					v[x] = float32(rng.NormFloat64())
				}
				idx.Put(fmt.Sprintf("%08d-0000-4000-8000-000000000000", i), v)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			queries := make([][]float32, batch)
			for j := range queries {
				queries[j] = randVec(rng, d)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				idx.Nearest(queries, 20, 0.3) // recall
				idx.Nearest(queries, 4, 0.97) // guard
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batch), "µs/fact")
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "index-MiB")
		})
	}
}
