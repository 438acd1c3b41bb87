package sqlstore

import (
	"context"
	"sort"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
)

// What the bank's HTTP API (promptops serve --bank) reads and writes.

var _ consolidation.QueryStore = (*Store)(nil)

// BankGeneration is a key's generation, moved by every batch applied to
// it, and its bank's erasures; Applied is -1 for a key the store does not
// know.
func (s *Store) BankGeneration(ctx context.Context, key string) (consolidation.Generation, error) {
	return s.generation(ctx, key)
}

// ScanRecallable streams the bank's observations with their source fact
// ids, and the distinct tags of those facts: two queries for the bank.
func (s *Store) ScanRecallable(ctx context.Context, bank string, fn func(o consolidation.Observation, tags []string)) error {
	type src struct {
		ids  []string
		tags []string
	}
	srcs := map[string]*src{}
	rows, err := s.scan.QueryContext(ctx, s.q(`SELECT s.observation_id, s.fact_id, f.tags FROM promptops_observation_sources s
		JOIN promptops_facts f ON f.bank = s.bank AND f.id = s.fact_id WHERE s.bank = $1 ORDER BY s.observation_id, f.created_at DESC, f.id`), bank)
	if err != nil {
		return err
	}
	for rows.Next() {
		var obs, fact, tags string
		if err := rows.Scan(&obs, &fact, &tags); err != nil {
			rows.Close()
			return err
		}
		sc := srcs[obs]
		if sc == nil {
			sc = &src{}
			srcs[obs] = sc
		}
		sc.ids = append(sc.ids, fact)
		if tags != "[]" && tags != "" {
			for _, t := range fromJSON(tags) {
				if !contains(sc.tags, t) {
					sc.tags = append(sc.tags, t)
				}
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = s.scan.QueryContext(ctx, s.q("SELECT "+obsColumns+" FROM promptops_observations WHERE bank = $1"), bank)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var o consolidation.Observation
		var ents string
		var os, oe, ca, ua scanTime
		if err := rows.Scan(&o.ID, &o.Text, &o.ProofCount, &os, &oe, &ents, &ca, &ua); err != nil {
			return err
		}
		o.OccurredStart, o.OccurredEnd, o.Entities = os.t, oe.t, entityList(ents)
		if ca.t != nil {
			o.CreatedAt = *ca.t
		}
		if ua.t != nil {
			o.UpdatedAt = *ua.t
		}
		_, o.Scope = consolidation.SplitBankKey(bank)
		var tags []string
		if sc := srcs[o.ID]; sc != nil {
			o.SourceFactIDs, tags = sc.ids, sc.tags
		}
		fn(o, tags)
	}
	return rows.Err()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// PendingFacts returns up to limit of the bank's pending facts created at
// or after since, oldest first.
func (s *Store) PendingFacts(ctx context.Context, bank string, since time.Time, limit int) ([]consolidation.Fact, error) {
	return s.queryFacts(ctx, "SELECT "+factColumns+" FROM promptops_facts WHERE bank = $1 AND status = 'pending' AND created_at >= $2 ORDER BY created_at, id LIMIT $3", bank, s.t(&since), limit)
}

// RetainFacts stores facts, each with its id, in one transaction, each in
// its scope: a fact whose id its scope holds with the same text is left as
// it is and counted in unchanged; one with other text fails the whole call
// with *consolidation.FactConflictError and stores nothing. created_at
// keeps the order given.
func (s *Store) RetainFacts(ctx context.Context, bank string, facts []consolidation.Fact) (stored, unchanged int, err error) {
	if len(facts) == 0 {
		return 0, 0, nil
	}
	if err := s.ensureKeys(ctx, bank, facts); err != nil {
		return 0, 0, err
	}
	keys := factKeys(bank, facts)
	byKey := map[string][]string{}
	for i, f := range facts {
		byKey[keys[i]] = append(byKey[keys[i]], f.ID)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = tx.Rollback() }()
	held := func() (map[[2]string]string, error) {
		out := map[[2]string]string{}
		for key, ids := range byKey {
			texts, err := s.factTexts(ctx, tx, key, ids)
			if err != nil {
				return nil, err
			}
			for id, text := range texts {
				out[[2]string{key, id}] = text
			}
		}
		return out, nil
	}
	before, err := held()
	if err != nil {
		return 0, 0, err
	}
	base := time.Now().UTC()
	var rows [][]any
	for i, f := range facts {
		k := [2]string{keys[i], f.ID}
		if text, ok := before[k]; ok {
			if text != f.Text {
				return 0, 0, &consolidation.FactConflictError{ID: f.ID}
			}
			unchanged++
			continue
		}
		created := base.Add(time.Duration(i) * time.Microsecond)
		rows = append(rows, []any{keys[i], f.ID, f.Text, toJSON(f.Entities), toJSON(f.Tags), s.t(f.OccurredStart), s.t(f.OccurredEnd), s.t(f.MentionedAt), s.t(&created)})
		before[k] = f.Text
	}
	// ON CONFLICT DO NOTHING: a concurrent request may store one of these
	// ids first; its text is compared below.
	if err := s.insertRows(ctx, tx, `INSERT INTO promptops_facts (bank, id, text, entities, tags, occurred_start, occurred_end, mentioned_at, created_at) VALUES `, " ON CONFLICT DO NOTHING", rows); err != nil {
		return 0, 0, err
	}
	if len(rows) > 0 {
		now, err := held()
		if err != nil {
			return 0, 0, err
		}
		for i, f := range facts {
			if now[[2]string{keys[i], f.ID}] != f.Text {
				return 0, 0, &consolidation.FactConflictError{ID: f.ID}
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, err
	}
	return len(rows), unchanged, nil
}

// factTexts returns the texts of the facts of ids that the bank holds.
func (s *Store) factTexts(ctx context.Context, db querier, bank string, ids []string) (map[string]string, error) {
	out := map[string]string{}
	sorted := append([]string(nil), ids...)
	sort.Strings(sorted)
	for start := 0; start < len(sorted); start += 500 {
		chunk := sorted[start:min(start+500, len(sorted))]
		args := []any{bank}
		for _, id := range chunk {
			args = append(args, id)
		}
		query, args := s.anyOf("SELECT id, text FROM promptops_facts WHERE bank = $1 AND id @IN", 2, args)
		rows, err := db.QueryContext(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id, text string
			if err := rows.Scan(&id, &text); err != nil {
				rows.Close()
				return nil, err
			}
			out[id] = text
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
