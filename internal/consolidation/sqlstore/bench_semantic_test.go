package sqlstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/llm"
	"github.com/promptops/promptops/internal/llmtest"
)

// timedLLM and timedEmbedder add up the time spent waiting for the scripted
// servers, so that engine time excludes LLM and embedding latency.
type timedLLM struct {
	consolidation.LLM
	spent *atomic.Int64
}

func (t timedLLM) Complete(ctx context.Context, req consolidation.Request) (consolidation.Completion, error) {
	start := time.Now()
	defer func() { t.spent.Add(int64(time.Since(start))) }()
	return t.LLM.Complete(ctx, req)
}

type timedEmbedder struct {
	consolidation.Embedder
	spent *atomic.Int64
}

func (t timedEmbedder) Embed(ctx context.Context, texts []string) (consolidation.Embeddings, error) {
	start := time.Now()
	defer func() { t.spent.Add(int64(time.Since(start))) }()
	return t.Embedder.Embed(ctx, texts)
}

// benchVector is the scripted embedding of a text: its own direction.
func benchVector(dims int) llmtest.VectorFunc {
	return func(text string, _ int) ([]float32, error) {
		return llmtest.TopicVector(dims, []string{text}, []float64{1}), nil
	}
}

// benchWords is a vocabulary of 3,000 made-up words of 4 to 9 letters, so
// that texts share trigrams about as real words do.
var benchWords = func() []string {
	rng := rand.New(rand.NewPCG(7, 8))
	out := make([]string, 3000)
	for i := range out {
		w := make([]byte, 4+rng.IntN(6))
		for k := range w {
			w[k] = byte('a' + rng.IntN(26))
		}
		out[i] = string(w)
	}
	return out
}()

// benchText is a text about one of 2,000 people, made of six words.
func benchText(i int) (string, string) {
	person := fmt.Sprintf("%s%d", people[i%len(people)], (i*7919)%2000)
	text := person
	for w := 0; w < 6; w++ {
		text += " " + benchWords[(i*31+w*977+w*w*i)%len(benchWords)]
	}
	return person, text
}

// benchFactsDiverse are n pending facts about the same people and words as
// the seeded observations.
func benchFactsDiverse(n int) []consolidation.Fact {
	out := make([]consolidation.Fact, n)
	for i := range out {
		person, text := benchText(i*13 + 5)
		out[i] = consolidation.Fact{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i+1), Text: text, Entities: []string{person}}
	}
	return out
}

// seedObservations writes n observations straight into the bank, with
// vectors in sp when sp.Dims > 0, in one transaction.
func seedObservations(b *testing.B, s *Store, n int, sp consolidation.Space) {
	b.Helper()
	ctx := context.Background()
	if err := s.EnsureBank(ctx, bank); err != nil {
		b.Fatal(err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	now := time.Now().UTC()
	vec := benchVector(sp.Dims)
	for i := 0; i < n; i++ {
		id := uuid.NewString()
		person, text := benchText(i)
		if _, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO promptops_observations (bank, id, text, text_norm, proof_count, entities_norm, created_at, updated_at)
			VALUES ($1, $2, $3, $4, 1, $5, $6, $6)`), bank, id, text, consolidation.Normalize(text), toJSON(entitySet(nil, []consolidation.Fact{{Entities: []string{person}}})), s.timeArg(&now)); err != nil {
			b.Fatal(err)
		}
		if sp.Dims > 0 {
			v, _ := vec(text, 0)
			if err := s.upsertVector(ctx, tx, "promptops_observation_vectors", "observation_id", bank, id, sp, v); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	// Statistics, as autovacuum would have them for a bank this size:
	// without them PostgreSQL scans instead of using the trigram index.
	if _, err := s.db.ExecContext(ctx, "ANALYZE"); err != nil {
		b.Fatal(err)
	}
}

// peakHeap samples the heap in use (spans holding objects, and goroutine
// stacks) until stop is closed and returns the highest value seen. It reads
// runtime/metrics, which does not stop the world as runtime.ReadMemStats
// does: sampling every 2 ms must not add to the engine time it measures.
func peakHeap(stop <-chan struct{}) func() uint64 {
	var peak uint64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		samples := []metrics.Sample{
			{Name: "/memory/classes/heap/objects:bytes"},
			{Name: "/memory/classes/heap/unused:bytes"},
			{Name: "/memory/classes/heap/stacks:bytes"},
		}
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(samples)
			var inuse uint64
			for _, s := range samples {
				inuse += s.Value.Uint64()
			}
			peak = max(peak, inuse)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 { wg.Wait(); return peak }
}

// BenchmarkEngineSemantic consolidates 200 facts, batch 8, into a bank of
// 10,000 observations (about 2,000 people, a 3,000-word vocabulary) with
// 1,536-dimension vectors, with a scripted LLM and
// embeddings server, recall hybrid against lexical on both stores: engine
// time per fact (time waiting for the servers excluded) and the peak heap
// of the process during the run (the scripted servers included).
func BenchmarkEngineSemantic(b *testing.B) {
	const observations, n, batch, dims = 10000, 200, 8, 1536
	sp := consolidation.Space{Model: "bench-embed", Dims: dims}
	for _, storeName := range []string{"postgres", "sqlite"} {
		for _, mode := range []string{"lexical", "hybrid"} {
			b.Run(storeName+"/"+mode, func(b *testing.B) {
				var engineTime time.Duration
				var peak uint64
				var embCalls int64
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					s := benchStore(b, storeName, 0)
					if _, err := s.ImportFacts(context.Background(), bank, benchFactsDiverse(n)); err != nil {
						b.Fatal(err)
					}
					seed := sp
					if mode == "lexical" {
						seed.Dims = 0
					}
					seedObservations(b, s, observations, seed)
					srv := llmtest.New(llmtest.OnePerFact)
					var spent atomic.Int64
					e := engine(s, srv, func(st *consolidation.Settings) { st.BatchSize, st.MaxFacts, st.MaxTokensPerRun = batch, n, 1<<40 })
					e.LLM = timedLLM{e.LLM, &spent}
					var emb *llmtest.EmbedServer
					if mode == "hybrid" {
						emb = llmtest.NewEmbeddings(benchVector(dims))
						e.Embedder = timedEmbedder{llm.NewEmbeddings(llm.EmbeddingsConfig{BaseURL: emb.BaseURL(), Model: sp.Model, Timeout: 30 * time.Second}), &spent}
					}
					runtime.GC()
					stop := make(chan struct{})
					done := peakHeap(stop)
					b.StartTimer()
					start := time.Now()
					sum, err := e.Run(context.Background())
					wall := time.Since(start)
					b.StopTimer()
					close(stop)
					peak = max(peak, done())
					if err != nil || sum.FactsConsolidated != n {
						b.Fatalf("%v %+v", err, sum)
					}
					if mode == "hybrid" && sum.Reembedded != 0 {
						b.Fatalf("the seeded vectors must be used: %+v", sum)
					}
					engineTime += wall - time.Duration(spent.Load())
					embCalls += sum.EmbeddingCalls
					_ = s.Close()
					srv.Close()
					if emb != nil {
						emb.Close()
					}
				}
				b.ReportMetric(float64(engineTime.Microseconds())/float64(b.N*n), "engine-µs/fact")
				b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
				b.ReportMetric(float64(embCalls)/float64(b.N*n/batch), "embed-calls/batch")
			})
		}
	}
}
