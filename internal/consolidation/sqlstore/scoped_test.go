package sqlstore

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
)

// The boundary of a scope in the store: a method that takes a ScopeKey
// reads and changes that scope's rows only, one that takes a BankID that
// bank's only. Two banks whose ids share a prefix ("iso/bank" and
// "iso/bank-b"), each with its shared scope and a scope "ana" (whose key
// starts with the shared scope's), hold rows in every table under the
// same fact ids; each method is called on one scope (or bank), and every
// other scope's rows must be as they were, and what it read must be of
// that scope only.

const (
	isoBank  consolidation.BankID = "iso/bank"
	isoOther consolidation.BankID = "iso/bank-b"
)

// isoKeys are the four scopes; each holds a different number of
// observations (1 + its index), so that counts tell them apart.
var isoKeys = []consolidation.ScopeKey{isoBank.Scope(""), isoBank.Scope("ana"), isoOther.Scope(""), isoOther.Scope("ana")}

var isoSpace = consolidation.Space{Model: "iso", Dims: 4}

// isoTables are every table that holds a bank's rows, with the column
// that holds its key.
var isoTables = []struct{ table, columns, key string }{
	{"promptops_banks", "id, generation, erasures", "id"},
	{"promptops_facts", "*", "bank"},
	{"promptops_fact_vectors", "*", "bank"},
	{"promptops_observations", "*", "bank"},
	{"promptops_observation_sources", "*", "bank"},
	{"promptops_observation_vectors", "*", "bank"},
	{"promptops_observation_history", "*", "bank"},
	{"promptops_messages", "*", "bank"},
}

// isoSeed is what the seeding wrote: the observation ids of each scope,
// and the fact of each scope that run "r" holds.
type isoSeed struct {
	obs   map[consolidation.ScopeKey][]string
	owner map[string]consolidation.ScopeKey
	r     map[consolidation.ScopeKey]string
}

func (sd *isoSeed) allObs() []string {
	var out []string
	for _, k := range isoKeys {
		out = append(out, sd.obs[k]...)
	}
	return out
}

func isoVector(i int) []float32 {
	v := make([]float32, isoSpace.Dims)
	v[i%isoSpace.Dims] = 1
	return v
}

// isoSources are the sources of the seeded facts, in turn, so that the
// observations' provenances differ.
var isoSources = []string{"user", "crm", ""}

// seedIsolation writes, in every scope of isoKeys, facts f1..f5 (texts
// start with the scope's key, sources in turn of isoSources) and
// observations with vectors, sources, provenance and history: of the
// facts, two consolidated, one failed, one claimed by run "r" with a
// vector, one pending (which ones depends on the order the store claims
// them in).
func seedIsolation(t *testing.T, s *Store) *isoSeed {
	t.Helper()
	ctx := context.Background()
	sd := &isoSeed{obs: map[consolidation.ScopeKey][]string{}, owner: map[string]consolidation.ScopeKey{}, r: map[consolidation.ScopeKey]string{}}
	for _, bank := range []consolidation.BankID{isoBank, isoOther} {
		var facts []consolidation.Fact
		for _, scope := range []string{"", "ana"} {
			for i := 1; i <= 5; i++ {
				facts = append(facts, consolidation.Fact{ID: fmt.Sprintf("f%d", i), Scope: scope, Source: isoSources[i%len(isoSources)],
					Text: fmt.Sprintf("%s fact %d about apples", bank.Scope(scope), i), Entities: []string{"Apple"}, Tags: []string{"t"}})
			}
		}
		if _, err := s.ImportFacts(ctx, bank, facts); err != nil {
			t.Fatal(err)
		}
		// Messages m1..m3 of conversation c1 in both scopes, their
		// contents starting with the scope's key.
		var msgs []consolidation.Message
		for _, scope := range []string{"", "ana"} {
			for i := 1; i <= 3; i++ {
				msgs = append(msgs, consolidation.Message{ID: fmt.Sprintf("m%d", i), Scope: scope, Conversation: "c1", Role: consolidation.RoleUser,
					Content: fmt.Sprintf("%s message %d", bank.Scope(scope), i), At: time.Date(2026, 3, 1, 9, i, 0, 0, time.UTC)})
			}
		}
		if _, _, err := s.RetainMessages(ctx, bank, msgs); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	for i, k := range isoKeys {
		claimed, err := s.ClaimFacts(ctx, k, "seed", 3, now, now.Add(time.Hour))
		if err != nil || len(claimed) != 3 {
			t.Fatalf("claiming in %s: %d facts, %v", k, len(claimed), err)
		}
		f1, f2, f3 := claimed[0].ID, claimed[1].ID, claimed[2].ID
		ops := consolidation.Ops{Space: isoSpace, FactVectors: map[string][]float32{f1: isoVector(i)}}
		for j := 0; j <= i; j++ {
			ops.Creates = append(ops.Creates, consolidation.Create{Text: fmt.Sprintf("%s observation %d about apples", k, j), SourceFactIDs: []string{f1}, Vector: isoVector(i)})
		}
		created, err := s.Apply(ctx, k, "seed", ops, []string{f1}, now)
		if err != nil || len(created) != i+1 {
			t.Fatalf("applying to %s: %v, %v", k, created, err)
		}
		sd.obs[k] = created
		for _, id := range created {
			sd.owner[id] = k
		}
		up := consolidation.Ops{Space: isoSpace, Updates: []consolidation.Update{{ObservationID: created[0], Text: fmt.Sprintf("%s observation 0 about apples, updated", k), SourceFactIDs: []string{f2}, Vector: isoVector(i)}}}
		if _, err := s.Apply(ctx, k, "seed", up, []string{f2}, now); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkFailed(ctx, k, "seed", []string{f3}, "bad", now); err != nil {
			t.Fatal(err)
		}
		claimed, err = s.ClaimFacts(ctx, k, "r", 1, now, now.Add(time.Hour))
		if err != nil || len(claimed) != 1 {
			t.Fatalf("claiming for r in %s: %d facts, %v", k, len(claimed), err)
		}
		sd.r[k] = claimed[0].ID
		if err := s.PutFactVectors(ctx, k, isoSpace, map[string][]float32{sd.r[k]: isoVector(i)}); err != nil {
			t.Fatal(err)
		}
	}
	return sd
}

// isoRows renders every row of every table, by the key it belongs to.
func isoRows(t *testing.T, s *Store) map[consolidation.ScopeKey][]string {
	t.Helper()
	out := map[consolidation.ScopeKey][]string{}
	for _, tb := range isoTables {
		eachRow(t, s.db, "SELECT "+tb.columns+" FROM "+tb.table, func(cols []string, vals []any) {
			key, _ := vals[slices.Index(cols, tb.key)].(string)
			var b strings.Builder
			b.WriteString(tb.table)
			for i, c := range cols {
				if tb.table == "promptops_banks" && c == "erasures" {
					// The bank's count of erasures moves with an
					// erasure in any of its scopes; isoRows of the
					// bank's row keep it apart (see erasures).
					continue
				}
				fmt.Fprintf(&b, " %s=%v", c, vals[i])
			}
			out[consolidation.ScopeKey(key)] = append(out[consolidation.ScopeKey(key)], b.String())
		})
	}
	for k := range out {
		sort.Strings(out[k])
	}
	return out
}

// erasures is a bank's count of erasures.
func erasures(t *testing.T, s *Store, bank consolidation.BankID) int64 {
	t.Helper()
	var n int64
	if err := s.db.QueryRow(s.rebind("SELECT erasures FROM promptops_banks WHERE id = $1"), string(bank)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// ownerOfText is the key a fact's or an observation's text starts with.
func ownerOfText(text string) consolidation.ScopeKey {
	k, _, _ := strings.Cut(text, " ")
	return consolidation.ScopeKey(k)
}

func isoWipe(t *testing.T, s *Store) {
	t.Helper()
	for _, tb := range isoTables {
		if _, err := s.db.Exec("DELETE FROM " + tb.table); err != nil {
			t.Fatal(err)
		}
	}
}

// isoCase calls one method on target and returns the keys of what it
// read (nil for a method that only writes).
type isoCase struct {
	name string
	call func(ctx context.Context, s *Store, sd *isoSeed, target consolidation.ScopeKey) ([]consolidation.ScopeKey, error)
	// shared is false for a method that refuses the shared scope.
	noShared bool
	// read says the call must have read something of target.
	read bool
}

func ofObs(sd *isoSeed, ids []string) []consolidation.ScopeKey {
	out := make([]consolidation.ScopeKey, 0, len(ids))
	for _, id := range ids {
		k, ok := sd.owner[id]
		if !ok {
			k = "unknown observation " + consolidation.ScopeKey(id)
		}
		out = append(out, k)
	}
	return out
}

func ofFacts(facts []consolidation.Fact) []consolidation.ScopeKey {
	out := make([]consolidation.ScopeKey, 0, len(facts))
	for _, f := range facts {
		out = append(out, ownerOfText(f.Text))
	}
	return out
}

var allFacts = []string{"f1", "f2", "f3", "f4", "f5"}

var scopedCases = []isoCase{
	{name: "ClaimFacts", read: true, call: func(ctx context.Context, s *Store, _ *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		now := time.Now().UTC()
		facts, err := s.ClaimFacts(ctx, k, "other", 10, now, now.Add(time.Hour))
		return ofFacts(facts), err
	}},
	{name: "ExtendClaims", call: func(ctx context.Context, s *Store, _ *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		return nil, s.ExtendClaims(ctx, k, "r", time.Now().Add(48*time.Hour))
	}},
	{name: "CountScopeObservations", call: func(ctx context.Context, s *Store, sd *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		n, err := s.CountScopeObservations(ctx, k)
		if err == nil && n != len(sd.obs[k]) {
			err = fmt.Errorf("%d observations, want %d", n, len(sd.obs[k]))
		}
		return nil, err
	}},
	{name: "Recall", read: true, call: func(ctx context.Context, s *Store, sd *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		got, err := s.Recall(ctx, k, []consolidation.Fact{{ID: "q", Text: "observation about apples", Entities: []string{"Apple"}}}, 20)
		var ids []string
		for _, c := range got["q"] {
			ids = append(ids, c.ID)
		}
		return ofObs(sd, ids), err
	}},
	{name: "Candidates", read: true, call: func(ctx context.Context, s *Store, sd *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		got, err := s.Candidates(ctx, k, sd.allObs())
		var ids []string
		for _, c := range got {
			ids = append(ids, c.ID)
		}
		return ofObs(sd, ids), err
	}},
	{name: "CandidateSources", read: true, call: func(ctx context.Context, s *Store, sd *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		ids, facts, err := s.CandidateSources(ctx, k, sd.allObs())
		var out []consolidation.ScopeKey
		for id, f := range facts {
			out = append(append(out, ofObs(sd, []string{id})...), ofFacts(f)...)
		}
		for id := range ids {
			out = append(out, ofObs(sd, []string{id})...)
		}
		return out, err
	}},
	{name: "HasObservationTexts", read: true, call: func(ctx context.Context, s *Store, sd *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		var norms []string
		byNorm := map[string]consolidation.ScopeKey{}
		for _, key := range isoKeys {
			texts := []string{fmt.Sprintf("%s observation 0 about apples, updated", key)}
			for j := range sd.obs[key] {
				texts = append(texts, fmt.Sprintf("%s observation %d about apples", key, j))
			}
			for _, text := range texts {
				n := consolidation.Normalize(text)
				norms = append(norms, n)
				byNorm[n] = key
			}
		}
		got, err := s.HasObservationTexts(ctx, k, norms)
		var out []consolidation.ScopeKey
		for n, ok := range got {
			if ok {
				out = append(out, byNorm[n])
			}
		}
		return out, err
	}},
	{name: "WarmRecall and ReleaseRecall", call: func(ctx context.Context, s *Store, _ *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		err := s.WarmRecall(ctx, k)
		s.ReleaseRecall(k)
		return nil, err
	}},
	{name: "FactVectors", read: true, call: func(ctx context.Context, s *Store, _ *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		got, err := s.FactVectors(ctx, k, isoSpace, allFacts)
		var out []consolidation.ScopeKey
		for _, v := range got {
			out = append(out, isoKeys[slices.Index(v, slices.Max(v))])
		}
		return out, err
	}},
	{name: "PutFactVectors", call: func(ctx context.Context, s *Store, _ *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		vecs := map[string][]float32{}
		for _, id := range allFacts {
			vecs[id] = []float32{0.5, 0.5, 0.5, 0.5}
		}
		return nil, s.PutFactVectors(ctx, k, isoSpace, vecs)
	}},
	{name: "ScanObservationQuantized", read: true, call: func(ctx context.Context, s *Store, sd *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		var ids []string
		err := s.ScanObservationQuantized(ctx, k, isoSpace, func(id string, _ []int8, _ float32) { ids = append(ids, id) }, func(id string, _ []float32) { ids = append(ids, id) })
		return ofObs(sd, ids), err
	}},
	{name: "ObservationsWithoutVector", read: true, call: func(ctx context.Context, s *Store, sd *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		obs, err := s.ObservationsWithoutVector(ctx, k, consolidation.Space{Model: "none", Dims: 4}, "", 100)
		var ids []string
		for _, o := range obs {
			ids = append(ids, o.ID)
		}
		return ofObs(sd, ids), err
	}},
	{name: "PutObservationVectors", call: func(ctx context.Context, s *Store, sd *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		vecs := map[string][]float32{}
		for _, id := range sd.allObs() {
			vecs[id] = []float32{0.5, 0.5, 0.5, 0.5}
		}
		return nil, s.PutObservationVectors(ctx, k, isoSpace, vecs)
	}},
	{name: "Apply", call: func(ctx context.Context, s *Store, sd *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		f := sd.r[k]
		ops := consolidation.Ops{Space: isoSpace, Creates: []consolidation.Create{{Text: string(k) + " new", SourceFactIDs: []string{f}, Vector: isoVector(0)}},
			FactVectors: map[string][]float32{f: isoVector(1)}}
		_, err := s.Apply(ctx, k, "r", ops, []string{f}, time.Now().UTC())
		return nil, err
	}},
	{name: "Apply naming other scopes' observations", call: func(ctx context.Context, s *Store, sd *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		var ops consolidation.Ops
		for _, id := range sd.allObs() {
			if sd.owner[id] != k {
				ops.Deletes = append(ops.Deletes, consolidation.Delete{ObservationID: id})
				ops.Merges = append(ops.Merges, consolidation.Merge{ObservationID: id, SourceFactIDs: []string{sd.r[k]}})
			}
		}
		// Refused or applied to nothing: either way no other scope's
		// row may change.
		_, _ = s.Apply(ctx, k, "r", ops, []string{sd.r[k]}, time.Now().UTC())
		return nil, nil
	}},
	{name: "MarkFailed", call: func(ctx context.Context, s *Store, _ *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		// Every scope has one fact that r holds; r fails all five ids
		// of this one.
		return nil, s.MarkFailed(ctx, k, "r", allFacts, "bad", time.Now().UTC())
	}},
	{name: "BankGeneration", call: func(ctx context.Context, s *Store, _ *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		g, err := s.BankGeneration(ctx, k)
		if err == nil && g.Applied < 0 {
			err = fmt.Errorf("generation %+v", g)
		}
		return nil, err
	}},
	{name: "LoadRecallable", read: true, call: func(ctx context.Context, s *Store, sd *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		l := &loaded{obs: map[string]consolidation.Observation{}, tags: map[string][]string{}, vectors: map[string][]float32{}}
		_, err := s.LoadRecallable(ctx, k, isoSpace, l)
		var out []consolidation.ScopeKey
		for id, o := range l.obs {
			out = append(append(out, ofObs(sd, []string{id})...), ownerOfText(o.Text))
		}
		for id := range l.vectors {
			out = append(out, ofObs(sd, []string{id})...)
		}
		return out, err
	}},
	{name: "PendingFacts", read: true, call: func(ctx context.Context, s *Store, _ *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		facts, err := s.PendingFacts(ctx, k, time.Time{}, 100)
		return ofFacts(facts), err
	}},
	{name: "EraseScope", noShared: true, call: func(ctx context.Context, s *Store, _ *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		_, err := s.EraseScope(ctx, k)
		return nil, err
	}},
	{name: "DeleteScopeFacts", call: func(ctx context.Context, s *Store, _ *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		_, err := s.DeleteScopeFacts(ctx, k, allFacts)
		return nil, err
	}},
	{name: "ExportScope", read: true, call: func(ctx context.Context, s *Store, sd *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		var out []consolidation.ScopeKey
		msgs := 0
		err := s.ExportScope(ctx, k, func(e consolidation.Exported) error {
			out = append(out, ownerOfText(e.Text))
			switch e.Kind {
			case consolidation.KindObservation:
				out = append(out, ofObs(sd, []string{e.ID})...)
			case consolidation.KindMessage:
				msgs++
			}
			return nil
		})
		if err == nil && msgs != 3 {
			err = fmt.Errorf("exported %d messages, want the scope's 3", msgs)
		}
		return out, err
	}},
	{name: "ListScopeMessages", read: true, call: func(ctx context.Context, s *Store, _ *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		msgs, err := s.ListScopeMessages(ctx, k, "", 100)
		var out []consolidation.ScopeKey
		for _, m := range msgs {
			out = append(out, ownerOfText(m.Content))
		}
		return out, err
	}},
	{name: "PendingMessages", read: true, call: func(ctx context.Context, s *Store, _ *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		msgs, err := s.PendingMessages(ctx, consolidation.ConversationRef{Key: k, Conversation: "c1"}, 100)
		var out []consolidation.ScopeKey
		for _, m := range msgs {
			out = append(out, ownerOfText(m.Content))
		}
		if err == nil && len(msgs) != 3 {
			err = fmt.Errorf("%d pending messages, want the scope's 3", len(msgs))
		}
		return out, err
	}},
	{name: "MessagesBefore", read: true, call: func(ctx context.Context, s *Store, _ *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		c := consolidation.ConversationRef{Key: k, Conversation: "c1"}
		all, err := s.PendingMessages(ctx, c, 100)
		if err != nil || len(all) != 3 {
			return nil, fmt.Errorf("%d messages, %v", len(all), err)
		}
		msgs, err := s.MessagesBefore(ctx, c, all[2], 100)
		var out []consolidation.ScopeKey
		for _, m := range msgs {
			out = append(out, ownerOfText(m.Content))
		}
		if err == nil && (len(msgs) != 2 || msgs[0].ID != "m1" || msgs[1].ID != "m2") {
			err = fmt.Errorf("messages before m3: %d, want the scope's m1, m2 in order", len(msgs))
		}
		return out, err
	}},
	{name: "MarkMessages", call: func(ctx context.Context, s *Store, _ *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		return nil, s.MarkMessages(ctx, k, []string{"m1", "m2", "m3"}, consolidation.MessageFailed, "bad")
	}},
	{name: "ListScopeFacts", read: true, call: func(ctx context.Context, s *Store, _ *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		facts, err := s.ListScopeFacts(ctx, k, "", 100)
		return ofFacts(facts), err
	}},
	{name: "RetryFacts", call: func(ctx context.Context, s *Store, _ *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		n, err := s.RetryFacts(ctx, k, nil)
		if err == nil && n != 1 {
			err = fmt.Errorf("%d facts retried, want 1", n)
		}
		return nil, err
	}},
	{name: "ListObservations", read: true, call: func(ctx context.Context, s *Store, sd *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		obs, err := s.ListObservations(ctx, k)
		var out []consolidation.ScopeKey
		for _, o := range obs {
			out = append(append(out, ofObs(sd, []string{o.ID})...), ownerOfText(o.Text))
		}
		return out, err
	}},
	{name: "History", read: true, call: func(ctx context.Context, s *Store, sd *isoSeed, k consolidation.ScopeKey) ([]consolidation.ScopeKey, error) {
		var out []consolidation.ScopeKey
		for _, key := range isoKeys {
			h, err := s.History(ctx, k, sd.obs[key][0])
			if err != nil {
				return nil, err
			}
			for _, text := range h {
				out = append(out, ownerOfText(text))
			}
		}
		return out, nil
	}},
}

// bankCases call a method on isoBank; a read returns the keys of what it
// read.
var bankCases = []struct {
	name string
	call func(ctx context.Context, s *Store, sd *isoSeed) ([]consolidation.ScopeKey, error)
}{
	{"EnsureBank", func(ctx context.Context, s *Store, _ *isoSeed) ([]consolidation.ScopeKey, error) {
		return nil, s.EnsureBank(ctx, isoBank)
	}},
	{"PendingScopes", func(ctx context.Context, s *Store, _ *isoSeed) ([]consolidation.ScopeKey, error) {
		return s.PendingScopes(ctx, isoBank, time.Now())
	}},
	{"ReleaseClaims", func(ctx context.Context, s *Store, _ *isoSeed) ([]consolidation.ScopeKey, error) {
		return nil, s.ReleaseClaims(ctx, isoBank, "r")
	}},
	{"CountFacts", func(ctx context.Context, s *Store, _ *isoSeed) ([]consolidation.ScopeKey, error) {
		n, err := s.CountFacts(ctx, isoBank)
		if err == nil && n[consolidation.FactFailed] != 2 {
			err = fmt.Errorf("counts %v, want 2 failed", n)
		}
		return nil, err
	}},
	{"CountObservations", func(ctx context.Context, s *Store, sd *isoSeed) ([]consolidation.ScopeKey, error) {
		n, err := s.CountObservations(ctx, isoBank)
		if want := len(sd.obs[isoKeys[0]]) + len(sd.obs[isoKeys[1]]); err == nil && n != want {
			err = fmt.Errorf("%d observations, want %d", n, want)
		}
		return nil, err
	}},
	{"ListScopes", func(ctx context.Context, s *Store, _ *isoSeed) ([]consolidation.ScopeKey, error) {
		scopes, err := s.ListScopes(ctx, isoBank)
		var out []consolidation.ScopeKey
		for _, c := range scopes {
			out = append(out, isoBank.Scope(c.Scope))
		}
		return out, err
	}},
	{"ListFacts", func(ctx context.Context, s *Store, _ *isoSeed) ([]consolidation.ScopeKey, error) {
		facts, err := s.ListFacts(ctx, isoBank, "", 100)
		return ofFacts(facts), err
	}},
	{"ImportFacts", func(ctx context.Context, s *Store, _ *isoSeed) ([]consolidation.ScopeKey, error) {
		_, err := s.ImportFacts(ctx, isoBank, []consolidation.Fact{{ID: "f1", Text: "other text"}, {ID: "f9", Scope: "ana", Text: "new"}})
		return nil, err
	}},
	{"RetainFacts", func(ctx context.Context, s *Store, _ *isoSeed) ([]consolidation.ScopeKey, error) {
		_, _, err := s.RetainFacts(ctx, isoBank, []consolidation.Fact{{ID: "f9", Text: "new"}, {ID: "f9", Scope: "bob", Text: "new"}})
		return nil, err
	}},
	{"RetainMessages", func(ctx context.Context, s *Store, _ *isoSeed) ([]consolidation.ScopeKey, error) {
		at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
		_, _, err := s.RetainMessages(ctx, isoBank, []consolidation.Message{
			{ID: "m9", Conversation: "c1", Role: consolidation.RoleUser, Content: "new", At: at},
			{ID: "m9", Scope: "bob", Conversation: "c1", Role: consolidation.RoleUser, Content: "new", At: at}})
		return nil, err
	}},
	{"PendingConversations", func(ctx context.Context, s *Store, _ *isoSeed) ([]consolidation.ScopeKey, error) {
		refs, err := s.PendingConversations(ctx, isoBank, consolidation.ConversationRef{}, 100)
		var out []consolidation.ScopeKey
		for _, r := range refs {
			out = append(out, r.Key)
		}
		if err == nil && len(refs) != 2 {
			err = fmt.Errorf("%d conversations of %s, want its 2 (c1 of two scopes)", len(refs), isoBank)
		}
		if err == nil {
			// The page after the first starts after it.
			var rest []consolidation.ConversationRef
			if rest, err = s.PendingConversations(ctx, isoBank, refs[0], 100); err == nil && (len(rest) != 1 || rest[0] != refs[1]) {
				err = fmt.Errorf("after %v: %v, want %v", refs[0], rest, refs[1:])
			}
		}
		return out, err
	}},
	{"DeleteExpiredMessages", func(ctx context.Context, s *Store, _ *isoSeed) ([]consolidation.ScopeKey, error) {
		n, err := s.DeleteExpiredMessages(ctx, isoBank, time.Now().Add(24*time.Hour))
		if err == nil && n != 6 {
			err = fmt.Errorf("%d expired messages of %s, want its 6", n, isoBank)
		}
		return nil, err
	}},
	{"ExpiredFacts", func(ctx context.Context, s *Store, _ *isoSeed) ([]consolidation.ScopeKey, error) {
		// Every fact of both banks was stored before now and a day.
		got, _, err := s.ExpiredFacts(ctx, isoBank, time.Now().Add(24*time.Hour), consolidation.FactCursor{}, 100)
		var out []consolidation.ScopeKey
		n := 0
		for k, ids := range got {
			for range ids {
				out = append(out, k)
			}
			n += len(ids)
		}
		if err == nil && n != 10 {
			err = fmt.Errorf("%d expired facts of %s, want its 10", n, isoBank)
		}
		return out, err
	}},
	{"DeleteFacts", func(ctx context.Context, s *Store, _ *isoSeed) ([]consolidation.ScopeKey, error) {
		_, err := s.DeleteFacts(ctx, isoBank, allFacts)
		return nil, err
	}},
}

// TestScopedMethods holds every store method to the scope its signature
// names, on PostgreSQL and SQLite.
func TestScopedMethods(t *testing.T) {
	ctx := context.Background()
	for _, dialect := range []string{"postgres", "sqlite"} {
		t.Run(dialect, func(t *testing.T) {
			url := "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
			if dialect == "postgres" {
				var err error
				if url, err = pg.NewDatabase(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// fresh is a store seeded anew, with nothing of the last
			// case held in memory.
			fresh := func(t *testing.T) (*Store, *isoSeed) {
				s, err := Open(ctx, url)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				isoWipe(t, s)
				return s, seedIsolation(t, s)
			}
			for _, tc := range scopedCases {
				for _, target := range []consolidation.ScopeKey{isoBank.Scope(""), isoBank.Scope("ana")} {
					if tc.noShared && target.Name() == "" {
						continue
					}
					t.Run(tc.name+"/"+string(target), func(t *testing.T) {
						s, sd := fresh(t)
						before := isoRows(t, s)
						otherErasures := erasures(t, s, isoOther)
						read, err := tc.call(ctx, s, sd, target)
						if err != nil {
							t.Fatal(err)
						}
						if tc.read && len(read) == 0 {
							t.Errorf("read nothing of %s", target)
						}
						for _, k := range read {
							if k != target {
								t.Errorf("read a row of %s", k)
							}
						}
						after := isoRows(t, s)
						for _, k := range isoKeys {
							if k != target && !slices.Equal(before[k], after[k]) {
								t.Errorf("changed rows of %s:\nbefore %q\nafter  %q", k, before[k], after[k])
							}
						}
						if erasures(t, s, isoOther) != otherErasures {
							t.Errorf("moved the erasures of %s", isoOther)
						}
					})
				}
			}
			for _, tc := range bankCases {
				t.Run(tc.name, func(t *testing.T) {
					s, sd := fresh(t)
					before := isoRows(t, s)
					otherErasures := erasures(t, s, isoOther)
					read, err := tc.call(ctx, s, sd)
					if err != nil {
						t.Fatal(err)
					}
					for _, k := range read {
						if k.Bank() != isoBank {
							t.Errorf("read a row of %s", k)
						}
					}
					after := isoRows(t, s)
					for _, k := range isoKeys[2:] {
						if !slices.Equal(before[k], after[k]) {
							t.Errorf("changed rows of %s:\nbefore %q\nafter  %q", k, before[k], after[k])
						}
					}
					if erasures(t, s, isoOther) != otherErasures {
						t.Errorf("moved the erasures of %s", isoOther)
					}
				})
			}
		})
	}
}
