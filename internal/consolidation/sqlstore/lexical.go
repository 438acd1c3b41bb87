package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
)

// lexCache is a key's lexical index as of the key's generation gen.
type lexCache struct {
	gen consolidation.Generation
	idx *consolidation.LexIndex
}

// generation reads a key's generation and its bank's erasures; Applied is
// -1 when the key is unknown. A served bank reads it before every recall,
// so its statement is prepared once (on SQLite that halves its cost), on
// the read handle (on SQLite, not behind a write).
func (s *Store) generation(ctx context.Context, key string) (consolidation.Generation, error) {
	g := consolidation.Generation{}
	bank := consolidation.ScopeKey(key).Bank()
	var err error
	if st := s.genStmt(ctx); st != nil {
		err = st.QueryRowContext(ctx, key, string(bank)).Scan(&g.Applied, &g.Erasures)
	} else {
		err = s.scan.QueryRowContext(ctx, s.rebind(generationQuery), key, string(bank)).Scan(&g.Applied, &g.Erasures)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return consolidation.Generation{Applied: -1}, nil
	}
	return g, err
}

const generationQuery = "SELECT generation, COALESCE((SELECT erasures FROM promptops_banks WHERE id = $2), 0) FROM promptops_banks WHERE id = $1"

// genStmt is the prepared read of a bank's generation; nil when it could
// not be prepared (the caller then runs the query as it is).
func (s *Store) genStmt(ctx context.Context) *sql.Stmt {
	if st := s.gen.Load(); st != nil {
		return st
	}
	st, err := s.scan.PrepareContext(ctx, s.rebind(generationQuery))
	if err != nil {
		return nil
	}
	if !s.gen.CompareAndSwap(nil, st) {
		_ = st.Close()
	}
	return s.gen.Load()
}

// bumpGeneration advances a key's generation in tx, registering the key
// when it is new (a scope whose facts were written without it): the row
// is written only with a batch, in its transaction, so a run never brings
// back the key of a scope erased meanwhile.
func (s *Store) bumpGeneration(ctx context.Context, tx *sql.Tx, key string) (int64, error) {
	var g int64
	err := tx.QueryRowContext(ctx, s.rebind("INSERT INTO promptops_banks (id, created_at) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET generation = promptops_banks.generation + 1 RETURNING generation"), key, s.timeArg(ptrTime(time.Now()))).Scan(&g)
	if errors.Is(err, sql.ErrNoRows) {
		return -1, nil
	}
	return g, err
}

// bumpGenerationPG is bumpGeneration as the last statement of an Apply on
// PostgreSQL, whose one parameter (%d) is the key.
const bumpGenerationPG = "INSERT INTO promptops_banks (id) VALUES ($%d) ON CONFLICT (id) DO UPDATE SET generation = promptops_banks.generation + 1 RETURNING generation"

// lexIndex returns the bank's lexical index, current as of the bank's
// generation: kept from the last call when no other store applied a batch
// since, loaded in one streaming pass otherwise. Call with s.mu held.
func (s *Store) lexIndex(ctx context.Context, bank string) (*consolidation.LexIndex, error) {
	gen, err := s.generation(ctx, bank)
	if err != nil {
		return nil, err
	}
	if c := s.lex[bank]; c != nil && gen.Applied >= 0 && c.gen == gen {
		return c.idx, nil
	}
	delete(s.lex, bank)
	// The rows are current as of gen if the generation has not moved by
	// the time they are read; otherwise the index serves this call only.
	rows, err := s.scan.QueryContext(ctx, s.rebind("SELECT id, text, entities_norm FROM promptops_observations WHERE bank = $1"), bank)
	if err != nil {
		return nil, err
	}
	idx := consolidation.NewLexIndex()
	for rows.Next() {
		var id, text, ents string
		if err := rows.Scan(&id, &text, &ents); err != nil {
			rows.Close()
			return nil, err
		}
		idx.Put(id, text, fromJSON(ents))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	after, err := s.generation(ctx, bank)
	if err != nil {
		return nil, err
	}
	if gen.Applied >= 0 && after == gen {
		s.lex[bank] = &lexCache{gen: gen, idx: idx}
	}
	return idx, nil
}

// lexApplied brings a cached index up to a batch this store applied: the
// observations the batch touched, as it wrote them (nil: deleted). An
// index that was behind before the batch is dropped, to be reloaded. Call
// with s.mu held.
func (s *Store) lexApplied(bank string, gen int64, touched lexChanges) {
	c := s.lex[bank]
	if c == nil {
		return
	}
	if gen < 0 || c.gen.Applied != gen-1 {
		delete(s.lex, bank)
		return
	}
	for id, o := range touched {
		if o == nil {
			c.idx.Delete(id)
		} else {
			c.idx.Put(id, o.Text, o.Entities)
		}
	}
	c.gen.Applied = gen
}
