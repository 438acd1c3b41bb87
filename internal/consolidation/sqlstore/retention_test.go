package sqlstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/llmtest"
)

// countingStore records how many expired facts each ExpiredFacts call
// returned, the position it was asked to start after and the one it
// returned.
type countingStore struct {
	*Store
	got         []int
	after, next []consolidation.FactCursor
	seen        map[consolidation.ScopeKey]map[string]int
}

func (c *countingStore) ExpiredFacts(ctx context.Context, bank consolidation.BankID, before time.Time, after consolidation.FactCursor, limit int) (map[consolidation.ScopeKey][]string, consolidation.FactCursor, error) {
	out, next, err := c.Store.ExpiredFacts(ctx, bank, before, after, limit)
	n := 0
	if c.seen == nil {
		c.seen = map[consolidation.ScopeKey]map[string]int{}
	}
	for k, ids := range out {
		n += len(ids)
		if c.seen[k] == nil {
			c.seen[k] = map[string]int{}
		}
		for _, id := range ids {
			c.seen[k][id]++
		}
	}
	c.got = append(c.got, n)
	c.after = append(c.after, after)
	c.next = append(c.next, next)
	return out, next, err
}

// A run with RetentionMaxAge erases the bank's expired facts of every
// scope (and status) first, a bounded batch at a time, before it claims
// any; the fresh facts are consolidated as before and another bank's
// old facts are left alone.
func TestRetentionErasesExpiredFactsInBatches(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		const old = 1203
		var facts []consolidation.Fact
		for i := 0; i < old; i++ {
			facts = append(facts, consolidation.Fact{ID: fmt.Sprintf("old-%04d", i), Scope: []string{"", "ana", "bob"}[i%3], Text: fmt.Sprintf("Old fact number %d", i)})
		}
		importFacts(t, s, facts...)
		const other consolidation.BankID = "agents/support-b"
		if _, err := s.ImportFacts(ctx, other, []consolidation.Fact{{ID: "old-0000", Text: "Another bank's old fact"}}); err != nil {
			t.Fatal(err)
		}
		twoHoursAgo := time.Now().Add(-2 * time.Hour)
		if _, err := s.db.ExecContext(ctx, s.rebind("UPDATE promptops_facts SET created_at = $1"), s.timeArg(&twoHoursAgo)); err != nil {
			t.Fatal(err)
		}
		// Messages too: 7 of two scopes stored two hours ago, 2 now, and
		// another bank's old one.
		retainMessages(t, s, append(conversation("ana", "c1", 0, 4), conversation("bob", "c1", 0, 3)...))
		if _, _, err := s.RetainMessages(ctx, other, conversation("ana", "c1", 0, 1)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.db.ExecContext(ctx, s.rebind("UPDATE promptops_messages SET created_at = $1"), s.timeArg(&twoHoursAgo)); err != nil {
			t.Fatal(err)
		}
		retainMessages(t, s, conversation("ana", "c1", 4, 2))
		importFacts(t, s, consolidation.Fact{ID: fid(1), Text: "Alice works at Acme Corp"}, consolidation.Fact{ID: fid(2), Scope: "ana", Text: "Bob has a dog named Rex"})
		srv := llmtest.New(llmtest.OnePerFact)
		defer srv.Close()
		e := engine(s, srv, func(set *consolidation.Settings) { set.RetentionMaxAge = time.Hour })
		cs := &countingStore{Store: s}
		e.Store = cs
		sum, err := e.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sum.ExpiredFacts != old || sum.ExpiredMessages != 7 || sum.FactsConsolidated != 2 || sum.PendingFacts != 0 {
			t.Fatalf("summary %+v", sum)
		}
		if len(cs.got) != 4 || cs.got[0] != 500 || cs.got[1] != 500 || cs.got[2] != old-1000 || cs.got[3] != 0 {
			t.Errorf("ExpiredFacts returned %v facts, want 500 at a time", cs.got)
		}
		// Each call starts after the previous one's last fact, the
		// positions advance in (key, id) order (the facts share one
		// created_at), and no fact is listed twice.
		for i := range cs.after {
			if i == 0 {
				if cs.after[0].Key != "" {
					t.Errorf("the first call starts after %+v, want the start", cs.after[0])
				}
				continue
			}
			if prev, cur := cs.next[i-1], cs.after[i]; cur.Key != prev.Key || cur.ID != prev.ID || fmt.Sprint(cur.CreatedAt) != fmt.Sprint(prev.CreatedAt) {
				t.Errorf("call %d starts after %+v, want the previous call's last %+v", i, cur, prev)
			}
			if i < len(cs.after)-1 {
				if prev, cur := cs.next[i-1], cs.next[i]; cur.Key < prev.Key || cur.Key == prev.Key && cur.ID <= prev.ID {
					t.Errorf("call %d ends at %s %s, not after the previous call's %s %s", i, cur.Key, cur.ID, prev.Key, prev.ID)
				}
			}
		}
		for k, ids := range cs.seen {
			for id, n := range ids {
				if n != 1 {
					t.Errorf("%s %s listed %d times", k, id, n)
				}
			}
		}
		left, err := s.ListFacts(ctx, bank, "", 10000)
		if err != nil || len(left) != 2 {
			t.Fatalf("the bank holds %d facts (%v), want the 2 fresh ones", len(left), err)
		}
		if n, err := s.CountFacts(ctx, other); err != nil || n[consolidation.FactPending] != 1 {
			t.Errorf("another bank's facts: %v %v", n, err)
		}
		if msgs, err := s.ListScopeMessages(ctx, consolidation.BankID(bank).Scope("ana"), "", 100); err != nil || len(msgs) != 2 {
			t.Errorf("ana holds %d messages (%v), want the 2 fresh ones", len(msgs), err)
		}
		if msgs, err := s.ListScopeMessages(ctx, other.Scope("ana"), "", 100); err != nil || len(msgs) != 1 {
			t.Errorf("another bank's messages: %d, %v", len(msgs), err)
		}
	})
}
