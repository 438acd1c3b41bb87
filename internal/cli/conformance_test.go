package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/promptops/promptops/internal/serve"
	"github.com/promptops/promptops/internal/testenv"
	"github.com/promptops/promptops/plan"
)

// conformanceCase is one file of testdata/conformance/cases (written by
// hack/conformance; the format is in docs/plan.md).
type conformanceCase struct {
	Name    string            `json:"name"`
	Plan    json.RawMessage   `json:"plan"`
	Intent  string            `json:"intent"`
	Runtime map[string]string `json:"runtime"`
	Query   string            `json:"query"`
	Scope   string            `json:"scope"`
	Memory  map[string]struct {
		Items    []plan.MemoryItem `json:"items"`
		Error    string            `json:"error"`
		TimedOut bool              `json:"timedOut"`
	} `json:"memory"`
	Expected struct {
		Prompt       string                 `json:"prompt"`
		Tokens       int                    `json:"tokens"`
		MaxTokens    int                    `json:"maxTokens"`
		WithinBudget bool                   `json:"withinBudget"`
		Cut          []string               `json:"cut"`
		Sections     []serve.SectionSummary `json:"sections"`
		Memory       []memoryExpected       `json:"memory"`
		// CacheableTokens is the prefix the same in every request.
		CacheableTokens int `json:"cacheableTokens"`
	} `json:"expected"`
}

func conformanceCases(t *testing.T) []conformanceCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testenv.Root(), "testdata", "conformance", "cases", "*.json"))
	if err != nil || len(files) < 30 {
		t.Fatalf("want at least 30 conformance cases, found %d (%v)", len(files), err)
	}
	var out []conformanceCase
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var c conformanceCase
		if err := json.Unmarshal(data, &c); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, c)
	}
	return out
}

type memoryExpected struct {
	Section  string   `json:"section"`
	Scope    string   `json:"scope"`
	Items    []string `json:"items"`
	Recalled int      `json:"recalled"`
	Omitted  int      `json:"omitted"`
	TimedOut bool     `json:"timedOut"`
	Error    string   `json:"error"`
}

// recall answers a case's recalls from its memory inputs.
func (c *conformanceCase) recall(ctx context.Context, r plan.MemoryRequest) ([]plan.MemoryItem, error) {
	m := c.Memory[r.Section]
	switch {
	case m.TimedOut:
		return nil, context.DeadlineExceeded
	case m.Error != "":
		return nil, &plan.RecallError{Code: plan.MemoryCode(m.Error), Message: "as the case says"}
	}
	return m.Items, nil
}

// bankRecaller sends serve's recalls over HTTP to the test's bank,
// whatever endpoint the vector's plan has (none).
type bankRecaller struct {
	*serve.HTTPRecaller
	url string
}

func (b bankRecaller) Recall(ctx context.Context, r plan.MemoryRequest) ([]plan.MemoryItem, error) {
	r.Endpoint = b.url
	return b.HTTPRecaller.Recall(ctx, r)
}

// Every conformance vector gives the same answer through the package, the
// assemble verb and the server; the reference tokenizer agrees on the count.
// Memory vectors' recall answers come from a bank over HTTP for the server
// (the assemble verb has no memory and skips them).
func TestConformanceVectors(t *testing.T) {
	tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader())
	var current atomic.Pointer[conformanceCase]
	var askedScope atomic.Pointer[string] // the scope serve's last recall asked for
	bank := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := current.Load()
		var req struct {
			Query string `json:"query"`
			Scope string `json:"scope"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		askedScope.Store(&req.Scope)
		for _, m := range c.Memory {
			switch {
			case m.TimedOut:
				<-r.Context().Done()
			case m.Error != "":
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, `{"error":{"code":%q,"message":"as the case says"}}`, m.Error)
			default:
				json.NewEncoder(w).Encode(map[string]any{"items": m.Items})
			}
			return // the vectors have one memory section
		}
	}))
	defer bank.Close()
	srv := serve.New(serve.Options{Log: logr.Discard(), MemoryRecaller: bankRecaller{serve.NewHTTPRecaller(""), bank.URL}, MemoryTimeout: 100 * time.Millisecond})
	sources := map[string][]byte{}
	for _, c := range conformanceCases(t) {
		sources[c.Name] = c.Plan
	}
	// Cases share templates: the server holds each template once.
	dedup := map[string][]byte{}
	for _, data := range sources {
		p, err := plan.Load(data)
		if err != nil {
			t.Fatal(err)
		}
		dedup[p.Name] = data
	}
	srv.Apply(dedup)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	for _, c := range conformanceCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			current.Store(&c)
			want := c.Expected
			p, err := plan.Load(c.Plan)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := tiktoken.GetEncoding(p.Encoding)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(ref.EncodeOrdinary(want.Prompt)); n != want.Tokens {
				t.Errorf("reference tiktoken counts %d tokens, the vector says %d", n, want.Tokens)
			}

			// The package.
			a, err := p.Assemble(context.Background(), c.Intent, c.Runtime, plan.WithRecall(c.recall), plan.WithQuery(c.Query), plan.WithScope(c.Scope))
			if err != nil {
				t.Fatal(err)
			}
			var mems []memoryExpected
			for _, m := range a.Memory {
				e := memoryExpected{Section: m.Section, Scope: m.Scope, Items: []string{}, Recalled: m.Recalled, Omitted: m.Omitted, TimedOut: m.TimedOut, Error: string(m.Code)}
				for _, it := range m.Items {
					e.Items = append(e.Items, it.ID)
				}
				mems = append(mems, e)
			}
			if !reflect.DeepEqual(mems, want.Memory) {
				t.Fatalf("package: memory %+v, want %+v", mems, want.Memory)
			}
			var secs []serve.SectionSummary
			for _, s := range a.Sections {
				secs = append(secs, serve.SectionSummary{Name: s.Name, Tokens: s.Tokens, TruncatedTokens: s.TruncatedTokens})
			}
			cut := a.Cut
			if cut == nil {
				cut = []string{}
			}
			if a.Text != want.Prompt || a.Tokens != want.Tokens || a.MaxTokens != want.MaxTokens || a.WithinBudget != want.WithinBudget || !reflect.DeepEqual(cut, want.Cut) || !reflect.DeepEqual(secs, want.Sections) || a.CacheableTokens != want.CacheableTokens {
				t.Fatalf("package: %d tokens cut %v sections %v cacheable %d; want %d cut %v sections %v cacheable %d", a.Tokens, cut, secs, a.CacheableTokens, want.Tokens, want.Cut, want.Sections, want.CacheableTokens)
			}

			// promptops assemble (it has no memory).
			if !p.HasMemory() {
				planFile := filepath.Join(t.TempDir(), "plan.json")
				if err := os.WriteFile(planFile, c.Plan, 0o644); err != nil {
					t.Fatal(err)
				}
				stdin, _ := json.Marshal(c.Runtime)
				code, prompt, report := run(t, string(stdin), "assemble", "--plan", planFile, "--intent", c.Intent)
				wantCode := ExitOK
				if !want.WithinBudget {
					wantCode = ExitFailed
				}
				if code != wantCode || prompt != want.Prompt || !strings.Contains(report, fmt.Sprintf(": %d tokens of %d", want.Tokens, want.MaxTokens)) {
					t.Fatalf("assemble: exit %d (want %d), same prompt %v, report %q", code, wantCode, prompt == want.Prompt, report)
				}
			}

			// promptops serve.
			askedScope.Store(nil)
			body, _ := json.Marshal(map[string]any{"namespace": p.Namespace, "name": p.Name, "intent": c.Intent, "runtime": c.Runtime, "query": c.Query, "scope": c.Scope})
			resp, err := http.Post(ts.URL+"/v1/assemble", "application/json", strings.NewReader(string(body)))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got serve.AssembleResponse
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			wantStatus := http.StatusOK
			if !want.WithinBudget {
				wantStatus = http.StatusUnprocessableEntity
			}
			if resp.StatusCode != wantStatus || got.Prompt != want.Prompt || got.Tokens != want.Tokens || got.MaxTokens != want.MaxTokens ||
				got.WithinBudget != want.WithinBudget || got.Revision != p.Revision || !reflect.DeepEqual(got.Sections, want.Sections) || got.CacheableTokens != want.CacheableTokens {
				t.Fatalf("serve: status %d (want %d), %d tokens, sections %v", resp.StatusCode, wantStatus, got.Tokens, got.Sections)
			}
			var gotMem []memoryExpected
			for _, m := range got.Memory {
				// The answer does not repeat the scope: the bank says what
				// it was asked.
				e := memoryExpected{Section: m.Section, Items: []string{}, Recalled: m.Recalled, Omitted: m.Omitted, TimedOut: m.TimedOut, Error: m.Error}
				if asked := askedScope.Load(); asked != nil {
					e.Scope = *asked
				}
				for _, it := range m.Items {
					e.Items = append(e.Items, it.ID)
				}
				gotMem = append(gotMem, e)
			}
			if !reflect.DeepEqual(gotMem, want.Memory) {
				t.Fatalf("serve: memory %+v, want %+v", gotMem, want.Memory)
			}
		})
	}
}
