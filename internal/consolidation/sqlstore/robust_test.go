package sqlstore

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/llmtest"
)

// people3 are three facts about different people, none recalling another.
func people3() []consolidation.Fact {
	return []consolidation.Fact{
		{ID: fid(1), Text: "Erin plays the violin", Entities: []string{"Erin"}},
		{ID: fid(2), Text: "Frank collects stamps", Entities: []string{"Frank"}},
		{ID: fid(3), Text: "Grace runs marathons", Entities: []string{"Grace"}},
	}
}

// TestMixedAnswerKeepsTheGoodItems: three good creates and one delete of an
// invented id. The creates land in one call; the delete is counted.
func TestMixedAnswerKeepsTheGoodItems(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		importFacts(t, s, people3()...)
		srv := llmtest.New(func(n int, req llmtest.Request) llmtest.Reply {
			rep := llmtest.OnePerFact(n, req)
			rep.Content = strings.Replace(rep.Content, `"deletes":[]`, `"deletes":[{"observation_id":"11111111-2222-3333-4444-555555555555"}]`, 1)
			return rep
		})
		defer srv.Close()
		sum, err := engine(s, srv, nil).Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if sum.LLMCalls != 1 || sum.Retries != 0 || sum.Created != 3 || sum.FactsConsolidated != 3 || sum.FactsFailed != 0 ||
			sum.DroppedItems[consolidation.DropUnknownObservation] != 1 || sum.PendingFacts != 0 || sum.FailedFacts != 0 {
			t.Fatalf("summary %+v", sum)
		}
		if obs := observations(t, s); len(obs) != 3 {
			t.Fatalf("observations %+v", obs)
		}
		if req := srv.Requests()[0]; req.MaxTokens != consolidation.CompletionBudget(3, consolidation.DefaultMaxCompletionTokens) || req.MaxTokensField != "max_tokens" {
			t.Fatalf("max_tokens not sent: %+v", req.MaxTokensField)
		}
	})
}

// TestInvalidMentionGoesBackThenFails: a fact whose only item names an
// invented observation is asked again, alone and with the reason, and only
// after the batch's attempts marked failed with the drop reason; its
// neighbours land at the first call.
func TestInvalidMentionGoesBackThenFails(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		importFacts(t, s, people3()...)
		srv := llmtest.New(func(n int, req llmtest.Request) llmtest.Reply {
			var a llmtest.Answer
			for _, f := range llmtest.Facts(req.User) {
				if f.ID == fid(2) {
					a.Updates = append(a.Updates, map[string]any{"observation_id": "11111111-2222-3333-4444-555555555555", "text": f.Text, "source_fact_ids": []string{f.ID}})
				} else {
					a.Creates = append(a.Creates, map[string]any{"text": f.Text, "source_fact_ids": []string{f.ID}})
				}
			}
			return llmtest.Reply{Content: a.JSON()}
		})
		defer srv.Close()
		sum, err := engine(s, srv, nil).Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if sum.LLMCalls != 3 || sum.Retries != 2 || sum.Created != 2 || sum.FactsConsolidated != 2 || sum.FactsFailed != 1 || sum.FailedFacts != 1 {
			t.Fatalf("summary %+v", sum)
		}
		reqs := srv.Requests()
		for _, req := range reqs[1:] {
			facts := llmtest.Facts(req.User)
			if len(facts) != 1 || facts[0].ID != fid(2) || !strings.Contains(req.User, "ITEMS OF YOUR PREVIOUS ANSWER WERE REJECTED") {
				t.Fatalf("a retry asks again about the dropped fact alone, with the reason: %v\n%s", facts, req.User)
			}
		}
		_, reasons := factStates(t, s)
		if len(reasons) != 1 || !strings.Contains(reasons[0], "not among the existing observations shown") {
			t.Fatalf("reasons %v", reasons)
		}
	})
}

// TestLongCreateIsNotSilentlyConsolidated: a create over the text limit
// used to be dropped and its fact marked consolidated with nothing stored.
func TestLongCreateIsNotSilentlyConsolidated(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		importFacts(t, s, people3()[:1]...)
		srv := llmtest.New(func(n int, req llmtest.Request) llmtest.Reply {
			f := llmtest.Facts(req.User)[0]
			text := strings.Repeat("Erin plays the violin beautifully. ", 200)
			if n == 1 {
				text = "Erin plays the violin."
			}
			return llmtest.Reply{Content: llmtest.Answer{Creates: []map[string]any{{"text": text, "source_fact_ids": []string{f.ID}}}}.JSON()}
		})
		defer srv.Close()
		sum, err := engine(s, srv, nil).Run(context.Background())
		if err != nil || sum.LLMCalls != 2 || sum.Created != 1 || sum.FactsConsolidated != 1 || sum.DroppedItems[consolidation.DropBadText] != 1 {
			t.Fatalf("%v %+v", err, sum)
		}
		if obs := observations(t, s); len(obs) != 1 || obs[0].Text != "Erin plays the violin." {
			t.Fatalf("%+v", obs)
		}
	})
}

// TestUnusableAnswersAreAskedAgainWithTheReason: duplicate keys, a
// truncated answer and a 300 MB answer are unusable as a whole; each retry
// tells the model why, so a model at temperature 0 does not repeat itself.
func TestUnusableAnswersAreAskedAgainWithTheReason(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bad    func(good string) llmtest.Reply
		reason string
	}{
		{"duplicate keys", func(good string) llmtest.Reply {
			return llmtest.Reply{Content: strings.TrimSuffix(good, "}") + `,"creates":[]}`}
		}, `key "creates" twice`},
		{"truncated at max_tokens", func(good string) llmtest.Reply {
			return llmtest.Reply{Content: good[:len(good)/2], FinishReason: "length"}
		}, "stopped at max_tokens"},
		{"a 300 MB answer", func(string) llmtest.Reply { return llmtest.Reply{HugeContent: 300 << 20} }, "longer than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, s *Store) {
				importFacts(t, s, people3()...)
				srv := llmtest.New(func(n int, req llmtest.Request) llmtest.Reply {
					good := llmtest.OnePerFact(n, req)
					if strings.Contains(req.User, "YOUR PREVIOUS ANSWER WAS REJECTED") {
						return good
					}
					return tc.bad(good.Content)
				})
				defer srv.Close()
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				sum, err := engine(s, srv, nil).Run(context.Background())
				runtime.ReadMemStats(&after)
				if err != nil || sum.LLMCalls != 2 || sum.Retries != 1 || sum.Created != 3 || sum.FactsConsolidated != 3 {
					t.Fatalf("%v %+v", err, sum)
				}
				if retry := srv.Requests()[1].User; !strings.Contains(retry, tc.reason) {
					t.Fatalf("the retry does not say %q:\n%s", tc.reason, retry[strings.Index(retry, "## YOUR"):])
				}
				if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
					t.Fatalf("the run allocated %d MB", grew>>20)
				}
			})
		})
	}
}

// TestMaxTokensPerRun: the run stops starting calls before the budget would
// be passed; the rest stays pending (and unclaimed) and the summary says why.
func TestMaxTokensPerRun(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		var facts []consolidation.Fact
		for i := 0; i < 12; i++ {
			facts = append(facts, consolidation.Fact{ID: fid(100 + i), Text: fmt.Sprintf("Person%d likes color %d", i, i)})
		}
		importFacts(t, s, facts...)
		srv := llmtest.New(func(n int, req llmtest.Request) llmtest.Reply {
			rep := llmtest.OnePerFact(n, req)
			rep.PromptTokens, rep.CompletionTokens = 3000, 200
			return rep
		})
		defer srv.Close()
		// Each call costs 3,200 reported tokens and is planned at about
		// 3,000 prompt + CompletionBudget(2) of max_tokens.
		budget := int64(3*3200 + 3000 + consolidation.CompletionBudget(2, consolidation.DefaultMaxCompletionTokens))
		sum, err := engine(s, srv, func(st *consolidation.Settings) { st.BatchSize, st.MaxTokensPerRun = 2, budget }).Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if sum.CutShort == "" || !strings.Contains(sum.CutShort, "maxTokensPerRun") || sum.PromptTokens+sum.CompletionTokens > budget {
			t.Fatalf("%+v", sum)
		}
		if sum.LLMCalls < 2 || sum.LLMCalls > 4 || sum.PendingFacts != int64(12-2*sum.LLMCalls) || sum.FactsConsolidated != 2*sum.LLMCalls {
			t.Fatalf("%+v", sum)
		}
		// Nothing stays claimed: another run takes the rest at once.
		srv.SetScript(llmtest.OnePerFact)
		sum2, err := engine(s, srv, nil).Run(context.Background())
		if err != nil || sum2.FactsConsolidated != sum.PendingFacts || sum2.PendingFacts != 0 {
			t.Fatalf("%v %+v", err, sum2)
		}
	})
}

// openTwice opens a second handle on the same bank database, as a second
// process would.
func openTwice(t *testing.T, s *Store) *Store {
	t.Helper()
	var url string
	if s.dialect == postgres {
		var name string
		if err := s.DB().QueryRow("SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		url = pg.DSN(name)
	} else {
		var file string
		if err := s.DB().QueryRow("SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&file); err != nil {
			t.Fatal(err)
		}
		url = "sqlite://" + file
	}
	other, err := Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	return other
}

// TestOverlappingRunsConsolidateEachFactOnce: two runs on one bank at once,
// through two connections, as an old Job pod beside its replacement. Every
// fact is sent to the LLM once and consolidated once; no observation is
// duplicated.
func TestOverlappingRunsConsolidateEachFactOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		const n = 40
		var facts []consolidation.Fact
		for i := 0; i < n; i++ {
			facts = append(facts, consolidation.Fact{ID: fid(200 + i), Text: fmt.Sprintf("Member%d joined team %d", i, i)})
		}
		importFacts(t, s, facts...)
		srv := llmtest.New(func(n int, req llmtest.Request) llmtest.Reply {
			rep := llmtest.OnePerFact(n, req)
			rep.Delay = 20 * time.Millisecond // long enough for the runs to interleave
			return rep
		})
		defer srv.Close()
		stores := []*Store{s, openTwice(t, s)}
		sums := make([]consolidation.Summary, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sums[i], errs[i] = engine(stores[i], srv, func(st *consolidation.Settings) { st.BatchSize = 4 }).Run(context.Background())
			}()
		}
		wg.Wait()
		for i := range errs {
			if errs[i] != nil {
				t.Fatalf("run %d: %v", i, errs[i])
			}
		}
		if sums[0].FactsConsolidated+sums[1].FactsConsolidated != n || sums[0].FactsConsolidated == 0 || sums[1].FactsConsolidated == 0 {
			t.Fatalf("the runs should share the work: %d + %d", sums[0].FactsConsolidated, sums[1].FactsConsolidated)
		}
		sent := map[string]int{}
		for _, req := range srv.Requests() {
			for _, f := range llmtest.Facts(req.User) {
				sent[f.ID]++
			}
		}
		for id, k := range sent {
			if k != 1 {
				t.Errorf("fact %s sent %d times", id, k)
			}
		}
		obs := observations(t, s)
		texts := map[string]bool{}
		for _, o := range obs {
			if texts[o.Text] {
				t.Errorf("duplicate observation %q", o.Text)
			}
			texts[o.Text] = true
		}
		if len(obs) != n {
			t.Fatalf("%d observations for %d facts", len(obs), n)
		}
		if states, _ := factStates(t, s); states[consolidation.FactConsolidated] != n {
			t.Fatalf("states %v", states)
		}
	})
}

// TestKilledRunsClaimExpires: a run that died holding claims blocks its
// facts only until the lease ends; then the next run consolidates them.
func TestKilledRunsClaimExpires(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		importFacts(t, s, people3()...)
		t0 := time.Now().UTC()
		claimed, err := s.ClaimFacts(ctx, bank, "killed-run", 2, t0, t0.Add(10*time.Minute))
		if err != nil || len(claimed) != 2 || claimed[0].ID != fid(1) || claimed[1].ID != fid(2) {
			t.Fatalf("%v %+v", err, claimed)
		}
		srv := llmtest.New(llmtest.OnePerFact)
		defer srv.Close()
		at := func(d time.Duration) *consolidation.Engine {
			e := engine(s, srv, nil)
			e.Now = func() time.Time { return t0.Add(d) }
			return e
		}
		sum, err := at(5 * time.Minute).Run(ctx)
		if err != nil || sum.FactsConsolidated != 1 || sum.PendingFacts != 2 {
			t.Fatalf("within the lease only the unclaimed fact is taken: %v %+v", err, sum)
		}
		if facts := llmtest.Facts(srv.Requests()[0].User); len(facts) != 1 || facts[0].ID != fid(3) {
			t.Fatalf("sent %v", facts)
		}
		sum, err = at(11 * time.Minute).Run(ctx)
		if err != nil || sum.FactsConsolidated != 2 || sum.PendingFacts != 0 {
			t.Fatalf("after the lease the killed run's facts are taken: %v %+v", err, sum)
		}
		// The killed run, were it to come back, can apply nothing.
		if _, err := s.Apply(ctx, bank, "killed-run", consolidation.Ops{}, []string{fid(1)}, time.Now()); err != consolidation.ErrClaimLost {
			t.Fatalf("want ErrClaimLost, got %v", err)
		}
		if states, _ := factStates(t, s); states[consolidation.FactConsolidated] != 3 {
			t.Fatalf("%v", states)
		}
	})
}

// TestTooLargeFactFailsAtOnce: a fact that cannot fit any call is failed
// before any call, its batch's other facts are consolidated without a split.
func TestTooLargeFactFailsAtOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		importFacts(t, s, append(people3(), consolidation.Fact{ID: fid(9), Text: strings.Repeat("An enormous fact. ", 1200)})...)
		srv := llmtest.New(llmtest.OnePerFact)
		defer srv.Close()
		sum, err := engine(s, srv, func(st *consolidation.Settings) { st.MaxPromptTokens = 4000 }).Run(context.Background())
		if err != nil || sum.LLMCalls != 1 || sum.FactsFailed != 1 || sum.FactsConsolidated != 3 {
			t.Fatalf("%v %+v", err, sum)
		}
		for _, req := range srv.Requests() {
			if strings.Contains(req.User, "An enormous fact") {
				t.Fatal("the fact too large was sent")
			}
		}
		_, reasons := factStates(t, s)
		if !slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(r, "does not fit maxPromptTokens (4000)") }) {
			t.Fatalf("%v", reasons)
		}
	})
}
