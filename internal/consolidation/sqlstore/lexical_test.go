package sqlstore

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
)

func TestFromJSON(t *testing.T) {
	for _, ents := range [][]string{nil, {"alice"}, {"alice", "bob"}, {`a"b`, `c\d`}, {"张伟", "a, b", `","`}} {
		got := fromJSON(toJSON(ents))
		if len(ents) == 0 && len(got) == 0 {
			continue
		}
		if !slices.Equal(got, ents) {
			t.Errorf("fromJSON(%s) = %q, want %q", toJSON(ents), got, ents)
		}
	}
	if got := fromJSON(`[ "x" , "y" ]`); !slices.Equal(got, []string{"x", "y"}) {
		t.Errorf("spaced array: %q", got)
	}
}

// TestRecallFollowsOtherStores: a store's lexical index follows the batches
// it applies itself and reloads when another store (another run) applied
// one, on both stores.
func TestRecallFollowsOtherStores(t *testing.T) {
	for _, storeName := range []string{"postgres", "sqlite"} {
		t.Run(storeName, func(t *testing.T) {
			ctx := context.Background()
			url := "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
			if storeName == "postgres" {
				dsn, err := pg.NewDatabase(ctx)
				if err != nil {
					t.Fatal(err)
				}
				url = dsn
			}
			open := func() *Store {
				s, err := Open(ctx, url)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
			a, b := open(), open()
			if err := a.EnsureBank(ctx, bank); err != nil {
				t.Fatal(err)
			}
			create := func(s *Store, text string) string {
				t.Helper()
				ids, err := s.Apply(ctx, bank, "run", consolidation.Ops{Creates: []consolidation.Create{{Text: text}}}, nil, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				return ids[0]
			}
			recall := func(s *Store, text string) []string {
				t.Helper()
				got, err := s.Recall(ctx, bank, []consolidation.Fact{{ID: "f", Text: text}}, 5)
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, c := range got["f"] {
					ids = append(ids, c.ID)
				}
				return ids
			}
			bergen := create(a, "Alice moved to Bergen")
			if got := recall(a, "Alice moved to Bergen in May"); !slices.Equal(got, []string{bergen}) {
				t.Fatalf("own create: %v", got)
			}
			bike := create(b, "张伟买了一辆红色自行车")
			if got := recall(a, "张伟买了自行车"); !slices.Equal(got, []string{bike}) {
				t.Fatalf("another store's create: %v", got)
			}
			if _, err := b.Apply(ctx, bank, "run", consolidation.Ops{Deletes: []consolidation.Delete{{ObservationID: bergen}}}, nil, time.Now()); err != nil {
				t.Fatal(err)
			}
			if got := recall(a, "Alice moved to Bergen in May"); len(got) != 0 {
				t.Fatalf("another store's delete: %v", got)
			}
			// a applies while behind b: it must not keep a stale index.
			oslo := create(a, "Alice moved to Oslo")
			create(b, "Bob moved to Oslo")
			if got := recall(a, "Alice moved to Oslo"); len(got) != 2 || got[0] != oslo {
				t.Fatalf("after both applied: %v", got)
			}
		})
	}
}

// WarmRecall loads the bank's lexical index ahead of the first Recall,
// which then uses it; an unknown bank is not held.
func TestWarmRecall(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		if err := s.WarmRecall(ctx, "ns/unknown"); err != nil || s.lex["ns/unknown"] != nil {
			t.Fatalf("unknown bank: %v, held %v", err, s.lex["ns/unknown"])
		}
		if err := s.EnsureBank(ctx, bank); err != nil {
			t.Fatal(err)
		}
		ids, err := s.Apply(ctx, bank, "run", consolidation.Ops{Creates: []consolidation.Create{{Text: "Alice moved to Bergen"}}}, nil, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		delete(s.lex, bank)
		if err := s.WarmRecall(ctx, bank); err != nil {
			t.Fatal(err)
		}
		held := s.lex[bank]
		if held == nil || held.idx.Len() != 1 {
			t.Fatalf("the index is not held after WarmRecall: %+v", held)
		}
		got, err := s.Recall(ctx, bank, []consolidation.Fact{{ID: "f", Text: "Alice moved to Bergen"}}, 5)
		if err != nil || len(got["f"]) != 1 || got["f"][0].ID != ids[0] || s.lex[bank] != held {
			t.Fatalf("recall after WarmRecall: %v %+v, index reloaded: %v", err, got, s.lex[bank] != held)
		}
	})
}
