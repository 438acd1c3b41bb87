package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/plan"
)

// A recall's trustedOnly reaches the Query, from the bank API's body and
// from a memory section's request alike; left out, it is false.
func TestRecallTrustedOnlyReachesQuery(t *testing.T) {
	for _, trusted := range []bool{false, true} {
		var req RecallRequest
		body := `{"query": "email", "maxTokens": 100}`
		if trusted {
			body = `{"query": "email", "maxTokens": 100, "trustedOnly": true}`
		}
		if err := json.Unmarshal([]byte(body), &req); err != nil {
			t.Fatal(err)
		}
		q, msg := recallQuery(&req)
		if msg != "" || q.TrustedOnly != trusted {
			t.Errorf("%s: query %+v, %q", body, q, msg)
		}
		r := recallRequestOf(plan.MemoryRequest{Query: "email", MaxTokens: 100, TrustedOnly: trusted})
		if q, msg := recallQuery(&r); r.TrustedOnly != trusted || msg != "" || q.TrustedOnly != trusted {
			t.Errorf("a memory section's request with TrustedOnly %v: %+v, %+v", trusted, r, q)
		}
	}
}

// A memory section with trustedOnly asks the bank over HTTP for trusted
// items alone, and drops any other the bank answers; a section without it
// sends no trustedOnly (a bank of before takes the body) and keeps every
// item.
func TestAssembleTrustedOnlyOverHTTP(t *testing.T) {
	var body []byte
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = readAll(r)
		_, _ = w.Write([]byte(`{"items":[` +
			`{"id":"o1","kind":"observation","text":"The customer prefers email.","score":0.9,"proofCount":1,"trusted":true},` +
			`{"id":"o2","kind":"observation","text":"The customer asked for a refund in cash.","score":0.8,"proofCount":1,"trusted":false}]}`))
	}))
	defer remote.Close()
	for _, trusted := range []bool{false, true} {
		p, err := plan.Load(memoryPlanJSON(t, remote.URL, true))
		if err != nil {
			t.Fatal(err)
		}
		p.Sections[2].Memory.TrustedOnly = trusted
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		ts := memoryServer(t, data, "", 0)
		code, a := assembleMemory(t, ts.URL, `{"namespace":"shop","name":"support","intent":"chat","runtime":{"question":"Hi"},"query":"How does the customer like to be reached?"}`)
		if code != 200 || len(a.Memory) != 1 {
			t.Fatalf("trustedOnly %v: %d %+v", trusted, code, a)
		}
		if sent := bytes.Contains(body, []byte(`"trustedOnly":true`)); sent != trusted || (!trusted && bytes.Contains(body, []byte("trustedOnly"))) {
			t.Errorf("trustedOnly %v: the recall's body %s", trusted, body)
		}
		if !strings.Contains(a.Prompt, "prefers email") || strings.Contains(a.Prompt, "refund in cash") != !trusted {
			t.Errorf("trustedOnly %v: prompt %q", trusted, a.Prompt)
		}
		ids := []string{}
		for _, it := range a.Memory[0].Items {
			ids = append(ids, it.ID)
			if it.ID == "o1" && !it.Trusted {
				t.Errorf("trustedOnly %v: o1 lost its trusted: %+v", trusted, it)
			}
		}
		if want := map[bool][]string{false: {"o1", "o2"}, true: {"o1"}}[trusted]; !slices.Equal(ids, want) || a.Memory[0].Recalled != 2 {
			t.Errorf("trustedOnly %v: items %v of %d recalled, want %v of 2", trusted, ids, a.Memory[0].Recalled, want)
		}
	}
}

func readAll(r *http.Request) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(r.Body)
	return b.Bytes(), err
}

// A recall answers "trusted" on every item, false included, as the
// OpenAPI document requires it.
func TestRecallItemsCarryTrusted(t *testing.T) {
	b := newBankServer(t, "sqlite://"+t.TempDir()+"/bank.db", nil, BankLimits{}, nil)
	if code, body := b.post(t, "facts", "", []byte(`{"facts": [{"text": "Alice moved to Lisbon", "source": "crm"}, {"text": "Alice likes Lisbon"}]}`)); code != http.StatusOK {
		t.Fatalf("retain: %d %s", code, body)
	}
	for _, body := range []string{
		`{"query": "Alice Lisbon", "maxTokens": 200, "includePending": true}`,
		`{"query": "Alice Lisbon", "maxTokens": 200, "includePending": true, "trustedOnly": true}`,
	} {
		code, resp := b.post(t, "recall", "", []byte(body))
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", body, code, resp)
		}
		var raw struct{ Items []map[string]any }
		if err := json.Unmarshal(resp, &raw); err != nil {
			t.Fatal(err)
		}
		for _, it := range raw.Items {
			if _, ok := it["trusted"].(bool); !ok {
				t.Errorf("%s: an item without trusted: %v", body, it)
			}
		}
	}
}

// sourceStore is a bank store that keeps the facts retained and exports
// them, with an observation citing them, as a store does.
type sourceStore struct {
	facts []consolidation.Fact
}

func (s *sourceStore) RetainFacts(_ context.Context, _ consolidation.BankID, facts []consolidation.Fact) (int, int, error) {
	s.facts = append(s.facts, facts...)
	return len(facts), 0, nil
}

func (s *sourceStore) EraseScope(context.Context, consolidation.ScopeKey) (consolidation.Erasure, error) {
	return consolidation.Erasure{}, nil
}

func (s *sourceStore) DeleteFacts(context.Context, consolidation.BankID, []string) (consolidation.Erasure, error) {
	return consolidation.Erasure{}, nil
}

func (s *sourceStore) DeleteScopeFacts(context.Context, consolidation.ScopeKey, []string) (consolidation.Erasure, error) {
	return consolidation.Erasure{}, nil
}

func (s *sourceStore) ExportScope(_ context.Context, _ consolidation.ScopeKey, fn func(consolidation.Exported) error) error {
	var ids []string
	for _, f := range s.facts {
		if err := fn(consolidation.Exported{Kind: "fact", Fact: f}); err != nil {
			return err
		}
		ids = append(ids, f.ID)
	}
	return fn(consolidation.Exported{Kind: "observation", Fact: consolidation.Fact{ID: "o1", Scope: "user:ana", Text: "Ana lives in Lisbon", CreatedAt: time.Now()},
		SourceFactIDs: ids, ProofCount: len(ids)})
}

// A fact retained with a source keeps it (one without is "unspecified"),
// the same text from another source is another fact, and a scope's
// export shows each fact's source.
func TestRetainAndExportSource(t *testing.T) {
	st := &sourceStore{}
	s := New(Options{Log: logr.Discard(), Banks: []*Bank{{Namespace: "team-a", Name: "support", Store: st, Encoding: "cl100k_base"}}})
	s.Apply(map[string][]byte{})
	ts := newServer(t, s.Handler())
	defer ts.Close()
	resp, err := http.Post(ts.URL+"/v1/banks/team-a/support/facts", "application/json", strings.NewReader(
		`{"facts": [{"scope": "user:ana", "text": "Ana lives in Lisbon", "source": "crm"}, {"scope": "user:ana", "text": "Ana lives in Lisbon", "source": "user"}, {"scope": "user:ana", "text": "Ana lives in Lisbon"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(st.facts) != 3 {
		t.Fatalf("retain: %d, %d facts stored", resp.StatusCode, len(st.facts))
	}
	if got := []string{st.facts[0].Source, st.facts[1].Source, st.facts[2].Source}; !slices.Equal(got, []string{"crm", "user", consolidation.SourceUnspecified}) {
		t.Errorf("sources stored %v", got)
	}
	if a, b, c := st.facts[0].ID, st.facts[1].ID, st.facts[2].ID; a == b || a == c || b == c {
		t.Errorf("one text of three sources has ids %s %s %s, want three", a, b, c)
	}
	resp, err = http.Get(ts.URL + "/v1/banks/team-a/support/scopes/user:ana/export")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var lines []map[string]any
	dec := json.NewDecoder(resp.Body)
	for dec.More() {
		var line map[string]any
		if err := dec.Decode(&line); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line)
	}
	if len(lines) != 4 {
		t.Fatalf("export: %d lines %v", len(lines), lines)
	}
	for i, want := range []string{"crm", "user", consolidation.SourceUnspecified} {
		if lines[i]["source"] != want {
			t.Errorf("export line %d: source %v, want %s", i, lines[i]["source"], want)
		}
	}
}
