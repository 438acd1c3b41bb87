package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/llm"
	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/pgtest"
)

var pg *pgtest.Server

// TestMain starts a real PostgreSQL for the package; the tests fail, never
// skip, when it cannot start.
func TestMain(m *testing.M) {
	var err error
	pg, err = pgtest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		os.Exit(1)
	}
	code := m.Run()
	pg.Stop()
	os.Exit(code)
}

// eachStore runs f against a fresh PostgreSQL database and a fresh SQLite file.
func eachStore(t *testing.T, f func(t *testing.T, s *Store)) {
	t.Run("postgres", func(t *testing.T) {
		dsn, err := pg.NewDatabase(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		f(t, s)
	})
	t.Run("sqlite", func(t *testing.T) {
		s, err := Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "bank.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		f(t, s)
	})
}

const bank = "agents/support"

func day(s string) *time.Time {
	t, err := time.Parse("2006-01-02", s)
	if err != nil {
		panic(err)
	}
	return &t
}

func importFacts(t *testing.T, s *Store, facts ...consolidation.Fact) {
	t.Helper()
	if _, err := s.ImportFacts(context.Background(), bank, facts); err != nil {
		t.Fatal(err)
	}
}

func engine(s *Store, srv *llmtest.Server, mod func(*consolidation.Settings)) *consolidation.Engine {
	set := consolidation.Settings{Bank: bank, BatchSize: 8, MaxFacts: 200, MaxPromptTokens: 16000, MaxAttempts: 3}
	if mod != nil {
		mod(&set)
	}
	return &consolidation.Engine{
		Store: s, Settings: set,
		LLM: llm.New(llm.Config{BaseURL: srv.BaseURL(), Model: "test", Timeout: 2 * time.Second, MaxRetries: 2}),
	}
}

// factStates counts facts per status and returns failure reasons.
func factStates(t *testing.T, s *Store) (map[string]int, []string) {
	t.Helper()
	facts, err := s.ListFacts(context.Background(), bank, "", 10000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	var reasons []string
	for _, f := range facts {
		out[f.Status]++
		if f.Status == consolidation.FactFailed {
			if f.FailureReason == "" {
				t.Errorf("fact %s failed without a reason", f.ID)
			}
			reasons = append(reasons, f.FailureReason)
		}
	}
	return out, reasons
}

func observations(t *testing.T, s *Store) []consolidation.Observation {
	t.Helper()
	obs, err := s.ListObservations(context.Background(), bank)
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

// ensureScope registers a scope's key, as the first facts of the scope
// would.
func ensureScope(t *testing.T, s *Store, key consolidation.ScopeKey) {
	t.Helper()
	if _, err := s.db.ExecContext(context.Background(), s.rebind("INSERT INTO promptops_banks (id, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING"), string(key), s.timeArg(ptrTime(time.Now()))); err != nil {
		t.Fatal(err)
	}
}

// eachRow calls fn with the columns and values of every row query reads
// (text read as []byte given as string), then checks the rows' error.
func eachRow(t *testing.T, db *sql.DB, query string, fn func(cols []string, vals []any)) {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if b, ok := v.([]byte); ok {
				vals[i] = string(b)
			}
		}
		fn(cols, vals)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// storeAtVersion is a new store of the kind ("postgres" or "sqlite")
// migrated only to schema version pgVersion or sqliteVersion, as a release
// before the later migrations left it, and the URL that Open upgrades it
// through; old.db is the store's connection, to write rows as that
// release did and to close before Open.
func storeAtVersion(t *testing.T, kind string, pgVersion, sqliteVersion int) (old *Store, url string) {
	t.Helper()
	ctx := context.Background()
	driver, raw, d, version := "sqlite", "", dialect(sqlite), sqliteVersion
	url = "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
	if kind == "postgres" {
		dsn, err := pg.NewDatabase(ctx)
		if err != nil {
			t.Fatal(err)
		}
		driver, url, raw, d, version = "pgx", dsn, dsn, postgres, pgVersion
	} else {
		raw = "file:" + strings.TrimPrefix(url, "sqlite://")
	}
	db, err := sql.Open(driver, raw)
	if err != nil {
		t.Fatal(err)
	}
	old = &Store{db: db, scan: db, dialect: d, lex: map[string]*lexCache{}}
	if err := old.migrateTo(ctx, version); err != nil {
		t.Fatal(err)
	}
	return old, url
}
