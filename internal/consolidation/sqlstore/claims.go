package sqlstore

import (
	"context"
	"sort"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
)

// claimLayout is fixed-width, so SQLite's text comparison orders claim
// times correctly.
const claimLayout = "2006-01-02T15:04:05.000000000Z"

// claimTime encodes a lease time for the dialect.
func (s *Store) claimTime(t time.Time) any {
	if s.dialect == sqlite {
		return t.UTC().Format(claimLayout)
	}
	return t.UTC()
}

// ClaimFacts claims up to limit pending facts no live claim holds, oldest
// first, in one statement. PostgreSQL skips rows another transaction is
// claiming (FOR UPDATE SKIP LOCKED); on SQLite a writing statement takes
// the database's write lock before it reads, which serialises claims.
func (s *Store) ClaimFacts(ctx context.Context, key consolidation.ScopeKey, run string, limit int, now, until time.Time) ([]consolidation.Fact, error) {
	var query string
	switch s.dialect {
	case postgres:
		// Each fact comes with whether it has a stored vector, so that
		// FactVectors need not ask for those that have none (most).
		query = `UPDATE promptops_facts f SET claimed_by = $3, claimed_until = $5
			FROM (SELECT bank, id FROM promptops_facts
			      WHERE bank = $1 AND status = 'pending' AND (claimed_until IS NULL OR claimed_until <= $4)
			      ORDER BY created_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) c
			WHERE f.bank = c.bank AND f.id = c.id
			RETURNING EXISTS (SELECT 1 FROM promptops_fact_vectors v WHERE v.bank = f.bank AND v.fact_id = f.id), ` + factColumnsOf("f")
	default:
		query = `UPDATE promptops_facts SET claimed_by = ?3, claimed_until = ?5
			WHERE bank = ?1 AND id IN (SELECT id FROM promptops_facts
			      WHERE bank = ?1 AND status = 'pending' AND (claimed_until IS NULL OR claimed_until <= ?4)
			      ORDER BY created_at, id LIMIT ?2)
			RETURNING ` + factColumns
	}
	// Atomic on its own: no transaction around it (on PostgreSQL a BEGIN
	// and a COMMIT would be two more round trips per batch).
	rows, err := s.db.QueryContext(ctx, query, string(key), limit, run, s.claimTime(now), s.claimTime(until))
	if err != nil {
		return nil, err
	}
	var out []consolidation.Fact
	var noVector []string
	for rows.Next() {
		var f consolidation.Fact
		var hasVector bool
		if s.dialect == postgres {
			f, err = scanFact(rows, &hasVector)
		} else {
			f, err = scanFact(rows)
		}
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, f)
		if s.dialect == postgres && !hasVector {
			noVector = append(noVector, f.ID)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	s.claimedWithoutVector(string(key), noVector)
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// ExtendClaims renews the lease of run's claimed pending facts of the
// scope.
func (s *Store) ExtendClaims(ctx context.Context, key consolidation.ScopeKey, run string, until time.Time) error {
	_, err := s.db.ExecContext(ctx, s.rebind("UPDATE promptops_facts SET claimed_until = $2 WHERE bank = $1 AND claimed_by = $3 AND status = 'pending'"), string(key), s.claimTime(until), run)
	return err
}

// ReleaseClaims gives up run's claims on facts still pending, in every
// scope of the bank.
func (s *Store) ReleaseClaims(ctx context.Context, bank consolidation.BankID, run string) error {
	_, err := s.db.ExecContext(ctx, s.rebind("UPDATE promptops_facts SET claimed_by = NULL, claimed_until = NULL WHERE "+inBank+" AND claimed_by = $4 AND status = 'pending'"), bankArgs(bank, run)...)
	return err
}

// PendingScopes lists the keys of the bank's scopes with pending facts
// that no live claim holds, the one with the oldest such fact first.
func (s *Store) PendingScopes(ctx context.Context, bank consolidation.BankID, now time.Time) ([]consolidation.ScopeKey, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind("SELECT bank, min(created_at) AS oldest FROM promptops_facts WHERE "+inBank+
		" AND status = 'pending' AND (claimed_until IS NULL OR claimed_until <= $4) GROUP BY bank ORDER BY oldest, bank"), bankArgs(bank, s.claimTime(now))...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []consolidation.ScopeKey
	for rows.Next() {
		var key string
		var oldest scanTime
		if err := rows.Scan(&key, &oldest); err != nil {
			return nil, err
		}
		out = append(out, consolidation.ScopeKey(key))
	}
	return out, rows.Err()
}

// CountFacts counts a bank's facts per status, all scopes together.
func (s *Store) CountFacts(ctx context.Context, bank consolidation.BankID) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind("SELECT status, count(*) FROM promptops_facts WHERE "+inBank+" GROUP BY status"), bankArgs(bank)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var status string
		var n int64
		if err := rows.Scan(&status, &n); err != nil {
			return nil, err
		}
		out[status] = n
	}
	return out, rows.Err()
}
