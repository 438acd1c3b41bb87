package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/sqlstore"
	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/redact/redacttest"
)

// servedBank is `promptops serve --bank` running in the test's process.
type servedBank struct {
	t      *testing.T
	addr   string
	done   chan int
	mu     sync.Mutex
	stderr bytes.Buffer
}

// startServe runs serve --bank with args added and waits until it listens;
// an empty store leaves the URL to $PROMPTOPS_STORE.
func startServe(t *testing.T, bank, store string, args ...string) *servedBank {
	t.Helper()
	addrs := make(chan string, 1)
	serveReady = func(addr string) { addrs <- addr }
	defer func() { serveReady = nil }()
	s := &servedBank{t: t, done: make(chan int, 1)}
	all := []string{"serve", "--bank", bank, "--listen", "127.0.0.1:0"}
	if store != "" { // else $PROMPTOPS_STORE
		all = append(all, "--store", store)
	}
	all = append(all, args...)
	go func() {
		s.done <- Main(all, strings.NewReader(""), io.Discard, &lockedWriter{&s.mu, &s.stderr})
	}()
	select {
	case s.addr = <-addrs:
	case code := <-s.done:
		t.Fatalf("serve exited %d: %s", code, s.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not start")
	}
	return s
}

func (s *servedBank) do(method, path, body string) (int, string) {
	s.t.Helper()
	req, err := http.NewRequest(method, "http://"+s.addr+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// stop ends serve with SIGTERM and returns what it logged.
func (s *servedBank) stop() string {
	s.t.Helper()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		s.t.Fatal(err)
	}
	select {
	case code := <-s.done:
		if code != ExitOK {
			s.t.Errorf("serve exited %d", code)
		}
	case <-time.After(30 * time.Second):
		s.t.Fatal("serve did not stop on SIGTERM")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// storeText is every row of every table of the store as text, the tables
// read from the database's own catalog so that none is left out.
func storeText(t *testing.T, url string) string {
	t.Helper()
	ctx := context.Background()
	st, err := sqlstore.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	catalog := "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
	if strings.HasPrefix(url, "sqlite:") {
		catalog = "SELECT name FROM sqlite_master WHERE type = 'table'"
	}
	rows, err := st.DB().QueryContext(ctx, catalog)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	rows.Close()
	if len(tables) < 5 {
		t.Fatalf("the catalog lists %d tables: %v", len(tables), tables)
	}
	var b strings.Builder
	for _, table := range tables {
		rows, err := st.DB().QueryContext(ctx, `SELECT * FROM "`+table+`"`)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
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
				if bs, ok := v.([]byte); ok {
					v = string(bs)
				}
				fmt.Fprintf(&b, "%s.%s=%v|", table, cols[i], v)
			}
			b.WriteByte('\n')
		}
		rows.Close()
	}
	return b.String()
}

// bankFacts lists a bank's facts straight from the store.
func bankFacts(t *testing.T, url, bank string) []consolidation.Fact {
	t.Helper()
	st, err := sqlstore.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	facts, err := st.ListFacts(context.Background(), consolidation.BankID(bank), "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	return facts
}

// leaks returns the secrets of the corpus that text holds, by kind. A
// short one (a PIN) is looked for with the words said before it, as any
// four digits may be in a timestamp.
func leaks(text string, secrets []redacttest.Secret) []string {
	var out []string
	for _, s := range secrets {
		for _, v := range s.Values {
			needle := v
			if i := strings.Index(s.Text, v); len(v) < 8 && i >= 0 {
				needle = s.Text[max(0, i-8) : i+len(v)]
			}
			if strings.Contains(text, needle) {
				out = append(out, s.Kind)
			}
		}
	}
	return out
}

func factLine(t *testing.T, id, scope, text string) string {
	t.Helper()
	data, err := json.Marshal(map[string]any{"id": id, "scope": scope, "text": text})
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// The done-when test of redaction at the write path: the corpus of fake
// secrets and benign look-alikes, half retained over HTTP through serve
// --bank and half imported by facts import, on both stores. Every fact is
// stored, every secret replaced; no secret is in any table, any LLM or
// embeddings request of a run (facts written straight into the store
// included), recall, export, list, or what the verbs logged; at most 2% of
// the benign facts changed.
func TestRedactionCorpusEndToEnd(t *testing.T) {
	secrets := redacttest.Secrets(t)
	benign := redacttest.Benign(t)
	const bank = "team-a/support"
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			type posted struct {
				id, text string
				secret   *redacttest.Secret
			}
			var all []posted
			for i := range secrets {
				all = append(all, posted{id: fmt.Sprintf("s-%02d", i), text: secrets[i].Text, secret: &secrets[i]})
			}
			for i, b := range benign {
				all = append(all, posted{id: fmt.Sprintf("b-%02d", i), text: b})
			}
			var httpFacts []string
			var jsonl strings.Builder
			for i, p := range all {
				line := factLine(t, p.id, "u1", p.text)
				if i%2 == 0 {
					httpFacts = append(httpFacts, line)
				} else {
					jsonl.WriteString(line + "\n")
				}
			}
			var logs strings.Builder

			srv := startServe(t, bank, url)
			code, body := srv.do("POST", "/v1/banks/team-a/support/facts", `{"facts": [`+strings.Join(httpFacts, ",")+`]}`)
			var ans struct {
				Stored   int            `json:"stored"`
				Redacted map[string]int `json:"redacted"`
			}
			if code != http.StatusOK || json.Unmarshal([]byte(body), &ans) != nil || ans.Stored != len(httpFacts) {
				t.Fatalf("retain: %d %s", code, body)
			}
			for i, p := range all {
				if i%2 == 0 && p.secret != nil && ans.Redacted[p.secret.Kind] == 0 {
					t.Errorf("the retain answer's redacted %v has no %s", ans.Redacted, p.secret.Kind)
				}
			}
			if l := leaks(body, secrets); l != nil {
				t.Errorf("the retain answer holds secrets of %v", l)
			}
			_, metrics := srv.do("GET", "/metrics", "")
			if !strings.Contains(metrics, `promptops_serve_bank_redactions_total{kind="aws-access-token",name="support",namespace="team-a"}`) {
				t.Errorf("no redaction metric by kind:\n%s", grepLines(metrics, "redactions"))
			}
			logs.WriteString(srv.stop())

			file := filepath.Join(t.TempDir(), "facts.jsonl")
			if err := os.WriteFile(file, []byte(jsonl.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := run(t, "", "facts", "import", "--bank", bank, "--store", url, file)
			if code != ExitOK || !strings.Contains(out, "redacted ") || !strings.Contains(out, "aws-access-token=") {
				t.Fatalf("import: %d %s %s", code, out, errOut)
			}
			logs.WriteString(out + errOut)

			// Every fact stored, every secret replaced, at most 2% of the
			// benign facts changed.
			stored := map[string]string{}
			for _, f := range bankFacts(t, url, bank) {
				stored[f.ID] = f.Text
			}
			changed := 0
			for _, p := range all {
				got, ok := stored[p.id]
				switch {
				case !ok:
					t.Errorf("fact %s was not stored", p.id)
				case p.secret != nil && !strings.Contains(got, "[REDACTED:"+p.secret.Kind+"]"):
					t.Errorf("fact %s (%s) stored as %q", p.id, p.secret.Kind, got)
				case p.secret == nil && got != p.text:
					changed++
					t.Logf("benign fact changed: %q", got)
				}
			}
			if share := float64(changed) / float64(len(benign)); share > 0.02 {
				t.Errorf("%d of %d benign facts changed (%.1f%%), want at most 2%%", changed, len(benign), 100*share)
			}
			if l := leaks(storeText(t, url), secrets); l != nil {
				t.Fatalf("the store's tables hold secrets of %v", l)
			}

			// Facts written straight into the store, secrets and all, are
			// redacted before the run sends them.
			st, err := sqlstore.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			var raw []consolidation.Fact
			for i, s := range secrets {
				raw = append(raw, consolidation.Fact{ID: fmt.Sprintf("raw-%02d", i), Scope: "u2", Text: s.Text})
			}
			if _, err := st.ImportFacts(context.Background(), consolidation.BankID(bank), raw); err != nil {
				t.Fatal(err)
			}
			st.Close()

			var mu sync.Mutex
			var sent strings.Builder
			model := llmtest.New(func(n int, req llmtest.Request) llmtest.Reply {
				mu.Lock()
				sent.WriteString(req.System + "\n" + req.User + "\n")
				mu.Unlock()
				return llmtest.OnePerFact(n, req)
			})
			defer model.Close()
			emb := llmtest.NewEmbeddings(func(text string, dims int) ([]float32, error) {
				mu.Lock()
				sent.WriteString(text + "\n")
				mu.Unlock()
				return llmtest.TopicVector(dims, []string{text}, []float64{1}), nil
			})
			defer emb.Close()
			embArgs := []string{"--embeddings-base-url", emb.BaseURL(), "--embeddings-model", "e", "--embeddings-dimensions", "32"}
			withEnv(t, map[string]string{"PROMPTOPS_STORE": url})
			code, out, errOut = run(t, "", append([]string{"consolidate", "--bank", bank, "--llm-base-url", model.BaseURL(), "--model", "m", "--batch-size", "10"}, embArgs...)...)
			if code != ExitOK {
				t.Fatalf("consolidate: %d %s", code, errOut)
			}
			logs.WriteString(out + errOut)
			var sum consolidation.Summary
			if err := json.Unmarshal([]byte(out), &sum); err != nil || sum.FactsConsolidated+sum.FactsFailed != int64(len(all)+len(raw)) || sum.Redacted["aws-access-token"] == 0 {
				t.Fatalf("summary %+v (%v)", sum, err)
			}
			if calls, _ := emb.Calls(); calls == 0 || len(model.Requests()) == 0 {
				t.Fatalf("the run made %d embeddings calls and %d LLM calls", calls, len(model.Requests()))
			}
			if l := leaks(sent.String(), secrets); l != nil {
				t.Errorf("the run sent secrets of %v", l)
			}

			// Recall, export and list hold none, nor does anything logged.
			callsBefore, _ := emb.Calls()
			srv = startServe(t, bank, url, embArgs...)
			var answers strings.Builder
			// A query holding a secret is redacted before it is embedded.
			for _, s := range secrets {
				q, _ := json.Marshal(map[string]any{"query": s.Text, "maxTokens": 4000, "scope": "u1", "includePending": true})
				code, body := srv.do("POST", "/v1/banks/team-a/support/recall", string(q))
				if code != http.StatusOK || !strings.Contains(body, "[REDACTED:") && s.Kind == "aws-access-token" {
					t.Errorf("recall: %d %s", code, body)
				}
				answers.WriteString(body)
			}
			code, body = srv.do("GET", "/v1/banks/team-a/support/scopes/u1/export", "")
			if code != http.StatusOK || !strings.Contains(body, "[REDACTED:private-key]") {
				t.Errorf("export: %d %.300s", code, body)
			}
			answers.WriteString(body)
			logs.WriteString(srv.stop())
			for _, verb := range [][]string{{"facts", "list", "-o", "json", "--scope", "u1"}, {"observations", "list", "-o", "json", "--scope", "u1"}} {
				code, out, errOut := run(t, "", append(verb, "--bank", bank)...)
				if code != ExitOK {
					t.Fatalf("%v: %d %s", verb, code, errOut)
				}
				answers.WriteString(out + errOut)
			}
			if calls, _ := emb.Calls(); calls <= callsBefore {
				t.Error("recall embedded no query")
			}
			if l := leaks(sent.String(), secrets); l != nil {
				t.Errorf("recall sent the embeddings API secrets of %v", l)
			}
			if l := leaks(answers.String(), secrets); l != nil {
				t.Errorf("recall, export or list hold secrets of %v", l)
			}
			if l := leaks(logs.String(), secrets); l != nil {
				t.Errorf("the logs hold secrets of %v", l)
			}
		})
	}
}

func grepLines(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Under --redact-secrets=Reject a request or a file holding a secret is
// refused whole, naming the fact and the kind, never the secret, and
// nothing of it is stored.
func TestRedactionReject(t *testing.T) {
	secrets := redacttest.Secrets(t)
	benign := redacttest.Benign(t)
	const bank = "team-a/strict"
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			srv := startServe(t, bank, url, "--redact-secrets", "Reject")
			var logs strings.Builder
			for i, s := range secrets {
				body := `{"facts": [` + factLine(t, "", "u1", benign[i%len(benign)]) + "," + factLine(t, fmt.Sprintf("f-%d", i), "u1", s.Text) + `]}`
				code, out := srv.do("POST", "/v1/banks/team-a/strict/facts", body)
				var e struct {
					Error struct{ Code, Message string }
				}
				if code != http.StatusUnprocessableEntity || json.Unmarshal([]byte(out), &e) != nil || e.Error.Code != "SecretInFact" {
					t.Errorf("%s: %d %s, want 422 SecretInFact", s.Kind, code, out)
					continue
				}
				if !strings.Contains(e.Error.Message, fmt.Sprintf(`facts[1].text of id "f-%d"`, i)) || !strings.Contains(e.Error.Message, s.Kind) {
					t.Errorf("%s: %q does not name the fact and the kind", s.Kind, e.Error.Message)
				}
				if l := leaks(out, secrets); l != nil {
					t.Errorf("%s: the error quotes a secret: %s", s.Kind, out)
				}
			}
			if code, out := srv.do("POST", "/v1/banks/team-a/strict/facts", `{"facts": [`+factLine(t, "", "u1", benign[0])+`]}`); code != http.StatusOK {
				t.Errorf("a benign fact under Reject: %d %s", code, out)
			}
			logs.WriteString(srv.stop())

			var jsonl strings.Builder
			jsonl.WriteString(factLine(t, "", "u1", benign[1]) + "\n")
			jsonl.WriteString(factLine(t, "", "u1", secrets[0].Text) + "\n")
			code, out, errOut := run(t, jsonl.String(), "facts", "import", "--redact-secrets=Reject", "--bank", bank, "--store", url, "-")
			if code != ExitInvalid || !strings.Contains(errOut, "line 2: text holds a secret (") || !strings.Contains(errOut, secrets[0].Kind) {
				t.Errorf("import under Reject: %d %s %s", code, out, errOut)
			}
			logs.WriteString(out + errOut)
			if facts := bankFacts(t, url, bank); len(facts) != 1 || facts[0].Text != benign[0] {
				t.Errorf("the bank holds %d facts, want only the benign one posted alone: %+v", len(facts), facts)
			}
			if l := leaks(storeText(t, url)+logs.String(), secrets); l != nil {
				t.Errorf("the store or the logs hold secrets of %v", l)
			}
		})
	}
}

// Personal data kinds are redacted in both stores when asked, through
// both doors, and kept when not.
func TestRedactionPersonalData(t *testing.T) {
	personal := redacttest.PersonalData(t)
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			for _, asked := range []bool{true, false} {
				bank, args := "team-a/kept", []string(nil)
				if asked {
					bank, args = "team-a/asked", []string{"--redact-personal-data", "Email,Phone,PaymentCard,IBAN,NationalID"}
				}
				var lines []string
				var jsonl strings.Builder
				for i, p := range personal {
					line := factLine(t, fmt.Sprintf("p-%02d", i), "u1", p.Text)
					if i%2 == 0 {
						lines = append(lines, line)
					} else {
						jsonl.WriteString(line + "\n")
					}
				}
				srv := startServe(t, bank, url, args...)
				code, out := srv.do("POST", "/v1/banks/"+bank+"/facts", `{"facts": [`+strings.Join(lines, ",")+`]}`)
				if code != http.StatusOK || asked != strings.Contains(out, `"redacted"`) {
					t.Errorf("retain (asked %v): %d %s", asked, code, out)
				}
				srv.stop()
				if code, out, errOut := run(t, jsonl.String(), append(append([]string{"facts", "import", "--bank", bank, "--store", url}, args...), "-")...); code != ExitOK {
					t.Fatalf("import: %d %s %s", code, out, errOut)
				}
				stored := map[string]string{}
				for _, f := range bankFacts(t, url, bank) {
					stored[f.ID] = f.Text
				}
				for i, p := range personal {
					got := stored[fmt.Sprintf("p-%02d", i)]
					if asked && (strings.Contains(got, p.Value) || !strings.Contains(got, "[REDACTED:"+p.Name+"]")) {
						t.Errorf("%s asked: stored %q", p.Kind, got)
					}
					if !asked && got != p.Text {
						t.Errorf("%s not asked: stored %q, want %q", p.Kind, got, p.Text)
					}
				}
			}
			// The asked bank's values are in no table but the kept bank's rows.
			for _, row := range strings.Split(storeText(t, url), "\n") {
				if strings.Contains(row, "team-a/kept") {
					continue
				}
				for _, p := range personal {
					if strings.Contains(row, p.Value) {
						t.Errorf("%s: a row outside the kept bank holds %q: %.200s", p.Kind, p.Value, row)
					}
				}
			}
		})
	}
}

func TestRedactionFlags(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
	for _, tc := range []struct{ args []string }{
		{[]string{"facts", "import", "--redact-secrets", "Mask", "--bank", "a/b", "--store", url, "-"}},
		{[]string{"facts", "import", "--redact-personal-data", "Email,Address", "--bank", "a/b", "--store", url, "-"}},
		{[]string{"serve", "--redact-secrets", "Mask", "--bank", "a/b", "--store", url, "--listen", "127.0.0.1:0"}},
		{[]string{"consolidate", "--redact-personal-data", "Address", "--bank", "a/b", "--store", url, "--llm-base-url", "http://127.0.0.1:1/v1", "--model", "m"}},
	} {
		code, _, errOut := run(t, "", tc.args...)
		i := slices.IndexFunc(tc.args, func(a string) bool { return strings.HasPrefix(a, "--redact-") })
		flag, value := tc.args[i], tc.args[i+1]
		bad := strings.Split(value, ",")
		if code != ExitInvalid || !strings.Contains(errOut, flag) || !strings.Contains(errOut, bad[len(bad)-1]) {
			t.Errorf("%v: exit %d %q, want %d naming %s and %s", tc.args, code, errOut, ExitInvalid, flag, value)
		}
	}
}
