package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/llm"
	"github.com/promptops/promptops/internal/llmtest"
)

// paraphrases is testdata/paraphrases.json: 30 topics in English and
// Chinese, each as [told first, a near-copy of it, two paraphrases].
type paraphrases struct {
	topics  [][]string
	topicOf map[string]int
	wording map[string]string
}

func loadParaphrases(t testing.TB) paraphrases {
	t.Helper()
	data, err := os.ReadFile("testdata/paraphrases.json")
	if err != nil {
		t.Fatal(err)
	}
	p := paraphrases{topicOf: map[string]int{}, wording: map[string]string{}}
	if err := json.Unmarshal(data, &p.topics); err != nil {
		t.Fatal(err)
	}
	for i, texts := range p.topics {
		if len(texts) != 4 {
			t.Fatalf("topic %d has %d texts", i, len(texts))
		}
		for k, text := range texts {
			if _, dup := p.topicOf[text]; dup {
				t.Fatalf("text %q twice", text)
			}
			p.topicOf[text] = i
			// The near-copy shares the first telling's wording.
			p.wording[text] = fmt.Sprintf("wording-%d-%d", i, max(k, 1)-1+k/2)
		}
	}
	return p
}

// vector puts a topic's texts near each other (paraphrases at a cosine of
// about 0.86, a near-copy above 0.99) and unrelated texts far apart.
func (p paraphrases) vector(text string, _ int) ([]float32, error) {
	topic, ok := p.topicOf[text]
	if !ok {
		return llmtest.TopicVector(64, []string{text}, []float64{1}), nil
	}
	return llmtest.TopicVector(64, []string{fmt.Sprintf("topic-%d", topic), p.wording[text], text}, []float64{1, 0.4, 0.05}), nil
}

// facts tells every topic once, then three more times, in rounds that keep
// a topic's tellings more than a batch apart.
func (p paraphrases) facts() []consolidation.Fact {
	var out []consolidation.Fact
	n := len(p.topics)
	for round := 0; round < 4; round++ {
		for j := 0; j < n; j++ {
			topic := (j + round*10) % n
			out = append(out, consolidation.Fact{ID: fmt.Sprintf("00000000-0000-4000-8000-%04d%08d", round, topic), Text: p.topics[topic][round]})
		}
	}
	return out
}

// model updates an observation of a fact's topic whenever the prompt shows
// one, and otherwise creates one with the fact's text.
func (p paraphrases) model(_ int, req llmtest.Request) llmtest.Reply {
	obs := llmtest.Observations(req.User)
	var a llmtest.Answer
	for _, f := range llmtest.Facts(req.User) {
		topic := p.topicOf[f.Text]
		updated := false
		for _, o := range obs {
			if t, ok := p.topicOf[o.Text]; ok && t == topic {
				a.Updates = append(a.Updates, map[string]any{"observation_id": o.ID, "text": o.Text, "source_fact_ids": []string{f.ID}})
				updated = true
				break
			}
		}
		if !updated {
			a.Creates = append(a.Creates, map[string]any{"text": f.Text, "source_fact_ids": []string{f.ID}})
		}
	}
	return llmtest.Reply{Content: a.JSON(), PromptTokens: 1000, CompletionTokens: 100}
}

// duplicates counts the observations beyond one per topic.
func (p paraphrases) duplicates(t *testing.T, s *Store) int {
	perTopic := map[int]int{}
	for _, o := range observations(t, s) {
		topic, ok := p.topicOf[o.Text]
		if !ok {
			t.Fatalf("an observation not from the data: %q", o.Text)
		}
		perTopic[topic]++
	}
	dups := 0
	for _, n := range perTopic {
		dups += n - 1
	}
	if len(perTopic) != len(p.topics) {
		t.Fatalf("%d topics have observations, want %d", len(perTopic), len(p.topics))
	}
	return dups
}

func embeddingsEngine(s *Store, srv *llmtest.Server, emb *llmtest.EmbedServer, mod func(*consolidation.Settings)) *consolidation.Engine {
	e := engine(s, srv, mod)
	if emb != nil {
		e.Embedder = llm.NewEmbeddings(llm.EmbeddingsConfig{BaseURL: emb.BaseURL(), Model: "test-embed", Timeout: 2 * time.Second, MaxRetries: 1})
	}
	return e
}

// TestParaphraseDuplicates: 30 topics told once and then three more times
// in other words; a model that updates whenever it is shown the right
// observation. Lexical recall misses paraphrases and stores duplicates;
// hybrid recall with the duplicate guard keeps one observation per topic,
// with the same number of LLM calls.
func TestParaphraseDuplicates(t *testing.T) {
	p := loadParaphrases(t)
	facts := p.facts()
	batches := int64((len(facts) + 7) / 8)
	eachStore(t, func(t *testing.T, s *Store) {
		for _, mode := range []string{"lexical", "hybrid"} {
			// A bank per mode in the same database.
			e := func() *consolidation.Engine {
				srv := llmtest.New(p.model)
				t.Cleanup(srv.Close)
				var emb *llmtest.EmbedServer
				if mode == "hybrid" {
					emb = llmtest.NewEmbeddings(p.vector)
					t.Cleanup(emb.Close)
				}
				e := embeddingsEngine(s, srv, emb, nil)
				e.Settings.Bank = bank
				return e
			}()
			if _, err := s.DB().Exec("DELETE FROM promptops_observations"); err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"DELETE FROM promptops_observation_sources", "DELETE FROM promptops_facts", "DELETE FROM promptops_observation_vectors", "DELETE FROM promptops_fact_vectors"} {
				if _, err := s.DB().Exec(q); err != nil {
					t.Fatal(err)
				}
			}
			// Observations written outside Apply: move the bank's
			// generation so that recall reloads its index.
			if _, err := s.DB().Exec("UPDATE promptops_banks SET generation = generation + 1"); err != nil {
				t.Fatal(err)
			}
			importFacts(t, s, facts...)
			sum, err := e.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			states, _ := factStates(t, s)
			dups := p.duplicates(t, s)
			t.Logf("%s recall: %d duplicate observations of %d chances, %d observations, %d consolidated, %d failed, %d LLM calls for %d batches, dropped %v, %d embedding calls, %d embedding tokens",
				mode, dups, len(facts)-len(p.topics), sum.Observations, states[consolidation.FactConsolidated], states[consolidation.FactFailed], sum.LLMCalls, batches, sum.DroppedItems, sum.EmbeddingCalls, sum.EmbeddingTokens)
			if mode == "hybrid" {
				// The lexical run is the baseline reported beside it.
				if states[consolidation.FactConsolidated] != len(facts) || sum.FactsFailed != 0 || sum.PendingFacts != 0 {
					t.Fatalf("every fact must be consolidated: %v %+v", states, sum)
				}
				if sum.LLMCalls != batches {
					t.Fatalf("%d LLM calls for %d batches", sum.LLMCalls, batches)
				}
				if dups > 2 {
					t.Fatalf("hybrid recall left %d duplicates", dups)
				}
				if sum.Recall != "hybrid" {
					t.Fatalf("summary recall %q", sum.Recall)
				}
			} else if sum.Recall != "lexical" || sum.EmbeddingCalls != 0 {
				t.Fatalf("lexical run: %+v", sum)
			}
		}
	})
}

// TestDuplicateGuard: a model that never updates. The guard turns every
// near-copy into a merge into its twin (proof count up, the fact
// consolidated); paraphrases, further than duplicateSimilarity, are kept.
func TestDuplicateGuard(t *testing.T) {
	p := loadParaphrases(t)
	var facts []consolidation.Fact
	for _, f := range p.facts() {
		if f.ID[24:28] == "0000" || f.ID[24:28] == "0001" { // first tellings and near-copies
			facts = append(facts, f)
		}
	}
	eachStore(t, func(t *testing.T, s *Store) {
		importFacts(t, s, facts...)
		srv := llmtest.New(func(_ int, req llmtest.Request) llmtest.Reply {
			var a llmtest.Answer
			for _, f := range llmtest.Facts(req.User) {
				a.Creates = append(a.Creates, map[string]any{"text": f.Text, "source_fact_ids": []string{f.ID}})
			}
			return llmtest.Reply{Content: a.JSON()}
		})
		defer srv.Close()
		emb := llmtest.NewEmbeddings(p.vector)
		emb.Base64 = true // servers that answer base64 whatever was asked
		defer emb.Close()
		sum, err := embeddingsEngine(s, srv, emb, nil).Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		obs := observations(t, s)
		// A near-copy whose normalised text is the same is "repeated", as
		// without embeddings; the others are caught by the guard.
		dup := sum.DroppedItems[consolidation.DropDuplicate]
		if len(obs) != len(p.topics) || dup+sum.DroppedItems[consolidation.DropRepeated] != int64(len(p.topics)) || dup < 20 || sum.FactsConsolidated != int64(len(facts)) || sum.FactsFailed != 0 {
			t.Fatalf("%d observations, %+v", len(obs), sum)
		}
		joined := 0
		for _, o := range obs {
			if o.ProofCount == 2 && len(o.SourceFactIDs) == 2 {
				joined++
			}
		}
		if int64(joined) != dup {
			t.Fatalf("each caught near-copy's fact must join its twin: %d of %d", joined, dup)
		}
		if sum.LLMCalls != int64((len(facts)+7)/8) {
			t.Fatalf("the guard must not cost LLM calls: %+v", sum)
		}
	})
}

// TestEmbeddingsDown: an embeddings server that does not answer fails the
// run with the reason, and every fact stays pending.
func TestEmbeddingsDown(t *testing.T) {
	p := loadParaphrases(t)
	eachStore(t, func(t *testing.T, s *Store) {
		importFacts(t, s, p.facts()[:10]...)
		srv := llmtest.New(p.model)
		defer srv.Close()
		emb := llmtest.NewEmbeddings(p.vector)
		defer emb.Close()
		emb.SetDown(true)
		sum, err := embeddingsEngine(s, srv, emb, nil).Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "embeddings answered 503: the embeddings server is down") {
			t.Fatalf("want the server's reason, got %v", err)
		}
		if sum.PendingFacts != 10 || sum.FactsConsolidated != 0 || len(srv.Requests()) != 0 {
			t.Fatalf("nothing may be lost or sent: %+v", sum)
		}
	})
}

// TestEmbeddingsRefusedItem: a fact the server refuses (too long) is
// recalled lexically and consolidated; only it lacks a vector.
func TestEmbeddingsRefusedItem(t *testing.T) {
	p := loadParaphrases(t)
	eachStore(t, func(t *testing.T, s *Store) {
		facts := p.facts()[:4]
		facts[2].Text = "LONG " + facts[2].Text
		importFacts(t, s, facts...)
		srv := llmtest.New(llmtest.OnePerFact)
		defer srv.Close()
		emb := llmtest.NewEmbeddings(func(text string, dims int) ([]float32, error) {
			if strings.HasPrefix(text, "LONG ") {
				return nil, llmtest.ErrTooLong(9000)
			}
			return p.vector(text, dims)
		})
		defer emb.Close()
		var lines []string
		e := embeddingsEngine(s, srv, emb, nil)
		e.Progress = func(l string) { lines = append(lines, l) }
		sum, err := e.Run(context.Background())
		if err != nil || sum.FactsConsolidated != 4 {
			t.Fatalf("%v %+v", err, sum)
		}
		vecs, err := s.FactVectors(context.Background(), bank, consolidation.Space{Model: "test-embed", Dims: 64}, []string{facts[0].ID, facts[2].ID})
		if err != nil || len(vecs) != 1 || vecs[facts[0].ID] == nil {
			t.Fatalf("%v %v", err, vecs)
		}
		if !strings.Contains(strings.Join(lines, "\n"), "fact "+consolidation.LogID(facts[2].ID)+" (id hash) not embedded: embeddings answered 400: input is too long") {
			t.Fatalf("the reason must be reported: %q", lines)
		}
	})
}

// TestEmbeddingsSpaceChange: a bank embedded with one model is re-embedded
// with the next, bounded per run, and the spaces never mix.
func TestEmbeddingsSpaceChange(t *testing.T) {
	p := loadParaphrases(t)
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		facts := p.facts()
		importFacts(t, s, facts[:30]...)
		srv := llmtest.New(p.model)
		defer srv.Close()
		emb := llmtest.NewEmbeddings(p.vector)
		defer emb.Close()
		if _, err := embeddingsEngine(s, srv, emb, nil).Run(ctx); err != nil {
			t.Fatal(err)
		}
		importFacts(t, s, facts[30:40]...)
		e := embeddingsEngine(s, srv, emb, func(st *consolidation.Settings) { st.MaxReembedPerRun = 20 })
		e.Embedder = llm.NewEmbeddings(llm.EmbeddingsConfig{BaseURL: emb.BaseURL(), Model: "other-embed", Timeout: 2 * time.Second})
		sum, err := e.Run(ctx)
		if err != nil || sum.Reembedded != 20 {
			t.Fatalf("%v %+v", err, sum)
		}
		count := func(model string) int {
			n := 0
			if err := scanObservationVectors(ctx, s, bank, consolidation.Space{Model: model, Dims: 64}, func(string, []float32) { n++ }); err != nil {
				t.Fatal(err)
			}
			return n
		}
		// 20 re-embedded plus what the run created or updated in the new space.
		if n := count("other-embed"); n < 20 || n+count("test-embed") != 30 {
			t.Fatalf("vectors: %d in the new space, %d in the old", n, count("test-embed"))
		}
	})
}

// TestEmbeddingTokensCountTowardBudget: a run whose budget the embeddings
// use up stops before the next call, leaving the rest pending.
func TestEmbeddingTokensCountTowardBudget(t *testing.T) {
	p := loadParaphrases(t)
	eachStore(t, func(t *testing.T, s *Store) {
		importFacts(t, s, p.facts()...)
		srv := llmtest.New(func(_ int, req llmtest.Request) llmtest.Reply {
			r := p.model(0, req)
			r.PromptTokens, r.CompletionTokens = 1, 1
			return r
		})
		defer srv.Close()
		emb := llmtest.NewEmbeddings(func(text string, dims int) ([]float32, error) { return p.vector(text, dims) })
		emb.NoUsage = true // our own count then
		defer emb.Close()
		// The completion cap (max_tokens) is what the budget reserves per
		// call; 1,100 of it are left for the embeddings of a few batches.
		e := embeddingsEngine(s, srv, emb, func(st *consolidation.Settings) {
			st.MaxCompletionTokens, st.MaxPromptTokens = 1, 4000
			st.MaxTokensPerRun = 1000 + 1000
		})
		sum, err := e.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if sum.CutShort == "" || sum.EmbeddingTokens == 0 || sum.PendingFacts == 0 || sum.PromptTokens+sum.CompletionTokens+sum.EmbeddingTokens > 2000 {
			t.Fatalf("%+v", sum)
		}
	})
}

// TestUpdateGuard: an update whose new text would be a near-copy of another
// observation becomes a merge into that one.
func TestUpdateGuard(t *testing.T) {
	p := loadParaphrases(t)
	eachStore(t, func(t *testing.T, s *Store) {
		a, b := p.topics[0], p.topics[1]
		importFacts(t, s, consolidation.Fact{ID: fid(1), Text: a[0]}, consolidation.Fact{ID: fid(2), Text: b[0]})
		srv := llmtest.New(llmtest.OnePerFact)
		defer srv.Close()
		emb := llmtest.NewEmbeddings(p.vector)
		defer emb.Close()
		if _, err := embeddingsEngine(s, srv, emb, nil).Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		obs := observations(t, s)
		var idB string
		for _, o := range obs {
			if o.Text == b[0] {
				idB = o.ID
			}
		}
		// A fact of topic b; the model rewrites observation b into a
		// near-copy of observation a.
		importFacts(t, s, consolidation.Fact{ID: fid(3), Text: b[2]})
		srv.SetScript(func(_ int, req llmtest.Request) llmtest.Reply {
			return llmtest.Reply{Content: llmtest.Answer{Updates: []map[string]any{{"observation_id": idB, "text": a[1], "source_fact_ids": []string{fid(3)}}}}.JSON()}
		})
		sum, err := embeddingsEngine(s, srv, emb, nil).Run(context.Background())
		if err != nil || sum.DroppedItems[consolidation.DropDuplicate] != 1 || sum.Updated != 0 || sum.FactsConsolidated != 1 {
			t.Fatalf("%v %+v", err, sum)
		}
		for _, o := range observations(t, s) {
			if o.Text == b[0] && o.ProofCount != 1 || o.Text == a[0] && o.ProofCount != 2 {
				t.Fatalf("the fact must join observation a, b unchanged: %+v", o)
			}
		}
	})
}
