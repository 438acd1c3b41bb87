// Package sqlstore keeps banks in PostgreSQL (pgx) or SQLite (modernc, pure
// Go) with embedded versioned migrations, behind what each consumer needs:
// a run's consolidation.RunStore, a served bank's recall
// (consolidation.QueryStore), retain, erasure and export (serve's BankStore
// and ScopeStore) and the CLI. Several banks share one database; every row
// is of one scope's key (consolidation.ScopeKey).
package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"

	"github.com/promptops/promptops/internal/consolidation"
)

//go:embed migrations
var migrations embed.FS

// HistoryLimit is how many history rows one observation keeps.
const HistoryLimit = 50

type dialect int

const (
	postgres dialect = iota
	sqlite
)

// Store is a SQL bank store.
type Store struct {
	db *sql.DB
	// scan is the handle of the bulk reads that load a bank's indexes:
	// db on PostgreSQL; on SQLite, whose db has one connection, a pool of
	// two more, so that the lexical and the vector index of a run load side
	// by side, not waiting for db (WAL: readers neither wait for nor block
	// the writer).
	scan    *sql.DB
	dialect dialect

	mu  sync.Mutex           // guards lex
	lex map[string]*lexCache // per bank, for Recall

	gen   atomic.Pointer[sql.Stmt] // reads a bank's generation
	noVec noVector
}

var _ consolidation.RunStore = (*Store)(nil)

// pgIdleConns is how many PostgreSQL connections a Store keeps open
// while idle: more than a run or a served bank uses at once.
const pgIdleConns = 8

// Open opens a store URL: postgres://... (or postgresql://) or
// sqlite:///absolute/path.db, and migrates it. Errors never contain the
// URL, which may hold a password.
func Open(ctx context.Context, storeURL string) (*Store, error) {
	u, err := url.Parse(storeURL)
	if err != nil {
		return nil, errors.New("store URL does not parse (expected postgres://... or sqlite:///path)")
	}
	var s *Store
	switch u.Scheme {
	case "postgres", "postgresql":
		db, err := sql.Open("pgx", storeURL)
		if err != nil {
			return nil, fmt.Errorf("opening PostgreSQL: %w", redact(err, storeURL))
		}
		// database/sql keeps 2 idle connections by default: a run's
		// overlapping reads (the next claim, the lexical and the semantic
		// recall, a load) use more, and each one past 2 was closed on
		// release and opened again (a new PostgreSQL backend) next time.
		db.SetMaxIdleConns(pgIdleConns)
		s = &Store{db: db, scan: db, dialect: postgres, lex: map[string]*lexCache{}}
	case "sqlite":
		path := u.Path
		if u.Opaque != "" {
			path = u.Opaque
		}
		if path == "" {
			return nil, errors.New("sqlite store URL needs a path: sqlite:///data/bank.db")
		}
		q := url.Values{}
		q.Add("_pragma", "busy_timeout(10000)")
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Add("_txlock", "immediate")
		db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
		if err != nil {
			return nil, fmt.Errorf("opening SQLite: %w", err)
		}
		db.SetMaxOpenConns(1)
		sq := url.Values{}
		sq.Add("_pragma", "busy_timeout(10000)")
		scan, err := sql.Open("sqlite", "file:"+path+"?"+sq.Encode())
		if err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("opening SQLite: %w", err)
		}
		scan.SetMaxOpenConns(2)
		s = &Store{db: db, scan: scan, dialect: sqlite, lex: map[string]*lexCache{}}
	default:
		return nil, fmt.Errorf("unsupported store URL scheme %q: use postgres:// or sqlite://", u.Scheme)
	}
	if err := s.db.PingContext(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("connecting to the store: %w", redact(err, storeURL))
	}
	if err := s.migrate(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("migrating the store: %w", redact(err, storeURL))
	}
	return s, nil
}

// redact removes the URL and its passwords (the user's, and a query's
// password or sslpassword) from an error message.
func redact(err error, storeURL string) error {
	msg := strings.ReplaceAll(err.Error(), storeURL, "<store URL>")
	if u, perr := url.Parse(storeURL); perr == nil {
		var secrets []string
		if u.User != nil {
			if p, ok := u.User.Password(); ok {
				secrets = append(secrets, p)
			}
		}
		q := u.Query()
		secrets = append(secrets, q["password"]...)
		secrets = append(secrets, q["sslpassword"]...)
		for _, p := range secrets {
			if p != "" {
				msg = strings.ReplaceAll(msg, p, "<redacted>")
			}
		}
	}
	return errors.New(msg)
}

// Close closes the database.
func (s *Store) Close() error {
	var err error
	if st := s.gen.Swap(nil); st != nil {
		err = st.Close()
	}
	err = errors.Join(err, s.db.Close())
	if s.scan != s.db {
		err = errors.Join(err, s.scan.Close())
	}
	return err
}

// DB exposes the database, for tests.
func (s *Store) DB() *sql.DB { return s.db }

var placeholderRE = regexp.MustCompile(`\$(\d+)`)

// rebind adapts a query written with $1.. to the dialect (SQLite: ?1..).
func (s *Store) rebind(query string) string {
	if s.dialect == sqlite {
		return placeholderRE.ReplaceAllString(query, "?$1")
	}
	return query
}

// timeArg encodes a time for the dialect: timestamptz or RFC 3339 text.
func (s *Store) timeArg(t *time.Time) any {
	if t == nil {
		return nil
	}
	if s.dialect == sqlite {
		return t.UTC().Format(time.RFC3339Nano)
	}
	return t.UTC()
}

// scanTime decodes a nullable time column of either dialect.
type scanTime struct{ t *time.Time }

func (st *scanTime) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		st.t = nil
	case time.Time:
		t := x.UTC()
		st.t = &t
	case string:
		return st.parse(x)
	case []byte:
		return st.parse(string(x))
	default:
		return fmt.Errorf("unexpected time value %T", v)
	}
	return nil
}

func (st *scanTime) parse(s string) error {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			t = t.UTC()
			st.t = &t
			return nil
		}
	}
	return fmt.Errorf("unparseable time %q", s)
}

func (s *Store) migrate(ctx context.Context) error {
	return s.migrateTo(ctx, math.MaxInt)
}

// migrateTo applies the migrations not yet applied up to version last.
func (s *Store) migrateTo(ctx context.Context, last int) error {
	dir := "migrations/postgres"
	if s.dialect == sqlite {
		dir = "migrations/sqlite"
	}
	entries, err := fs.ReadDir(migrations, dir)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if s.dialect == postgres {
		// Two Jobs starting at once migrate one after the other.
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(72626163)"); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS promptops_schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL)`); err != nil {
		return err
	}
	for _, name := range names {
		v, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: name must start with a number", name)
		}
		var n int
		if err := tx.QueryRowContext(ctx, s.rebind("SELECT count(*) FROM promptops_schema_migrations WHERE version = $1"), v).Scan(&n); err != nil {
			return err
		}
		if n > 0 || v > last {
			continue
		}
		body, err := fs.ReadFile(migrations, dir+"/"+name)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			return fmt.Errorf("migration %s: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, s.rebind("INSERT INTO promptops_schema_migrations (version, name) VALUES ($1, $2)"), v, name); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// EnsureBank registers a bank.
func (s *Store) EnsureBank(ctx context.Context, bank consolidation.BankID) error {
	return s.ensureKeys(ctx, bank, nil)
}

// HasBank reports whether the store knows the bank: EnsureBank, a retain,
// an import or a run registered it.
func (s *Store) HasBank(ctx context.Context, bank consolidation.BankID) (bool, error) {
	var one int
	err := s.db.QueryRowContext(ctx, s.rebind("SELECT 1 FROM promptops_banks WHERE id = $1"), string(bank.Scope(""))).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// ensureKeys registers the bank and the keys of the facts' scopes.
func (s *Store) ensureKeys(ctx context.Context, bank consolidation.BankID, facts []consolidation.Fact) error {
	return s.ensureScopeKeys(ctx, bank, factKeys(bank, facts))
}

// ensureScopeKeys registers the bank and keys of its scopes.
func (s *Store) ensureScopeKeys(ctx context.Context, bank consolidation.BankID, keys []consolidation.ScopeKey) error {
	seen := map[consolidation.ScopeKey]bool{}
	for _, key := range append([]consolidation.ScopeKey{bank.Scope("")}, keys...) {
		if !seen[key] {
			seen[key] = true
			if _, err := s.db.ExecContext(ctx, s.rebind("INSERT INTO promptops_banks (id, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING"), string(key), s.timeArg(ptrTime(time.Now()))); err != nil {
				return err
			}
		}
	}
	return nil
}

// factKeys are the keys of the facts' scopes, in the facts' order.
func factKeys(bank consolidation.BankID, facts []consolidation.Fact) []consolidation.ScopeKey {
	out := make([]consolidation.ScopeKey, len(facts))
	for i, f := range facts {
		out[i] = bank.Scope(f.Scope)
	}
	return out
}

func ptrTime(t time.Time) *time.Time { return &t }

func toJSON(v []string) string {
	if v == nil {
		v = []string{}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// fromJSON decodes a JSON array of strings the store wrote (toJSON); nil
// when it is not one.
func fromJSON(s string) []string {
	var v []string
	if jsonv2.Unmarshal([]byte(s), &v) != nil {
		return nil
	}
	return v
}

// factColumnsOf lists a fact's columns, qualified by a table alias when
// one is given; scanFact reads them in this order.
func factColumnsOf(alias string) string {
	p := ""
	if alias != "" {
		p = alias + "."
	}
	return fmt.Sprintf("%[1]sid, %[1]stext, %[1]sentities, %[1]stags, %[1]soccurred_start, %[1]soccurred_end, %[1]smentioned_at, %[1]screated_at, %[1]sstatus, COALESCE(%[1]sfailure_reason, ''), %[1]ssource", p)
}

var factColumns = factColumnsOf("")

// scanFact scans factColumns, after any leading columns into lead.
func scanFact(sc interface{ Scan(...any) error }, lead ...any) (consolidation.Fact, error) {
	var f consolidation.Fact
	var ents, tags string
	var os, oe, ma, ca scanTime
	if err := sc.Scan(append(lead, &f.ID, &f.Text, &ents, &tags, &os, &oe, &ma, &ca, &f.Status, &f.FailureReason, &f.Source)...); err != nil {
		return f, err
	}
	f.Entities, f.Tags = fromJSON(ents), fromJSON(tags)
	f.OccurredStart, f.OccurredEnd, f.MentionedAt = os.t, oe.t, ma.t
	if ca.t != nil {
		f.CreatedAt = *ca.t
	}
	return f, nil
}

// ListFacts lists the facts of every scope of the bank, oldest first, with
// their scopes; status "" lists all.
func (s *Store) ListFacts(ctx context.Context, bank consolidation.BankID, status string, limit int) ([]consolidation.Fact, error) {
	return s.listFacts(ctx, "SELECT bank, "+factColumns+" FROM promptops_facts WHERE "+inBank+" AND ($4 = '' OR status = $4) ORDER BY created_at, id LIMIT $5", bankArgs(bank, status, limit)...)
}

// ListScopeFacts is ListFacts of one scope.
func (s *Store) ListScopeFacts(ctx context.Context, key consolidation.ScopeKey, status string, limit int) ([]consolidation.Fact, error) {
	return s.listFacts(ctx, "SELECT bank, "+factColumns+" FROM promptops_facts WHERE bank = $1 AND ($2 = '' OR status = $2) ORDER BY created_at, id LIMIT $3", string(key), status, limit)
}

// listFacts runs a query whose columns are the bank column and
// factColumns.
func (s *Store) listFacts(ctx context.Context, query string, args ...any) ([]consolidation.Fact, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []consolidation.Fact
	for rows.Next() {
		var key string
		f, err := scanFact(rows, &key)
		if err != nil {
			return nil, err
		}
		f.Scope = consolidation.ScopeKey(key).Name()
		out = append(out, f)
	}
	return out, rows.Err()
}

// queryFacts runs a query whose columns are factColumns.
func (s *Store) queryFacts(ctx context.Context, query string, args ...any) ([]consolidation.Fact, error) {
	rows, err := s.db.QueryContext(ctx, s.rebind(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []consolidation.Fact
	for rows.Next() {
		f, err := scanFact(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// ImportFacts inserts facts in one transaction: all of them or none. A fact
// without an id gets a new UUID; created_at keeps the order given; its
// source is consolidation.SourceOf's. A fact whose id its scope holds
// already is skipped and not counted, whatever its text and source.
func (s *Store) ImportFacts(ctx context.Context, bank consolidation.BankID, facts []consolidation.Fact) (int, error) {
	if err := s.ensureKeys(ctx, bank, facts); err != nil {
		return 0, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	base := time.Now().UTC()
	n := 0
	for i, f := range facts {
		if f.ID == "" {
			f.ID = uuid.NewString()
		}
		created := base.Add(time.Duration(i) * time.Microsecond)
		res, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO promptops_facts (bank, id, text, entities, tags, occurred_start, occurred_end, mentioned_at, created_at, source)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING`),
			string(bank.Scope(f.Scope)), f.ID, f.Text, toJSON(f.Entities), toJSON(f.Tags), s.timeArg(f.OccurredStart), s.timeArg(f.OccurredEnd), s.timeArg(f.MentionedAt), s.timeArg(&created), consolidation.SourceOf(f))
		if err != nil {
			return 0, fmt.Errorf("fact %d: %w", i+1, err)
		}
		if k, _ := res.RowsAffected(); k > 0 {
			n++
		}
	}
	return n, tx.Commit()
}

// RetryFacts sets failed facts back to pending: the given ids, or all
// failed facts of the bank when ids is empty.
func (s *Store) RetryFacts(ctx context.Context, key consolidation.ScopeKey, ids []string) (int64, error) {
	query := "UPDATE promptops_facts SET status = 'pending', failure_reason = NULL, claimed_by = NULL, claimed_until = NULL WHERE bank = $1 AND status = 'failed'"
	args := []any{string(key)}
	if len(ids) > 0 {
		query += " AND id IN (" + placeholders(2, len(ids)) + ")"
		for _, id := range ids {
			args = append(args, id)
		}
	}
	res, err := s.db.ExecContext(ctx, s.rebind(query), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// anyOf adapts a query whose list parameter is written @IN (args from
// position from on are the list): = ANY($from) with one array on
// PostgreSQL, so that the statement's text and its cached preparation do
// not depend on the list's length; IN ($from, ...) on SQLite.
func (s *Store) anyOf(query string, from int, args []any) (string, []any) {
	if s.dialect == postgres {
		list := make([]string, 0, len(args)-(from-1))
		for _, a := range args[from-1:] {
			list = append(list, a.(string))
		}
		return strings.Replace(query, "@IN", "= ANY($"+strconv.Itoa(from)+")", 1), append(args[:from-1:from-1], list)
	}
	return s.rebind(strings.Replace(query, "@IN", "IN ("+placeholders(from, len(args)-(from-1))+")", 1)), args
}

func placeholders(from, n int) string {
	p := make([]string, n)
	for i := range p {
		p[i] = "$" + strconv.Itoa(from+i)
	}
	return strings.Join(p, ", ")
}

// CountObservations counts a bank's observations, all scopes together.
func (s *Store) CountObservations(ctx context.Context, bank consolidation.BankID) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, s.rebind("SELECT count(*) FROM promptops_observations WHERE "+inBank), bankArgs(bank)...).Scan(&n)
	return n, err
}

// CountScopeObservations counts the observations of one scope's key.
func (s *Store) CountScopeObservations(ctx context.Context, key consolidation.ScopeKey) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, s.rebind("SELECT count(*) FROM promptops_observations WHERE bank = $1"), string(key)).Scan(&n)
	return n, err
}

// inBank is the condition on a row's bank column that holds for every
// scope of the bank in $1, $2 and $3 (bankArgs): its own key, and the keys
// "bank/scope", which sort between "bank/" and "bank0" ('0' follows '/'),
// a range of the primary key's index.
const inBank = "(bank = $1 OR (bank >= $2 AND bank < $3))"

// bankArgs are the arguments of inBank, then more.
func bankArgs(bank consolidation.BankID, more ...any) []any {
	b := string(bank)
	return append([]any{b, b + "/", b + "0"}, more...)
}

// HasObservationTexts tells which of the normalised texts an observation
// has, in one query per 500.
func (s *Store) HasObservationTexts(ctx context.Context, key consolidation.ScopeKey, norms []string) (map[string]bool, error) {
	out := map[string]bool{}
	for start := 0; start < len(norms); start += 500 {
		chunk := norms[start:min(start+500, len(norms))]
		args := []any{string(key)}
		for _, n := range chunk {
			args = append(args, n)
		}
		query, args := s.anyOf("SELECT DISTINCT text_norm FROM promptops_observations WHERE bank = $1 AND text_norm @IN", 2, args)
		rows, err := s.db.QueryContext(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				rows.Close()
				return nil, err
			}
			out[n] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// obsColumns lists an observation's columns; scanObservation reads them
// in this order.
const obsColumns = "id, text, proof_count, occurred_start, occurred_end, entities_norm, created_at, updated_at, provenance"

// scanObservation scans obsColumns.
func scanObservation(sc interface{ Scan(...any) error }) (consolidation.Observation, error) {
	var o consolidation.Observation
	var ents, prov string
	var os, oe, ca, ua scanTime
	if err := sc.Scan(&o.ID, &o.Text, &o.ProofCount, &os, &oe, &ents, &ca, &ua, &prov); err != nil {
		return o, err
	}
	o.OccurredStart, o.OccurredEnd, o.Entities, o.Provenance = os.t, oe.t, fromJSON(ents), provenanceOf(prov)
	if ca.t != nil {
		o.CreatedAt = *ca.t
	}
	if ua.t != nil {
		o.UpdatedAt = *ua.t
	}
	return o, nil
}

// provenanceOf decodes a provenance column: SourceUnspecified alone when
// it holds no source.
func provenanceOf(s string) []string {
	if p := fromJSON(s); len(p) > 0 {
		return p
	}
	return []string{consolidation.SourceUnspecified}
}

func (s *Store) observations(ctx context.Context, db querier, bank string, ids []string) ([]consolidation.Observation, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := []any{bank}
	for _, id := range ids {
		args = append(args, id)
	}
	query, args := s.anyOf("SELECT "+obsColumns+" FROM promptops_observations WHERE bank = $1 AND id @IN", 2, args)
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byID := map[string]consolidation.Observation{}
	for rows.Next() {
		o, err := scanObservation(rows)
		if err != nil {
			return nil, err
		}
		byID[o.ID] = o
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]consolidation.Observation, 0, len(ids))
	for _, id := range ids {
		if o, ok := byID[id]; ok {
			out = append(out, o)
		}
	}
	return out, nil
}

// sourcesOf returns, per observation, its source fact ids and up to
// maxSources source facts, newest first.
func (s *Store) sourcesOf(ctx context.Context, db querier, bank string, ids []string, maxSources int) (map[string][]string, map[string][]consolidation.Fact, error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	args := []any{bank}
	for _, id := range ids {
		args = append(args, id)
	}
	query, args := s.anyOf(`SELECT s.observation_id, `+factColumnsOf("f")+`
		FROM promptops_observation_sources s JOIN promptops_facts f ON f.bank = s.bank AND f.id = s.fact_id
		WHERE s.bank = $1 AND s.observation_id @IN ORDER BY s.observation_id, f.created_at DESC, f.id`, 2, args)
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	srcIDs := map[string][]string{}
	facts := map[string][]consolidation.Fact{}
	for rows.Next() {
		var obsID string
		f, err := scanFact(rows, &obsID)
		if err != nil {
			return nil, nil, err
		}
		srcIDs[obsID] = append(srcIDs[obsID], f.ID)
		if len(facts[obsID]) < maxSources {
			facts[obsID] = append(facts[obsID], f)
		}
	}
	return srcIDs, facts, rows.Err()
}

// WarmRecall loads the bank's lexical index, as Recall's first call would.
func (s *Store) WarmRecall(ctx context.Context, key consolidation.ScopeKey) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.lexIndex(ctx, string(key))
	return err
}

// Recall returns, per fact, the observations whose trigrams
// (consolidation.Trigrams) it shares best and those that share one of its
// entities, at most limit of each, ranked, from the bank's lexical index in
// memory (loaded once, kept up to date by Apply, reloaded when another
// store applied a batch): one look at the bank's generation and one load
// of the candidates for the whole batch. The candidates come without their
// sources (CandidateSources).
func (s *Store) Recall(ctx context.Context, key consolidation.ScopeKey, facts []consolidation.Fact, limit int) (map[string][]consolidation.Candidate, error) {
	s.mu.Lock()
	idx, err := s.lexIndex(ctx, string(key))
	perFact := make([][]string, len(facts))
	var union []string
	if err == nil {
		seen := map[string]bool{}
		for i, f := range facts {
			perFact[i] = idx.SearchRanked(f, limit)
			for _, id := range perFact[i] {
				if !seen[id] {
					seen[id] = true
					union = append(union, id)
				}
			}
		}
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	cands, err := s.Candidates(ctx, key, union)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]consolidation.Candidate, len(cands))
	for _, c := range cands {
		byID[c.ID] = c
	}
	out := make(map[string][]consolidation.Candidate, len(facts))
	for i, f := range facts {
		for _, id := range perFact[i] {
			if c, ok := byID[id]; ok {
				out[f.ID] = append(out[f.ID], c)
			}
		}
	}
	return out, nil
}
