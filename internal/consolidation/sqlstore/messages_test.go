package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
)

// conversation is n messages of one conversation in scope, alternating
// user and assistant, a minute apart, with derived ids.
func conversation(scope, conv string, from, n int) []consolidation.Message {
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	var out []consolidation.Message
	for i := from; i < from+n; i++ {
		m := consolidation.Message{Scope: scope, Conversation: conv, Role: consolidation.RoleUser,
			Content: fmt.Sprintf("message %d of %s", i, conv), At: t0.Add(time.Duration(i) * time.Minute)}
		if i%2 == 1 {
			m.Role = consolidation.RoleAssistant
		}
		m.ID = consolidation.DerivedMessageID(bank, m)
		out = append(out, m)
	}
	return out
}

func retainMessages(t *testing.T, s *Store, msgs []consolidation.Message) (stored, unchanged int) {
	t.Helper()
	stored, unchanged, err := s.RetainMessages(context.Background(), bank, msgs)
	if err != nil {
		t.Fatal(err)
	}
	return stored, unchanged
}

func TestRetainMessagesIdempotent(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		first := conversation("ana", "c1", 0, 10)
		if st, un := retainMessages(t, s, first); st != 10 || un != 0 {
			t.Fatalf("first retain: %d stored, %d unchanged", st, un)
		}
		if st, un := retainMessages(t, s, first); st != 0 || un != 10 {
			t.Fatalf("the same conversation again: %d stored, %d unchanged, want 0 and 10", st, un)
		}
		// The application sends the whole conversation with five more.
		if st, un := retainMessages(t, s, append(first, conversation("ana", "c1", 10, 5)...)); st != 5 || un != 10 {
			t.Fatalf("five appended: %d stored, %d unchanged, want 5 and 10", st, un)
		}
		// The same conversation of another scope is another's.
		if st, _ := retainMessages(t, s, conversation("bob", "c1", 0, 3)); st != 3 {
			t.Fatalf("bob's messages: %d stored, want 3", st)
		}
		got, err := s.ListScopeMessages(ctx, consolidation.BankID(bank).Scope("ana"), "", 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 15 {
			t.Fatalf("ana holds %d messages, want 15", len(got))
		}
		for i, m := range got {
			want := conversation("ana", "c1", i, 1)[0]
			if m.ID != want.ID || m.Content != want.Content || m.Role != want.Role || !m.At.Equal(want.At) || m.Conversation != "c1" ||
				m.Scope != "ana" || m.Status != consolidation.MessagePending || m.CreatedAt.IsZero() {
				t.Fatalf("message %d: %+v, want %+v pending", i, m, want)
			}
		}
		if got, err := s.ListScopeMessages(ctx, consolidation.BankID(bank).Scope("ana"), consolidation.MessageExtracted, 100); err != nil || len(got) != 0 {
			t.Fatalf("extracted messages: %d, %v", len(got), err)
		}
	})
}

func TestRetainMessagesConflict(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		base := consolidation.Message{ID: "m1", Scope: "ana", Conversation: "c1", Role: consolidation.RoleUser, Content: "I like tea", At: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
		retainMessages(t, s, []consolidation.Message{base})
		// The same instant in another zone is the same message.
		same := base
		same.At = base.At.In(time.FixedZone("CET", 3600))
		if st, un := retainMessages(t, s, []consolidation.Message{same}); st != 0 || un != 1 {
			t.Fatalf("the same message: %d stored, %d unchanged", st, un)
		}
		for name, change := range map[string]func(*consolidation.Message){
			"content":      func(m *consolidation.Message) { m.Content = "I like coffee" },
			"role":         func(m *consolidation.Message) { m.Role = consolidation.RoleAssistant },
			"conversation": func(m *consolidation.Message) { m.Conversation = "c2" },
			"at":           func(m *consolidation.Message) { m.At = m.At.Add(time.Second) },
		} {
			other := base
			change(&other)
			fresh := consolidation.Message{ID: "m2", Scope: "ana", Conversation: "c1", Role: consolidation.RoleUser, Content: "new", At: base.At}
			_, _, err := s.RetainMessages(ctx, bank, []consolidation.Message{fresh, other})
			var conflict *consolidation.MessageConflictError
			if !errors.As(err, &conflict) || conflict.ID != "m1" {
				t.Fatalf("other %s: %v, want a conflict on m1", name, err)
			}
		}
		got, err := s.ListScopeMessages(ctx, consolidation.BankID(bank).Scope("ana"), "", 100)
		if err != nil || len(got) != 1 || got[0].Content != "I like tea" {
			t.Fatalf("after the conflicts: %+v, %v; want m1 alone, as it was", got, err)
		}
		// Another scope may hold m1 with other content.
		other := base
		other.Scope, other.Content = "bob", "I like coffee"
		if st, _ := retainMessages(t, s, []consolidation.Message{other}); st != 1 {
			t.Fatalf("bob's m1: %d stored", st)
		}
	})
}

func TestMessagesErasedExportedExpired(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		importFacts(t, s, consolidation.Fact{ID: "f1", Scope: "ana", Text: "Ana likes tea"})
		retainMessages(t, s, append(conversation("ana", "c1", 0, 3), conversation("ana", "c0", 0, 2)...))
		retainMessages(t, s, conversation("bob", "c1", 0, 4))

		var kinds []string
		var msgs []consolidation.Exported
		if err := s.ExportScope(ctx, consolidation.BankID(bank).Scope("ana"), func(e consolidation.Exported) error {
			kinds = append(kinds, e.Kind)
			if e.Kind == consolidation.KindMessage {
				msgs = append(msgs, e)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(kinds) != 6 || kinds[0] != consolidation.KindFact || len(msgs) != 5 {
			t.Fatalf("export: %v, want the fact and then 5 messages", kinds)
		}
		first := conversation("ana", "c0", 0, 1)[0]
		if e := msgs[0]; e.ID != first.ID || e.Conversation != "c0" || e.Text != first.Content || e.Source != "user" || e.Scope != "ana" ||
			e.At == nil || !e.At.Equal(first.At) || e.Status != "pending" {
			t.Fatalf("first exported message %+v, want %+v", e, first)
		}
		if msgs[1].Source != "assistant" {
			t.Fatalf("second message's source %q, want its role assistant", msgs[1].Source)
		}

		erased, err := s.EraseScope(ctx, consolidation.BankID(bank).Scope("ana"))
		if err != nil {
			t.Fatal(err)
		}
		if erased.Messages != 5 || erased.Facts != 1 {
			t.Fatalf("erasure %+v, want 5 messages and 1 fact", erased)
		}
		var left int
		if err := s.db.QueryRow(s.rebind("SELECT count(*) FROM promptops_messages WHERE bank = $1"), string(consolidation.BankID(bank).Scope("ana"))).Scan(&left); err != nil || left != 0 {
			t.Fatalf("%d of ana's messages left, %v", left, err)
		}
		if got, err := s.ListScopeMessages(ctx, consolidation.BankID(bank).Scope("bob"), "", 100); err != nil || len(got) != 4 {
			t.Fatalf("bob's messages after ana's erasure: %d, %v", len(got), err)
		}

		// Retention: nothing was stored before an hour ago; all of it
		// before an hour from now.
		if n, err := s.DeleteExpiredMessages(ctx, bank, time.Now().Add(-time.Hour)); err != nil || n != 0 {
			t.Fatalf("expired an hour ago: %d, %v", n, err)
		}
		if n, err := s.DeleteExpiredMessages(ctx, bank, time.Now().Add(time.Hour)); err != nil || n != 4 {
			t.Fatalf("expired by an hour from now: %d, %v; want bob's 4", n, err)
		}
	})
}
