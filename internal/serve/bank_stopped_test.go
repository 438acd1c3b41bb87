package serve

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/sqlstore"
	"github.com/promptops/promptops/internal/pgtest"
)

// A template with a memory section still assembles, 200 and within its
// budget, when the bank's store stops answering (its PostgreSQL frozen:
// every query hangs) and when it is gone (stopped): the section is empty
// and the answer says why. Both ways a bank is reached are checked: in the
// bank's own process, and from another serve (a sidecar) over HTTP.
func TestAssembleWithTheStoreStopped(t *testing.T) {
	ctx := context.Background()
	pg, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	dsn, err := pg.NewDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlstore.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const bank = "shop/customers"
	seedObservations(t, store, bank, consolidation.Fact{ID: "f1", Text: "The customer prefers email", Entities: []string{"customer"}})

	// The bank's process serves the template too (in-process recall); a
	// sidecar serve reaches the bank over HTTP.
	const timeout = 250 * time.Millisecond
	rec := &consolidation.Recaller{Store: store, Scope: bank}
	bankSrv := New(Options{Log: logr.Discard(), MemoryTimeout: timeout, RequestTimeout: time.Second, Banks: []*Bank{{Namespace: "shop", Name: "customers", Store: store, Recaller: rec, Encoding: "cl100k_base"}}})
	bankTS := newServer(t, bankSrv.Handler())
	defer bankTS.Close()
	bankSrv.Apply(map[string][]byte{"support": memoryPlanJSON(t, "http://127.0.0.1:1", true)})
	sidecar := memoryServer(t, memoryPlanJSON(t, bankTS.URL, true), "", timeout)

	body := `{"namespace":"shop","name":"support","intent":"chat","runtime":{"question":"Hi"},"query":"How does the customer like to be reached?"}`
	servers := map[string]string{"in the bank's process": bankTS.URL, "from a sidecar": sidecar.URL}
	check := func(when string, wantItems bool) {
		t.Helper()
		for name, url := range servers {
			start := time.Now()
			code, a := assembleMemory(t, url, body)
			took := time.Since(start)
			if code != 200 || len(a.Memory) != 1 {
				t.Fatalf("%s, %s: %d %+v", when, name, code, a)
			}
			m := a.Memory[0]
			if wantItems && (len(m.Items) == 0 || m.TimedOut || m.Error != "") {
				t.Fatalf("%s, %s: memory %+v", when, name, m)
			}
			if !wantItems && (len(m.Items) != 0 || (!m.TimedOut && m.Error == "")) {
				t.Fatalf("%s, %s: the section should be empty and say why: %+v", when, name, m)
			}
			if a.Tokens > 400 {
				t.Fatalf("%s, %s: %d tokens over the budget of 400", when, name, a.Tokens)
			}
			t.Logf("%s, %s: 200 in %v, memory %s", when, name, took.Round(time.Millisecond), describe(m))
		}
	}
	check("store up", true)
	// POST .../recall itself: 503, with why.
	recallCode := func(when string, status int, code Code) {
		t.Helper()
		resp, err := http.Post(bankTS.URL+"/v1/banks/shop/customers/recall", "application/json", strings.NewReader(`{"query": "email", "maxTokens": 50}`))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := resp.StatusCode
		if got != status || (code != "" && !strings.Contains(string(out), `"code":"`+string(code)+`"`)) {
			t.Fatalf("%s: recall answered %d %s, want %d %s", when, got, out, status, code)
		}
	}
	recallCode("store up", 200, "")

	thaw, err := pg.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	// Every recall reads the bank's generation first; frozen, it hangs.
	check("store frozen", false)
	recallCode("store frozen", 503, CodeTimeout)
	thaw()
	// The bank recovers: its recall answers again (on a busy machine the
	// first query after the thaw may still pass the memory timeout).
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Post(bankTS.URL+"/v1/banks/shop/customers/recall", "application/json", strings.NewReader(`{"query": "email", "maxTokens": 50}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store thawed: recall still answers %d after 10 s", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
	check("store thawed", true)

	pg.Stop()
	check("store stopped", false)
	recallCode("store stopped", 503, CodeStoreUnavailable)
}

func describe(m MemorySummary) string {
	return fmt.Sprintf("items %d, timedOut %v, error %q", len(m.Items), m.TimedOut, m.Error)
}
