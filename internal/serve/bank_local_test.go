package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/promptops/promptops/internal/assembler"
	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/sqlstore"
	"github.com/promptops/promptops/plan"
)

// countingRecaller counts its calls and answers one item.
type countingRecaller struct{ calls atomic.Int64 }

func (s *countingRecaller) Recall(context.Context, plan.MemoryRequest) ([]plan.MemoryItem, error) {
	s.calls.Add(1)
	return []plan.MemoryItem{{ID: "x", Kind: "observation", Text: "From the other bank.", Score: 0.9, ProofCount: 1}}, nil
}

// A memory section of a bank this process serves is filled in-process:
// its endpoint (unreachable here) and the MemoryRecaller are not used; a
// section of another bank still goes to the MemoryRecaller.
func TestBankFillsOwnMemorySectionsInProcess(t *testing.T) {
	ctx := context.Background()
	store, err := sqlstore.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "bank.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const bank = "shop/customers"
	seedObservations(t, store, bank,
		consolidation.Fact{ID: "f1", Text: "The customer prefers email", Entities: []string{"customer"}},
		consolidation.Fact{ID: "f2", Text: "Bob collects stamps", Entities: []string{"Bob"}})
	for _, own := range []bool{true, false} {
		name := "customers"
		if !own {
			name = "elsewhere"
		}
		stub := &countingRecaller{}
		rec := &consolidation.Recaller{Store: store, Scope: consolidation.ScopeKey("shop/" + name)}
		s := New(Options{Log: logr.Discard(), MemoryRecaller: stub, Banks: []*Bank{{Namespace: "shop", Name: name, Store: store, Recaller: rec, Encoding: "cl100k_base"}}})
		s.Apply(map[string][]byte{"support": memoryPlanJSON(t, "http://127.0.0.1:1", true)})
		ts := newServer(t, s.Handler())
		defer ts.Close()
		code, a := assembleMemory(t, ts.URL, `{"namespace":"shop","name":"support","intent":"chat","runtime":{"question":"Hi"},"query":"How does the customer like to be reached by email?"}`)
		if code != 200 || len(a.Memory) != 1 || a.Memory[0].TimedOut || a.Memory[0].Error != "" || len(a.Memory[0].Items) == 0 {
			t.Fatalf("own %v: %d %+v", own, code, a)
		}
		want, calls := "The customer prefers email", int64(0)
		if !own {
			want, calls = "From the other bank.", 1
		}
		if a.Memory[0].Items[0].Text != want || !strings.Contains(a.Prompt, want) || stub.calls.Load() != calls {
			t.Errorf("own %v: items %+v, %d calls to the recaller", own, a.Memory[0].Items, stub.calls.Load())
		}
	}
}

// The in-process recall passes a section's maxItems and minScore on to
// the bank's recall (0 for either: the recall's default), as POST
// .../recall takes them.
func TestLocalRecallerPassesMaxItemsAndMinScore(t *testing.T) {
	ctx := context.Background()
	store, err := sqlstore.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "bank.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const bank = "shop/customers"
	texts := []string{"The customer prefers email for invoices", "The customer prefers phone calls"}
	seedObservations(t, store, bank, consolidation.Fact{ID: "f0", Text: texts[0]}, consolidation.Fact{ID: "f1", Text: texts[1]})
	s := New(Options{Log: logr.Discard(), Banks: []*Bank{{Namespace: "shop", Name: "customers", Store: store,
		Recaller: &consolidation.Recaller{Store: store, Scope: bank}, Encoding: "cl100k_base"}}})
	recall := func(maxItems, minScore int) []plan.MemoryItem {
		t.Helper()
		items, err := s.recaller.Recall(ctx, plan.MemoryRequest{Section: "memory", Bank: plan.BankRef{Namespace: "shop", Name: "customers"},
			Query: "Does the customer prefer email for invoices?", MaxTokens: 200, MaxItems: maxItems, MinScorePerMille: minScore})
		if err != nil {
			t.Fatalf("maxItems %d, minScore %v: %v", maxItems, minScore, err)
		}
		return items
	}
	all := recall(0, 0)
	if len(all) != 2 || all[0].Text != texts[0] || all[0].Score <= all[1].Score {
		t.Fatalf("both observations, the email one first: %+v", all)
	}
	if got := recall(1, 0); len(got) != 1 || got[0].ID != all[0].ID {
		t.Errorf("maxItems 1: %+v", got)
	}
	// A threshold in thousandths between the two scores.
	between := int(math.Floor(all[1].Score*1000)) + 1
	if plan.ScoreOfPerMille(between) > all[0].Score {
		t.Fatalf("scores %v and %v are too close to tell apart in thousandths", all[0].Score, all[1].Score)
	}
	if got := recall(0, between); len(got) != 1 || got[0].ID != all[0].ID {
		t.Errorf("minScore between the two scores: %+v", got)
	}
}

// seedObservations stores facts in bank and consolidates each into an
// observation of its own text, as a run would.
func seedObservations(t *testing.T, store *sqlstore.Store, bank consolidation.BankID, facts ...consolidation.Fact) {
	t.Helper()
	ctx := context.Background()
	if _, err := store.ImportFacts(ctx, bank, facts); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claimed, err := store.ClaimFacts(ctx, bank.Scope(""), "t", len(facts), now, now.Add(time.Hour))
	if err != nil || len(claimed) != len(facts) {
		t.Fatal(len(claimed), err)
	}
	ops := consolidation.Ops{}
	var consolidated []string
	for _, f := range claimed {
		ops.Creates = append(ops.Creates, consolidation.Create{Text: f.Text, SourceFactIDs: []string{f.ID}})
		consolidated = append(consolidated, f.ID)
	}
	if _, err := store.Apply(ctx, bank.Scope(""), "t", ops, consolidated, now); err != nil {
		t.Fatal(err)
	}
}

// A recall in-process that fails because the request's context ended
// reports the context's error (the section timed out), not the store as
// unavailable.
func TestLocalRecallerReportsTheEndedContext(t *testing.T) {
	store, err := sqlstore.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "bank.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const bank = "shop/customers"
	seedObservations(t, store, bank, consolidation.Fact{ID: "f0", Text: "The customer prefers email"})
	s := New(Options{Log: logr.Discard(), Banks: []*Bank{{Namespace: "shop", Name: "customers", Store: store,
		Recaller: &consolidation.Recaller{Store: store, Scope: bank}, Encoding: "cl100k_base"}}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := plan.MemoryRequest{Bank: plan.BankRef{Namespace: "shop", Name: "customers"}, Query: "email", MaxTokens: 100}
	items, err := s.recaller.Recall(ctx, req)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("with the context ended: %v, %v; want context.Canceled", items, err)
	}
	if items, err := s.recaller.Recall(context.Background(), req); err != nil || len(items) != 1 {
		t.Fatalf("then with a live context: %v, %v", items, err)
	}
}

// scopedMemoryPlanJSON is memoryPlanJSON (query from the request) with the
// memory section's scope.
func scopedMemoryPlanJSON(t *testing.T, endpoint string, sc plan.MemoryScope) []byte {
	t.Helper()
	p, err := plan.Load(memoryPlanJSON(t, endpoint, true))
	if err != nil {
		t.Fatal(err)
	}
	p.Sections[2].Memory.Scope = &sc
	if _, err := assembler.Seal(context.Background(), p, false); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// A scoped memory section recalls the request's scope only (and the
// shared scope when the plan says so), in-process and over HTTP; a bad
// scope is the request's error, naming the field.
func TestAssembleScopedMemory(t *testing.T) {
	ctx := context.Background()
	store, err := sqlstore.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "bank.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const bank = "shop/customers"
	seedObservations(t, store, bank, consolidation.Fact{ID: "s1", Text: "The customer is reached by email until six"})
	seedScope(t, store, bank, "user:ana", "The customer prefers email")
	seedScope(t, store, bank, "user:bob", "The customer prefers a phone call")
	const ask = `{"namespace":"shop","name":"support","intent":"chat","runtime":{"question":"Hi"},"query":"How does the customer like to be reached by email?","scope":%q}`
	for _, shared := range []bool{false, true} {
		s := New(Options{Log: logr.Discard(), Banks: []*Bank{{Namespace: "shop", Name: "customers", Store: store,
			Recaller: &consolidation.Recaller{Store: store, Scope: bank}, Encoding: "cl100k_base"}}})
		s.Apply(map[string][]byte{"support": scopedMemoryPlanJSON(t, "http://127.0.0.1:1", plan.MemoryScope{FromRequest: true, IncludeShared: shared})})
		ts := newServer(t, s.Handler())
		defer ts.Close()
		code, a := assembleMemory(t, ts.URL, fmt.Sprintf(ask, "user:ana"))
		if code != 200 || len(a.Memory) != 1 || a.Memory[0].Error != "" {
			t.Fatalf("shared %v: %d %+v", shared, code, a)
		}
		if !strings.Contains(a.Prompt, "prefers email") || strings.Contains(a.Prompt, "phone") || strings.Contains(a.Prompt, "until six") != shared {
			t.Errorf("shared %v: prompt %q", shared, a.Prompt)
		}
		if code, a = assembleMemory(t, ts.URL, fmt.Sprintf(ask, "")); code != 200 || a.Memory[0].Error != string(plan.MemoryNoScope) || strings.Contains(a.Prompt, "customer") {
			t.Errorf("no scope: %d %+v", code, a)
		}
		code, out := post(t, ts.URL, fmt.Sprintf(ask, "user/ana"))
		if code != 400 || !strings.Contains(string(out), `"code":"InvalidScope"`) || !strings.Contains(string(out), "scope: byte 5") {
			t.Errorf("bad scope: %d %s", code, out)
		}
	}
	// Over HTTP the scope and includeShared go in the recall's body.
	var got RecallRequest
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&got)
		_, _ = w.Write([]byte(`{"items":[]}`))
	}))
	defer remote.Close()
	ts := memoryServer(t, scopedMemoryPlanJSON(t, remote.URL, plan.MemoryScope{FromRequest: true, IncludeShared: true}), "", 0)
	if code, _ := assembleMemory(t, ts.URL, fmt.Sprintf(ask, "user:bob")); code != 200 || got.Scope != "user:bob" || !got.IncludeShared {
		t.Errorf("over HTTP: %d, asked %+v", code, got)
	}
}

// seedScope stores a fact in a scope of bank and an observation of its
// text, as a run would.
func seedScope(t *testing.T, store *sqlstore.Store, bank consolidation.BankID, scope, text string) {
	t.Helper()
	ctx := context.Background()
	key := bank.Scope(scope)
	if _, err := store.ImportFacts(ctx, bank, []consolidation.Fact{{ID: "f-" + scope, Scope: scope, Text: text}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claimed, err := store.ClaimFacts(ctx, key, "t", 1, now, now.Add(time.Hour))
	if err != nil || len(claimed) != 1 {
		t.Fatal(len(claimed), err)
	}
	ops := consolidation.Ops{Creates: []consolidation.Create{{Text: text, SourceFactIDs: []string{claimed[0].ID}}}}
	if _, err := store.Apply(ctx, key, "t", ops, []string{claimed[0].ID}, now); err != nil {
		t.Fatal(err)
	}
}

// The scopes' indexes a served bank holds stay within IndexCacheBytes,
// the least recently used dropped first; the most recent is kept whatever
// its size, and a dropped scope is loaded again when asked.
func TestScopeIndexCacheIsBoundedInBytes(t *testing.T) {
	ctx := context.Background()
	store, err := sqlstore.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "bank.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const bank = "shop/customers"
	users := []string{"u1", "u2", "u3", "u4"}
	for _, u := range users {
		seedScope(t, store, bank, u, "The customer "+u+" prefers email over phone calls")
	}
	recall := func(bk *Bank, scope string) {
		t.Helper()
		items, err := recallScoped(ctx, bk, scope, false, consolidation.Query{Text: "Does the customer prefer email?", Limit: 5})
		if err != nil || len(items) != 1 || !strings.Contains(items[0].Text, scope) {
			t.Fatalf("%s: %+v %v", scope, items, err)
		}
	}
	// One scope's size, measured alone.
	one := &Bank{Namespace: "shop", Name: "customers", Store: store, Recaller: &consolidation.Recaller{Store: store, Scope: bank}, IndexCacheBytes: 1}
	recall(one, "u1")
	size := one.scopes().bytes
	if size <= 0 || one.scopes().lru.Len() != 1 {
		t.Fatalf("one scope: %d bytes, %d held", size, one.scopes().lru.Len())
	}
	recall(one, "u2")
	if one.scopes().lru.Len() != 1 || one.scopes().byName["u2"] == nil {
		t.Fatalf("a bound below one scope keeps the most recent only: %d held", one.scopes().lru.Len())
	}
	two := &Bank{Namespace: "shop", Name: "customers", Store: store, Recaller: &consolidation.Recaller{Store: store, Scope: bank}, IndexCacheBytes: 2*size + size/2}
	for _, u := range []string{"u1", "u2", "u3", "u1", "u4"} {
		recall(two, u)
	}
	sc := two.scopes()
	if sc.lru.Len() != 2 || sc.byName["u1"] == nil || sc.byName["u4"] == nil || sc.bytes > sc.max {
		t.Fatalf("held %d scopes (%d bytes of %d): u1 %v u4 %v", sc.lru.Len(), sc.bytes, sc.max, sc.byName["u1"] != nil, sc.byName["u4"] != nil)
	}
	var sum int64
	for e := sc.lru.Front(); e != nil; e = e.Next() {
		sum += e.Value.(*scopeRecaller).r.Bytes()
	}
	if sum != sc.bytes {
		t.Errorf("bytes counted %d, held %d", sc.bytes, sum)
	}
	sc.drop("u1")
	if sc.lru.Len() != 1 || sc.bytes != size {
		t.Errorf("after dropping u1: %d held, %d bytes", sc.lru.Len(), sc.bytes)
	}
}

// Erasing or exporting a scope whose name is not one is the request's
// error, naming the field, before the store is asked.
func TestScopeRoutesRefuseABadScope(t *testing.T) {
	ctx := context.Background()
	store, err := sqlstore.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "bank.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s := New(Options{Log: logr.Discard(), Banks: []*Bank{{Namespace: "shop", Name: "customers", Store: store,
		Recaller: &consolidation.Recaller{Store: store, Scope: "shop/customers"}, Encoding: "cl100k_base"}}})
	ts := newServer(t, s.Handler())
	defer ts.Close()
	for _, method := range []string{http.MethodDelete, http.MethodGet} {
		url := ts.URL + "/v1/banks/shop/customers/scopes/user%2Fana"
		if method == http.MethodGet {
			url += "/export"
		}
		req, err := http.NewRequest(method, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(out), `"code":"InvalidScope"`) || !strings.Contains(string(out), `"message":"scope: byte 5`) {
			t.Errorf("%s %s: %d %s", method, url, resp.StatusCode, out)
		}
	}
}
