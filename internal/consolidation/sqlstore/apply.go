package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/promptops/promptops/internal/consolidation"
)

// Apply applies a batch's operations and marks its facts consolidated in one
// transaction. It first marks the facts, which must be pending and claimed
// by run (ErrClaimLost otherwise, and nothing is applied); that also locks
// them against a run whose claim would start meanwhile. Then deletes,
// updates and creates.
func (s *Store) Apply(ctx context.Context, key consolidation.ScopeKey, run string, ops consolidation.Ops, consolidated []string, now time.Time) ([]string, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()

	// The batch's facts marked consolidated and read back in one statement,
	// for the dates, entities and sources (provenance) of new sources.
	facts, err := s.consolidateFacts(ctx, tx, string(key), run, consolidated, now)
	if err != nil {
		return nil, err
	}
	// What the batch leaves of each observation it touched, for the
	// lexical index of Recall: recorded as written (a deleted one is
	// missing), not read back.
	lex := lexChanges{}
	for _, d := range ops.Deletes {
		if err := s.deleteObservation(ctx, tx, string(key), d.ObservationID, now); err != nil {
			return nil, err
		}
		lex.touch(d.ObservationID)
	}
	// Writes whose results nothing reads are gathered in last and run
	// after the rest, with the generation's bump: on PostgreSQL in one
	// statement. Merges (which keep an observation's text) write neither
	// history nor vectors, so none of theirs comes before an update's.
	var last []insert
	if err := s.updateObservations(ctx, tx, string(key), ops.Updates, ops.Space, facts, now, lex, &last); err != nil {
		return nil, err
	}
	for _, m := range ops.Merges {
		if err := s.mergeObservation(ctx, tx, string(key), m, facts, now, lex); err != nil {
			return nil, err
		}
	}
	created := s.createObservations(string(key), ops.Creates, ops.Space, facts, now, lex, &last)
	s.insertFactVectors(string(key), ops.Space, ops.FactVectors, facts, &last)
	gen, err := s.finishApply(ctx, tx, string(key), last)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.lexApplied(string(key), gen, lex)
	s.mu.Unlock()
	return created, nil
}

// lexChanges are the observations a batch touched: id -> what it now is,
// nil when deleted.
type lexChanges map[string]*consolidation.Observation

func (l lexChanges) touch(id string) { l[id] = nil }

func (l lexChanges) put(id, text string, entities []string) {
	l[id] = &consolidation.Observation{ID: id, Text: text, Entities: entities}
}

// insert is an INSERT of rows of equal width: head VALUES (..), (..) tail;
// or, with raw set, the statement raw writes, which gets the placeholder
// of each of its arguments from arg.
type insert struct {
	head, tail string
	rows       [][]any
	raw        func(arg func(v any) string) string
}

// exec runs in on its own.
func (s *Store) exec(ctx context.Context, tx *sql.Tx, in insert) error {
	if in.raw == nil {
		return s.insertRows(ctx, tx, in.head, in.tail, in.rows)
	}
	var args []any
	query := in.raw(func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	})
	_, err := tx.ExecContext(ctx, s.rebind(query), args...)
	return err
}

// finishApply runs the inserts and bumps the bank's generation, which it
// returns (-1 for an unknown bank). PostgreSQL runs them as one statement
// (each insert a data-modifying CTE: one round trip instead of one per
// insert) when their parameters fit one; otherwise, and on SQLite, they
// run one by one.
func (s *Store) finishApply(ctx context.Context, tx *sql.Tx, bank string, ins []insert) (int64, error) {
	if s.dialect == postgres {
		if query, args, ok := withInserts(ins, bumpGenerationPG, bank); ok {
			var g int64
			err := tx.QueryRowContext(ctx, query, args...).Scan(&g)
			if errors.Is(err, sql.ErrNoRows) {
				return -1, nil
			}
			return g, err
		}
	}
	for _, in := range ins {
		if err := s.exec(ctx, tx, in); err != nil {
			return 0, err
		}
	}
	return s.bumpGeneration(ctx, tx, bank)
}

// withInserts is a PostgreSQL statement that runs the inserts as CTEs of
// main, whose one parameter (%d in main) is arg; ok is false when there is
// no insert or their parameters do not fit one statement.
func withInserts(ins []insert, main string, arg any) (query string, args []any, ok bool) {
	var b strings.Builder
	k := 0
	for _, in := range ins {
		if in.raw != nil {
			if k == 0 {
				b.WriteString("WITH ")
			} else {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "i%d AS (%s)", k, in.raw(func(v any) string {
				args = append(args, v)
				return "$" + strconv.Itoa(len(args))
			}))
			k++
			continue
		}
		if len(in.rows) == 0 {
			continue
		}
		width := len(in.rows[0])
		if len(args)+len(in.rows)*width >= maxParams {
			return "", nil, false
		}
		if k == 0 {
			b.WriteString("WITH ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "i%d AS (%s", k, in.head)
		k++
		args = writeValues(&b, in.rows, width, args)
		b.WriteString(in.tail)
		b.WriteString(")")
	}
	if k == 0 || len(args) >= maxParams {
		return "", nil, false
	}
	args = append(args, arg)
	fmt.Fprintf(&b, " "+main, len(args))
	return b.String(), args, true
}

// insertFactVectors adds to out the insert of the vectors of the batch's
// consolidated facts (read in tx, so they exist).
func (s *Store) insertFactVectors(bank string, sp consolidation.Space, vecs map[string][]float32, facts map[string]consolidation.Fact, out *[]insert) {
	var rows [][]any
	var ids []string
	for id, v := range vecs {
		if _, ok := facts[id]; ok && len(v) > 0 {
			rows = append(rows, vecRow(bank, id, sp, v))
			ids = append(ids, id)
		}
	}
	s.storedVectors(bank, ids)
	sort.Slice(rows, func(i, j int) bool { return rows[i][1].(string) < rows[j][1].(string) })
	*out = append(*out, insert{head: vecInsert("promptops_fact_vectors", "fact_id"), tail: vecUpsert("fact_id"), rows: rows})
}

// consolidateFacts marks the facts consolidated, in tx, and returns them
// as they now are. Each must be pending and claimed by run; otherwise the
// error is ErrClaimLost (and the caller rolls back).
func (s *Store) consolidateFacts(ctx context.Context, tx *sql.Tx, bank, run string, ids []string, now time.Time) (map[string]consolidation.Fact, error) {
	out := make(map[string]consolidation.Fact, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	args := []any{bank, s.timeArg(&now), run}
	for _, id := range ids {
		args = append(args, id)
	}
	query, args := s.anyOf("UPDATE promptops_facts SET status = 'consolidated', consolidated_at = $2, failure_reason = NULL, claimed_until = NULL WHERE bank = $1 AND status = 'pending' AND claimed_by = $3 AND id @IN RETURNING "+factColumns, 4, args)
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		f, err := scanFact(rows)
		if err != nil {
			return nil, err
		}
		out[f.ID] = f
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) != len(ids) {
		var missing []string
		for _, id := range ids {
			if _, ok := out[id]; !ok {
				missing = append(missing, id)
			}
		}
		held, err := s.heldFacts(ctx, tx, bank, missing)
		if err != nil {
			return nil, err
		}
		var gone []string
		for _, id := range missing {
			if _, ok := held[id]; !ok {
				gone = append(gone, id)
			}
		}
		if len(gone) > 0 {
			return nil, &consolidation.GoneError{Facts: gone}
		}
		return nil, consolidation.ErrClaimLost
	}
	return out, nil
}

func (s *Store) history(ctx context.Context, tx *sql.Tx, bank, obsID, change, previous string, now time.Time) error {
	if _, err := tx.ExecContext(ctx, s.rebind("INSERT INTO promptops_observation_history (bank, observation_id, change, previous_text, changed_at) VALUES ($1, $2, $3, $4, $5)"), bank, obsID, change, previous, s.timeArg(&now)); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, s.rebind(fmt.Sprintf(`DELETE FROM promptops_observation_history WHERE bank = $1 AND observation_id = $2 AND seq NOT IN (
		SELECT seq FROM promptops_observation_history WHERE bank = $1 AND observation_id = $2 ORDER BY seq DESC LIMIT %d)`, HistoryLimit)), bank, obsID)
	return err
}

func (s *Store) deleteObservation(ctx context.Context, tx *sql.Tx, bank, id string, now time.Time) error {
	obs, err := s.observations(ctx, tx, bank, []string{id})
	if err != nil {
		return err
	}
	if len(obs) == 0 {
		return nil // already gone
	}
	if err := s.history(ctx, tx, bank, id, "delete", obs[0].Text, now); err != nil {
		return err
	}
	for _, q := range []string{
		"DELETE FROM promptops_observation_sources WHERE bank = $1 AND observation_id = $2",
		"DELETE FROM promptops_observation_vectors WHERE bank = $1 AND observation_id = $2",
		"DELETE FROM promptops_observations WHERE bank = $1 AND id = $2",
	} {
		if _, err := tx.ExecContext(ctx, s.rebind(q), bank, id); err != nil {
			return err
		}
	}
	return nil
}

// bounds widens [start, end] with the facts' dates.
func bounds(start, end *time.Time, facts []consolidation.Fact) (*time.Time, *time.Time) {
	for _, f := range facts {
		for _, t := range []*time.Time{f.OccurredStart, f.OccurredEnd} {
			if t == nil {
				continue
			}
			if start == nil || t.Before(*start) {
				v := *t
				start = &v
			}
			if end == nil || t.After(*end) {
				v := *t
				end = &v
			}
		}
	}
	return start, end
}

func entitySet(existing []string, facts []consolidation.Fact) []string {
	set := map[string]bool{}
	for _, e := range existing {
		set[e] = true
	}
	for _, f := range facts {
		for _, e := range f.Entities {
			if e = strings.ToLower(strings.TrimSpace(e)); e != "" {
				set[e] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for e := range set {
		out = append(out, e)
	}
	sort.Strings(out)
	return out
}

func pick(facts map[string]consolidation.Fact, ids []string) []consolidation.Fact {
	out := make([]consolidation.Fact, 0, len(ids))
	for _, id := range ids {
		if f, ok := facts[id]; ok {
			out = append(out, f)
		}
	}
	return out
}

// insertSources records facts as sources of an observation.
func (s *Store) insertSources(ctx context.Context, tx *sql.Tx, bank, obsID string, factIDs []string) error {
	for _, fid := range factIDs {
		if _, err := tx.ExecContext(ctx, s.rebind("INSERT INTO promptops_observation_sources (bank, observation_id, fact_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING"), bank, obsID, fid); err != nil {
			return err
		}
	}
	return nil
}

// addSources records facts as sources of an observation and returns how
// many sources it has now.
func (s *Store) addSources(ctx context.Context, tx *sql.Tx, bank, obsID string, factIDs []string) (int, error) {
	if err := s.insertSources(ctx, tx, bank, obsID, factIDs); err != nil {
		return 0, err
	}
	var n int
	err := tx.QueryRowContext(ctx, s.rebind("SELECT count(*) FROM promptops_observation_sources WHERE bank = $1 AND observation_id = $2"), bank, obsID).Scan(&n)
	return n, err
}

// mergeObservation adds sources to an observation and keeps its text: a
// duplicate the guard caught. An observation gone meanwhile fails the batch
// (the facts stay pending), as an update of it would.
func (s *Store) mergeObservation(ctx context.Context, tx *sql.Tx, bank string, m consolidation.Merge, facts map[string]consolidation.Fact, now time.Time, lex lexChanges) error {
	obs, err := s.observations(ctx, tx, bank, []string{m.ObservationID})
	if err != nil {
		return err
	}
	if len(obs) == 0 {
		return &consolidation.GoneError{Observations: []string{m.ObservationID}}
	}
	return s.updateObservation(ctx, tx, bank, consolidation.Update{ObservationID: m.ObservationID, Text: obs[0].Text, SourceFactIDs: m.SourceFactIDs}, consolidation.Space{}, facts, now, lex)
}

// updateObservations applies a batch's updates as updateObservation would
// one after the other, with one statement per kind of write for all of them
// (but the UPDATE of each row); updates that name an observation twice go
// one by one.
func (s *Store) updateObservations(ctx context.Context, tx *sql.Tx, bank string, updates []consolidation.Update, sp consolidation.Space, facts map[string]consolidation.Fact, now time.Time, lex lexChanges, last *[]insert) error {
	ids := make([]string, 0, len(updates))
	seen := map[string]bool{}
	for _, u := range updates {
		if seen[u.ObservationID] {
			for _, u := range updates {
				if err := s.updateObservation(ctx, tx, bank, u, sp, facts, now, lex); err != nil {
					return err
				}
			}
			return nil
		}
		seen[u.ObservationID] = true
		ids = append(ids, u.ObservationID)
	}
	if len(updates) == 0 {
		return nil
	}
	obs, err := s.observations(ctx, tx, bank, ids)
	if err != nil {
		return err
	}
	byID := make(map[string]consolidation.Observation, len(obs))
	for _, o := range obs {
		byID[o.ID] = o
	}
	if len(byID) != len(ids) {
		gone := &consolidation.GoneError{}
		for _, id := range ids {
			if _, ok := byID[id]; !ok {
				gone.Observations = append(gone.Observations, id)
			}
		}
		return gone
	}
	var histRows, vecRows, srcRows [][]any
	var unvector []string
	srcSeen := map[[2]string]bool{}
	for _, u := range updates {
		o := byID[u.ObservationID]
		if o.Text != u.Text {
			histRows = append(histRows, []any{bank, o.ID, "update", o.Text, s.timeArg(&now)})
		}
		switch {
		case u.Vector != nil:
			vecRows = append(vecRows, vecRow(bank, o.ID, sp, u.Vector))
		case o.Text != u.Text:
			// The old vector no longer says what the text says.
			unvector = append(unvector, o.ID)
		}
		for _, fid := range u.SourceFactIDs {
			if k := [2]string{o.ID, fid}; !srcSeen[k] {
				srcSeen[k] = true
				srcRows = append(srcRows, []any{bank, o.ID, fid})
			}
		}
	}
	if s.dialect == postgres {
		return s.updateObservationsPG(ctx, tx, bank, updates, byID, facts, now, lex, histRows, vecRows, unvector, srcRows, last)
	}
	if len(histRows) > 0 {
		if err := s.insertRows(ctx, tx, "INSERT INTO promptops_observation_history (bank, observation_id, change, previous_text, changed_at) VALUES ", "", histRows); err != nil {
			return err
		}
		args := []any{bank}
		for _, r := range histRows {
			args = append(args, r[1])
		}
		if _, err := tx.ExecContext(ctx, s.rebind(fmt.Sprintf(`DELETE FROM promptops_observation_history WHERE bank = $1 AND observation_id IN (%s) AND seq NOT IN (
			SELECT h.seq FROM promptops_observation_history h WHERE h.bank = $1 AND h.observation_id = promptops_observation_history.observation_id ORDER BY h.seq DESC LIMIT %d)`, placeholders(2, len(histRows)), HistoryLimit)), args...); err != nil {
			return err
		}
	}
	if err := s.insertRows(ctx, tx, obsVecInsert, obsVecUpsert, vecRows); err != nil {
		return err
	}
	if len(unvector) > 0 {
		args := []any{bank}
		for _, id := range unvector {
			args = append(args, id)
		}
		if _, err := tx.ExecContext(ctx, s.rebind("DELETE FROM promptops_observation_vectors WHERE bank = $1 AND observation_id IN ("+placeholders(2, len(unvector))+")"), args...); err != nil {
			return err
		}
	}
	if err := s.insertRows(ctx, tx, "INSERT INTO promptops_observation_sources (bank, observation_id, fact_id) VALUES ", " ON CONFLICT DO NOTHING", srcRows); err != nil {
		return err
	}
	counts := make(map[string]int, len(ids))
	args := []any{bank}
	for _, id := range ids {
		args = append(args, id)
	}
	query, args := s.anyOf("SELECT observation_id, count(*) FROM promptops_observation_sources WHERE bank = $1 AND observation_id @IN GROUP BY observation_id", 2, args)
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return err
		}
		counts[id] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, u := range updates {
		o := byID[u.ObservationID]
		start, end, ents, prov := updatedFields(o, u, facts, lex)
		if _, err := tx.ExecContext(ctx, s.rebind(`UPDATE promptops_observations SET text = $3, text_norm = $4, proof_count = $5, occurred_start = $6, occurred_end = $7, entities_norm = $8, updated_at = $9, provenance = $10
		WHERE bank = $1 AND id = $2`), bank, o.ID, u.Text, consolidation.Normalize(u.Text), counts[o.ID], s.timeArg(start), s.timeArg(end), toJSON(ents), s.timeArg(&now), toJSON(prov)); err != nil {
			return err
		}
	}
	return nil
}

// updatedFields are the dates, entities and provenance o has after u (its
// own and its new sources'), recorded in lex with u's text.
func updatedFields(o consolidation.Observation, u consolidation.Update, facts map[string]consolidation.Fact, lex lexChanges) (start, end *time.Time, ents, prov []string) {
	src := pick(facts, u.SourceFactIDs)
	start, end = bounds(o.OccurredStart, o.OccurredEnd, src)
	ents = entitySet(o.Entities, src)
	lex.put(o.ID, u.Text, ents)
	return start, end, ents, provenance(o.Provenance, src)
}

// provenance is the provenance of an observation of provenance old that
// now also cites the facts (consolidation.JoinProvenance). An old
// provenance is never empty: an observation with none recorded is of
// unspecified sources, as consolidation.Trust reads it.
func provenance(old []string, facts []consolidation.Fact) []string {
	if len(old) == 0 && len(facts) == 0 {
		return []string{consolidation.SourceUnspecified}
	}
	added := make([]string, len(facts))
	for i, f := range facts {
		added[i] = consolidation.SourceOf(f)
	}
	return consolidation.JoinProvenance(old, added...)
}

// updateObservationsPG is updateObservations' writes on PostgreSQL: the
// sources, the proof counts and the rows in one statement; the history
// (trimmed to HistoryLimit) and the vectors into last. A text that changed
// without a new vector loses its old one at once.
func (s *Store) updateObservationsPG(ctx context.Context, tx *sql.Tx, bank string, updates []consolidation.Update, byID map[string]consolidation.Observation, facts map[string]consolidation.Fact, now time.Time, lex lexChanges, histRows, vecRows [][]any, unvector []string, srcRows [][]any, last *[]insert) error {
	if len(histRows) > 0 {
		// The newest HistoryLimit-1 rows kept, then one added per
		// observation (an observation is updated once here): the
		// newest HistoryLimit, as inserting then trimming would keep.
		ids := make([]any, len(histRows))
		for i, r := range histRows {
			ids[i] = r[1]
		}
		*last = append(*last, insert{raw: func(arg func(any) string) string {
			b := arg(bank)
			in := make([]string, len(ids))
			for i, id := range ids {
				in[i] = arg(id)
			}
			return fmt.Sprintf(`DELETE FROM promptops_observation_history WHERE bank = %s AND observation_id IN (%s) AND seq NOT IN (
			SELECT h.seq FROM promptops_observation_history h WHERE h.bank = %s AND h.observation_id = promptops_observation_history.observation_id ORDER BY h.seq DESC LIMIT %d)`,
				b, strings.Join(in, ", "), b, HistoryLimit-1)
		}}, insert{head: "INSERT INTO promptops_observation_history (bank, observation_id, change, previous_text, changed_at) VALUES ", rows: histRows})
	}
	*last = append(*last, insert{head: obsVecInsert, tail: obsVecUpsert, rows: vecRows})
	if len(unvector) > 0 {
		args := []any{bank}
		for _, id := range unvector {
			args = append(args, id)
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM promptops_observation_vectors WHERE bank = $1 AND observation_id IN ("+placeholders(2, len(unvector))+")", args...); err != nil {
			return err
		}
	}
	// The proof count is the sources the statement's snapshot holds
	// (without those it inserts) plus those it inserted (RETURNING
	// leaves out the conflicts: sources held already).
	args := []any{bank}
	var b strings.Builder
	b.WriteString("WITH ")
	if len(srcRows) > 0 {
		b.WriteString("ins AS (INSERT INTO promptops_observation_sources (bank, observation_id, fact_id) VALUES ")
		for i, r := range srcRows {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "($1, $%d, $%d)", len(args)+1, len(args)+2)
			args = append(args, r[1], r[2])
		}
		b.WriteString(" ON CONFLICT DO NOTHING RETURNING observation_id), ")
	} else {
		b.WriteString("ins AS (SELECT NULL::text AS observation_id WHERE false), ")
	}
	b.WriteString("added AS (SELECT observation_id, count(*) AS n FROM ins GROUP BY observation_id)\n")
	var vals []string
	for _, u := range updates {
		o := byID[u.ObservationID]
		start, end, ents, prov := updatedFields(o, u, facts, lex)
		n := len(args)
		vals = append(vals, fmt.Sprintf("($%d::text, $%d::text, $%d::text, $%d::timestamptz, $%d::timestamptz, $%d::text, $%d::timestamptz, $%d::text)", n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8))
		args = append(args, o.ID, u.Text, consolidation.Normalize(u.Text), s.timeArg(start), s.timeArg(end), toJSON(ents), s.timeArg(&now), toJSON(prov))
	}
	b.WriteString(`UPDATE promptops_observations o SET text = v.text, text_norm = v.text_norm,
		proof_count = (SELECT count(*) FROM promptops_observation_sources c WHERE c.bank = o.bank AND c.observation_id = o.id) + COALESCE((SELECT a.n FROM added a WHERE a.observation_id = o.id), 0),
		occurred_start = v.occurred_start, occurred_end = v.occurred_end, entities_norm = v.entities_norm, updated_at = v.updated_at, provenance = v.provenance
		FROM (VALUES `)
	b.WriteString(strings.Join(vals, ", "))
	b.WriteString(`) AS v(id, text, text_norm, occurred_start, occurred_end, entities_norm, updated_at, provenance)
		WHERE o.bank = $1 AND o.id = v.id`)
	if len(args) >= maxParams {
		return fmt.Errorf("a batch of %d updates is too large for one statement", len(updates))
	}
	_, err := tx.ExecContext(ctx, b.String(), args...)
	return err
}

func (s *Store) updateObservation(ctx context.Context, tx *sql.Tx, bank string, u consolidation.Update, sp consolidation.Space, facts map[string]consolidation.Fact, now time.Time, lex lexChanges) error {
	obs, err := s.observations(ctx, tx, bank, []string{u.ObservationID})
	if err != nil {
		return err
	}
	if len(obs) == 0 {
		return &consolidation.GoneError{Observations: []string{u.ObservationID}}
	}
	o := obs[0]
	if o.Text != u.Text {
		if err := s.history(ctx, tx, bank, o.ID, "update", o.Text, now); err != nil {
			return err
		}
	}
	switch {
	case u.Vector != nil:
		if err := s.upsertVector(ctx, tx, "promptops_observation_vectors", "observation_id", bank, o.ID, sp, u.Vector); err != nil {
			return err
		}
	case o.Text != u.Text:
		// The old vector no longer says what the text says.
		if err := s.deleteVector(ctx, tx, bank, o.ID); err != nil {
			return err
		}
	}
	// Sources = old ∪ new; proof_count = number of sources.
	n, err := s.addSources(ctx, tx, bank, o.ID, u.SourceFactIDs)
	if err != nil {
		return err
	}
	start, end, ents, prov := updatedFields(o, u, facts, lex)
	_, err = tx.ExecContext(ctx, s.rebind(`UPDATE promptops_observations SET text = $3, text_norm = $4, proof_count = $5, occurred_start = $6, occurred_end = $7, entities_norm = $8, updated_at = $9, provenance = $10
		WHERE bank = $1 AND id = $2`), bank, o.ID, u.Text, consolidation.Normalize(u.Text), n, s.timeArg(start), s.timeArg(end), toJSON(ents), s.timeArg(&now), toJSON(prov))
	return err
}

// createObservations inserts a batch's new observations, their sources and
// their vectors: one multi-row statement each per chunk of rows.
func (s *Store) createObservations(bank string, creates []consolidation.Create, sp consolidation.Space, facts map[string]consolidation.Fact, now time.Time, lex lexChanges, out *[]insert) []string {
	if len(creates) == 0 {
		return nil
	}
	ids := make([]string, len(creates))
	var obsRows, srcRows, vecRows [][]any
	seenSrc := map[[2]string]bool{}
	for i, c := range creates {
		id := uuid.NewString()
		ids[i] = id
		src := pick(facts, c.SourceFactIDs)
		start, end := bounds(nil, nil, src)
		ents := entitySet(nil, src)
		lex.put(id, c.Text, ents)
		obsRows = append(obsRows, []any{bank, id, c.Text, consolidation.Normalize(c.Text), len(c.SourceFactIDs), s.timeArg(start), s.timeArg(end), toJSON(ents), s.timeArg(&now), s.timeArg(&now), toJSON(provenance(nil, src))})
		for _, fid := range c.SourceFactIDs {
			if k := [2]string{id, fid}; !seenSrc[k] {
				seenSrc[k] = true
				srcRows = append(srcRows, []any{bank, id, fid})
			}
		}
		if c.Vector != nil {
			vecRows = append(vecRows, vecRow(bank, id, sp, c.Vector))
		}
	}
	*out = append(*out,
		insert{head: "INSERT INTO promptops_observations (bank, id, text, text_norm, proof_count, occurred_start, occurred_end, entities_norm, created_at, updated_at, provenance) VALUES ", rows: obsRows},
		insert{head: "INSERT INTO promptops_observation_sources (bank, observation_id, fact_id) VALUES ", tail: " ON CONFLICT DO NOTHING", rows: srcRows},
		insert{head: obsVecInsert, tail: obsVecUpsert, rows: vecRows})
	return ids
}

// writeValues writes rows of width values as (..), (..), numbering their
// placeholders after the args already taken, and returns args with the
// rows' values added.
func writeValues(b *strings.Builder, rows [][]any, width int, args []any) []any {
	for i, r := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(")
		b.WriteString(placeholders(len(args)+1, width))
		b.WriteString(")")
		args = append(args, r...)
	}
	return args
}

// maxParams bounds the parameters of one statement: well under either
// dialect's limit (PostgreSQL 65,535; SQLite 32,766).
const maxParams = 30000

// insertRows runs head VALUES (..), (..) tail for rows of equal width, in
// chunks that stay well under either dialect's limit on parameters.
func (s *Store) insertRows(ctx context.Context, tx *sql.Tx, head, tail string, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	width := len(rows[0])
	per := max(1, maxParams/width)
	for start := 0; start < len(rows); start += per {
		chunk := rows[start:min(start+per, len(rows))]
		var b strings.Builder
		b.WriteString(head)
		args := writeValues(&b, chunk, width, make([]any, 0, len(chunk)*width))
		b.WriteString(tail)
		if _, err := tx.ExecContext(ctx, s.rebind(b.String()), args...); err != nil {
			return err
		}
	}
	return nil
}

// MarkFailed marks run's claimed pending facts failed with a reason; they
// are skipped until RetryFacts.
func (s *Store) MarkFailed(ctx context.Context, key consolidation.ScopeKey, run string, ids []string, reason string, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	args := []any{string(key), reason, run}
	for _, id := range ids {
		args = append(args, id)
	}
	_, err := s.db.ExecContext(ctx, s.rebind("UPDATE promptops_facts SET status = 'failed', failure_reason = $2, claimed_until = NULL WHERE bank = $1 AND status = 'pending' AND claimed_by = $3 AND id IN ("+placeholders(4, len(ids))+")"), args...)
	return err
}

// ListObservations lists the observations of a scope with their sources,
// oldest first.
func (s *Store) ListObservations(ctx context.Context, key consolidation.ScopeKey) ([]consolidation.Observation, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind("SELECT id FROM promptops_observations WHERE bank = $1 ORDER BY created_at, id"), string(key))
	if err != nil {
		return nil, err
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []consolidation.Observation
	for start := 0; start < len(ids); start += 500 {
		chunk := ids[start:min(start+500, len(ids))]
		obs, err := s.observations(ctx, s.db, string(key), chunk)
		if err != nil {
			return nil, err
		}
		for i := range obs {
			obs[i].Scope = key.Name()
		}
		srcIDs, _, err := s.sourcesOf(ctx, s.db, string(key), chunk, 0)
		if err != nil {
			return nil, err
		}
		for _, o := range obs {
			o.SourceFactIDs = srcIDs[o.ID]
			out = append(out, o)
		}
	}
	return out, nil
}

// History returns an observation's previous texts, newest first.
func (s *Store) History(ctx context.Context, key consolidation.ScopeKey, obsID string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind("SELECT previous_text FROM promptops_observation_history WHERE bank = $1 AND observation_id = $2 ORDER BY seq DESC"), string(key), obsID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}
