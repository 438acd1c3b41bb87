package sqlstore

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/llmtest"
)

// The users of a product, each telling three facets once and then
// changing them, in the words a per-user memory stores them.
var (
	users    = []string{"ana", "ben", "chen", "dara", "eli", "fay", "gus", "hana", "ivo", "jun", "kai", "lea"}
	facets   = []string{"favourite colour", "city", "pets"}
	firstVal = [][]string{{"blue", "green", "red"}, {"Oslo", "Lima", "Pune"}, {"a cat", "two dogs", "no pets"}}
	nextVal  = [][]string{{"amber", "teal", "violet"}, {"Bergen", "Cusco", "Goa"}, {"a parrot", "three fish", "a hamster"}}
)

func facetFact(user string, u, f, round int) consolidation.Fact {
	vals := firstVal
	if round == 1 {
		vals = nextVal
	}
	return consolidation.Fact{
		ID:   fmt.Sprintf("%s-%d-%d", user, f, round),
		Text: fmt.Sprintf("The user's %s is %s.", facets[f], vals[f][u%3]),
	}
}

// facetModel follows the consolidation rules literally: a fact about a
// facet updates the existing observation of that facet, else creates one.
// It records which facts each call carried.
type facetModel struct {
	mu    sync.Mutex
	calls [][]string
}

func (m *facetModel) reply(_ int, req llmtest.Request) llmtest.Reply {
	obs := llmtest.Observations(req.User)
	var a llmtest.Answer
	var ids []string
	for _, f := range llmtest.Facts(req.User) {
		ids = append(ids, f.ID)
		facet := ""
		for _, name := range facets {
			if strings.Contains(f.Text, name) {
				facet = name
			}
		}
		updated := false
		for _, o := range obs {
			if facet != "" && strings.Contains(o.Text, facet) {
				a.Updates = append(a.Updates, map[string]any{"observation_id": o.ID, "text": f.Text, "source_fact_ids": []string{f.ID}})
				updated = true
				break
			}
		}
		if !updated {
			a.Creates = append(a.Creates, map[string]any{"text": f.Text, "source_fact_ids": []string{f.ID}})
		}
	}
	m.mu.Lock()
	m.calls = append(m.calls, ids)
	m.mu.Unlock()
	return llmtest.Reply{Content: a.JSON(), PromptTokens: 100, CompletionTokens: 50}
}

// userOf is the user a fact id of facetFact belongs to.
func userOf(id string) string { u, _, _ := strings.Cut(id, "-"); return u }

// mixedCalls counts the calls that carried facts of more than one user.
func (m *facetModel) mixedCalls() (mixed, calls int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ids := range m.calls {
		seen := map[string]bool{}
		for _, id := range ids {
			seen[userOf(id)] = true
		}
		if len(seen) > 1 {
			mixed++
		}
	}
	return mixed, len(m.calls)
}

// tellEveryone imports the facts of round, interleaved across users, each
// in the user's scope or, with tags, in the shared scope tagged user:<name>.
func tellEveryone(t *testing.T, s *Store, round int, tags bool) {
	t.Helper()
	var facts []consolidation.Fact
	for f := range facets {
		for u, user := range users {
			fact := facetFact(user, u, f, round)
			if tags {
				fact.Tags = []string{"user:" + user}
			} else {
				fact.Scope = user
			}
			facts = append(facts, fact)
		}
	}
	importFacts(t, s, facts...)
}

func TestScopesNeverMix(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		model := &facetModel{}
		srv := llmtest.New(model.reply)
		defer srv.Close()
		for round := 0; round < 2; round++ {
			tellEveryone(t, s, round, false)
			sum, err := engine(s, srv, func(set *consolidation.Settings) { set.Parallelism = 3 }).Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if sum.FactsConsolidated != int64(len(users)*len(facets)) || sum.FactsFailed != 0 {
				t.Fatalf("round %d: %+v", round, sum)
			}
		}
		facts, err := s.ListFacts(ctx, bank, "", 10000)
		if err != nil {
			t.Fatal(err)
		}
		if want := 2 * len(users) * len(facets); len(facts) != want {
			t.Fatalf("%d facts stored, want %d", len(facts), want)
		}
		if mixed, calls := model.mixedCalls(); mixed != 0 {
			t.Errorf("%d of %d LLM calls carried several users' facts", mixed, calls)
		}
		for u, user := range users {
			key := consolidation.BankID(bank).Scope(user)
			obs, err := s.ListObservations(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(obs) != len(facets) {
				t.Errorf("%s: %d observations, want one per facet: %+v", user, len(obs), obs)
			}
			for _, o := range obs {
				if o.Scope != user {
					t.Errorf("%s: observation of scope %q", user, o.Scope)
				}
				for _, src := range o.SourceFactIDs {
					if userOf(src) != user {
						t.Errorf("%s: observation %q cites %s's fact %s", user, o.Text, userOf(src), src)
					}
				}
			}
			// Each user's recall gives their own latest state, nothing of
			// another scope.
			rec := &consolidation.Recaller{Store: s, Scope: key}
			for f, facet := range facets {
				items, _, err := rec.Recall(ctx, consolidation.Query{Text: "The user's " + facet, Limit: 10})
				if err != nil {
					t.Fatal(err)
				}
				own := map[string]bool{}
				for _, o := range obs {
					own[o.ID] = true
				}
				want := facetFact(user, u, f, 1).Text
				if len(items) == 0 || items[0].Text != want {
					t.Errorf("%s: recall of %q gave %+v, want %q first", user, facet, items, want)
				}
				for _, it := range items {
					if !own[it.ID] {
						t.Errorf("%s: recall of %q gave another scope's item %s", user, facet, it.ID)
					}
				}
			}
		}

		// The same users told apart only by tags, for comparison: the
		// mixing scopes end.
		other := &facetModel{}
		srv2 := llmtest.New(other.reply)
		defer srv2.Close()
		tagged := consolidation.BankID(bank + "-tags")
		for round := 0; round < 2; round++ {
			var facts []consolidation.Fact
			for f := range facets {
				for u, user := range users {
					fact := facetFact(user, u, f, round)
					fact.Tags = []string{"user:" + user}
					facts = append(facts, fact)
				}
			}
			if _, err := s.ImportFacts(ctx, tagged, facts); err != nil {
				t.Fatal(err)
			}
			e := engine(s, srv2, nil)
			e.Settings.Bank = tagged
			if _, err := e.Run(ctx); err != nil {
				t.Fatal(err)
			}
		}
		obs, err := s.ListObservations(ctx, tagged.Scope(""))
		if err != nil {
			t.Fatal(err)
		}
		cross := 0
		for _, o := range obs {
			seen := map[string]bool{}
			for _, src := range o.SourceFactIDs {
				seen[userOf(src)] = true
			}
			if len(seen) > 1 {
				cross++
			}
		}
		mixed, calls := other.mixedCalls()
		t.Logf("told apart by tags only: %d observations for %d user facets, %d citing several users; %d of %d LLM calls mixed users",
			len(obs), len(users)*len(facets), cross, mixed, calls)
	})
}

// tables are every table of the store, for the erasure's scan.
var tables = []string{"promptops_facts", "promptops_observations", "promptops_observation_sources", "promptops_observation_history",
	"promptops_fact_vectors", "promptops_observation_vectors", "promptops_banks"}

// dump is every row of every table as text, one line a row.
func dump(t *testing.T, s *Store) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, table := range tables {
		eachRow(t, s.DB(), "SELECT * FROM "+table, func(cols []string, vals []any) {
			var b strings.Builder
			for i, v := range vals {
				if cols[i] == "generation" || cols[i] == "erasures" {
					continue // moved by the erasure, on purpose
				}
				fmt.Fprintf(&b, "%s=%v|", cols[i], v)
			}
			out[table] = append(out[table], b.String())
		})
	}
	return out
}

func TestEraseScope(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		model := &facetModel{}
		srv := llmtest.New(model.reply)
		defer srv.Close()
		for round := 0; round < 2; round++ {
			tellEveryone(t, s, round, false)
			if _, err := engine(s, srv, nil).Run(ctx); err != nil {
				t.Fatal(err)
			}
		}
		gone := "chen"
		rec := &consolidation.Recaller{Store: s, Scope: consolidation.BankID(bank).Scope(gone)}
		if items, _, err := rec.Recall(ctx, consolidation.Query{Text: "The user's city", Limit: 5}); err != nil || len(items) == 0 {
			t.Fatalf("before the erasure: %v %v", items, err)
		}
		obs, err := s.ListObservations(ctx, consolidation.BankID(bank).Scope(gone))
		if err != nil {
			t.Fatal(err)
		}
		var needles []string
		for _, o := range obs {
			needles = append(needles, o.ID)
		}
		facts, _ := s.ListScopeFacts(ctx, consolidation.BankID(bank).Scope(gone), "", 100)
		for _, f := range facts {
			needles = append(needles, f.ID)
		}
		needles = append(needles, bank+"/"+gone)
		before := dump(t, s)

		// A run in flight on the scope: its call is answered only after
		// the erasure.
		tellEveryone(t, s, 2, false) // round 2 repeats round 0's values with new ids
		hold, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		srv.SetScript(func(n int, req llmtest.Request) llmtest.Reply {
			if fs := llmtest.Facts(req.User); len(fs) > 0 && userOf(fs[0].ID) == gone {
				once.Do(func() { close(hold) })
				<-release
			}
			return model.reply(n, req)
		})
		done := make(chan consolidation.Summary)
		go func() {
			sum, err := engine(s, srv, nil).Run(ctx)
			if err != nil {
				t.Error(err)
			}
			done <- sum
		}()
		<-hold
		erased, err := s.EraseScope(ctx, consolidation.BankID(bank).Scope(gone))
		if err != nil {
			t.Fatal(err)
		}
		close(release)
		sum := <-done
		if erased.Facts != 9 || erased.Observations != 3 {
			t.Errorf("erased %+v, want 9 facts and 3 observations", erased)
		}
		if sum.DroppedItems[consolidation.DropErased] == 0 {
			t.Errorf("the run in flight dropped nothing as erased: %+v", sum)
		}
		after := dump(t, s)
		for table, rows := range after {
			for _, row := range rows {
				for _, n := range needles {
					if strings.Contains(row, n) {
						t.Errorf("%s still holds %q: %s", table, n, row)
					}
				}
				if regexp.MustCompile(`\b` + gone + `\b`).MatchString(row) {
					t.Errorf("%s still names the scope: %s", table, row)
				}
			}
		}
		// Every other scope is as it was, but for what the run in flight
		// added to it.
		for table, rows := range before {
			now := map[string]bool{}
			for _, r := range after[table] {
				now[r] = true
			}
			for _, r := range rows {
				if !strings.Contains(r, gone) && !now[r] && table != "promptops_facts" && table != "promptops_observations" {
					t.Errorf("%s lost a row of another scope: %s", table, r)
				}
			}
		}
		for u, user := range users {
			if user == gone {
				continue
			}
			obs, _ := s.ListObservations(ctx, consolidation.BankID(bank).Scope(user))
			if len(obs) != len(facets) {
				t.Errorf("%s: %d observations after another scope's erasure", user, len(obs))
			}
			_ = u
		}
		// The served copy made before the erasure is not used again.
		if items, _, err := rec.Recall(ctx, consolidation.Query{Text: "The user's city", Limit: 5}); err != nil || len(items) != 0 {
			t.Errorf("after the erasure the scope recalls %v %v", items, err)
		}
	})
}

func TestDeleteFactRequeuesOtherSources(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		importFacts(t, s,
			consolidation.Fact{ID: "f1", Scope: "ana", Text: "Ana likes tea."},
			consolidation.Fact{ID: "f2", Scope: "ana", Text: "Ana likes tea in the morning."},
			consolidation.Fact{ID: "f3", Scope: "ana", Text: "Ana lives in Oslo."})
		srv := llmtest.New(func(_ int, req llmtest.Request) llmtest.Reply {
			var a llmtest.Answer
			a.Creates = append(a.Creates, map[string]any{"text": "Ana drinks tea, mostly in the morning.", "source_fact_ids": []string{"f1", "f2"}})
			a.Creates = append(a.Creates, map[string]any{"text": "Ana lives in Oslo.", "source_fact_ids": []string{"f3"}})
			return llmtest.Reply{Content: a.JSON()}
		})
		defer srv.Close()
		if _, err := engine(s, srv, nil).Run(ctx); err != nil {
			t.Fatal(err)
		}
		erased, err := s.DeleteFacts(ctx, bank, []string{"f1"})
		if err != nil {
			t.Fatal(err)
		}
		if erased != (consolidation.Erasure{Facts: 1, Observations: 1, Requeued: 1}) {
			t.Errorf("erased %+v", erased)
		}
		ana := "ana"
		facts, _ := s.ListScopeFacts(ctx, consolidation.BankID(bank).Scope(ana), "", 10)
		states := map[string]string{}
		for _, f := range facts {
			states[f.ID] = f.Status
		}
		if want := map[string]string{"f2": "pending", "f3": "consolidated"}; fmt.Sprint(states) != fmt.Sprint(want) {
			t.Errorf("facts after the delete: %v, want %v", states, want)
		}
		obs, _ := s.ListObservations(ctx, consolidation.BankID(bank).Scope("ana"))
		if len(obs) != 1 || obs[0].Text != "Ana lives in Oslo." {
			t.Errorf("observations after the delete: %+v", obs)
		}
		for table, rows := range dump(t, s) {
			for _, r := range rows {
				if strings.Contains(r, "=f1|") || strings.Contains(r, "tea, mostly") {
					t.Errorf("%s still holds the deleted fact or what cited it: %s", table, r)
				}
			}
		}
		// An id is unique per scope: given a scope, only that scope's fact
		// goes; without one, every scope's.
		importFacts(t, s,
			consolidation.Fact{ID: "same", Scope: "bob", Text: "Bob said so."},
			consolidation.Fact{ID: "same", Scope: "carl", Text: "Carl said so."},
			consolidation.Fact{ID: "same", Text: "Everyone said so."})
		bob := "bob"
		if erased, err := s.DeleteScopeFacts(ctx, consolidation.BankID(bank).Scope(bob), []string{"same"}); err != nil || erased.Facts != 1 {
			t.Fatalf("scoped delete: %+v %v", erased, err)
		}
		left, _ := s.ListFacts(ctx, bank, "", 100)
		var scopes []string
		for _, f := range left {
			if f.ID == "same" {
				scopes = append(scopes, f.Scope)
			}
		}
		if fmt.Sprint(scopes) != "[carl ]" && fmt.Sprint(scopes) != "[ carl]" {
			t.Errorf("after deleting bob's: the id is left in scopes %q", scopes)
		}
		if erased, err := s.DeleteFacts(ctx, bank, []string{"same"}); err != nil || erased.Facts != 2 {
			t.Fatalf("unscoped delete: %+v %v", erased, err)
		}
	})
}

// TestParallelRunTakesEveryScope: with maxFactsPerRun exactly the pending
// facts and scopes of fewer facts than a batch, parallel claims that book
// whole batches never make the run drop a scope: every fact is
// consolidated, one LLM call per scope.
func TestParallelRunTakesEveryScope(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		const scopes, each = 60, 3
		for round := range 3 {
			var facts []consolidation.Fact
			for i := range scopes {
				for j := range each {
					facts = append(facts, consolidation.Fact{ID: fmt.Sprintf("r%d-f%d-%d", round, i, j), Scope: fmt.Sprintf("r%d-u%d", round, i), Text: fmt.Sprintf("User %d of round %d said thing %d.", i, round, j)})
				}
			}
			importFacts(t, s, facts...)
			srv := llmtest.New(llmtest.OnePerFact)
			sum, err := engine(s, srv, func(set *consolidation.Settings) {
				set.MaxFacts, set.Parallelism = scopes*each, 4
			}).Run(ctx)
			srv.Close()
			if err != nil {
				t.Fatal(err)
			}
			if sum.FactsConsolidated != scopes*each || sum.LLMCalls != scopes || sum.PendingFacts != 0 {
				t.Fatalf("round %d: %d facts consolidated, %d LLM calls, %d pending; want %d, %d, 0", round, sum.FactsConsolidated, sum.LLMCalls, sum.PendingFacts, scopes*each, scopes)
			}
			// The run let go of each scope's index when done with it.
			s.mu.Lock()
			held := len(s.lex)
			s.mu.Unlock()
			if held != 0 {
				t.Errorf("round %d: the store still holds %d scopes' lexical indexes after the run", round, held)
			}
		}
	})
}
