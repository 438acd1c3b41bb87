package consolidation

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// benchStore is a QueryStore held in memory, for BenchmarkRecall.
type benchStore struct {
	obs  []Observation
	vecs map[string][]float32
}

func (s *benchStore) BankGeneration(context.Context, ScopeKey) (Generation, error) {
	return Generation{Applied: 1}, nil
}
func (s *benchStore) LoadRecallable(_ context.Context, _ ScopeKey, sp Space, into RecallableSink) (Generation, error) {
	into.Grow(len(s.obs))
	for _, o := range s.obs {
		into.Observation(o, []string{"seed"})
	}
	if sp.Dims > 0 {
		for id, v := range s.vecs {
			into.Vector(id, v)
		}
	}
	return Generation{Applied: 1}, nil
}
func (s *benchStore) PendingFacts(context.Context, ScopeKey, time.Time, int) ([]Fact, error) {
	return nil, nil
}

type benchEmbedder struct{ vecs map[string][]float32 }

func (benchEmbedder) Model() string { return "bench" }
func (e benchEmbedder) Embed(_ context.Context, texts []string) (Embeddings, error) {
	out := Embeddings{Vectors: make([][]float32, len(texts)), Errs: make([]error, len(texts))}
	for i, t := range texts {
		out.Vectors[i] = e.vecs[t]
	}
	return out, nil
}

// madeUpWords are n words of 4 to 9 random letters, so that texts share
// trigrams about as real words do.
func madeUpWords(rng *rand.Rand, n int) []string {
	words := make([]string, n)
	for i := range words {
		w := make([]byte, 4+rng.IntN(6))
		for k := range w {
			w[k] = byte('a' + rng.IntN(26))
		}
		words[i] = string(w)
	}
	return words
}

// BenchmarkRecall is one recall of the bank API over 10,000 observations
// of eight made-up words and a person each, with 1,536-dimension vectors:
// what a recall costs the server besides HTTP and the query's embedding.
// Its sub-benchmarks: "all", a bank that names no trusted sources; and
// "trustedOnly", one that trusts "crm" (every tenth observation is a
// user's), recalled with trustedOnly, which looks deeper as tags do.
func BenchmarkRecall(b *testing.B) {
	const n, d = 10000, 1536
	rng := rand.New(rand.NewPCG(7, 8))
	words := madeUpWords(rng, 3000)
	st := &benchStore{vecs: map[string][]float32{}}
	emb := benchEmbedder{vecs: map[string][]float32{}}
	var queries []string
	for i := 0; i < n; i++ {
		person := fmt.Sprintf("Person%d", i)
		t := person
		for w := 0; w < 8; w++ {
			t += " " + words[(i*31+w*977+w*w*i)%len(words)]
		}
		id := fmt.Sprintf("%08d-0000-4000-8000-000000000000", i)
		prov := []string{"crm"}
		if i%10 == 5 { // never an observation a query is made from
			prov = []string{"crm", "user"}
		}
		st.obs = append(st.obs, Observation{ID: id, Text: t, ProofCount: 1, Entities: []string{person}, SourceFactIDs: []string{fmt.Sprint("seed-", i)}, Provenance: prov})
		v := randVec(rng, d)
		st.vecs[id] = v
		if i%50 == 0 {
			q := fmt.Sprintf("what about q%d and the %s", i, words[(i*31+977)%len(words)])
			qv := make([]float32, d)
			for x := range qv {
				qv[x] = v[x] + 0.5*float32(rng.NormFloat64())
			}
			emb.vecs[q] = qv
			queries = append(queries, q)
		}
	}
	crm, err := NewTrust([]string{"crm"})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		trust Trust
	}{{"all", Trust{}}, {"trustedOnly", crm}} {
		b.Run(c.name, func(b *testing.B) {
			r := &Recaller{Store: st, Scope: "b", Embedder: emb, Floor: 0.3, Trust: c.trust}
			if err := r.Load(context.Background(), Space{Model: "bench", Dims: d}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				items, _, err := r.Recall(context.Background(), Query{Text: queries[i%len(queries)], Limit: 10, TrustedOnly: !c.trust.Everyone()})
				if err != nil || len(items) == 0 {
					b.Fatal(err, len(items))
				}
			}
		})
	}
}
