package sqlstore

import (
	"context"
	"slices"
	"testing"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/llmtest"
)

// The duplicate guard keeps trust (a bank that trusts "crm"): a user's
// near-copy of a trusted observation does not join it (refused, counted;
// the observation keeps its one source); the CRM's near-copy of a user's
// observation is kept apart as a trusted observation of its own; within
// one answer, near-copies of two trusts stay two observations, and of
// one trust join as before.
func TestDuplicateGuardKeepsTrust(t *testing.T) {
	p := loadParaphrases(t)
	// Topics whose near-copy is not the same text once normalised (that
	// one is "repeated" before the guard sees it).
	var topics [][]string
	for _, tp := range p.topics {
		if consolidation.Normalize(tp[0]) != consolidation.Normalize(tp[1]) {
			topics = append(topics, tp)
		}
	}
	if len(topics) < 4 {
		t.Fatalf("%d usable topics", len(topics))
	}
	a, b, c, d := topics[0], topics[1], topics[2], topics[3]
	trust, err := consolidation.NewTrust([]string{"crm"})
	if err != nil {
		t.Fatal(err)
	}
	withTrust := func(s *consolidation.Settings) { s.Trust = trust }
	eachStore(t, func(t *testing.T, s *Store) {
		importFacts(t, s, consolidation.Fact{ID: fid(1), Text: a[0], Source: "crm"}, consolidation.Fact{ID: fid(2), Text: b[0], Source: "user"})
		srv := llmtest.New(func(_ int, req llmtest.Request) llmtest.Reply {
			var ans llmtest.Answer
			for _, f := range llmtest.Facts(req.User) {
				ans.Creates = append(ans.Creates, map[string]any{"text": f.Text, "source_fact_ids": []string{f.ID}})
			}
			return llmtest.Reply{Content: ans.JSON()}
		})
		defer srv.Close()
		emb := llmtest.NewEmbeddings(p.vector)
		defer emb.Close()
		if sum, err := embeddingsEngine(s, srv, emb, withTrust).Run(context.Background()); err != nil || sum.Created != 2 {
			t.Fatalf("%v %+v", err, sum)
		}
		importFacts(t, s,
			consolidation.Fact{ID: fid(3), Text: a[1], Source: "user"},
			consolidation.Fact{ID: fid(4), Text: b[1], Source: "crm"},
			consolidation.Fact{ID: fid(5), Text: c[0], Source: "user"},
			consolidation.Fact{ID: fid(6), Text: c[1], Source: "crm"},
			consolidation.Fact{ID: fid(7), Text: d[0], Source: "crm"},
			consolidation.Fact{ID: fid(8), Text: d[1], Source: "crm"},
		)
		sum, err := embeddingsEngine(s, srv, emb, withTrust).Run(context.Background())
		if err != nil || sum.RefusedByTrust != 1 || sum.FactsConsolidated != 6 || sum.FactsFailed != 0 {
			t.Fatalf("%v %+v", err, sum)
		}
		got := map[string]consolidation.Observation{}
		for _, o := range observations(t, s) {
			got[o.Text] = o
		}
		want := map[string]struct {
			prov    []string
			sources []string
		}{
			a[0]: {[]string{"crm"}, []string{fid(1)}}, // the user's a[1] refused
			b[0]: {[]string{"user"}, []string{fid(2)}},
			b[1]: {[]string{"crm"}, []string{fid(4)}}, // kept apart
			c[0]: {[]string{"user"}, []string{fid(5)}},
			c[1]: {[]string{"crm"}, []string{fid(6)}},
			d[0]: {[]string{"crm"}, []string{fid(7), fid(8)}}, // joined
		}
		if len(got) != len(want) {
			t.Errorf("%d observations, want %d", len(got), len(want))
		}
		for text, w := range want {
			o, ok := got[text]
			src := slices.Clone(o.SourceFactIDs)
			slices.Sort(src)
			if !ok || !slices.Equal(o.Provenance, w.prov) || !slices.Equal(src, w.sources) {
				t.Errorf("%q: held %v, provenance %v, sources %v; want %v %v", text, ok, o.Provenance, src, w.prov, w.sources)
			}
		}
	})
}
