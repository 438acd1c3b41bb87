package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
)

// Erasure and export of a bank's scopes and facts (the bank API's DELETE
// and export endpoints, promptops scopes and facts delete).

// EraseScope removes every row of a scope (other than the shared one) in
// one transaction: its facts and their vectors, its observations with
// their vectors, sources and history, its messages, and its key. The bank's erasures
// move in the same transaction, so no served copy of the scope is used
// again. A run working on the scope meanwhile finds its facts gone and
// writes nothing of them.
func (s *Store) EraseScope(ctx context.Context, key consolidation.ScopeKey) (consolidation.Erasure, error) {
	bank, scope := key.Split()
	if scope == "" {
		return consolidation.Erasure{}, errors.New("the shared scope is not erased as a scope; delete its facts by id")
	}
	var out consolidation.Erasure
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		for _, st := range []struct {
			query string
			n     *int64
		}{
			{"DELETE FROM promptops_observation_history WHERE bank = $1", nil},
			{"DELETE FROM promptops_observation_vectors WHERE bank = $1", nil},
			{"DELETE FROM promptops_observation_sources WHERE bank = $1", nil},
			{"DELETE FROM promptops_observations WHERE bank = $1", &out.Observations},
			{"DELETE FROM promptops_fact_vectors WHERE bank = $1", nil},
			{"DELETE FROM promptops_facts WHERE bank = $1", &out.Facts},
			{"DELETE FROM promptops_messages WHERE bank = $1", &out.Messages},
			{"DELETE FROM promptops_banks WHERE id = $1", nil},
		} {
			res, err := tx.ExecContext(ctx, s.rebind(st.query), string(key))
			if err != nil {
				return err
			}
			if st.n != nil {
				if *st.n, err = res.RowsAffected(); err != nil {
					return err
				}
			}
		}
		return s.erased(ctx, tx, bank)
	})
	if err != nil {
		return consolidation.Erasure{}, err
	}
	s.forget(string(key))
	return out, nil
}

// DeleteFacts removes facts of the bank by id, in whichever scope holds
// them, in one transaction: each fact with its vector, every observation
// that cites one of them (with its vectors, sources and history: an
// observation may say what the fact said), and it puts the other source
// facts of those observations back to pending, so the next run rebuilds
// what they alone support.
func (s *Store) DeleteFacts(ctx context.Context, bank consolidation.BankID, ids []string) (consolidation.Erasure, error) {
	return s.deleteFacts(ctx, bank, nil, ids)
}

// ExpiredFacts returns up to limit of the bank's facts, of every scope and
// status, stored before before and after after, by scope (a run's
// retention erases them with DeleteScopeFacts: a fact's id may be
// another's in another scope), and the position of the last. The facts
// come in the order of the index promptops_facts_created, from after on
// (a row value comparison both databases serve from it), so a run that
// carries the position reads each fact once.
func (s *Store) ExpiredFacts(ctx context.Context, bank consolidation.BankID, before time.Time, after consolidation.FactCursor, limit int) (map[consolidation.ScopeKey][]string, consolidation.FactCursor, error) {
	// bank < $3 bounds the scan to the bank's keys; inBank leaves out
	// the other banks' keys between them.
	query := "SELECT bank, created_at, id FROM promptops_facts WHERE " + inBank + " AND bank < $3 AND created_at < $4"
	args := bankArgs(bank, s.timeArg(&before), limit)
	if after.Key == "" {
		query += " AND bank >= $1"
	} else {
		query += " AND (bank, created_at, id) > ($6, $7, $8)"
		args = append(args, string(after.Key), after.CreatedAt, after.ID)
	}
	rows, err := s.db.QueryContext(ctx, s.rebind(query+" ORDER BY bank, created_at, id LIMIT $5"), args...)
	if err != nil {
		return nil, after, err
	}
	defer rows.Close()
	out := map[consolidation.ScopeKey][]string{}
	last := after
	for rows.Next() {
		var key, id string
		var created any
		if err := rows.Scan(&key, &created, &id); err != nil {
			return nil, after, err
		}
		out[consolidation.ScopeKey(key)] = append(out[consolidation.ScopeKey(key)], id)
		last = consolidation.FactCursor{Key: consolidation.ScopeKey(key), CreatedAt: created, ID: id}
	}
	if err := rows.Err(); err != nil {
		return nil, after, err
	}
	return out, last, nil
}

// DeleteScopeFacts is DeleteFacts within one scope: facts of ids that
// other scopes hold are left alone.
func (s *Store) DeleteScopeFacts(ctx context.Context, key consolidation.ScopeKey, ids []string) (consolidation.Erasure, error) {
	return s.deleteFacts(ctx, key.Bank(), &key, ids)
}

// deleteFacts deletes the facts of ids that the bank holds, in the scope
// of only when it is not nil.
func (s *Store) deleteFacts(ctx context.Context, bank consolidation.BankID, only *consolidation.ScopeKey, ids []string) (consolidation.Erasure, error) {
	var out consolidation.Erasure
	var keys []string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		byKey, err := s.factKeysOf(ctx, tx, bank, only, ids)
		if err != nil {
			return err
		}
		keys = keys[:0]
		for key := range byKey {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			facts := byKey[key]
			obs, err := s.column(ctx, tx, "SELECT DISTINCT observation_id FROM promptops_observation_sources WHERE bank = $1 AND fact_id @IN", key, facts)
			if err != nil {
				return err
			}
			others, err := s.column(ctx, tx, "SELECT DISTINCT fact_id FROM promptops_observation_sources WHERE bank = $1 AND observation_id @IN", key, obs)
			if err != nil {
				return err
			}
			gone := map[string]bool{}
			for _, id := range facts {
				gone[id] = true
			}
			var requeue []string
			for _, id := range others {
				if !gone[id] {
					requeue = append(requeue, id)
				}
			}
			for _, st := range []struct {
				query string
				ids   []string
				n     *int64
			}{
				{"DELETE FROM promptops_observation_history WHERE bank = $1 AND observation_id @IN", obs, nil},
				{"DELETE FROM promptops_observation_vectors WHERE bank = $1 AND observation_id @IN", obs, nil},
				{"DELETE FROM promptops_observation_sources WHERE bank = $1 AND observation_id @IN", obs, nil},
				{"DELETE FROM promptops_observations WHERE bank = $1 AND id @IN", obs, &out.Observations},
				{"DELETE FROM promptops_observation_sources WHERE bank = $1 AND fact_id @IN", facts, nil},
				{"DELETE FROM promptops_fact_vectors WHERE bank = $1 AND fact_id @IN", facts, nil},
				{"DELETE FROM promptops_facts WHERE bank = $1 AND id @IN", facts, &out.Facts},
				{"UPDATE promptops_facts SET status = 'pending', consolidated_at = NULL, failure_reason = NULL, claimed_by = NULL, claimed_until = NULL WHERE bank = $1 AND status = 'consolidated' AND id @IN", requeue, &out.Requeued},
			} {
				n, err := s.execIn(ctx, tx, st.query, key, st.ids)
				if err != nil {
					return err
				}
				if st.n != nil {
					*st.n += n
				}
			}
			if _, err := tx.ExecContext(ctx, s.rebind("UPDATE promptops_banks SET generation = generation + 1 WHERE id = $1"), key); err != nil {
				return err
			}
		}
		if len(byKey) == 0 {
			return nil
		}
		return s.erased(ctx, tx, bank)
	})
	if err != nil {
		return consolidation.Erasure{}, err
	}
	for _, key := range keys {
		s.forget(key)
	}
	return out, nil
}

// ListScopes lists the bank's scopes with their facts, observations and
// messages (a scope that holds only messages is listed), the shared scope
// ("") first when it has any, then by name.
func (s *Store) ListScopes(ctx context.Context, bank consolidation.BankID) ([]consolidation.ScopeCount, error) {
	counts := map[string]*consolidation.ScopeCount{}
	for _, t := range []struct {
		table string
		n     func(*consolidation.ScopeCount) *int64
	}{
		{"promptops_facts", func(c *consolidation.ScopeCount) *int64 { return &c.Facts }},
		{"promptops_observations", func(c *consolidation.ScopeCount) *int64 { return &c.Observations }},
		{"promptops_messages", func(c *consolidation.ScopeCount) *int64 { return &c.Messages }},
	} {
		rows, err := s.db.QueryContext(ctx, s.rebind("SELECT bank, count(*) FROM "+t.table+" WHERE "+inBank+" GROUP BY bank"), bankArgs(bank)...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var key string
			var n int64
			if err := rows.Scan(&key, &n); err != nil {
				rows.Close()
				return nil, err
			}
			scope := consolidation.ScopeKey(key).Name()
			c := counts[scope]
			if c == nil {
				c = &consolidation.ScopeCount{Scope: scope}
				counts[scope] = c
			}
			*t.n(c) = n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	out := make([]consolidation.ScopeCount, 0, len(counts))
	for _, c := range counts {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Scope < out[j].Scope })
	return out, nil
}

// ExportScope streams a scope's facts (oldest first, with their sources),
// then its observations (with their source fact ids and provenance), then
// its messages (by conversation, in the order they were said) to fn, from one snapshot where the store gives one (a read-only
// transaction).
func (s *Store) ExportScope(ctx context.Context, key consolidation.ScopeKey, fn func(consolidation.Exported) error) error {
	scope := key.Name()
	return s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, s.rebind("SELECT "+factColumns+" FROM promptops_facts WHERE bank = $1 ORDER BY created_at, id"), string(key))
		if err != nil {
			return err
		}
		for rows.Next() {
			f, err := scanFact(rows)
			if err != nil {
				rows.Close()
				return err
			}
			f.Scope = scope
			if err := fn(consolidation.Exported{Kind: consolidation.KindFact, Fact: f}); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		srcs := map[string][]string{}
		rows, err = tx.QueryContext(ctx, s.rebind("SELECT observation_id, fact_id FROM promptops_observation_sources WHERE bank = $1 ORDER BY observation_id, fact_id"), string(key))
		if err != nil {
			return err
		}
		for rows.Next() {
			var o, f string
			if err := rows.Scan(&o, &f); err != nil {
				rows.Close()
				return err
			}
			srcs[o] = append(srcs[o], f)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.QueryContext(ctx, s.rebind("SELECT "+obsColumns+" FROM promptops_observations WHERE bank = $1 ORDER BY created_at, id"), string(key))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			o, err := scanObservation(rows)
			if err != nil {
				return err
			}
			e := consolidation.Exported{Kind: consolidation.KindObservation, Fact: consolidation.Fact{ID: o.ID, Scope: scope, Text: o.Text,
				Entities: o.Entities, OccurredStart: o.OccurredStart, OccurredEnd: o.OccurredEnd, CreatedAt: o.CreatedAt},
				SourceFactIDs: srcs[o.ID], ProofCount: o.ProofCount, Provenance: o.Provenance}
			if !o.UpdatedAt.IsZero() {
				e.UpdatedAt = o.UpdatedAt.Format(time.RFC3339Nano)
			}
			if err := fn(e); err != nil {
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		rows, err = tx.QueryContext(ctx, s.rebind("SELECT "+messageColumns+" FROM promptops_messages WHERE bank = $1 ORDER BY conversation, at, created_at, id"), string(key))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			m, err := scanMessage(rows, scope)
			if err != nil {
				return err
			}
			at := m.At
			e := consolidation.Exported{Kind: consolidation.KindMessage, Fact: consolidation.Fact{ID: m.ID, Scope: scope, Text: m.Content,
				Source: m.Source(), Status: string(m.Status), FailureReason: m.FailureReason, CreatedAt: m.CreatedAt},
				Conversation: m.Conversation, At: &at}
			if err := fn(e); err != nil {
				return err
			}
		}
		return rows.Err()
	})
}

// inTx runs fn in a transaction and commits it when fn succeeds.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// erased moves the bank's erasures in tx.
func (s *Store) erased(ctx context.Context, tx *sql.Tx, bank consolidation.BankID) error {
	_, err := tx.ExecContext(ctx, s.rebind("UPDATE promptops_banks SET erasures = erasures + 1 WHERE id = $1"), string(bank))
	return err
}

// ReleaseRecall drops the lexical index this store holds of a scope: a
// run calls it when done with a scope, so that a run over many scopes
// holds one scope's index at a time, not every scope's it worked on.
func (s *Store) ReleaseRecall(key consolidation.ScopeKey) { s.forget(string(key)) }

// forget drops what this store holds in memory of a key.
func (s *Store) forget(key string) {
	s.mu.Lock()
	delete(s.lex, key)
	s.mu.Unlock()
}

// factKeysOf finds the keys (scopes) of the bank that hold facts of ids,
// of the scope only when it is not nil, locking those rows on PostgreSQL.
func (s *Store) factKeysOf(ctx context.Context, tx *sql.Tx, bank consolidation.BankID, only *consolidation.ScopeKey, ids []string) (map[string][]string, error) {
	out := map[string][]string{}
	for start := 0; start < len(ids); start += 500 {
		chunk := ids[start:min(start+500, len(ids))]
		args, where, from := bankArgs(bank), inBank, 4
		if only != nil {
			args, where, from = []any{string(*only)}, "bank = $1", 2
		}
		for _, id := range chunk {
			args = append(args, id)
		}
		query, args := s.anyOf("SELECT bank, id FROM promptops_facts WHERE "+where+" AND id @IN", from, args)
		if s.dialect == postgres {
			query += " FOR UPDATE"
		}
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var key, id string
			if err := rows.Scan(&key, &id); err != nil {
				rows.Close()
				return nil, err
			}
			out[key] = append(out[key], id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// column runs a query of one text column whose list parameter (@IN) is
// ids, 500 at a time, for a key in $1, and returns the distinct values.
func (s *Store) column(ctx context.Context, tx *sql.Tx, query, key string, ids []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	err := s.inChunks(query, key, ids, func(q string, args []any) error {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				return err
			}
			if !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
		return rows.Err()
	})
	return out, err
}

// execIn runs a statement whose list parameter (@IN) is ids, 500 at a
// time, for a key in $1, and returns the rows it affected.
func (s *Store) execIn(ctx context.Context, tx *sql.Tx, query, key string, ids []string) (int64, error) {
	var n int64
	err := s.inChunks(query, key, ids, func(q string, args []any) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("erasing: %w", err)
		}
		k, err := res.RowsAffected()
		n += k
		return err
	})
	return n, err
}

// inChunks calls fn with query, whose list parameter (@IN) is ids, and
// its arguments, 500 ids at a time, for a key in $1.
func (s *Store) inChunks(query, key string, ids []string, fn func(q string, args []any) error) error {
	for start := 0; start < len(ids); start += 500 {
		chunk := ids[start:min(start+500, len(ids))]
		args := make([]any, 0, 1+len(chunk))
		args = append(args, key)
		for _, id := range chunk {
			args = append(args, id)
		}
		q, args := s.anyOf(query, 2, args)
		if err := fn(q, args); err != nil {
			return err
		}
	}
	return nil
}
