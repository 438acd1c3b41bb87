package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/tokens"
)

func fid(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

func TestGoodAnswerCreatesThenUpdates(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		importFacts(t, s,
			consolidation.Fact{ID: fid(1), Text: "Alice works at Acme Corp as an engineer", Entities: []string{"Alice", "Acme Corp"}, OccurredStart: day("2024-01-15"), MentionedAt: day("2024-01-15")},
			consolidation.Fact{ID: fid(2), Text: "Bob has a dog named Rex", Entities: []string{"Bob"}, OccurredStart: day("2024-02-01")},
		)
		srv := llmtest.New(llmtest.OnePerFact)
		defer srv.Close()
		sum, err := engine(s, srv, nil).Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sum.FactsConsolidated != 2 || sum.Created != 2 || sum.Observations != 2 || sum.LLMCalls != 1 || sum.PromptTokens == 0 {
			t.Fatalf("summary %+v", sum)
		}
		req := srv.Requests()[0]
		if req.ResponseFormat != "json_schema" || !strings.Contains(req.System, "## MISSION\n"+consolidation.DefaultMission) {
			t.Fatalf("request: format %q system %q", req.ResponseFormat, req.System[:200])
		}
		if !strings.Contains(req.User, "["+fid(1)+"] Alice works at Acme Corp as an engineer | Involving: Alice, Acme Corp (occurred_start=2024-01-15, mentioned_at=2024-01-15)") {
			t.Fatalf("fact line missing:\n%s", req.User)
		}
		alice := find(t, observations(t, s), "Alice")
		if alice.Text != "Alice works at Acme Corp as an engineer" || alice.ProofCount != 1 || !slices.Equal(alice.SourceFactIDs, []string{fid(1)}) ||
			alice.OccurredStart == nil || !alice.OccurredStart.Equal(*day("2024-01-15")) {
			t.Fatalf("observation %+v", alice)
		}

		// A later fact about Alice updates her observation.
		importFacts(t, s, consolidation.Fact{ID: fid(3), Text: "Alice moved to Globex in March", Entities: []string{"Alice"}, OccurredStart: day("2024-03-10")})
		srv.SetScript(func(_ int, req llmtest.Request) llmtest.Reply {
			var a llmtest.Answer
			for _, o := range llmtest.Observations(req.User) {
				if strings.HasPrefix(o.Text, "Alice") {
					a.Updates = append(a.Updates, map[string]any{"observation_id": o.ID, "text": "Alice works at Globex since March 2024 (occurred_start=2024-03-10) | Involving: Alice", "source_fact_ids": []string{fid(3), "not-a-batch-fact"}})
				}
			}
			return llmtest.Reply{Content: a.JSON()}
		})
		if sum, err = engine(s, srv, nil).Run(ctx); err != nil || sum.Updated != 1 || sum.Created != 0 {
			t.Fatalf("second run: %v %+v", err, sum)
		}
		alice = find(t, observations(t, s), "Alice")
		if alice.Text != "Alice works at Globex since March 2024" {
			t.Fatalf("fact metadata must not reach observation text: %q", alice.Text)
		}
		if alice.ProofCount != 2 || !slices.Equal(alice.SourceFactIDs, []string{fid(3), fid(1)}) {
			t.Fatalf("sources %v proof %d", alice.SourceFactIDs, alice.ProofCount)
		}
		if !alice.OccurredStart.Equal(*day("2024-01-15")) || alice.OccurredEnd == nil || !alice.OccurredEnd.Equal(*day("2024-03-10")) {
			t.Fatalf("time bounds %v..%v", alice.OccurredStart, alice.OccurredEnd)
		}
		hist, err := s.History(ctx, bank, alice.ID)
		if err != nil || len(hist) != 1 || hist[0] != "Alice works at Acme Corp as an engineer" {
			t.Fatalf("history %v %v", hist, err)
		}
		states, _ := factStates(t, s)
		if states[consolidation.FactConsolidated] != 3 {
			t.Fatalf("states %v", states)
		}
	})
}

// find returns the observation whose text starts with prefix.
func find(t *testing.T, obs []consolidation.Observation, prefix string) consolidation.Observation {
	t.Helper()
	for _, o := range obs {
		if strings.HasPrefix(o.Text, prefix) {
			return o
		}
	}
	t.Fatalf("no observation starts with %q in %+v", prefix, obs)
	return consolidation.Observation{}
}

// seed consolidates n facts about one entity into n observations.
func seed(t *testing.T, s *Store, entity string, n int) []consolidation.Observation {
	t.Helper()
	var facts []consolidation.Fact
	for i := 0; i < n; i++ {
		facts = append(facts, consolidation.Fact{ID: fid(900 + i), Text: fmt.Sprintf("%s fact number %d about the project", entity, i), Entities: []string{entity}})
	}
	importFacts(t, s, facts...)
	srv := llmtest.New(llmtest.OnePerFact)
	defer srv.Close()
	if _, err := engine(s, srv, nil).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return observations(t, s)
}

func TestScriptedFailuresLoseNothing(t *testing.T) {
	good := func(req llmtest.Request) string { return llmtest.OnePerFact(0, req).Content }
	cases := []struct {
		name   string
		seed   int // observations about Dana before the run
		facts  int
		set    func(*consolidation.Settings)
		script llmtest.Script
		check  func(t *testing.T, s *Store, sum consolidation.Summary, err error, before []consolidation.Observation)
	}{
		{name: "json in a code fence", facts: 2,
			script: func(_ int, req llmtest.Request) llmtest.Reply {
				return llmtest.Reply{Content: "```json\n" + good(req) + "\n```"}
			},
			check: func(t *testing.T, s *Store, sum consolidation.Summary, err error, _ []consolidation.Observation) {
				if err != nil || sum.Created != 2 || sum.FactsFailed != 0 {
					t.Fatalf("%v %+v", err, sum)
				}
			}},
		{name: "invented observation ids", facts: 2,
			script: func(_ int, req llmtest.Request) llmtest.Reply {
				f := llmtest.Facts(req.User)
				return llmtest.Reply{Content: llmtest.Answer{Updates: []map[string]any{{"observation_id": "11111111-2222-3333-4444-555555555555", "text": "x", "source_fact_ids": []string{f[0].ID}}}}.JSON()}
			},
			check: func(t *testing.T, s *Store, sum consolidation.Summary, err error, _ []consolidation.Observation) {
				// The update naming an invented id is dropped; the fact it was
				// about is asked again alone, the other fact (which the model
				// chose to omit) is consolidated at once.
				states, reasons := factStates(t, s)
				if err != nil || sum.FactsFailed != 1 || sum.FactsConsolidated != 1 || states[consolidation.FactFailed] != 1 || len(observations(t, s)) != 0 {
					t.Fatalf("%v %+v %v", err, sum, states)
				}
				if !strings.Contains(reasons[0], "every item about it was invalid in 3 attempts") || !strings.Contains(reasons[0], "not among the existing observations shown") {
					t.Fatalf("reason %q", reasons[0])
				}
				// 3 attempts at most per batch: the pair, then its fact twice.
				if sum.LLMCalls != 3 || sum.Retries != 2 || sum.DroppedItems[consolidation.DropUnknownObservation] != 3 {
					t.Fatalf("llm calls %d retries %d dropped %v", sum.LLMCalls, sum.Retries, sum.DroppedItems)
				}
				if sum.FailedFacts != 1 || sum.PendingFacts != 0 {
					t.Fatalf("bank counts: %+v", sum)
				}
			}},
		{name: "integer ids", facts: 1,
			script: func(int, llmtest.Request) llmtest.Reply {
				return llmtest.Reply{Content: `{"creates":[{"text":"Dana likes tea","source_fact_ids":[1]}],"updates":[],"deletes":[]}`}
			},
			check: func(t *testing.T, s *Store, sum consolidation.Summary, err error, _ []consolidation.Observation) {
				_, reasons := factStates(t, s)
				if err != nil || sum.FactsFailed != 1 || len(reasons) != 1 || !strings.Contains(reasons[0], "a JSON number where a string is wanted") {
					t.Fatalf("%v %+v %v", err, sum, reasons)
				}
			}},
		{name: "update of an observation no source fact recalled", seed: 1, facts: 2,
			script: func(_ int, req llmtest.Request) llmtest.Reply {
				f := llmtest.Facts(req.User)
				obs := llmtest.Observations(req.User)
				var carol string
				for _, x := range f {
					if strings.HasPrefix(x.Text, "Zed") {
						carol = x.ID
					}
				}
				if len(obs) == 0 {
					// Asked again about Zed alone, nothing recalled: omitted.
					return llmtest.Reply{Content: llmtest.Answer{}.JSON()}
				}
				a := llmtest.Answer{Updates: []map[string]any{{"observation_id": obs[0].ID, "text": "Dana was replaced", "source_fact_ids": []string{carol}}}}
				return llmtest.Reply{Content: a.JSON()}
			},
			check: func(t *testing.T, s *Store, sum consolidation.Summary, err error, before []consolidation.Observation) {
				after := observations(t, s)
				if err != nil || sum.Updated != 0 || sum.FactsConsolidated != 2 || after[0].Text != before[0].Text || after[0].ProofCount != 1 ||
					sum.DroppedItems[consolidation.DropNotRecalled] != 1 || sum.LLMCalls != 2 {
					t.Fatalf("%v %+v %+v", err, sum, after)
				}
			}},
		{name: "more creates than capacity", facts: 5,
			set: func(s *consolidation.Settings) { s.MaxObservations = 2 },
			script: func(_ int, req llmtest.Request) llmtest.Reply {
				return llmtest.Reply{Content: good(req)}
			},
			check: func(t *testing.T, s *Store, sum consolidation.Summary, err error, _ []consolidation.Observation) {
				if err != nil || sum.Created != 2 || sum.Observations != 2 || sum.FactsConsolidated != 5 {
					t.Fatalf("%v %+v", err, sum)
				}
			}},
		{name: "truncated JSON then a good answer", facts: 2,
			script: func(n int, req llmtest.Request) llmtest.Reply {
				if n == 0 {
					return llmtest.Reply{Content: good(req)[:40]}
				}
				return llmtest.Reply{Content: good(req)}
			},
			check: func(t *testing.T, s *Store, sum consolidation.Summary, err error, _ []consolidation.Observation) {
				if err != nil || sum.Created != 2 || sum.LLMCalls != 2 {
					t.Fatalf("%v %+v", err, sum)
				}
			}},
		{name: "HTTP 500 then success", facts: 2,
			script: func(n int, req llmtest.Request) llmtest.Reply {
				if n == 0 {
					return llmtest.Reply{Status: 500, Body: `{"error":{"message":"overloaded"}}`}
				}
				return llmtest.Reply{Content: good(req)}
			},
			check: func(t *testing.T, s *Store, sum consolidation.Summary, err error, _ []consolidation.Observation) {
				if err != nil || sum.Created != 2 || sum.LLMCalls != 1 {
					t.Fatalf("%v %+v", err, sum)
				}
			}},
		{name: "timeout", facts: 2,
			script: func(int, llmtest.Request) llmtest.Reply { return llmtest.Reply{Delay: 5 * time.Second, Content: "{}"} },
			check: func(t *testing.T, s *Store, sum consolidation.Summary, err error, _ []consolidation.Observation) {
				states, _ := factStates(t, s)
				if err == nil || !strings.Contains(err.Error(), "llm:") || states[consolidation.FactPending] != 2 {
					t.Fatalf("a run whose LLM never answers fails and leaves facts pending: %v %v", err, states)
				}
			}},
		{name: "an answer that deletes every observation", seed: 4, facts: 1,
			script: func(_ int, req llmtest.Request) llmtest.Reply {
				var a llmtest.Answer
				for _, o := range llmtest.Observations(req.User) {
					a.Deletes = append(a.Deletes, map[string]any{"observation_id": o.ID})
				}
				return llmtest.Reply{Content: a.JSON()}
			},
			check: func(t *testing.T, s *Store, sum consolidation.Summary, err error, before []consolidation.Observation) {
				// The deletes are dropped, not the answer; the fact, which no
				// item named, is consolidated.
				if err != nil || sum.Deleted != 0 || len(observations(t, s)) != len(before) || sum.FactsFailed != 0 || sum.FactsConsolidated != 1 ||
					sum.DroppedItems[consolidation.DropExcessDeletes] != 4 || sum.LLMCalls != 1 {
					t.Fatalf("%v %+v", err, sum)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, s *Store) {
				var before []consolidation.Observation
				if tc.seed > 0 {
					before = seed(t, s, "Dana", tc.seed)
				}
				var facts []consolidation.Fact
				for i := 0; i < tc.facts; i++ {
					text := fmt.Sprintf("Dana fact %d: Dana visited office %d", i, i)
					if i == 1 {
						text = "Zed owns cats"
					}
					facts = append(facts, consolidation.Fact{ID: fid(i + 1), Text: text, Entities: []string{strings.Fields(text)[0]}})
				}
				importFacts(t, s, facts...)
				srv := llmtest.New(tc.script)
				defer srv.Close()
				sum, err := engine(s, srv, tc.set).Run(context.Background())
				tc.check(t, s, sum, err, before)
				// Every fact ends consolidated, failed with a reason, or (only
				// when the run failed) pending.
				states, _ := factStates(t, s)
				if err == nil && states[consolidation.FactPending] != 0 {
					t.Fatalf("facts left pending after a successful run: %v", states)
				}
			})
		})
	}
}

func TestCapacityInPromptAndSchema(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		seed(t, s, "Dana", 2)
		importFacts(t, s, consolidation.Fact{ID: fid(1), Text: "Dana likes green tea"})
		srv := llmtest.New(llmtest.OnePerFact)
		defer srv.Close()
		sum, err := engine(s, srv, func(st *consolidation.Settings) { st.MaxObservations = 2 }).Run(context.Background())
		if err != nil || sum.Created != 0 {
			t.Fatalf("%v %+v", err, sum)
		}
		req := srv.Requests()[0]
		if !strings.Contains(req.User, "## CAPACITY CONSTRAINT\nThe bank is at its capacity of 2 observations.") {
			t.Fatalf("capacity note missing:\n%s", req.User[:300])
		}
		creates := req.Schema["properties"].(map[string]any)["creates"].(map[string]any)
		if creates["maxItems"] != float64(0) {
			t.Fatalf("schema maxItems %v", creates["maxItems"])
		}
	})
}

func TestChineseFacts(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		importFacts(t, s, consolidation.Fact{ID: fid(1), Text: "张伟在北京的阿里巴巴担任产品经理", Entities: []string{"张伟"}, OccurredStart: day("2024-05-01")})
		srv := llmtest.New(llmtest.OnePerFact)
		defer srv.Close()
		if sum, err := engine(s, srv, nil).Run(ctx); err != nil || sum.Created != 1 {
			t.Fatalf("%v %+v", err, sum)
		}
		// No shared entity this time: recall must come from the text.
		importFacts(t, s, consolidation.Fact{ID: fid(2), Text: "张伟离开了阿里巴巴，搬到上海担任产品总监", OccurredStart: day("2024-09-01")})
		var recalled []llmtest.Observation
		srv.SetScript(func(_ int, req llmtest.Request) llmtest.Reply {
			recalled = llmtest.Observations(req.User)
			var a llmtest.Answer
			for _, o := range recalled {
				a.Updates = append(a.Updates, map[string]any{"observation_id": o.ID, "text": "张伟自2024年9月起在上海担任产品总监，此前在北京的阿里巴巴担任产品经理。", "source_fact_ids": []string{fid(2)}})
			}
			return llmtest.Reply{Content: a.JSON()}
		})
		sum, err := engine(s, srv, nil).Run(ctx)
		if err != nil || len(recalled) != 1 || sum.Updated != 1 {
			t.Fatalf("Chinese recall: %v %+v recalled %v", err, sum, recalled)
		}
		obs := observations(t, s)
		if len(obs) != 1 || obs[0].ProofCount != 2 || !strings.HasPrefix(obs[0].Text, "张伟自2024年9月起") || !obs[0].OccurredEnd.Equal(*day("2024-09-01")) {
			t.Fatalf("%+v", obs)
		}
	})
}

// TestNoHalfAppliedBatch makes the database refuse the batch's last write;
// the deletes and updates before it must roll back with it.
func TestNoHalfAppliedBatch(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		before := seed(t, s, "Dana", 2)
		trigger := []string{`CREATE FUNCTION boom() RETURNS trigger AS $$ BEGIN IF NEW.text = 'BOOM' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql`,
			`CREATE TRIGGER boom BEFORE INSERT ON promptops_observations FOR EACH ROW EXECUTE FUNCTION boom()`}
		if s.dialect == sqlite {
			trigger = []string{`CREATE TRIGGER boom BEFORE INSERT ON promptops_observations WHEN NEW.text = 'BOOM' BEGIN SELECT RAISE(ABORT, 'boom'); END`}
		}
		for _, q := range trigger {
			if _, err := s.DB().Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		importFacts(t, s, consolidation.Fact{ID: fid(1), Text: "Dana fact number 0 about the project changed", Entities: []string{"Dana"}})
		srv := llmtest.New(func(_ int, req llmtest.Request) llmtest.Reply {
			obs := llmtest.Observations(req.User)
			return llmtest.Reply{Content: llmtest.Answer{
				Deletes: []map[string]any{{"observation_id": obs[1].ID}},
				Updates: []map[string]any{{"observation_id": obs[0].ID, "text": "Dana changed", "source_fact_ids": []string{fid(1)}}},
				Creates: []map[string]any{{"text": "BOOM", "source_fact_ids": []string{fid(1)}}},
			}.JSON()}
		})
		defer srv.Close()
		_, err := engine(s, srv, nil).Run(ctx)
		if err == nil || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("want the store's error, got %v", err)
		}
		after := observations(t, s)
		if len(after) != len(before) {
			t.Fatalf("delete survived a failed batch: %d -> %d", len(before), len(after))
		}
		for i := range after {
			if after[i].Text != before[i].Text || after[i].ProofCount != before[i].ProofCount {
				t.Fatalf("update survived a failed batch: %+v", after[i])
			}
			if h, _ := s.History(ctx, bank, after[i].ID); len(h) != 0 {
				t.Fatalf("history row survived a failed batch")
			}
		}
		if states, _ := factStates(t, s); states[consolidation.FactPending] != 1 {
			t.Fatalf("the batch's fact must stay pending: %v", states)
		}
	})
}

// TestCancelMidRun cancels while the second batch waits for the LLM: the
// first batch is applied, the second not at all.
func TestCancelMidRun(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		importFacts(t, s,
			consolidation.Fact{ID: fid(1), Text: "Erin plays the violin"},
			consolidation.Fact{ID: fid(2), Text: "Frank collects stamps"})
		srv := llmtest.New(func(n int, req llmtest.Request) llmtest.Reply {
			if n == 1 {
				return llmtest.Reply{Delay: 10 * time.Second, Content: llmtest.OnePerFact(0, req).Content}
			}
			return llmtest.OnePerFact(0, req)
		})
		defer srv.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := engine(s, srv, func(st *consolidation.Settings) { st.BatchSize = 1 }).Run(ctx)
			done <- err
		}()
		for len(srv.Requests()) < 2 {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		if err := <-done; err == nil {
			t.Fatal("a cancelled run reports an error")
		}
		states, _ := factStates(t, s)
		obs := observations(t, s)
		if states[consolidation.FactConsolidated] != 1 || states[consolidation.FactPending] != 1 || len(obs) != 1 || obs[0].Text != "Erin plays the violin" {
			t.Fatalf("states %v observations %+v", states, obs)
		}
	})
}

func TestImportRetryAndMigrationsIdempotent(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		// Migrating again is a no-op.
		if err := s.migrate(ctx); err != nil {
			t.Fatal(err)
		}
		importFacts(t, s, consolidation.Fact{ID: fid(1), Text: "x"}, consolidation.Fact{Text: "no id given"})
		facts, _ := s.ListFacts(ctx, bank, "", 10)
		if len(facts) != 2 || facts[1].ID == "" || facts[0].ID != fid(1) {
			t.Fatalf("%+v", facts)
		}
		if _, err := s.ClaimFacts(ctx, bank, "run-1", 10, time.Now(), time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkFailed(ctx, bank, "run-1", []string{fid(1)}, "test", time.Now()); err != nil {
			t.Fatal(err)
		}
		if n, err := s.RetryFacts(ctx, bank, nil); err != nil || n != 1 {
			t.Fatalf("retry %d %v", n, err)
		}
		// Another bank in the same database sees nothing of this one.
		if other, _ := s.ListFacts(ctx, "agents/other", "", 10); len(other) != 0 {
			t.Fatal("banks must not see each other's facts")
		}
	})
}

// TestPromptFitsMaxPromptTokens: the pool is trimmed so each call fits the
// budget, and a fact too large on its own is failed with the reason.
func TestPromptFitsMaxPromptTokens(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		var facts []consolidation.Fact
		for i := 0; i < 20; i++ {
			facts = append(facts, consolidation.Fact{ID: fid(500 + i), Text: fmt.Sprintf("Dana observation %d: %s", i, strings.Repeat("Dana went to the project meeting and took notes. ", 8)), Entities: []string{"Dana"}})
		}
		importFacts(t, s, facts...)
		srv := llmtest.New(llmtest.OnePerFact)
		defer srv.Close()
		if _, err := engine(s, srv, func(st *consolidation.Settings) { st.BatchSize = 20 }).Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		importFacts(t, s,
			consolidation.Fact{ID: fid(1), Text: "Dana went to the project meeting again", Entities: []string{"Dana"}},
			consolidation.Fact{ID: fid(2), Text: strings.Repeat("An enormous fact. ", 400)})
		budget := 2200
		srv2 := llmtest.New(func(int, llmtest.Request) llmtest.Reply { return llmtest.Reply{Content: llmtest.Answer{}.JSON()} })
		defer srv2.Close()
		sum, err := engine(s, srv2, func(st *consolidation.Settings) { st.MaxPromptTokens = budget; st.RecallPerFact = 20 }).Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		enc := tokens.MustGet(tokens.O200K)
		for _, req := range srv2.Requests() {
			if n := enc.Count(req.System) + enc.Count(req.User); n > budget {
				t.Fatalf("a call of %d tokens, budget %d", n, budget)
			}
			if obs := llmtest.Observations(req.User); len(obs) == 0 || len(obs) >= 20 {
				t.Fatalf("the pool should be trimmed, not emptied or whole: %d", len(obs))
			}
		}
		_, reasons := factStates(t, s)
		if sum.FactsFailed != 1 || len(reasons) != 1 || !strings.Contains(reasons[0], "does not fit maxPromptTokens (2200)") {
			t.Fatalf("%+v %v", sum, reasons)
		}
	})
}
