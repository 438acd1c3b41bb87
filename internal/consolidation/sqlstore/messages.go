package sqlstore

import (
	"context"
	"database/sql"
	"slices"
	"sort"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
)

// Messages retained for extraction (the bank API's POST .../messages).

// heldMessage is what RetainMessages compares of a message the bank holds.
type heldMessage struct{ conversation, role, content, at string }

func heldOf(m consolidation.Message) heldMessage {
	return heldMessage{conversation: m.Conversation, role: string(m.Role), content: m.Content, at: m.At.UTC().Format(time.RFC3339Nano)}
}

// RetainMessages stores messages, each with its id, in its scope, in one
// transaction, pending extraction: a message whose id its scope holds with
// the same conversation, role, time and content is left as it is and
// counted in unchanged; one that differs fails the whole call with
// *consolidation.MessageConflictError and stores nothing. created_at keeps
// the order given.
func (s *Store) RetainMessages(ctx context.Context, bank consolidation.BankID, msgs []consolidation.Message) (stored, unchanged int, err error) {
	if len(msgs) == 0 {
		return 0, 0, nil
	}
	keys := make([]consolidation.ScopeKey, len(msgs))
	byKey := map[consolidation.ScopeKey][]string{}
	for i, m := range msgs {
		keys[i] = bank.Scope(m.Scope)
		byKey[keys[i]] = append(byKey[keys[i]], m.ID)
	}
	if err := s.ensureScopeKeys(ctx, bank, keys); err != nil {
		return 0, 0, err
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		held := func() (map[[2]string]heldMessage, error) {
			out := map[[2]string]heldMessage{}
			for key, ids := range byKey {
				if err := s.heldMessages(ctx, tx, string(key), ids, out); err != nil {
					return nil, err
				}
			}
			return out, nil
		}
		before, err := held()
		if err != nil {
			return err
		}
		base := time.Now().UTC()
		var rows [][]any
		for i, m := range msgs {
			k, want := [2]string{string(keys[i]), m.ID}, heldOf(m)
			if h, ok := before[k]; ok {
				if h != want {
					return &consolidation.MessageConflictError{ID: m.ID}
				}
				unchanged++
				continue
			}
			created := base.Add(time.Duration(i) * time.Microsecond)
			rows = append(rows, []any{string(keys[i]), m.ID, m.Conversation, string(m.Role), m.Content, s.timeArg(&m.At), s.timeArg(&created), m.At.UnixNano(), created.UnixNano()})
			before[k] = want
		}
		// ON CONFLICT DO NOTHING: a concurrent request may store one of
		// these ids first; what it stored is compared below.
		if err := s.insertRows(ctx, tx, "INSERT INTO promptops_messages (bank, id, conversation, role, content, at, created_at, at_ns, created_ns) VALUES ", " ON CONFLICT DO NOTHING", rows); err != nil {
			return err
		}
		if len(rows) > 0 {
			now, err := held()
			if err != nil {
				return err
			}
			for i, m := range msgs {
				if now[[2]string{string(keys[i]), m.ID}] != heldOf(m) {
					return &consolidation.MessageConflictError{ID: m.ID}
				}
			}
		}
		stored = len(rows)
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return stored, unchanged, nil
}

// heldMessages adds to out what the scope of key holds of the messages of
// ids.
func (s *Store) heldMessages(ctx context.Context, db querier, key string, ids []string, out map[[2]string]heldMessage) error {
	sorted := append([]string(nil), ids...)
	sort.Strings(sorted)
	return s.inChunks("SELECT id, conversation, role, content, at FROM promptops_messages WHERE bank = $1 AND id @IN", key, sorted, func(q string, args []any) error {
		rows, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var h heldMessage
			var at scanTime
			if err := rows.Scan(&id, &h.conversation, &h.role, &h.content, &at); err != nil {
				return err
			}
			if at.t != nil {
				h.at = at.t.UTC().Format(time.RFC3339Nano)
			}
			out[[2]string{key, id}] = h
		}
		return rows.Err()
	})
}

// messageColumns are the columns scanMessage reads.
const messageColumns = "id, conversation, role, content, at, created_at, status, COALESCE(failure_reason, '')"

func scanMessage(rows interface{ Scan(...any) error }, scope string) (consolidation.Message, error) {
	m := consolidation.Message{Scope: scope}
	var role, status string
	var at, created scanTime
	if err := rows.Scan(&m.ID, &m.Conversation, &role, &m.Content, &at, &created, &status, &m.FailureReason); err != nil {
		return m, err
	}
	m.Role, m.Status = consolidation.MessageRole(role), consolidation.MessageStatus(status)
	if at.t != nil {
		m.At = *at.t
	}
	if created.t != nil {
		m.CreatedAt = *created.t
	}
	return m, nil
}

// ListScopeMessages lists up to limit of a scope's messages of status
// ("" for all), by conversation and then in the order they were said.
func (s *Store) ListScopeMessages(ctx context.Context, key consolidation.ScopeKey, status consolidation.MessageStatus, limit int) ([]consolidation.Message, error) {
	return s.queryMessages(ctx, key, "SELECT "+messageColumns+" FROM promptops_messages WHERE bank = $1 AND ($2 = '' OR status = $2) ORDER BY conversation, at_ns, created_ns, id LIMIT $3", string(key), string(status), limit)
}

// DeleteExpiredMessages removes the bank's messages, of every scope and
// status, stored before before, as a run's retention removes its facts,
// and returns how many.
func (s *Store) DeleteExpiredMessages(ctx context.Context, bank consolidation.BankID, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.rebind("DELETE FROM promptops_messages WHERE "+inBank+" AND created_at < $4"), bankArgs(bank, s.timeArg(&before))...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// The queries of a run's extraction (package extraction).

// PendingConversations lists up to limit of the bank's conversations that
// have pending messages, by scope key and name, after after (the zero
// value starts at the first).
func (s *Store) PendingConversations(ctx context.Context, bank consolidation.BankID, after consolidation.ConversationRef, limit int) ([]consolidation.ConversationRef, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind("SELECT DISTINCT bank, conversation FROM promptops_messages WHERE "+inBank+
		" AND status = 'pending' AND (bank > $4 OR (bank = $4 AND conversation > $5)) ORDER BY bank, conversation LIMIT $6"),
		bankArgs(bank, string(after.Key), after.Conversation, limit)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []consolidation.ConversationRef
	for rows.Next() {
		var c consolidation.ConversationRef
		var key string
		if err := rows.Scan(&key, &c.Conversation); err != nil {
			return nil, err
		}
		c.Key = consolidation.ScopeKey(key)
		out = append(out, c)
	}
	return out, rows.Err()
}

// PendingMessages returns up to limit of a conversation's pending
// messages, in the order they were said.
func (s *Store) PendingMessages(ctx context.Context, c consolidation.ConversationRef, limit int) ([]consolidation.Message, error) {
	return s.queryMessages(ctx, c.Key, "SELECT "+messageColumns+" FROM promptops_messages WHERE bank = $1 AND conversation = $2 AND status = 'pending' ORDER BY at_ns, created_ns, id LIMIT $3",
		string(c.Key), c.Conversation, limit)
}

// MessagesBefore returns up to limit of a conversation's messages, of any
// status, said before m (in the order PendingMessages lists them), the
// latest of them, oldest first.
func (s *Store) MessagesBefore(ctx context.Context, c consolidation.ConversationRef, m consolidation.Message, limit int) ([]consolidation.Message, error) {
	if limit <= 0 {
		return nil, nil
	}
	out, err := s.queryMessages(ctx, c.Key, "SELECT "+messageColumns+" FROM promptops_messages WHERE bank = $1 AND conversation = $2"+
		" AND (at_ns < $3 OR (at_ns = $3 AND (created_ns < $4 OR (created_ns = $4 AND id < $5)))) ORDER BY at_ns DESC, created_ns DESC, id DESC LIMIT $6",
		string(c.Key), c.Conversation, m.At.UnixNano(), m.CreatedAt.UnixNano(), m.ID, limit)
	slices.Reverse(out)
	return out, err
}

// MarkMessages sets the status of messages of the scope (extracted, or
// failed with a reason; a reason is cleared otherwise), in one statement
// per 500.
func (s *Store) MarkMessages(ctx context.Context, key consolidation.ScopeKey, ids []string, status consolidation.MessageStatus, reason string) error {
	var why any
	if status == consolidation.MessageFailed {
		why = reason
	}
	for start := 0; start < len(ids); start += 500 {
		chunk := ids[start:min(start+500, len(ids))]
		args := make([]any, 0, 3+len(chunk))
		args = append(args, string(status), why, string(key))
		for _, id := range chunk {
			args = append(args, id)
		}
		q, args := s.anyOf("UPDATE promptops_messages SET status = $1, failure_reason = $2 WHERE bank = $3 AND id @IN", 4, args)
		if _, err := s.db.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) queryMessages(ctx context.Context, key consolidation.ScopeKey, query string, args ...any) ([]consolidation.Message, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []consolidation.Message
	scope := key.Name()
	for rows.Next() {
		m, err := scanMessage(rows, scope)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}
