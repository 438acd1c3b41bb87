package sqlstore

import (
	"context"
	"reflect"
	"testing"

	"github.com/promptops/promptops/internal/consolidation"
)

// ListScopes counts each scope's messages beside its facts and
// observations: a scope that holds only messages is listed, another
// bank's are not counted, and an erased scope is gone.
func TestListScopesCountsMessages(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		facts := []consolidation.Fact{
			{ID: "f1", Text: "the office moved to Lisbon", Source: "user"},
			{ID: "f2", Text: "the office opens at nine", Source: "user"},
			{ID: "f3", Scope: "ana", Text: "Ana likes tea", Source: "user"},
		}
		if _, err := s.ImportFacts(ctx, bank, facts); err != nil {
			t.Fatal(err)
		}
		retainMessages(t, s, conversation("ana", "c1", 0, 3))
		retainMessages(t, s, conversation("bob", "c2", 0, 2))
		if _, _, err := s.RetainMessages(ctx, "agents/other", conversation("ana", "c1", 0, 4)); err != nil {
			t.Fatal(err)
		}
		want := []consolidation.ScopeCount{
			{Scope: "", Facts: 2},
			{Scope: "ana", Facts: 1, Messages: 3},
			{Scope: "bob", Messages: 2},
		}
		if got, err := s.ListScopes(ctx, bank); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("ListScopes = %+v, %v; want %+v", got, err, want)
		}
		if _, err := s.EraseScope(ctx, consolidation.BankID(bank).Scope("bob")); err != nil {
			t.Fatal(err)
		}
		if got, err := s.ListScopes(ctx, bank); err != nil || !reflect.DeepEqual(got, want[:2]) {
			t.Fatalf("after bob's erasure ListScopes = %+v, %v; want %+v", got, err, want[:2])
		}
	})
}
