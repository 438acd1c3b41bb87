package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/ptr"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/llm"
	"github.com/promptops/promptops/internal/consolidation/sqlstore"
	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/pgtest"
	"github.com/promptops/promptops/internal/tokens"
	"github.com/promptops/promptops/plan"
)

var (
	pgOnce sync.Once
	pgSrv  *pgtest.Server
	pgErr  error
)

// stopPG stops the PostgreSQL the bank tests started, if any (TestMain).
func stopPG() {
	if pgSrv != nil {
		pgSrv.Stop()
	}
}

const testBank = "team-a/support"

// eachBankStore runs f against a fresh PostgreSQL database and a fresh
// SQLite file; the tests fail, never skip, when PostgreSQL cannot start.
func eachBankStore(t *testing.T, f func(t *testing.T, url string)) {
	t.Run("postgres", func(t *testing.T) {
		pgOnce.Do(func() { pgSrv, pgErr = pgtest.Start() })
		if pgErr != nil {
			t.Fatal(pgErr)
		}
		dsn, err := pgSrv.NewDatabase(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		f(t, dsn)
	})
	t.Run("sqlite", func(t *testing.T) {
		f(t, "sqlite://"+filepath.Join(t.TempDir(), "bank.db"))
	})
}

// bankServer serves testBank from the store at url, with an embeddings
// server when emb is set.
type bankServer struct {
	store *sqlstore.Store
	rec   *consolidation.Recaller
	srv   *Server
	ts    *httptest.Server
}

func newBankServer(t *testing.T, url string, emb *llmtest.EmbedServer, limits BankLimits, auth *Auth) *bankServer {
	t.Helper()
	store, err := sqlstore.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.EnsureBank(context.Background(), testBank); err != nil {
		t.Fatal(err)
	}
	rec := &consolidation.Recaller{Store: store, Scope: testBank, Floor: 0.3}
	if emb != nil {
		rec.Embedder = embedder(emb)
	}
	s := New(Options{Log: logr.Discard(), Auth: auth, Banks: []*Bank{{Namespace: "team-a", Name: "support", Store: store, Recaller: rec, Encoding: "cl100k_base"}}, BankLimits: limits})
	s.Apply(map[string][]byte{})
	ts := newServer(t, s.Handler())
	t.Cleanup(ts.Close)
	return &bankServer{store: store, rec: rec, srv: s, ts: ts}
}

func embedder(emb *llmtest.EmbedServer) consolidation.Embedder {
	return llm.NewEmbeddings(llm.EmbeddingsConfig{BaseURL: emb.BaseURL(), Model: "test-embed", Timeout: 2 * time.Second, MaxRetries: 1})
}

func (b *bankServer) post(t *testing.T, endpoint, token string, body []byte) (int, []byte) {
	t.Helper()
	return b.do(t, http.MethodPost, endpoint, token, body)
}

func (b *bankServer) do(t *testing.T, method, endpoint, token string, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, b.ts.URL+"/v1/banks/team-a/support/"+endpoint, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (b *bankServer) factCount(t *testing.T) int {
	t.Helper()
	facts, err := b.store.ListFacts(context.Background(), testBank, "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	return len(facts)
}

// The retain validation of facts import, each error naming the item and
// the field, and nothing of a request stored when one item is bad.
func TestBankRetainValidation(t *testing.T) {
	good := `{"text": "Alice moved to Lisbon", "occurredStart": "2026-03-01"}`
	eachBankStore(t, func(t *testing.T, url string) {
		b := newBankServer(t, url, nil, BankLimits{}, nil)
		for _, tc := range []struct {
			name, body string
			code       Code
			msg        string
		}{
			{"end before start", `{"facts": [` + good + `, {"text": "a trip", "occurredStart": "2024-02-01", "occurredEnd": "2024-01-31"}]}`, CodeInvalidFact, `facts[1].occurredEnd: "2024-01-31" is before occurredStart "2024-02-01"`},
			{"a bad time", `{"facts": [` + good + `, ` + good + `, {"text": "x", "mentionedAt": "soon"}]}`, CodeInvalidFact, `facts[2].mentionedAt: "soon" is neither RFC 3339 nor YYYY-MM-DD`},
			{"no text", `{"facts": [{"id": "a"}]}`, CodeInvalidFact, "facts[0].text: is required"},
			{"blank text", `{"facts": [` + good + `, {"text": "  "}]}`, CodeInvalidFact, "facts[1].text: is required"},
			{"entities of the wrong type", `{"facts": [{"text": "t", "entities": "Alice"}]}`, CodeInvalidFact, "facts[0].entities: a JSON string where an array is wanted"},
			{"an unknown field", `{"facts": [{"text": "t", "tag": ["x"]}]}`, CodeInvalidFact, "facts[0].tag: is not a field of a fact"},
			{"a huge text", `{"facts": [{"text": "` + strings.Repeat("a", MaxFactTextBytes+1) + `"}]}`, CodeInvalidFact, fmt.Sprintf("facts[0].text: %d bytes, at most %d", MaxFactTextBytes+1, MaxFactTextBytes)},
			{"too many tags", `{"facts": [{"text": "t", "tags": [` + strings.TrimSuffix(strings.Repeat(`"x",`, MaxFactLabels+1), ",") + `]}]}`, CodeInvalidFact, "facts[0].tags: 65 items"},
			{"a source in capitals", `{"facts": [` + good + `, {"text": "t", "source": "CRM"}]}`, CodeInvalidFact, "facts[1].source: must start with a lowercase letter"},
			{"a source with a space", `{"facts": [{"text": "t", "source": "tool web"}]}`, CodeInvalidFact, "facts[0].source: byte 5 is not a lowercase letter, digit or one of . _ -"},
			{"a long source", `{"facts": [{"text": "t", "source": "` + strings.Repeat("a", consolidation.MaxSourceBytes+1) + `"}]}`, CodeInvalidFact, fmt.Sprintf("facts[0].source: %d bytes, at most %d", consolidation.MaxSourceBytes+1, consolidation.MaxSourceBytes)},
			{"a source not a string", `{"facts": [{"text": "t", "source": 7}]}`, CodeInvalidFact, "facts[0].source:"},
			{"no facts", `{"facts": []}`, CodeInvalidFact, "facts: at least one fact"},
			{"an unknown top-level field", `{"fact": []}`, CodeMalformed, "unknown field"},
			{"not JSON", `{"facts": [`, CodeMalformed, "the JSON ends early"},
		} {
			code, body := b.post(t, "facts", "", []byte(tc.body))
			if code != http.StatusBadRequest {
				t.Errorf("%s: %d %s", tc.name, code, body)
				continue
			}
			if c, msg := errorCode(t, body); c != tc.code || !strings.Contains(msg, tc.msg) {
				t.Errorf("%s: %s %q, want %s %q", tc.name, c, msg, tc.code, tc.msg)
			}
		}
		if n := b.factCount(t); n != 0 {
			t.Fatalf("%d facts stored from refused requests", n)
		}
	})
}

type retainAnswer struct {
	Stored, Unchanged int
	IDs               []string
}

// Idempotent by id: the same id and text again is counted unchanged, an id
// left out gets the id facts import derives, and other text under a known
// id is 409 naming it, with nothing of the request stored.
func TestBankRetainIdempotent(t *testing.T) {
	eachBankStore(t, func(t *testing.T, url string) {
		b := newBankServer(t, url, nil, BankLimits{}, nil)
		body := []byte(`{"facts": [{"id": "f-1", "text": "Alice moved to Lisbon", "tags": ["move"]}, {"text": "Bob adopted a cat", "occurredStart": "2026-01-05"}]}`)
		var first, again retainAnswer
		for _, out := range []*retainAnswer{&first, &again} {
			code, resp := b.post(t, "facts", "", body)
			if code != http.StatusOK {
				t.Fatalf("%d %s", code, resp)
			}
			if err := json.Unmarshal(resp, out); err != nil {
				t.Fatal(err)
			}
		}
		want := consolidation.DerivedFactID(testBank, consolidation.Fact{Text: "Bob adopted a cat", OccurredStart: ptr.To(time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC))})
		if first.Stored != 2 || first.Unchanged != 0 || len(first.IDs) != 2 || first.IDs[0] != "f-1" || first.IDs[1] != want {
			t.Fatalf("first: %+v, want 2 stored, ids [f-1 %s]", first, want)
		}
		if again.Stored != 0 || again.Unchanged != 2 || fmt.Sprint(again.IDs) != fmt.Sprint(first.IDs) {
			t.Fatalf("again: %+v", again)
		}
		code, resp := b.post(t, "facts", "", []byte(`{"facts": [{"text": "Carol runs the budget"}, {"id": "f-1", "text": "Alice moved to Porto"}]}`))
		if c, msg := errorCode(t, resp); code != http.StatusConflict || c != CodeFactConflict || !strings.Contains(msg, `"f-1"`) {
			t.Fatalf("conflict: %d %s", code, resp)
		}
		if n := b.factCount(t); n != 2 {
			t.Fatalf("%d facts, want 2: the conflicting request stored something", n)
		}
	})
}

// Each limit has its own 413: facts per request, and body bytes.
func TestBankRetainLimits(t *testing.T) {
	eachBankStore(t, func(t *testing.T, url string) {
		b := newBankServer(t, url, nil, BankLimits{MaxFactsPerRequest: 3, MaxRetainBytes: 2048}, nil)
		fact := `{"text": "a fact"}`
		code, resp := b.post(t, "facts", "", []byte(`{"facts": [`+strings.Repeat(fact+",", 3)+fact+`]}`))
		if c, msg := errorCode(t, resp); code != http.StatusRequestEntityTooLarge || c != CodeTooManyFacts || !strings.Contains(msg, "facts: 4 items, at most 3 per request (--max-facts-per-request)") {
			t.Fatalf("too many facts: %d %s", code, resp)
		}
		code, resp = b.post(t, "facts", "", []byte(`{"facts": [{"text": "`+strings.Repeat("b", 3000)+`"}]}`))
		if c, msg := errorCode(t, resp); code != http.StatusRequestEntityTooLarge || c != CodeTooLarge || !strings.Contains(msg, "over 2048 bytes (--max-retain-bytes)") {
			t.Fatalf("too many bytes: %d %s", code, resp)
		}
		// A body far over the limit, of unknown length: refused on the way.
		req, _ := http.NewRequest(http.MethodPost, b.ts.URL+"/v1/banks/team-a/support/facts", io.LimitReader(zeros{}, 300<<20))
		r, err := http.DefaultClient.Do(req)
		if err == nil {
			r.Body.Close()
			if r.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("a 300 MB body: %d", r.StatusCode)
			}
		}
		if n := b.factCount(t); n != 0 {
			t.Fatalf("%d facts stored", n)
		}
		code, resp = b.post(t, "recall", "", []byte(`{"query": "`+strings.Repeat("q", MaxQueryBytes+1)+`", "maxTokens": 10}`))
		if c, msg := errorCode(t, resp); code != http.StatusBadRequest || c != CodeInvalidRecall || !strings.HasPrefix(msg, "query:") {
			t.Fatalf("a long query: %d %s", code, resp)
		}
		for body, field := range map[string]string{
			`{"maxTokens": 10}`:                                         "query: required",
			`{"query": "x"}`:                                            "maxTokens: required",
			`{"query": "x", "maxTokens": 0}`:                            "maxTokens: 0",
			`{"query": "x", "maxTokens": 999999}`:                       "maxTokens: 999999",
			`{"query": "x", "maxTokens": 10, "maxItems": 0}`:            "maxItems: 0",
			`{"query": "x", "maxTokens": 10, "minScorePerMille": 1500}`: "minScorePerMille: 1500",
			`{"query": "x", "maxTokens": 10, "minScore": 0.5}`:          "minScore: a field renamed minScorePerMille",
		} {
			code, resp := b.post(t, "recall", "", []byte(body))
			if c, msg := errorCode(t, resp); code != http.StatusBadRequest || c != CodeInvalidRecall || !strings.HasPrefix(msg, field) {
				t.Errorf("%s: %d %s, want %s", body, code, resp, field)
			}
		}
		for _, body := range []string{``, " \n", `[]`, `null`, `{"query": 1, "maxTokens": 10}`, `{"query": "x", "maxTokens": 10} {}`} {
			code, resp := b.post(t, "recall", "", []byte(body))
			if c, msg := errorCode(t, resp); code != http.StatusBadRequest || c != CodeMalformed || !strings.HasPrefix(msg, "the body must be one JSON object") {
				t.Errorf("recall %s: %d %s, want %s", body, code, resp, CodeMalformed)
			}
			code, resp = b.post(t, "facts", "", []byte(body))
			if c, msg := errorCode(t, resp); code != http.StatusBadRequest || c != CodeMalformed || !strings.HasPrefix(msg, "the body must be one JSON object") {
				t.Errorf("facts %s: %d %s, want %s", body, code, resp, CodeMalformed)
			}
		}
		// A bank not served here.
		req, _ = http.NewRequest(http.MethodPost, b.ts.URL+"/v1/banks/team-a/other/recall", strings.NewReader(`{"query": "x", "maxTokens": 10}`))
		if r, err := http.DefaultClient.Do(req); err != nil || r.StatusCode != http.StatusNotFound {
			t.Fatalf("another bank: %v %v", r, err)
		}
		// Exactly the limit is accepted.
		if code, resp := b.post(t, "facts", "", []byte(`{"facts": [{"text": "one"}, {"text": "two"}, {"text": "three"}]}`)); code != http.StatusOK {
			t.Fatalf("3 facts at a limit of 3: %d %s", code, resp)
		}
		if n := b.factCount(t); n != 3 {
			t.Fatalf("%d facts stored, want 3", n)
		}
	})
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}

// topics are the bank's facts; queries ask about them in other words.
var topics = []struct{ fact, query string }{
	{"Alice moved to Lisbon in March to join the design team.", "Which city does our new designer live in now?"},
	{"Bob adopted a grey cat named Pixel last winter.", "Does anyone on the team have a pet?"},
	{"Carol runs the quarterly budget review for finance.", "Who is in charge of checking the money every three months?"},
	{"Dmitri prefers tea over coffee in meetings.", "What drink should be served to him during calls?"},
	{"Eve is allergic to peanuts.", "Any food restrictions for the team dinner?"},
}

// topicVector puts a fact and the query about it at a cosine of about 0.86
// and everything else far apart.
func topicVector(text string, _ int) ([]float32, error) {
	for i, tp := range topics {
		switch text {
		case tp.fact:
			return llmtest.TopicVector(64, []string{fmt.Sprintf("topic-%d", i), "told", text}, []float64{1, 0.4, 0.05}), nil
		case tp.query:
			return llmtest.TopicVector(64, []string{fmt.Sprintf("topic-%d", i), "asked", text}, []float64{1, 0.4, 0.05}), nil
		}
	}
	return llmtest.TopicVector(64, []string{text}, []float64{1}), nil
}

type recallAnswer struct {
	Items     []plan.MemoryItem
	Text      string
	Tokens    int
	MaxTokens int
	Omitted   int
}

func (b *bankServer) recall(t *testing.T, body string) recallAnswer {
	t.Helper()
	code, resp := b.post(t, "recall", "", []byte(body))
	if code != http.StatusOK {
		t.Fatalf("recall: %d %s", code, resp)
	}
	var out recallAnswer
	if err := json.Unmarshal(resp, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Facts posted over HTTP are pending, recalled with includePending, then
// consolidated by the next engine run; a paraphrase then finds its
// observation first by meaning, and text's exact count is tokens, within
// maxTokens, whole items only.
func TestBankRetainConsolidateRecall(t *testing.T) {
	enc, err := tokens.Get("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	eachBankStore(t, func(t *testing.T, url string) {
		emb := llmtest.NewEmbeddings(topicVector)
		t.Cleanup(emb.Close)
		b := newBankServer(t, url, emb, BankLimits{}, nil)
		var facts []string
		for _, tp := range topics {
			raw, _ := json.Marshal(map[string]any{"text": tp.fact, "tags": []string{"team"}, "occurredStart": "2026-03-01"})
			facts = append(facts, string(raw))
		}
		if code, resp := b.post(t, "facts", "", []byte(`{"facts": [`+strings.Join(facts, ",")+`]}`)); code != http.StatusOK {
			t.Fatalf("retain: %d %s", code, resp)
		}
		got := b.recall(t, `{"query": "Eve peanuts", "maxTokens": 200, "includePending": true}`)
		if len(got.Items) == 0 || got.Items[0].Kind != consolidation.KindFact || got.Items[0].Text != topics[4].fact {
			t.Fatalf("pending: %+v", got.Items)
		}
		if got := b.recall(t, `{"query": "Eve peanuts", "maxTokens": 200}`); len(got.Items) != 0 {
			t.Fatalf("without includePending, before consolidation: %+v", got.Items)
		}

		srv := llmtest.New(llmtest.OnePerFact)
		t.Cleanup(srv.Close)
		eng := &consolidation.Engine{Store: b.store,
			Settings: consolidation.Settings{Bank: testBank, BatchSize: 8, MaxFacts: 200, MaxPromptTokens: 16000, MaxAttempts: 3, DuplicateSimilarity: 0.97, SemanticFloor: 0.3},
			LLM:      llm.New(llm.Config{BaseURL: srv.BaseURL(), Model: "test", Timeout: 5 * time.Second, MaxRetries: 2}),
			Embedder: embedder(emb)}
		sum, err := eng.Run(context.Background())
		if err != nil || sum.FactsConsolidated != int64(len(topics)) {
			t.Fatalf("run: %+v %v", sum, err)
		}
		// The previous generation answers while the new one loads.
		var first recallAnswer
		waitFor(t, "the consolidated observations", func() bool {
			first = b.recall(t, fmt.Sprintf(`{"query": %q, "maxTokens": 500}`, topics[0].query))
			return len(first.Items) > 0 && first.Items[0].Kind == consolidation.KindObservation
		})
		for i, tp := range topics {
			got := b.recall(t, fmt.Sprintf(`{"query": %q, "maxTokens": 500, "maxItems": 3, "tags": ["team"]}`, tp.query))
			if len(got.Items) == 0 || got.Items[0].Text != tp.fact || got.Items[0].Kind != consolidation.KindObservation {
				t.Fatalf("topic %d: %+v", i, got.Items)
			}
			it := got.Items[0]
			if it.Score < 0.5 || it.Score > 1 || it.ProofCount != 1 || len(it.SourceFactIDs) != 1 || it.OccurredStart == nil {
				t.Errorf("topic %d: item %+v", i, it)
			}
			if n := enc.Count(got.Text); n != got.Tokens || n > got.MaxTokens || !strings.HasPrefix(got.Text, plan.MemoryLine(it)) {
				t.Errorf("topic %d: tokens %d, text counts %d, maxTokens %d: %q", i, got.Tokens, n, got.MaxTokens, got.Text)
			}
		}
		if got := b.recall(t, fmt.Sprintf(`{"query": %q, "maxTokens": 500, "tags": ["other"]}`, topics[0].query)); len(got.Items) != 0 {
			t.Errorf("tags filter: %+v", got.Items)
		}
		if got := b.recall(t, fmt.Sprintf(`{"query": %q, "maxTokens": 500, "minScorePerMille": 990}`, topics[0].query)); len(got.Items) != 0 {
			t.Errorf("minScorePerMille filter: %+v", got.Items)
		}
		// A budget for the first line only: the rest are omitted, whole.
		all := b.recall(t, `{"query": "team Alice Bob Carol Dmitri Eve", "maxTokens": 1000}`)
		if len(all.Items) < 2 {
			t.Fatalf("broad query: %+v", all.Items)
		}
		one := enc.Count(plan.MemoryLine(all.Items[0]))
		cut := b.recall(t, fmt.Sprintf(`{"query": "team Alice Bob Carol Dmitri Eve", "maxTokens": %d}`, one))
		if len(cut.Items) != 1 || cut.Omitted != len(all.Items)-1 || cut.Tokens != one || enc.Count(cut.Text) != one {
			t.Fatalf("cut to %d tokens: %+v", one, cut)
		}
	})
}

// DELETE .../facts/{id}?scope= deletes in that scope only; without it, in
// every scope that holds the id (an id is unique per scope).
func TestDeleteFactInAScope(t *testing.T) {
	b := newBankServer(t, "sqlite://"+filepath.Join(t.TempDir(), "bank.db"), nil, BankLimits{}, nil)
	if code, out := b.post(t, "facts", "", []byte(`{"facts": [{"id": "f1", "scope": "user:ana", "text": "Ana moved to Porto"}, {"id": "f1", "scope": "user:bob", "text": "Bob moved to Faro"}]}`)); code != http.StatusOK {
		t.Fatalf("retain: %d %s", code, out)
	}
	for _, tc := range []struct {
		endpoint string
		want     int
		body     string
	}{
		{"facts/f1?scope=user:ana", http.StatusOK, `"facts":1`},
		{"facts/f1?scope=user:ana", http.StatusNotFound, `"code":"FactNotFound"`},
		{"facts/f1?scope=a%2Fb", http.StatusBadRequest, `"code":"InvalidScope"`},
		{"facts/f1?scope=", http.StatusNotFound, `"code":"FactNotFound"`}, // the shared scope has none
		{"facts/f1", http.StatusOK, `"facts":1`},
	} {
		if code, out := b.do(t, http.MethodDelete, tc.endpoint, "", nil); code != tc.want || !strings.Contains(string(out), tc.body) {
			t.Errorf("DELETE %s: %d %s, want %d with %s", tc.endpoint, code, out, tc.want, tc.body)
		}
	}
	if n := b.factCount(t); n != 0 {
		t.Errorf("%d facts left", n)
	}
}
