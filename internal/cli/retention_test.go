package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/sqlstore"
	"github.com/promptops/promptops/internal/llmtest"
)

// The done-when test of retention, on both stores: facts stored two days
// ago and fresh ones are consolidated (one observation citing an old and a
// fresh fact); a bank served meanwhile recalls the old ones; a run with
// --retention-max-age=24h erases them first: no row of any table holds an
// expired fact's id or text, nor an observation built from it; the
// observation citing an old and a fresh fact goes as erasing the old one
// by id takes it, and the fresh fact is consolidated again on its own;
// fresh facts and their observations are untouched; the summary counts
// the expired facts; and the served bank stops recalling them.
func TestRetentionEndToEnd(t *testing.T) {
	const bank = "team-a/retained"
	expired := map[string]struct{ scope, text string }{
		"expired-fact-1": {"u1", "Quillon prefers the window seat on Lufthansa flights"},
		"expired-fact-2": {"u1", "Quillon keeps his gym locker number 7713 secret"},
		"expired-fact-3": {"u1", "Quillon drives a green Volvo estate"},
		"expired-fact-4": {"u2", "Zebulon collects brass telescopes"},
	}
	fresh := map[string]string{
		"fresh-fact-1": "Marisol teaches cello on Thursdays",
		"fresh-fact-2": "Marisol owns a blue Vespa scooter",
	}
	// The first run notes each fact on its own, but expired-fact-3 and
	// fresh-fact-2 together; a later run notes each fact on its own.
	together := map[string]bool{expired["expired-fact-3"].text: true, fresh["fresh-fact-2"]: true}
	script := func(first bool) llmtest.Script {
		return func(_ int, req llmtest.Request) llmtest.Reply {
			var a llmtest.Answer
			var both []string
			var bothText []string
			for _, f := range llmtest.Facts(req.User) {
				if first && together[f.Text] {
					both, bothText = append(both, f.ID), append(bothText, f.Text)
					continue
				}
				a.Creates = append(a.Creates, map[string]any{"text": "Noted: " + f.Text, "source_fact_ids": []string{f.ID}})
			}
			if len(both) > 0 {
				a.Creates = append(a.Creates, map[string]any{"text": "Noted together: " + strings.Join(bothText, "; "), "source_fact_ids": both})
			}
			return llmtest.Reply{Content: a.JSON()}
		}
	}
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st, err := sqlstore.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			var facts []consolidation.Fact
			for id, f := range expired {
				facts = append(facts, consolidation.Fact{ID: id, Scope: f.scope, Text: f.text})
			}
			for id, text := range fresh {
				facts = append(facts, consolidation.Fact{ID: id, Scope: "u1", Text: text})
			}
			if _, err := st.ImportFacts(ctx, consolidation.BankID(bank), facts); err != nil {
				t.Fatal(err)
			}
			model := llmtest.New(script(true))
			defer model.Close()
			consolidate := func(args ...string) consolidation.Summary {
				t.Helper()
				code, out, errOut := run(t, "", append([]string{"consolidate", "--bank", bank, "--store", url, "--llm-base-url", model.BaseURL(), "--model", "m", "--batch-size", "10"}, args...)...)
				var sum consolidation.Summary
				if code != ExitOK || json.Unmarshal([]byte(out), &sum) != nil {
					t.Fatalf("consolidate %v: %d %s %s", args, code, out, errOut)
				}
				return sum
			}
			if sum := consolidate(); sum.FactsConsolidated != 6 || sum.ExpiredFacts != 0 {
				t.Fatalf("the first run: %+v", sum)
			}
			// The old facts were stored two days ago.
			old := time.Now().UTC().Add(-48 * time.Hour).Format(time.RFC3339)
			if _, err := st.DB().ExecContext(ctx, "UPDATE promptops_facts SET created_at = '"+old+"' WHERE id LIKE 'expired-fact-%'"); err != nil {
				t.Fatal(err)
			}
			freshBefore := map[string]consolidation.Fact{}
			for _, f := range bankFacts(t, url, bank) {
				if _, ok := fresh[f.ID]; ok {
					freshBefore[f.ID] = f
				}
			}
			u1 := consolidation.BankID(bank).Scope("u1")
			obsBefore, err := st.ListObservations(ctx, u1)
			if err != nil {
				t.Fatal(err)
			}
			var fresh1Obs consolidation.Observation
			for _, o := range obsBefore {
				if o.Text == "Noted: "+fresh["fresh-fact-1"] {
					fresh1Obs = o
				}
			}
			if fresh1Obs.ID == "" {
				t.Fatalf("no observation of fresh-fact-1 in %+v", obsBefore)
			}

			srv := startServe(t, bank, url)
			defer func() {
				if srv != nil {
					srv.stop()
				}
			}()
			recall := func(scope, query string) string {
				t.Helper()
				q, _ := json.Marshal(map[string]any{"query": query, "maxTokens": 4000, "scope": scope})
				code, body := srv.do("POST", "/v1/banks/team-a/retained/recall", string(q))
				if code != http.StatusOK {
					t.Fatalf("recall: %d %s", code, body)
				}
				return body
			}
			if body := recall("u1", "Quillon Volvo window seat gym locker"); !strings.Contains(body, expired["expired-fact-1"].text) || !strings.Contains(body, "Noted together") {
				t.Fatalf("before the run the served bank does not recall the old facts: %s", body)
			}

			model.SetScript(script(false))
			sum := consolidate("--retention-max-age", "24h")
			if sum.ExpiredFacts != int64(len(expired)) {
				t.Errorf("the summary counts %d expired facts, want %d: %+v", sum.ExpiredFacts, len(expired), sum)
			}
			// fresh-fact-2 lost the observation it shared with an expired
			// fact and was consolidated again, on its own.
			if sum.FactsConsolidated != 1 {
				t.Errorf("the run consolidated %d facts, want fresh-fact-2 again: %+v", sum.FactsConsolidated, sum)
			}

			// No row of any table holds an expired fact's id or text, nor
			// an observation built from it.
			rows := storeText(t, url)
			for id, f := range expired {
				if strings.Contains(rows, id) || strings.Contains(rows, f.text) {
					t.Errorf("a row still holds %s (%q)", id, f.text)
				}
			}
			if strings.Contains(rows, "Noted together") {
				t.Error("the observation citing an expired fact is still stored")
			}

			// Fresh facts and what they alone support are untouched.
			after := map[string]consolidation.Fact{}
			for _, f := range bankFacts(t, url, bank) {
				after[f.ID] = f
			}
			if len(after) != len(fresh) {
				t.Errorf("the bank holds %d facts after the run, want the %d fresh ones", len(after), len(fresh))
			}
			for id, f := range freshBefore {
				got, ok := after[id]
				if !ok || got.Text != f.Text || !got.CreatedAt.Equal(f.CreatedAt) || got.Status != consolidation.FactConsolidated {
					t.Errorf("fresh fact %s was %+v, is %+v", id, f, got)
				}
			}
			obsAfter, err := st.ListObservations(ctx, u1)
			if err != nil {
				t.Fatal(err)
			}
			texts := map[string]string{}
			for _, o := range obsAfter {
				texts[o.Text] = o.ID
			}
			if texts[fresh1Obs.Text] != fresh1Obs.ID || texts["Noted: "+fresh["fresh-fact-2"]] == "" || len(obsAfter) != 2 {
				t.Errorf("observations after the run: %+v", obsAfter)
			}

			// The served bank stops recalling them.
			for scope, query := range map[string]string{"u1": "Quillon Volvo window seat gym locker", "u2": "Zebulon brass telescopes"} {
				body := recall(scope, query)
				for id, f := range expired {
					if strings.Contains(body, f.text) || strings.Contains(body, id) {
						t.Errorf("after the run the served bank still recalls %s in %s: %s", id, scope, body)
					}
				}
				if strings.Contains(body, "Noted together") {
					t.Errorf("after the run the served bank recalls the observation of an expired fact: %s", body)
				}
			}
			if body := recall("u1", "Marisol cello Vespa"); !strings.Contains(body, fresh["fresh-fact-1"]) || !strings.Contains(body, fresh["fresh-fact-2"]) {
				t.Errorf("the served bank no longer recalls the fresh facts: %s", body)
			}
			srv.stop()
			srv = nil
		})
	}
}

// --retention-max-age takes any positive Go duration, or 0 for none; an
// error names the flag and the value.
func TestRetentionMaxAgeFlag(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"", 0, false},
		{"0", 0, false},
		{"90s", 90 * time.Second, false},
		{"720h", 720 * time.Hour, false},
		{"-1h", 0, true},
		{"30d", 0, true},
		{"soon", 0, true},
	} {
		got, err := retentionMaxAge(tc.in)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%q: %v, %v", tc.in, got, err)
		}
		if err != nil && (!strings.Contains(err.Error(), "--retention-max-age") || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.in))) {
			t.Errorf("%q: the error %q does not name the flag and the value", tc.in, err)
		}
	}
	code, _, errOut := run(t, "", "consolidate", "--bank", "a/b", "--store", "sqlite:///nowhere.db", "--llm-base-url", "http://127.0.0.1:1/v1", "--model", "m", "--retention-max-age", "-5m")
	if code != ExitInvalid || !strings.Contains(errOut, `--retention-max-age: "-5m"`) {
		t.Errorf("consolidate --retention-max-age -5m: %d %s", code, errOut)
	}
}
