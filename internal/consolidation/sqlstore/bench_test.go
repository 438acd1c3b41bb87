package sqlstore

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/tokens"
)

var (
	people = []string{"Alice", "Bob", "Carol", "Dana", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy", "张伟", "李娜", "王芳"}
	topics = []string{"works at %s Labs", "moved to city %d", "has %d cats", "likes jazz number %d", "started a project called P%d", "在%d号楼办公"}
)

func benchFacts(n int) []consolidation.Fact {
	out := make([]consolidation.Fact, n)
	for i := range out {
		p := people[i%len(people)]
		topic := topics[(i/len(people))%len(topics)]
		var text string
		if topic == "works at %s Labs" {
			text = fmt.Sprintf("%s "+topic, p, people[(i+3)%len(people)])
		} else {
			text = fmt.Sprintf("%s "+topic, p, i%97)
		}
		d := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i%365)
		out[i] = consolidation.Fact{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i+1), Text: text, Entities: []string{p}, OccurredStart: &d}
	}
	return out
}

// BenchmarkEngine consolidates 1,000 facts with a scripted LLM that answers
// at once, and reports engine time per fact and prompt tokens per fact.
func BenchmarkEngine(b *testing.B) {
	const n = 1000
	enc := tokens.MustGet(tokens.O200K)
	for _, storeName := range []string{"postgres", "sqlite"} {
		for _, batch := range []int{1, 8, 16} {
			b.Run(fmt.Sprintf("%s/batch=%d", storeName, batch), func(b *testing.B) {
				var promptTokens int64
				var total time.Duration
				for i := 0; i < b.N; i++ {
					srv := llmtest.New(llmtest.OnePerFact)
					b.StopTimer()
					s := benchStore(b, storeName, n)
					e := engine(s, srv, func(st *consolidation.Settings) { st.BatchSize, st.MaxFacts, st.MaxTokensPerRun = batch, n, 1<<40 })
					b.StartTimer()
					start := time.Now()
					sum, err := e.Run(context.Background())
					total += time.Since(start)
					b.StopTimer()
					if err != nil || sum.FactsConsolidated != n {
						b.Fatalf("%v %+v", err, sum)
					}
					_ = s.Close()
					// Tokens the engine sent, counted outside the timed part.
					for _, req := range srv.Requests() {
						promptTokens += int64(enc.Count(req.System) + enc.Count(req.User))
					}
					srv.Close()
				}
				b.ReportMetric(float64(total.Microseconds())/float64(b.N*n), "µs/fact")
				b.ReportMetric(float64(promptTokens)/float64(b.N*n), "prompt-tokens/fact")
			})
		}
	}
}

// BenchmarkEngineFaulty consolidates 1,000 facts with a model that is
// mostly right, deterministic at temperature 0 (20% of answers carry one
// invalid item, 5% are truncated JSON, 5% fenced), beside the same run with
// a perfect model: LLM calls per batch (1.0 is perfect), prompt tokens and
// engine time per fact, and facts consolidated and failed.
func BenchmarkEngineFaulty(b *testing.B) {
	const n, batch = 1000, 8
	enc := tokens.MustGet(tokens.O200K)
	models := []struct {
		name   string
		script llmtest.Script
	}{
		{"perfect", llmtest.OnePerFact},
		{"faulty", llmtest.Faulty(llmtest.Faults{InvalidItem: 0.20, Truncated: 0.05, Fenced: 0.05})},
	}
	for _, storeName := range []string{"postgres", "sqlite"} {
		for _, m := range models {
			b.Run(storeName+"/"+m.name, func(b *testing.B) {
				var promptTokens, calls, consolidated, failed, lost int64
				var total time.Duration
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					srv := llmtest.New(m.script)
					s := benchStore(b, storeName, n)
					e := engine(s, srv, func(st *consolidation.Settings) { st.BatchSize, st.MaxFacts, st.MaxTokensPerRun = batch, n, 1<<40 })
					b.StartTimer()
					start := time.Now()
					sum, err := e.Run(context.Background())
					total += time.Since(start)
					b.StopTimer()
					if err != nil {
						b.Fatal(err)
					}
					counts, err := s.CountFacts(context.Background(), bank)
					if err != nil {
						b.Fatal(err)
					}
					calls += sum.LLMCalls
					consolidated += counts[consolidation.FactConsolidated]
					failed += counts[consolidation.FactFailed]
					lost += n - counts[consolidation.FactConsolidated] - counts[consolidation.FactFailed]
					_ = s.Close()
					for _, req := range srv.Requests() {
						promptTokens += int64(enc.Count(req.System) + enc.Count(req.User))
					}
					srv.Close()
				}
				batches := float64(b.N) * float64((n+batch-1)/batch)
				b.ReportMetric(float64(calls)/batches, "calls/batch")
				b.ReportMetric(float64(promptTokens)/float64(b.N*n), "prompt-tokens/fact")
				b.ReportMetric(float64(total.Microseconds())/float64(b.N*n), "µs/fact")
				b.ReportMetric(float64(consolidated)/float64(b.N), "consolidated")
				b.ReportMetric(float64(failed)/float64(b.N), "failed")
				b.ReportMetric(float64(lost)/float64(b.N), "lost")
			})
		}
	}
}

// benchStore is a fresh bank of n facts in a new PostgreSQL database or
// SQLite file.
func benchStore(b *testing.B, storeName string, n int) *Store {
	b.Helper()
	url := "sqlite://" + filepath.Join(b.TempDir(), "bank.db")
	if storeName == "postgres" {
		dsn, err := pg.NewDatabase(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		url = dsn
	}
	s, err := Open(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.ImportFacts(context.Background(), bank, benchFacts(n)); err != nil {
		b.Fatal(err)
	}
	return s
}
