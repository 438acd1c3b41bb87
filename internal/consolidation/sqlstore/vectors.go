package sqlstore

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"unsafe"

	"github.com/promptops/promptops/internal/consolidation"
)

// Vectors are written as Quantize makes them (qvec: the scale as
// little-endian float32, then one int8 a dimension), the form the run
// compares in: a quarter of the bytes of float32, so a batch writes and a
// run loads a quarter as much, and cosines stay within 1e-3 of the float
// vectors' (TestStoredVectorsKeepTheirCosines). vec, little-endian
// float32, is what rows written before migration 6 (PostgreSQL) or 7
// (SQLite) hold; they are still read, and a row written again loses it.

// vecRow is the row (bank, id, model, dims, qvec) of v.
func vecRow(bank, id string, sp consolidation.Space, v []float32) []any {
	return []any{bank, id, sp.Model, len(v), encodeQuantized(v)}
}

// vecInsert and vecUpsert are the multi-row upsert of vecRow rows into
// table, keyed by (bank, key).
func vecInsert(table, key string) string {
	return fmt.Sprintf("INSERT INTO %s (bank, %s, model, dims, qvec) VALUES ", table, key)
}

func vecUpsert(key string) string {
	return fmt.Sprintf(" ON CONFLICT (bank, %s) DO UPDATE SET model = excluded.model, dims = excluded.dims, qvec = excluded.qvec, vec = NULL", key)
}

// vectorParent is the table of what a vector table's rows belong to.
func vectorParent(table string) string {
	if table == "promptops_observation_vectors" {
		return "promptops_observations"
	}
	return "promptops_facts"
}

var (
	obsVecInsert = vecInsert("promptops_observation_vectors", "observation_id")
	obsVecUpsert = vecUpsert("observation_id")
)

// decodeVec decodes a float32 vec into dst (reused when large enough).
func decodeVec(b []byte, dst []float32) []float32 {
	n := len(b) / 4
	if cap(dst) < n {
		dst = make([]float32, n)
	}
	dst = dst[:n]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return dst
}

// decodeStored decodes a row's qvec (unit length, as quantized) or, for a
// row without one, its vec, into dst; ok is false when neither holds a
// vector of dims dimensions.
func decodeStored(qvec, vec []byte, dims int, dst []float32) ([]float32, bool) {
	if cap(dst) < dims {
		dst = make([]float32, dims)
	}
	dst = dst[:dims]
	switch {
	case len(qvec) == 4+dims:
		scale := math.Float32frombits(binary.LittleEndian.Uint32(qvec))
		for i, b := range qvec[4:] {
			dst[i] = float32(int8(b)) * scale
		}
		return dst, true
	case qvec == nil && len(vec) == 4*dims:
		return decodeVec(vec, dst), true
	}
	return dst, false
}

// noVector remembers facts this store claimed that had no stored vector
// then, so that FactVectors, asked for them next, need not query: one
// round trip less per batch. A vector stored since (by this run, or by
// another after this run's lease ran out) is missed and the fact is
// embedded again: tokens, not facts.
type noVector struct {
	mu  sync.Mutex
	ids map[[2]string]struct{} // bank, fact id
}

// maxNoVector bounds what noVector holds (facts claimed and never asked
// for, as in runs without embeddings); past it, it starts again.
const maxNoVector = 1 << 16

func (s *Store) claimedWithoutVector(bank string, ids []string) {
	if len(ids) == 0 {
		return
	}
	n := &s.noVec
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ids == nil || len(n.ids)+len(ids) > maxNoVector {
		n.ids = map[[2]string]struct{}{}
	}
	for _, id := range ids {
		n.ids[[2]string{bank, id}] = struct{}{}
	}
}

// storedVectors forgets what noVector held of facts whose vectors this
// store writes.
func (s *Store) storedVectors(bank string, ids []string) {
	n := &s.noVec
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, id := range ids {
		delete(n.ids, [2]string{bank, id})
	}
}

// withVectorMaybe returns the ids not known to have no vector, and
// forgets those known.
func (s *Store) withVectorMaybe(bank string, ids []string) []string {
	n := &s.noVec
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, id := range ids {
		k := [2]string{bank, id}
		if _, ok := n.ids[k]; ok {
			delete(n.ids, k)
			continue
		}
		out = append(out, id)
	}
	return out
}

// FactVectors returns the vectors in sp of the given facts that have one.
func (s *Store) FactVectors(ctx context.Context, key consolidation.ScopeKey, sp consolidation.Space, ids []string) (map[string][]float32, error) {
	out := map[string][]float32{}
	if ids = s.withVectorMaybe(string(key), ids); len(ids) == 0 {
		return out, nil
	}
	args := []any{string(key), sp.Model, sp.Dims}
	for _, id := range ids {
		args = append(args, id)
	}
	query, args := s.anyOf("SELECT fact_id, qvec, CASE WHEN qvec IS NULL THEN vec END FROM promptops_fact_vectors WHERE bank = $1 AND model = $2 AND dims = $3 AND fact_id @IN", 4, args)
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var q, v []byte
		if err := rows.Scan(&id, &q, &v); err != nil {
			return nil, err
		}
		// A vector that does not decode is left out: the fact is
		// embedded again.
		if vec, ok := decodeStored(q, v, sp.Dims, nil); ok {
			out[id] = vec
		}
	}
	return out, rows.Err()
}

// PutFactVectors stores facts' vectors in sp, replacing older ones.
func (s *Store) PutFactVectors(ctx context.Context, key consolidation.ScopeKey, sp consolidation.Space, vecs map[string][]float32) error {
	s.storedVectors(string(key), slices.Collect(maps.Keys(vecs)))
	return s.putVectors(ctx, "promptops_fact_vectors", "fact_id", string(key), sp, vecs)
}

// PutObservationVectors stores observations' vectors in sp; an observation
// deleted meanwhile gets none.
func (s *Store) PutObservationVectors(ctx context.Context, key consolidation.ScopeKey, sp consolidation.Space, vecs map[string][]float32) error {
	return s.putVectors(ctx, "promptops_observation_vectors", "observation_id", string(key), sp, vecs)
}

func (s *Store) putVectors(ctx context.Context, table, key, bank string, sp consolidation.Space, vecs map[string][]float32) error {
	if len(vecs) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	// Only rows whose fact or observation exists (one deleted meanwhile
	// gets none): one look for all, then one multi-row upsert.
	parent := vectorParent(table)
	ids := make([]string, 0, len(vecs))
	for id := range vecs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	exists := map[string]bool{}
	for start := 0; start < len(ids); start += 500 {
		chunk := ids[start:min(start+500, len(ids))]
		args := []any{bank}
		for _, id := range chunk {
			args = append(args, id)
		}
		query, args := s.anyOf("SELECT id FROM "+parent+" WHERE bank = $1 AND id @IN", 2, args)
		if s.dialect == postgres {
			// Locked until the vectors are written: an erasure that
			// deletes one of them meanwhile waits, and then takes its
			// vector too.
			query += " FOR SHARE"
		}
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			exists[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	var rows [][]any
	for _, id := range ids {
		if exists[id] {
			rows = append(rows, vecRow(bank, id, sp, vecs[id]))
		}
	}
	if err := s.insertRows(ctx, tx, vecInsert(table, key), vecUpsert(key), rows); err != nil {
		return err
	}
	return tx.Commit()
}

// upsertVector writes one vecRow as putVectors writes many, only while
// its fact or observation exists (one deleted meanwhile gets none).
func (s *Store) upsertVector(ctx context.Context, tx *sql.Tx, table, key, bank, id string, sp consolidation.Space, v []float32) error {
	_, err := tx.ExecContext(ctx, s.rebind(fmt.Sprintf("INSERT INTO %s (bank, %s, model, dims, qvec) SELECT $1, $2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM %s WHERE bank = $1 AND id = $2)", table, key, vectorParent(table))+vecUpsert(key)), vecRow(bank, id, sp, v)...)
	return err
}

// encodeQuantized is qvec: Quantize's scale as little-endian float32, then
// its int8s.
func encodeQuantized(v []float32) []byte {
	q, scale := consolidation.Quantize(v)
	b := make([]byte, 4+len(q))
	binary.LittleEndian.PutUint32(b, math.Float32bits(scale))
	for i, x := range q {
		b[4+i] = byte(x)
	}
	return b
}

// ScanObservationQuantized streams the bank's observation vectors in sp:
// qvec where a row has it (vec is then not read), vec otherwise.
func (s *Store) ScanObservationQuantized(ctx context.Context, key consolidation.ScopeKey, sp consolidation.Space, qfn func(id string, q []int8, scale float32), vfn func(id string, vec []float32)) error {
	rows, err := s.scan.QueryContext(ctx, s.rebind(`SELECT observation_id, qvec, CASE WHEN qvec IS NULL THEN vec END FROM promptops_observation_vectors WHERE bank = $1 AND model = $2 AND dims = $3`), string(key), sp.Model, sp.Dims)
	if err != nil {
		return err
	}
	defer rows.Close()
	var buf []float32
	var rawQ, rawV sql.RawBytes
	for rows.Next() {
		var id string
		if err := rows.Scan(&id, &rawQ, &rawV); err != nil {
			return err
		}
		if len(rawQ) == 4+sp.Dims {
			// The int8s are the bytes as they are: read in place, not
			// copied once more on the way to the index.
			q := unsafe.Slice((*int8)(unsafe.Pointer(unsafe.SliceData(rawQ[4:]))), sp.Dims)
			qfn(id, q, math.Float32frombits(binary.LittleEndian.Uint32(rawQ)))
			continue
		}
		if rawQ == nil && rawV != nil {
			buf = decodeVec(rawV, buf)
			vfn(id, buf)
		}
	}
	return rows.Err()
}

func (s *Store) deleteVector(ctx context.Context, tx *sql.Tx, bank, id string) error {
	_, err := tx.ExecContext(ctx, s.rebind("DELETE FROM promptops_observation_vectors WHERE bank = $1 AND observation_id = $2"), bank, id)
	return err
}

// ObservationsWithoutVector returns up to limit observations, by id after
// after, that have no vector in sp.
func (s *Store) ObservationsWithoutVector(ctx context.Context, key consolidation.ScopeKey, sp consolidation.Space, after string, limit int) ([]consolidation.Observation, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT o.id, o.text FROM promptops_observations o
		LEFT JOIN promptops_observation_vectors v ON v.bank = o.bank AND v.observation_id = o.id AND v.model = $2 AND v.dims = $3
		WHERE o.bank = $1 AND v.observation_id IS NULL AND o.id > $4 ORDER BY o.id LIMIT $5`), string(key), sp.Model, sp.Dims, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []consolidation.Observation
	for rows.Next() {
		var o consolidation.Observation
		if err := rows.Scan(&o.ID, &o.Text); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// Candidates loads observations by id, in the order given, without their
// sources (CandidateSources); ids that are gone are left out.
func (s *Store) Candidates(ctx context.Context, key consolidation.ScopeKey, ids []string) ([]consolidation.Candidate, error) {
	obs, err := s.observations(ctx, s.db, string(key), ids)
	if err != nil {
		return nil, err
	}
	out := make([]consolidation.Candidate, len(obs))
	for i, o := range obs {
		out[i] = consolidation.Candidate{Observation: o}
	}
	return out, nil
}

// CandidateSources returns, per observation, its source fact ids and up to
// 5 source facts, newest first.
func (s *Store) CandidateSources(ctx context.Context, key consolidation.ScopeKey, ids []string) (map[string][]string, map[string][]consolidation.Fact, error) {
	return s.sourcesOf(ctx, s.db, string(key), ids, candidateSources)
}

// candidateSources is how many source facts a candidate carries.
const candidateSources = 5
