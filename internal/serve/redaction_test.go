package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/sqlstore"
	"github.com/promptops/promptops/internal/pgtest"
	"github.com/promptops/promptops/internal/redact"
	"github.com/promptops/promptops/internal/redact/redacttest"
)

// redactingServer serves testBank from the store at url with red, its
// logs kept in logs; answers are checked against openapi.json.
func redactingServer(t *testing.T, url string, red *redact.Redactor, logs *strings.Builder) *bankServer {
	t.Helper()
	store, err := sqlstore.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.EnsureBank(context.Background(), testBank); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		logs.WriteString(prefix + args + "\n")
		mu.Unlock()
	}, funcr.Options{Verbosity: 10})
	rec := &consolidation.Recaller{Store: store, Scope: testBank}
	s := New(Options{Log: log, Banks: []*Bank{{Namespace: "team-a", Name: "support", Store: store, Recaller: rec, Encoding: "cl100k_base", Redactor: red}}})
	s.Apply(map[string][]byte{})
	ts := newServer(t, s.Handler())
	t.Cleanup(ts.Close)
	return &bankServer{store: store, rec: rec, srv: s, ts: ts}
}

func newRedactor(t testing.TB, cfg redact.Config) *redact.Redactor {
	t.Helper()
	r, err := redact.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Retain under Redact and Reject, on both stores: the answers (held to
// openapi.json), the spans and the logs hold no secret of the corpus.
func TestBankRedactionAnswersSpansLogs(t *testing.T) {
	secrets := redacttest.Secrets(t)
	leaked := func(s string) []string {
		var out []string
		for _, c := range secrets {
			for _, v := range c.Values {
				if len(v) >= 8 && strings.Contains(s, v) {
					out = append(out, c.Kind)
				}
			}
		}
		return out
	}
	eachBankStore(t, func(t *testing.T, url string) {
		rec := recordSpans(t)
		var logs strings.Builder
		var facts []map[string]string
		for i, s := range secrets {
			facts = append(facts, map[string]string{"id": fmt.Sprintf("s-%d", i), "text": s.Text})
		}
		body, _ := json.Marshal(map[string]any{"facts": facts})

		b := redactingServer(t, url, newRedactor(t, redact.Config{}), &logs)
		code, out := b.post(t, "facts", "", body)
		var ans RetainResponse
		if code != http.StatusOK || json.Unmarshal(out, &ans) != nil || ans.Stored != len(secrets) || len(ans.Redacted) < 15 {
			t.Fatalf("retain: %d %s", code, out)
		}
		answers := string(out)

		r := redactingServer(t, url, newRedactor(t, redact.Config{Secrets: redact.Reject}), &logs)
		// The same bank, which holds the facts redacted: nothing is added.
		before := r.factCount(t)
		code, out = r.post(t, "facts", "", body)
		if code != http.StatusUnprocessableEntity || !strings.Contains(string(out), `"SecretInFact"`) || !strings.Contains(string(out), `facts[0].text of id \"s-0\"`) {
			t.Fatalf("retain under Reject: %d %s", code, out)
		}
		if n := r.factCount(t); n != before {
			t.Errorf("a refused request changed the bank's facts from %d to %d", before, n)
		}
		answers += string(out)
		if l := leaked(answers); l != nil {
			t.Errorf("the answers hold secrets of %v", l)
		}
		if l := leaked(logs.String()); l != nil {
			t.Errorf("the logs hold secrets of %v", l)
		}
		spans := rec.Ended()
		if len(spans) < 2 {
			t.Fatalf("%d spans", len(spans))
		}
		for _, sp := range spans {
			var all strings.Builder
			all.WriteString(sp.Name() + sp.Status().Description)
			for _, a := range sp.Attributes() {
				all.WriteString(a.Value.Emit())
			}
			for _, e := range sp.Events() {
				all.WriteString(e.Name)
				for _, a := range e.Attributes {
					all.WriteString(a.Value.Emit())
				}
			}
			if l := leaked(all.String()); l != nil {
				t.Errorf("span %q holds secrets of %v", sp.Name(), l)
			}
		}
	})
}

// BenchmarkRetainRedaction: retain through the handler on both stores,
// 100 facts a request (a tenth of them holding a secret), with redaction
// off, on (secrets) and on with every personal data kind, in the same run.
// ns/fact is a fact's share of a request's time; facts/s the throughput.
//
//	go test -run '^$' -bench BenchmarkRetainRedaction -benchtime 30x ./internal/serve/
func BenchmarkRetainRedaction(b *testing.B) {
	secrets := redacttest.Secrets(b)
	benign := redacttest.Benign(b)
	pg, err := pgtest.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer pg.Stop()
	const perRequest = 100
	for _, store := range []string{"postgres", "sqlite"} {
		for _, mode := range []struct {
			name string
			cfg  *redact.Config
		}{
			{"off", nil},
			{"secrets", &redact.Config{}},
			{"secrets+personal", &redact.Config{PersonalData: redact.PersonalKinds}},
		} {
			b.Run(store+"/"+mode.name, func(b *testing.B) {
				url := "sqlite://" + b.TempDir() + "/bank.db"
				if store == "postgres" {
					if url, err = pg.NewDatabase(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
				st, err := sqlstore.Open(context.Background(), url)
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				if err := st.EnsureBank(context.Background(), testBank); err != nil {
					b.Fatal(err)
				}
				bank := &Bank{Namespace: "team-a", Name: "support", Store: st, Recaller: &consolidation.Recaller{Store: st, Scope: testBank}, Encoding: "cl100k_base"}
				if mode.cfg != nil {
					bank.Redactor = newRedactor(b, *mode.cfg)
				}
				s := New(Options{Banks: []*Bank{bank}})
				s.Apply(map[string][]byte{})
				h := s.Handler()
				bodies := make([][]byte, b.N)
				for i := range bodies {
					facts := make([]map[string]string, perRequest)
					for j := range facts {
						text := benign[(i*perRequest+j)%len(benign)]
						if j%10 == 0 {
							text = secrets[(i*perRequest+j)%len(secrets)].Text
						}
						facts[j] = map[string]string{"text": fmt.Sprintf("%s (request %d, fact %d)", text, i, j)}
					}
					bodies[i], _ = json.Marshal(map[string]any{"facts": facts})
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/banks/team-a/support/facts", bytes.NewReader(bodies[i])))
					if w.Code != http.StatusOK {
						b.Fatal(w.Code, w.Body.String())
					}
				}
				el := b.Elapsed()
				b.ReportMetric(float64(el.Nanoseconds())/float64(b.N*perRequest), "ns/fact")
				b.ReportMetric(float64(b.N*perRequest)/el.Seconds(), "facts/s")
			})
		}
	}
}

// BenchmarkRedactFact: the redaction of one fact alone, as retain does it,
// over the corpus (secrets, benign look-alikes and personal data).
func BenchmarkRedactFact(b *testing.B) {
	var texts []string
	for _, s := range redacttest.Secrets(b) {
		texts = append(texts, s.Text)
	}
	texts = append(texts, redacttest.Benign(b)...)
	for _, p := range redacttest.PersonalData(b) {
		texts = append(texts, p.Text)
	}
	for _, mode := range []struct {
		name string
		cfg  redact.Config
	}{{"secrets", redact.Config{}}, {"secrets+personal", redact.Config{PersonalData: redact.PersonalKinds}}} {
		b.Run(mode.name, func(b *testing.B) {
			r := newRedactor(b, mode.cfg)
			counts := redact.Counts{}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				f := consolidation.Fact{Text: texts[i%len(texts)]}
				if err := consolidation.RedactFact(r, &f, counts); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/fact")
		})
	}
}
