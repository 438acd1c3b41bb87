package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
)

// exportAll is a scope's export, facts and observations by id.
func exportAll(t *testing.T, s *Store, key consolidation.ScopeKey) map[string]consolidation.Exported {
	t.Helper()
	out := map[string]consolidation.Exported{}
	if err := s.ExportScope(context.Background(), key, func(e consolidation.Exported) error {
		out[e.Kind+" "+e.ID] = e
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSourcesRoundTrip: a fact's source is stored by import and retain
// (SourceUnspecified when it names none) and read back by every read of
// facts: list (bank and scope), pending, claim, export, the facts Apply
// reads and a candidate's source facts. An id held with the same text
// and another source is what one held with other text is: a conflict
// for retain, skipped by import.
func TestSourcesRoundTrip(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		b := consolidation.BankID(bank)
		shared, ana := b.Scope(""), b.Scope("ana")
		n, err := s.ImportFacts(ctx, b, []consolidation.Fact{
			{ID: "i1", Text: "Ana lives in Oslo", Source: "user"},
			{ID: "i2", Text: "Ana's plan is gold", Source: "crm"},
			{ID: "i3", Text: "Ana has a cat"},
			{ID: "i4", Scope: "ana", Text: "Oslo is in Norway", Source: "tool.web-search"},
		})
		if err != nil || n != 4 {
			t.Fatalf("imported %d: %v", n, err)
		}
		// Import skips an id it holds, whatever the text and source.
		if n, err := s.ImportFacts(ctx, b, []consolidation.Fact{{ID: "i1", Text: "Ana lives in Oslo", Source: "crm"}, {ID: "i2", Text: "other text", Source: "crm"}}); err != nil || n != 0 {
			t.Fatalf("imported again %d: %v", n, err)
		}
		stored, unchanged, err := s.RetainFacts(ctx, b, []consolidation.Fact{
			{ID: "r1", Text: "Ana asked about refunds", Source: "assistant"},
			{ID: "r2", Scope: "ana", Text: "Ana prefers email"},
		})
		if err != nil || stored != 2 || unchanged != 0 {
			t.Fatalf("retained %d, unchanged %d: %v", stored, unchanged, err)
		}
		// The same text and source again: unchanged ("" is unspecified).
		stored, unchanged, err = s.RetainFacts(ctx, b, []consolidation.Fact{
			{ID: "r1", Text: "Ana asked about refunds", Source: "assistant"},
			{ID: "r2", Scope: "ana", Text: "Ana prefers email", Source: consolidation.SourceUnspecified},
			{ID: "i3", Text: "Ana has a cat"},
		})
		if err != nil || stored != 0 || unchanged != 3 {
			t.Fatalf("retained again %d, unchanged %d: %v", stored, unchanged, err)
		}
		// The same text of another source is a conflict, as other text
		// is, and nothing of the call is stored.
		for _, f := range []consolidation.Fact{
			{ID: "r1", Text: "Ana asked about refunds", Source: "user"},
			{ID: "r2", Scope: "ana", Text: "Ana prefers email", Source: "user"},
			{ID: "i1", Text: "Ana lives in Oslo"},
			{ID: "i1", Text: "Ana lives in Bergen", Source: "user"},
		} {
			var conflict *consolidation.FactConflictError
			_, _, err := s.RetainFacts(ctx, b, []consolidation.Fact{{ID: "r9", Text: "a new fact", Source: "user"}, f})
			if !errors.As(err, &conflict) || conflict.ID != f.ID {
				t.Errorf("retaining %s of %q: %v, want a conflict on it", f.ID, f.Source, err)
			}
		}

		want := map[string]string{"i1": "user", "i2": "crm", "i3": "unspecified", "i4": "tool.web-search", "r1": "assistant", "r2": "unspecified"}
		check := func(what string, facts []consolidation.Fact, ids ...string) {
			t.Helper()
			var got []string
			for _, f := range facts {
				got = append(got, f.ID)
				if f.Source != want[f.ID] {
					t.Errorf("%s: fact %s of source %q, want %q", what, f.ID, f.Source, want[f.ID])
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, ids) {
				t.Errorf("%s: facts %v, want %v", what, got, ids)
			}
		}
		all, err := s.ListFacts(ctx, b, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		check("ListFacts", all, "i1", "i2", "i3", "i4", "r1", "r2")
		inAna, err := s.ListScopeFacts(ctx, ana, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		check("ListScopeFacts", inAna, "i4", "r2")
		pending, err := s.PendingFacts(ctx, shared, time.Time{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		check("PendingFacts", pending, "i1", "i2", "i3", "r1")
		for _, k := range []consolidation.ScopeKey{shared, ana} {
			var facts []consolidation.Fact
			for _, e := range exportAll(t, s, k) {
				facts = append(facts, e.Fact)
			}
			check("ExportScope "+string(k), facts, map[consolidation.ScopeKey][]string{shared: {"i1", "i2", "i3", "r1"}, ana: {"i4", "r2"}}[k]...)
		}

		now := time.Now().UTC()
		claimed, err := s.ClaimFacts(ctx, ana, "run", 10, now, now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		check("ClaimFacts", claimed, "i4", "r2")
		created, err := s.Apply(ctx, ana, "run", consolidation.Ops{Creates: []consolidation.Create{{Text: "Ana lives in Norway", SourceFactIDs: []string{"i4", "r2"}}}}, []string{"i4", "r2"}, now)
		if err != nil || len(created) != 1 {
			t.Fatalf("apply: %v %v", created, err)
		}
		done, err := s.ListScopeFacts(ctx, ana, consolidation.FactConsolidated, 100)
		if err != nil {
			t.Fatal(err)
		}
		check("ListScopeFacts consolidated", done, "i4", "r2")
		_, srcFacts, err := s.CandidateSources(ctx, ana, created)
		if err != nil {
			t.Fatal(err)
		}
		check("CandidateSources", srcFacts[created[0]], "i4", "r2")
	})
}

// TestProvenanceIsTheUnionOfSources: an observation's provenance is the
// distinct sources of the facts it cites, sorted: a create's are its
// facts', an update's and a merge's add the new facts' to what it had, in
// the batch path of distinct observations (one statement on PostgreSQL)
// as in the path of one update after the other. Every read of an
// observation carries it: list, candidates, recall, the recallable load
// and export.
func TestProvenanceIsTheUnionOfSources(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		key := consolidation.BankID(bank).Scope("")
		importFacts(t, s,
			consolidation.Fact{ID: "u1", Text: "Ana lives in Oslo", Source: "user"},
			consolidation.Fact{ID: "c1", Text: "Ana lives in Oslo, says the CRM", Source: "crm"},
			consolidation.Fact{ID: "n1", Text: "Ana has a cat"},
			consolidation.Fact{ID: "u2", Text: "Ana likes tea", Source: "user"},
			consolidation.Fact{ID: "a1", Text: "Ana was told about refunds", Source: "assistant"},
			consolidation.Fact{ID: "w1", Text: "Oslo is in Norway", Source: "tool.web-search"},
			consolidation.Fact{ID: "c2", Text: "Ana's cat is insured", Source: "crm"},
			consolidation.Fact{ID: "a2", Text: "Ana likes tea, the assistant noted", Source: "assistant"},
			consolidation.Fact{ID: "u3", Text: "Ana asked for a refund", Source: "user"},
			consolidation.Fact{ID: "n2", Text: "Ana got a refund"},
			consolidation.Fact{ID: "c3", Text: "Ana lives in Oslo, the CRM says again", Source: "crm"},
		)
		now := time.Now().UTC()
		if claimed, err := s.ClaimFacts(ctx, key, "run", 100, now, now.Add(time.Hour)); err != nil || len(claimed) != 11 {
			t.Fatalf("claimed %d: %v", len(claimed), err)
		}
		apply := func(ops consolidation.Ops, ids ...string) []string {
			t.Helper()
			created, err := s.Apply(ctx, key, "run", ops, ids, now)
			if err != nil {
				t.Fatal(err)
			}
			return created
		}
		created := apply(consolidation.Ops{Creates: []consolidation.Create{
			{Text: "Ana lives in Oslo", SourceFactIDs: []string{"u1", "c1"}},
			{Text: "Ana has a cat", SourceFactIDs: []string{"n1"}},
			{Text: "Ana likes tea", SourceFactIDs: []string{"u2"}},
			{Text: "Ana was told about refunds", SourceFactIDs: []string{"a1"}},
		}}, "u1", "c1", "n1", "u2", "a1")
		city, cat, tea, refunds := created[0], created[1], created[2], created[3]
		want := map[string][]string{city: {"crm", "user"}, cat: {"unspecified"}, tea: {"user"}, refunds: {"assistant"}}
		check := func(what string, obs []consolidation.Observation) {
			t.Helper()
			if len(obs) != len(want) {
				t.Errorf("%s: %d observations, want %d", what, len(obs), len(want))
			}
			for _, o := range obs {
				if !slices.Equal(o.Provenance, want[o.ID]) {
					t.Errorf("%s: %q of provenance %q, want %q", what, o.Text, o.Provenance, want[o.ID])
				}
			}
		}
		check("after the creates", observations(t, s))

		// Updates of distinct observations, and a merge.
		apply(consolidation.Ops{
			Updates: []consolidation.Update{
				{ObservationID: city, Text: "Ana lives in Oslo, Norway", SourceFactIDs: []string{"w1"}},
				{ObservationID: cat, Text: "Ana has an insured cat", SourceFactIDs: []string{"c2"}},
			},
			Merges: []consolidation.Merge{{ObservationID: tea, SourceFactIDs: []string{"a2"}}},
		}, "w1", "c2", "a2")
		want[city], want[cat], want[tea] = []string{"crm", "tool.web-search", "user"}, []string{"crm", "unspecified"}, []string{"assistant", "user"}
		check("after the batch of updates", observations(t, s))

		// Two updates of one observation, applied one after the other,
		// and a merge of a source it has.
		apply(consolidation.Ops{
			Updates: []consolidation.Update{
				{ObservationID: refunds, Text: "Ana asked for a refund", SourceFactIDs: []string{"u3"}},
				{ObservationID: refunds, Text: "Ana got a refund", SourceFactIDs: []string{"n2"}},
			},
			Merges: []consolidation.Merge{{ObservationID: city, SourceFactIDs: []string{"c3"}}},
		}, "u3", "n2", "c3")
		want[refunds] = []string{"assistant", "unspecified", "user"}
		check("after the updates one by one", observations(t, s))

		cands, err := s.Candidates(ctx, key, []string{city, cat, tea, refunds})
		if err != nil {
			t.Fatal(err)
		}
		var obs []consolidation.Observation
		for _, c := range cands {
			obs = append(obs, c.Observation)
		}
		check("Candidates", obs)

		recalled, err := s.Recall(ctx, key, []consolidation.Fact{{ID: "q", Text: "Ana lives in Oslo and has a cat"}}, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(recalled["q"]) == 0 {
			t.Fatal("recalled nothing")
		}
		for _, c := range recalled["q"] {
			if !slices.Equal(c.Provenance, want[c.ID]) {
				t.Errorf("Recall: %q of provenance %q, want %q", c.Text, c.Provenance, want[c.ID])
			}
		}

		l := &loaded{obs: map[string]consolidation.Observation{}, tags: map[string][]string{}, vectors: map[string][]float32{}}
		if _, err := s.LoadRecallable(ctx, key, consolidation.Space{}, l); err != nil {
			t.Fatal(err)
		}
		obs = obs[:0]
		for _, o := range l.obs {
			obs = append(obs, o)
		}
		check("LoadRecallable", obs)

		obs = obs[:0]
		for _, e := range exportAll(t, s, key) {
			if e.Kind == consolidation.KindObservation {
				obs = append(obs, consolidation.Observation{ID: e.ID, Text: e.Text, Provenance: e.Provenance})
			}
		}
		check("ExportScope", obs)
	})
}

// TestUpgradeKeepsRowsOfUnspecifiedSources: a store written at the schema
// before sources (PostgreSQL migration 8, SQLite 9) is migrated with every
// row of every table as it was, each fact of source "unspecified" and each
// observation of provenance ["unspecified"]; what is written after joins
// that provenance.
func TestUpgradeKeepsRowsOfUnspecifiedSources(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []string{"postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			old, url := storeAtVersion(t, kind, 8, 9)
			db := old.db
			key, ana := consolidation.BankID(bank).Scope(""), consolidation.BankID(bank).Scope("ana")
			at := func(day int) any { tm := time.Date(2026, 1, day, 0, 0, 0, 0, time.UTC); return old.timeArg(&tm) }
			exec := func(q string, args ...any) {
				t.Helper()
				if _, err := db.ExecContext(ctx, old.rebind(q), args...); err != nil {
					t.Fatal(err)
				}
			}
			for _, k := range []consolidation.ScopeKey{key, ana} {
				exec("INSERT INTO promptops_banks (id, created_at) VALUES ($1, $2)", string(k), at(1))
				for i, status := range []string{"consolidated", "consolidated", "failed", "pending", "pending"} {
					exec("INSERT INTO promptops_facts (bank, id, text, entities, tags, created_at, status) VALUES ($1, $2, $3, '[\"Ana\"]', '[\"t\"]', $4, $5)",
						string(k), fmt.Sprintf("f%d", i+1), fmt.Sprintf("%s fact %d about Ana", k, i+1), at(i+1), status)
				}
				for i := 1; i <= 2; i++ {
					o := fmt.Sprintf("o%d", i)
					exec(`INSERT INTO promptops_observations (bank, id, text, text_norm, proof_count, entities_norm, created_at, updated_at)
						VALUES ($1, $2, $3, $3, 1, '["ana"]', $4, $4)`, string(k), o, fmt.Sprintf("%s observation %d about Ana", k, i), at(i))
					exec("INSERT INTO promptops_observation_sources (bank, observation_id, fact_id) VALUES ($1, $2, $3)", string(k), o, fmt.Sprintf("f%d", i))
				}
				exec("INSERT INTO promptops_observation_history (bank, observation_id, change, previous_text, changed_at) VALUES ($1, 'o1', 'update', 'before', $2)", string(k), at(2))
				sp := consolidation.Space{Model: "m", Dims: 4}
				if err := old.PutObservationVectors(ctx, k, sp, map[string][]float32{"o1": {1, 0, 0, 0}}); err != nil {
					t.Fatal(err)
				}
				if err := old.PutFactVectors(ctx, k, sp, map[string][]float32{"f1": {0, 1, 0, 0}}); err != nil {
					t.Fatal(err)
				}
			}
			tables := []string{"promptops_banks", "promptops_facts", "promptops_fact_vectors", "promptops_observations",
				"promptops_observation_sources", "promptops_observation_vectors", "promptops_observation_history"}
			held := map[string][]string{}
			for _, tb := range tables {
				held[tb] = tableRows(t, db, tb)
			}
			_ = db.Close()

			s, err := Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// Every row as it was, with the new column at its end.
			for _, tb := range tables {
				want := slices.Clone(held[tb])
				for i := range want {
					switch tb {
					case "promptops_facts":
						want[i] += " source=unspecified"
					case "promptops_observations":
						want[i] += ` provenance=["unspecified"]`
					}
				}
				sort.Strings(want)
				if got := tableRows(t, s.db, tb); !slices.Equal(got, want) {
					t.Errorf("%s after the upgrade:\n%q\nwant\n%q", tb, got, want)
				}
			}
			facts, err := s.ListFacts(ctx, bank, "", 100)
			if err != nil || len(facts) != 10 {
				t.Fatalf("%d facts: %v", len(facts), err)
			}
			for _, f := range facts {
				if f.Source != consolidation.SourceUnspecified {
					t.Errorf("fact %s/%s of source %q", f.Scope, f.ID, f.Source)
				}
			}
			for _, k := range []consolidation.ScopeKey{key, ana} {
				obs, err := s.ListObservations(ctx, k)
				if err != nil || len(obs) != 2 {
					t.Fatalf("%d observations of %s: %v", len(obs), k, err)
				}
				for _, o := range obs {
					if !slices.Equal(o.Provenance, []string{consolidation.SourceUnspecified}) {
						t.Errorf("%s of provenance %q", o.Text, o.Provenance)
					}
				}
			}

			// A fact of a named source updating an observation of before
			// joins its provenance.
			if _, _, err := s.RetainFacts(ctx, bank, []consolidation.Fact{{ID: "f9", Text: "Ana moved to Bergen", Source: "user"}}); err != nil {
				t.Fatal(err)
			}
			now := time.Now().UTC()
			if claimed, err := s.ClaimFacts(ctx, key, "run", 10, now, now.Add(time.Hour)); err != nil || len(claimed) != 3 {
				t.Fatalf("claimed %d: %v", len(claimed), err)
			}
			if _, err := s.Apply(ctx, key, "run", consolidation.Ops{Updates: []consolidation.Update{{ObservationID: "o1", Text: "Ana lives in Bergen", SourceFactIDs: []string{"f9"}}}}, []string{"f9"}, now); err != nil {
				t.Fatal(err)
			}
			cands, err := s.Candidates(ctx, key, []string{"o1", "o2"})
			if err != nil || len(cands) != 2 {
				t.Fatalf("%d candidates: %v", len(cands), err)
			}
			if !slices.Equal(cands[0].Provenance, []string{"unspecified", "user"}) || !slices.Equal(cands[1].Provenance, []string{"unspecified"}) {
				t.Errorf("provenances %q and %q, want [unspecified user] and [unspecified]", cands[0].Provenance, cands[1].Provenance)
			}
		})
	}
}

// tableRows renders every row of a table, sorted.
func tableRows(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	var out []string
	eachRow(t, db, "SELECT * FROM "+table, func(cols []string, vals []any) {
		var b strings.Builder
		b.WriteString(table)
		for i, c := range cols {
			fmt.Fprintf(&b, " %s=%v", c, vals[i])
		}
		out = append(out, b.String())
	})
	sort.Strings(out)
	return out
}
