package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/sqlstore"
	"github.com/promptops/promptops/internal/llmtest"
)

// A conversation of the extraction test: who (the scope), which, and what
// was said, each user message of a preference or a change a durable fact.
type testConversation struct {
	scope, name string
	// ids says whether the application gives its messages ids.
	ids  bool
	msgs []testMessage
}

type testMessage struct {
	role, content string
	at            time.Time
}

var (
	preferRE = regexp.MustCompile(`^I prefer (.+)\.$`)
	movedRE  = regexp.MustCompile(`^Yesterday I moved to (.+)\.$`)
	bookedRE = regexp.MustCompile(`^Noted\. I booked a table at (.+) for you\.$`)
	switchRE = regexp.MustCompile(`^I switched from (.+) to (.+)\.$`)
)

// extractingModel plays a model that extracts, from the new messages
// only, a fact from every user sentence that states a preference or a
// change (resolving "yesterday" from the message's time) and from every
// booking the assistant announces; its third extraction answer cites an
// id that is not in the batch (a mistake the run must refuse and ask
// again). Consolidation calls create an observation per fact.
func extractingModel(calls *atomic.Int64) llmtest.Script {
	return func(n int, req llmtest.Request) llmtest.Reply {
		if !llmtest.IsExtraction(req) {
			return llmtest.OnePerFact(n, req)
		}
		k := calls.Add(1)
		var facts []llmtest.ExtractedFact
		for _, m := range llmtest.Messages(req.User) {
			if m.Earlier {
				continue
			}
			cite := []string{m.Label}
			switch {
			case m.Role == "user" && preferRE.MatchString(m.Content):
				facts = append(facts, llmtest.ExtractedFact{Text: "The user prefers " + preferRE.FindStringSubmatch(m.Content)[1] + ".", SourceMessageIDs: cite})
			case m.Role == "user" && switchRE.MatchString(m.Content):
				s := switchRE.FindStringSubmatch(m.Content)
				facts = append(facts, llmtest.ExtractedFact{Text: "The user now uses " + s[2] + " instead of " + s[1] + ".", SourceMessageIDs: cite})
			case m.Role == "user" && movedRE.MatchString(m.Content):
				day := m.At.AddDate(0, 0, -1).Format(time.DateOnly)
				city := movedRE.FindStringSubmatch(m.Content)[1]
				facts = append(facts, llmtest.ExtractedFact{Text: "The user moved to " + city + " on " + day + ".", SourceMessageIDs: cite, OccurredStart: day, Entities: []string{city}})
			case m.Role == "assistant" && bookedRE.MatchString(m.Content):
				facts = append(facts, llmtest.ExtractedFact{Text: "The assistant booked a table at " + bookedRE.FindStringSubmatch(m.Content)[1] + " for the user.", SourceMessageIDs: cite})
			}
		}
		if k == 3 && len(facts) > 0 {
			facts[0].SourceMessageIDs = []string{"not-a-message"}
		}
		return llmtest.Reply{Content: llmtest.ExtractionAnswer(facts), CompletionTokens: int64(10 + 30*len(facts))}
	}
}

func testConversations(users, perUser int, start time.Time) []testConversation {
	var out []testConversation
	for u := range users {
		for c := range perUser {
			tag := fmt.Sprintf("u%d-c%d", u, c)
			at := start.Add(time.Duration(u*perUser+c) * time.Hour)
			step := func(i int) time.Time { return at.Add(time.Duration(i) * time.Minute) }
			out = append(out, testConversation{scope: fmt.Sprintf("user-%d", u), name: "conv-" + tag, ids: u%2 == 0, msgs: []testMessage{
				{"user", "Hi there, " + tag + " here!", step(0)},
				{"assistant", "Hello " + tag + ", how can I help today?", step(1)},
				{"user", "I prefer green tea " + tag + ".", step(2)},
				{"assistant", "Noted. I booked a table at Cafe " + tag + " for you.", step(3)},
				{"user", "Yesterday I moved to City " + tag + ".", step(4)},
				{"user", "Thanks, that is all.\nSee you, " + tag + ".", step(5)},
			}})
		}
	}
	return out
}

// body is a POST .../messages body of messages [from, to) of c.
func (c testConversation) body(from, to int) string {
	var msgs []map[string]any
	for i := from; i < to; i++ {
		m := map[string]any{"role": c.msgs[i].role, "content": c.msgs[i].content, "at": c.msgs[i].at.Format(time.RFC3339)}
		if c.ids {
			m["id"] = fmt.Sprintf("%s-msg-%d", c.name, i)
		}
		msgs = append(msgs, m)
	}
	data, _ := json.Marshal(map[string]any{"scope": c.scope, "conversation": c.name, "messages": msgs})
	return string(data)
}

// TestExtractionEndToEnd is issue 46's done-when test, on both stores:
// conversations of many users, retained interleaved through the bank API,
// extracted and consolidated by one run of consolidate.
func TestExtractionEndToEnd(t *testing.T) {
	const bank = "shop/assistant"
	start := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	convs := testConversations(6, 2, start)
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int64
			model := llmtest.New(extractingModel(&calls))
			defer model.Close()
			serves := newServes(t)
			addr := serves.start("--bank", bank, "--store", url)
			post := func(body string) (stored, unchanged int) {
				t.Helper()
				code, resp := httpDo(t, "POST", "http://"+addr+"/v1/banks/shop/assistant/messages", body)
				var r struct{ Stored, Unchanged int }
				if code != http.StatusOK || json.Unmarshal([]byte(resp), &r) != nil {
					t.Fatalf("POST messages: %d %s", code, resp)
				}
				return r.Stored, r.Unchanged
			}
			// Interleaved: two messages of each conversation in turn.
			retainAll := func() (stored, unchanged int) {
				for i := 0; i < 6; i += 2 {
					for _, c := range convs {
						s, u := post(c.body(i, i+2))
						stored, unchanged = stored+s, unchanged+u
					}
				}
				return stored, unchanged
			}
			total := 6 * len(convs)
			if s, u := retainAll(); s != total || u != 0 {
				t.Fatalf("retained %d stored, %d unchanged, want %d, 0", s, u, total)
			}
			consolidate := func() consolidation.Summary {
				t.Helper()
				code, out, e := run(t, "", "consolidate", "--bank", bank, "--store", url, "--llm-base-url", model.BaseURL(), "--model", "m",
					"--trusted-sources", "assistant,system")
				var sum consolidation.Summary
				if code != ExitOK || json.Unmarshal([]byte(out), &sum) != nil || sum.Extraction == nil {
					t.Fatalf("consolidate: %d %s %s", code, out, e)
				}
				return sum
			}
			sum := consolidate()
			x := sum.Extraction
			durable := 3 * len(convs)
			if x.MessagesExtracted != int64(total) || x.MessagesFailed != 0 || x.FactsStored != int64(durable) || x.Retries != 1 {
				t.Errorf("extraction: %+v, want %d messages extracted, %d facts stored, 1 retry", x, total, durable)
			}
			if sum.FactsConsolidated != int64(durable) || sum.Created != int64(durable) || sum.LLMCalls <= x.LLMCalls {
				t.Errorf("the run consolidated %d facts into %d observations in %d calls (extraction %d), want %d in the same run",
					sum.FactsConsolidated, sum.Created, sum.LLMCalls, x.LLMCalls, durable)
			}
			if x.CacheablePromptTokens <= 0 || x.CacheablePromptTokens >= x.PromptTokens {
				t.Errorf("cacheable prompt tokens %d of %d", x.CacheablePromptTokens, x.PromptTokens)
			}

			// No call carries two scopes or two conversations: every message
			// line of an extraction prompt is of one conversation.
			where := map[string]string{}
			for _, c := range convs {
				for _, m := range c.msgs {
					where[m.content] = c.scope + "/" + c.name
				}
			}
			factScope := map[string]string{}
			for _, c := range convs {
				tag := strings.TrimPrefix(c.name, "conv-")
				for _, text := range []string{"green tea " + tag, "Cafe " + tag, "City " + tag} {
					factScope[text] = c.scope
				}
			}
			extractions := 0
			for _, req := range model.Requests() {
				if !llmtest.IsExtraction(req) {
					// A consolidation call: its facts are of one scope.
					scopes := map[string]bool{}
					for _, f := range llmtest.Facts(req.User) {
						for text, scope := range factScope {
							if strings.Contains(f.Text, text+" ") || strings.Contains(f.Text, text+".") {
								scopes[scope] = true
							}
						}
					}
					if len(scopes) != 1 {
						t.Errorf("a consolidation call carries the facts of %d scopes: %v", len(scopes), scopes)
					}
					continue
				}
				extractions++
				seen := map[string]bool{}
				for _, m := range llmtest.Messages(req.User) {
					w, ok := where[m.Content]
					if !ok {
						t.Fatalf("an extraction prompt shows a message no conversation holds: %q", m.Content)
					}
					seen[w] = true
				}
				if len(seen) != 1 {
					t.Errorf("an extraction call carries %d conversations: %v", len(seen), seen)
				}
			}
			if int64(extractions) != x.LLMCalls {
				t.Errorf("%d extraction requests, the summary says %d", extractions, x.LLMCalls)
			}

			// Every durable statement is one fact of the right scope and
			// source; "yesterday" resolved from the message's time.
			st, err := sqlstore.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			for _, c := range convs {
				facts, err := st.ListScopeFacts(context.Background(), consolidation.BankID(bank).Scope(c.scope), "", 100)
				if err != nil {
					t.Fatal(err)
				}
				tag := strings.TrimPrefix(c.name, "conv-")
				moved := c.msgs[4].at.AddDate(0, 0, -1).Format(time.DateOnly)
				want := map[string]string{
					"The user prefers green tea " + tag + ".":                        "user",
					"The assistant booked a table at Cafe " + tag + " for the user.": "assistant",
					"The user moved to City " + tag + " on " + moved + ".":           "user",
				}
				for _, f := range facts {
					src, ok := want[f.Text]
					if !ok {
						continue
					}
					delete(want, f.Text)
					if f.Source != src || f.Status != consolidation.FactConsolidated || f.MentionedAt == nil {
						t.Errorf("%s: fact %q: source %q, status %q, mentioned %v; want %q, consolidated", c.scope, f.Text, f.Source, f.Status, f.MentionedAt, src)
					}
					if strings.Contains(f.Text, "moved") && (f.OccurredStart == nil || f.OccurredStart.Format(time.DateOnly) != moved) {
						t.Errorf("%s: %q occurred %v, want %s", c.scope, f.Text, f.OccurredStart, moved)
					}
				}
				if len(want) > 0 {
					t.Errorf("%s %s: facts not made: %v", c.scope, c.name, want)
				}
				if len(facts) != 3*2 {
					t.Errorf("%s holds %d facts, want 6 (two conversations of three)", c.scope, len(facts))
				}
			}

			// The same conversations again: nothing new, nothing extracted.
			if s, u := retainAll(); s != 0 || u != total {
				t.Errorf("retained again: %d stored, %d unchanged, want 0, %d", s, u, total)
			}
			before := len(model.Requests())
			if again := consolidate(); again.Extraction.LLMCalls != 0 || again.Extraction.MessagesExtracted != 0 || again.FactsConsolidated != 0 || len(model.Requests()) != before {
				t.Errorf("the second run: %+v, extraction %+v", again, again.Extraction)
			}

			// Five messages appended to one conversation: only they are
			// extracted, the earlier ones shown as context.
			c := convs[3]
			tag := "u1-c1-later"
			last := c.msgs[len(c.msgs)-1].at
			c.msgs = append(c.msgs,
				testMessage{"user", "One more thing, " + tag + ".", last.Add(time.Hour)},
				testMessage{"user", "I switched from Bank A " + tag + " to Bank B " + tag + ".", last.Add(time.Hour + time.Minute)},
				testMessage{"assistant", "Got it, " + tag + ".", last.Add(time.Hour + 2*time.Minute)},
				testMessage{"user", "I prefer aisle seats " + tag + ".", last.Add(time.Hour + 3*time.Minute)},
				testMessage{"user", "Bye, " + tag + ".", last.Add(time.Hour + 4*time.Minute)},
			)
			for _, m := range c.msgs[6:] {
				where[m.content] = c.scope + "/" + c.name
			}
			if s, u := post(c.body(0, len(c.msgs))); s != 5 || u != 6 {
				t.Errorf("appending: %d stored, %d unchanged, want 5, 6", s, u)
			}
			before = len(model.Requests())
			third := consolidate()
			if third.Extraction.MessagesExtracted != 5 || third.Extraction.FactsStored != 2 || third.FactsConsolidated != 2 {
				t.Errorf("the appending run: %+v, extraction %+v", third, third.Extraction)
			}
			var fresh []string
			for _, req := range model.Requests()[before:] {
				if !llmtest.IsExtraction(req) {
					continue
				}
				for _, m := range llmtest.Messages(req.User) {
					if !m.Earlier {
						fresh = append(fresh, m.Content)
					}
				}
			}
			var appended []string
			for _, m := range c.msgs[6:] {
				appended = append(appended, m.content)
			}
			if !slices.Equal(fresh, appended) {
				t.Errorf("the appending run extracted from %q, want the five appended %q", fresh, appended)
			}
		})
	}
}
