package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/promptops/promptops/internal/consolidation"
)

// lexCache is a bank's lexical index as of the bank's generation gen.
type lexCache struct {
	gen int64
	idx *consolidation.LexIndex
}

// generation reads the bank's generation; -1 when the bank is unknown.
// A served bank reads it before every recall, so its statement is
// prepared once (on SQLite that halves its cost).
func (s *Store) generation(ctx context.Context, bank string) (int64, error) {
	var g int64
	var err error
	if st := s.genStmt(ctx); st != nil {
		err = st.QueryRowContext(ctx, bank).Scan(&g)
	} else {
		err = s.db.QueryRowContext(ctx, s.q(generationQuery), bank).Scan(&g)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return -1, nil
	}
	return g, err
}

const generationQuery = "SELECT generation FROM promptops_banks WHERE id = $1"

// genStmt is the prepared read of a bank's generation; nil when it could
// not be prepared (the caller then runs the query as it is).
func (s *Store) genStmt(ctx context.Context) *sql.Stmt {
	if st := s.gen.Load(); st != nil {
		return st
	}
	st, err := s.db.PrepareContext(ctx, s.q(generationQuery))
	if err != nil {
		return nil
	}
	if !s.gen.CompareAndSwap(nil, st) {
		_ = st.Close()
	}
	return s.gen.Load()
}

// bumpGeneration advances the bank's generation in tx; -1 when the bank
// is unknown.
func (s *Store) bumpGeneration(ctx context.Context, tx *sql.Tx, bank string) (int64, error) {
	var g int64
	err := tx.QueryRowContext(ctx, s.q("UPDATE promptops_banks SET generation = generation + 1 WHERE id = $1 RETURNING generation"), bank).Scan(&g)
	if errors.Is(err, sql.ErrNoRows) {
		return -1, nil
	}
	return g, err
}

// lexIndex returns the bank's lexical index, current as of the bank's
// generation: kept from the last call when no other store applied a batch
// since, loaded in one streaming pass otherwise. Call with s.mu held.
func (s *Store) lexIndex(ctx context.Context, bank string) (*consolidation.LexIndex, error) {
	gen, err := s.generation(ctx, bank)
	if err != nil {
		return nil, err
	}
	if c := s.lex[bank]; c != nil && gen >= 0 && c.gen == gen {
		return c.idx, nil
	}
	delete(s.lex, bank)
	// The rows are current as of gen if the generation has not moved by
	// the time they are read; otherwise the index serves this call only.
	rows, err := s.scan.QueryContext(ctx, s.q("SELECT id, text, entities_norm FROM promptops_observations WHERE bank = $1"), bank)
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
		idx.Put(id, text, entityList(ents))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	after, err := s.generation(ctx, bank)
	if err != nil {
		return nil, err
	}
	if gen >= 0 && after == gen {
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
	if gen < 0 || c.gen != gen-1 {
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
	c.gen = gen
}

// entityList decodes entities_norm, a JSON array of strings; plain
// arrays (no escapes) without encoding/json, which loading the index of a
// large bank would otherwise spend most of its time in.
func entityList(s string) []string {
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' || strings.IndexByte(s, '\\') >= 0 {
		return fromJSON(s)
	}
	body := s[1 : len(s)-1]
	if body == "" {
		return nil
	}
	if len(body) < 2 || body[0] != '"' || body[len(body)-1] != '"' {
		return fromJSON(s)
	}
	parts := strings.Split(body[1:len(body)-1], `","`)
	for _, p := range parts {
		if strings.IndexByte(p, '"') >= 0 {
			return fromJSON(s)
		}
	}
	return parts
}
