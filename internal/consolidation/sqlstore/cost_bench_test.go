package sqlstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/tokens"
)

// BenchmarkConsolidationCost is what a consolidation run costs in LLM
// calls and tokens per fact, by batch size, for docs/operations.md: 1,000
// facts into an empty SQLite bank with the default mission, prompt budget
// and recall (5 observations a fact), answered by the scripted model
// llmtest.OnePerFact (per fact, an update of a recalled observation about
// the same person, else a create). Two workloads: "people", facts about 13
// people (benchFacts: each batch holds several facts of one person, whose
// updates of one observation conflict), and "distinct", each fact about a
// person of its own (creates only). Tokens are counted in o200k_base:
// prompt tokens are the system and user messages' as sent, completion
// tokens the answer's, so they are what a provider would bill for the same
// texts (give or take a few tokens of chat framing a call). The store does
// not change the figures: only SQLite runs.
//
//	go test ./internal/consolidation/sqlstore/ -run '^$' -bench BenchmarkConsolidationCost -benchtime 1x
func BenchmarkConsolidationCost(b *testing.B) {
	const n = 1000
	enc := tokens.MustGet(tokens.O200K)
	workloads := []struct {
		name  string
		facts []consolidation.Fact
	}{
		{"people", benchFacts(n)},
		{"distinct", distinctFacts(n)},
	}
	for _, w := range workloads {
		var factTokens int64
		for _, f := range w.facts {
			factTokens += int64(enc.Count(f.Text))
		}
		for _, batch := range []int{1, 8, 32} {
			b.Run(fmt.Sprintf("%s/batch=%d", w.name, batch), func(b *testing.B) {
				var calls, retries, dropped, promptTokens, systemTokens, completionTokens int64
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					srv := llmtest.New(llmtest.OnePerFact)
					s := benchStore(b, "sqlite", 0)
					if _, err := s.ImportFacts(context.Background(), bank, w.facts); err != nil {
						b.Fatal(err)
					}
					e := engine(s, srv, func(st *consolidation.Settings) {
						st.BatchSize, st.MaxFacts, st.MaxTokensPerRun = batch, n, 1<<40
					})
					b.StartTimer()
					sum, err := e.Run(context.Background())
					b.StopTimer()
					if err != nil || sum.FactsConsolidated != n {
						b.Fatalf("%v %+v", err, sum)
					}
					_ = s.Close()
					calls += sum.LLMCalls
					retries += sum.Retries
					for _, d := range sum.DroppedItems {
						dropped += d
					}
					for k, req := range srv.Requests() {
						system := int64(enc.Count(req.System))
						systemTokens += system
						promptTokens += system + int64(enc.Count(req.User))
						completionTokens += int64(enc.Count(llmtest.OnePerFact(k, req).Content))
					}
					srv.Close()
				}
				per := float64(b.N * n)
				b.ReportMetric(float64(calls)/per, "calls/fact")
				b.ReportMetric(float64(retries)/float64(b.N), "retries")
				b.ReportMetric(float64(dropped)/float64(b.N), "dropped-items")
				b.ReportMetric(float64(promptTokens)/per, "prompt-tokens/fact")
				b.ReportMetric(float64(systemTokens)/float64(calls), "system-tokens/call")
				b.ReportMetric(float64(completionTokens)/per, "completion-tokens/fact")
				b.ReportMetric(float64(factTokens)/n, "fact-text-tokens/fact")
			})
		}
	}
}

// distinctFacts are n facts of the length of benchFacts', each about a
// person of its own.
func distinctFacts(n int) []consolidation.Fact {
	out := benchFacts(n)
	for i := range out {
		name := fmt.Sprintf("Customer%d", i+1)
		out[i].Text = fmt.Sprintf("%s renewed the plan on %s", name, time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i%365).Format("2006-01-02"))
		out[i].Entities = []string{name}
	}
	return out
}
