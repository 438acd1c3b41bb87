package sqlstore

import (
	"context"
	"database/sql"
	"encoding/binary"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
	"unsafe"

	"github.com/promptops/promptops/internal/consolidation"
)

// What the bank's HTTP API (promptops serve --bank) reads and writes.

var _ consolidation.QueryStore = (*Store)(nil)

// BankGeneration is a key's generation, moved by every batch applied to
// it, and its bank's erasures; Applied is -1 for a key the store does not
// know.
func (s *Store) BankGeneration(ctx context.Context, key consolidation.ScopeKey) (consolidation.Generation, error) {
	return s.generation(ctx, string(key))
}

// recallableQuery reads, in one statement and so in one snapshot of the
// store, what a Recaller holds of a key: its generation (the row 'g',
// with the bank's erasures and the key's count of observations), its
// observations with their provenance and vectors in a space (rows 'o'),
// and their sources with the tags of those facts (rows 's'). $1 is the
// key, $2 and $3 the space (none matches a space of 0 dimensions), $4 the
// bank. The rows come in any order.
const recallableQuery = `SELECT 'g', NULL, NULL, b.generation, COALESCE((SELECT erasures FROM promptops_banks WHERE id = $4), 0),
		NULL, NULL, NULL, NULL, NULL, NULL, NULL, (SELECT count(*) FROM promptops_observations WHERE bank = $1), NULL
	FROM promptops_banks b WHERE b.id = $1
UNION ALL
SELECT 'o', o.id, o.text, o.proof_count, NULL, o.occurred_start, o.occurred_end, o.entities_norm, o.created_at, o.updated_at,
		v.qvec, CASE WHEN v.qvec IS NULL THEN v.vec END, NULL, o.provenance
	FROM promptops_observations o
	LEFT JOIN promptops_observation_vectors v ON v.bank = o.bank AND v.observation_id = o.id AND v.model = $2 AND v.dims = $3
	WHERE o.bank = $1
UNION ALL
SELECT 's', s.observation_id, s.fact_id, NULL, NULL, NULL, NULL, f.tags, f.created_at, NULL, NULL, NULL, NULL, NULL
	FROM promptops_observation_sources s JOIN promptops_facts f ON f.bank = s.bank AND f.id = s.fact_id
	WHERE s.bank = $1`

// LoadRecallable reads a key's generation, observations, sources and
// vectors in sp in one statement, so that what it reads is as of the
// generation it answers (Applied -1 when the store does not know the
// key). into hears the count of observations when it comes first, and
// each vector as it is read; each observation, with its source fact ids
// (newest fact first), its provenance and its sources' distinct tags, once
// all is read.
func (s *Store) LoadRecallable(ctx context.Context, key consolidation.ScopeKey, sp consolidation.Space, into consolidation.RecallableSink) (consolidation.Generation, error) {
	gen := consolidation.Generation{Applied: -1}
	bank, scope := key.Split()
	rows, err := s.scan.QueryContext(ctx, s.rebind(recallableQuery), string(key), sp.Model, sp.Dims, string(bank))
	if err != nil {
		return gen, err
	}
	defer rows.Close()
	type source struct {
		fact    string
		created time.Time
		tags    string
	}
	sources := map[string][]source{}
	var obs []consolidation.Observation
	var buf []float32
	var (
		kind, id, text, txt sql.NullString
		num, num2, count    sql.NullInt64
		os, oe, ca, ua      scanTime
		rawQ, rawV, rawP    sql.RawBytes
	)
	// A bank's observations have few distinct provenances: each is decoded
	// once and its slice shared (no one writes to an observation's
	// Provenance; JoinProvenance makes a new one).
	provs := map[string][]string{}
	for rows.Next() {
		if err := rows.Scan(&kind, &id, &text, &num, &num2, &os, &oe, &txt, &ca, &ua, &rawQ, &rawV, &count, &rawP); err != nil {
			return gen, err
		}
		switch kind.String {
		case "g":
			gen = consolidation.Generation{Applied: num.Int64, Erasures: num2.Int64}
			if len(obs) == 0 {
				into.Grow(int(count.Int64))
			}
		case "o":
			o := consolidation.Observation{ID: id.String, Text: text.String, ProofCount: int(num.Int64), Scope: scope,
				OccurredStart: os.t, OccurredEnd: oe.t, Entities: fromJSON(txt.String)}
			if p, ok := provs[string(rawP)]; ok {
				o.Provenance = p
			} else {
				o.Provenance = provenanceOf(string(rawP))
				if len(provs) < maxSharedProvenances {
					provs[string(rawP)] = o.Provenance
				}
			}
			if ca.t != nil {
				o.CreatedAt = *ca.t
			}
			if ua.t != nil {
				o.UpdatedAt = *ua.t
			}
			obs = append(obs, o)
			switch {
			case sp.Dims > 0 && len(rawQ) == 4+sp.Dims:
				// The int8s are the bytes as they are: read in place,
				// not copied once more on the way to the index.
				q := unsafe.Slice((*int8)(unsafe.Pointer(unsafe.SliceData(rawQ[4:]))), sp.Dims)
				into.Quantized(o.ID, q, math.Float32frombits(binary.LittleEndian.Uint32(rawQ)))
			case sp.Dims > 0 && rawQ == nil && rawV != nil:
				buf = decodeVec(rawV, buf)
				into.Vector(o.ID, buf)
			}
		case "s":
			src := source{fact: text.String, tags: txt.String}
			if ca.t != nil {
				src.created = *ca.t
			}
			sources[id.String] = append(sources[id.String], src)
		}
	}
	if err := rows.Err(); err != nil {
		return gen, err
	}
	for _, o := range obs {
		srcs := sources[o.ID]
		slices.SortFunc(srcs, func(a, b source) int {
			if c := b.created.Compare(a.created); c != 0 {
				return c
			}
			return strings.Compare(a.fact, b.fact)
		})
		var tags []string
		if len(srcs) > 0 {
			o.SourceFactIDs = make([]string, len(srcs))
		}
		for i, src := range srcs {
			o.SourceFactIDs[i] = src.fact
			if src.tags != "[]" && src.tags != "" {
				for _, t := range fromJSON(src.tags) {
					if !contains(tags, t) {
						tags = append(tags, t)
					}
				}
			}
		}
		into.Observation(o, tags)
	}
	return gen, nil
}

// maxSharedProvenances bounds the distinct provenances LoadRecallable
// decodes once and shares.
const maxSharedProvenances = 1024

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
func (s *Store) PendingFacts(ctx context.Context, key consolidation.ScopeKey, since time.Time, limit int) ([]consolidation.Fact, error) {
	return s.queryFacts(ctx, "SELECT "+factColumns+" FROM promptops_facts WHERE bank = $1 AND status = 'pending' AND created_at >= $2 ORDER BY created_at, id LIMIT $3", string(key), s.timeArg(&since), limit)
}

// RetainFacts stores facts, each with its id and its source
// (consolidation.SourceOf), in one transaction, each in its scope: a fact
// whose id its scope holds with the same text and source is left as it is
// and counted in unchanged; one with other text or another source fails
// the whole call with *consolidation.FactConflictError and stores nothing.
// created_at keeps the order given.
func (s *Store) RetainFacts(ctx context.Context, bank consolidation.BankID, facts []consolidation.Fact) (stored, unchanged int, err error) {
	if len(facts) == 0 {
		return 0, 0, nil
	}
	if err := s.ensureKeys(ctx, bank, facts); err != nil {
		return 0, 0, err
	}
	keys := factKeys(bank, facts)
	byKey := map[consolidation.ScopeKey][]string{}
	for i, f := range facts {
		byKey[keys[i]] = append(byKey[keys[i]], f.ID)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = tx.Rollback() }()
	held := func() (map[[2]string]heldFact, error) {
		out := map[[2]string]heldFact{}
		for key, ids := range byKey {
			got, err := s.heldFacts(ctx, tx, string(key), ids)
			if err != nil {
				return nil, err
			}
			for id, h := range got {
				out[[2]string{string(key), id}] = h
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
		k := [2]string{string(keys[i]), f.ID}
		want := heldFact{text: f.Text, source: consolidation.SourceOf(f)}
		if h, ok := before[k]; ok {
			if h != want {
				return 0, 0, &consolidation.FactConflictError{ID: f.ID}
			}
			unchanged++
			continue
		}
		created := base.Add(time.Duration(i) * time.Microsecond)
		rows = append(rows, []any{string(keys[i]), f.ID, f.Text, toJSON(f.Entities), toJSON(f.Tags), s.timeArg(f.OccurredStart), s.timeArg(f.OccurredEnd), s.timeArg(f.MentionedAt), s.timeArg(&created), want.source})
		before[k] = want
	}
	// ON CONFLICT DO NOTHING: a concurrent request may store one of these
	// ids first; its text and source are compared below.
	if err := s.insertRows(ctx, tx, `INSERT INTO promptops_facts (bank, id, text, entities, tags, occurred_start, occurred_end, mentioned_at, created_at, source) VALUES `, " ON CONFLICT DO NOTHING", rows); err != nil {
		return 0, 0, err
	}
	if len(rows) > 0 {
		now, err := held()
		if err != nil {
			return 0, 0, err
		}
		for i, f := range facts {
			if now[[2]string{string(keys[i]), f.ID}] != (heldFact{text: f.Text, source: consolidation.SourceOf(f)}) {
				return 0, 0, &consolidation.FactConflictError{ID: f.ID}
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, err
	}
	return len(rows), unchanged, nil
}

// heldFact is what RetainFacts compares of a fact the bank holds.
type heldFact struct{ text, source string }

// heldFacts returns the texts and sources of the facts of ids that the
// bank holds.
func (s *Store) heldFacts(ctx context.Context, db querier, bank string, ids []string) (map[string]heldFact, error) {
	out := map[string]heldFact{}
	sorted := append([]string(nil), ids...)
	sort.Strings(sorted)
	for start := 0; start < len(sorted); start += 500 {
		chunk := sorted[start:min(start+500, len(sorted))]
		args := []any{bank}
		for _, id := range chunk {
			args = append(args, id)
		}
		query, args := s.anyOf("SELECT id, text, source FROM promptops_facts WHERE bank = $1 AND id @IN", 2, args)
		rows, err := db.QueryContext(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			var h heldFact
			if err := rows.Scan(&id, &h.text, &h.source); err != nil {
				rows.Close()
				return nil, err
			}
			out[id] = h
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
