package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/redact"
)

// messagesBody is a conversation of scope user:ana with messages from..to-1,
// user and assistant in turn, a minute apart, without ids.
func messagesBody(from, to int) []byte {
	var msgs []map[string]string
	for i := from; i < to; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": fmt.Sprintf("message %d", i), "at": fmt.Sprintf("2026-03-01T09:%02d:00Z", i)})
	}
	body, _ := json.Marshal(map[string]any{"scope": "user:ana", "conversation": "c1", "messages": msgs})
	return body
}

func postMessages(t *testing.T, b *bankServer, body []byte) MessagesResponse {
	t.Helper()
	code, out := b.post(t, "messages", "", body)
	var ans MessagesResponse
	if code != http.StatusOK || json.Unmarshal(out, &ans) != nil {
		t.Fatalf("POST messages: %d %s", code, out)
	}
	return ans
}

func (b *bankServer) messages(t *testing.T) []consolidation.Message {
	t.Helper()
	msgs, err := b.store.ListScopeMessages(context.Background(), consolidation.BankID(testBank).Scope("user:ana"), "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// POST .../messages on both stores: the same conversation again stores
// nothing; five appended store five; an id with other content is a
// conflict that stores nothing; each message keeps its role as its source;
// the scope's export lists them and its erasure removes them.
func TestRetainMessages(t *testing.T) {
	eachBankStore(t, func(t *testing.T, url string) {
		b := newBankServer(t, url, nil, BankLimits{}, nil)
		first := postMessages(t, b, messagesBody(0, 10))
		if first.Stored != 10 || first.Unchanged != 0 || len(first.IDs) != 10 {
			t.Fatalf("first: %+v", first)
		}
		if again := postMessages(t, b, messagesBody(0, 10)); again.Stored != 0 || again.Unchanged != 10 || strings.Join(again.IDs, ",") != strings.Join(first.IDs, ",") {
			t.Fatalf("the same conversation again: %+v", again)
		}
		appended := postMessages(t, b, messagesBody(0, 15))
		if appended.Stored != 5 || appended.Unchanged != 10 {
			t.Fatalf("five appended: %+v", appended)
		}
		msgs := b.messages(t)
		if len(msgs) != 15 || msgs[1].Role != consolidation.RoleAssistant || msgs[1].Source() != "assistant" || msgs[0].Source() != "user" ||
			msgs[0].Status != consolidation.MessagePending || msgs[0].Conversation != "c1" {
			t.Fatalf("stored: %+v", msgs[:2])
		}

		// An id the scope holds, with other content: nothing is stored.
		body := fmt.Sprintf(`{"scope": "user:ana", "conversation": "c1", "messages": [
			{"id": "new-1", "role": "user", "content": "new", "at": "2026-03-01T10:00:00Z"},
			{"id": %q, "role": "user", "content": "other words", "at": "2026-03-01T09:00:00Z"}]}`, first.IDs[0])
		code, out := b.post(t, "messages", "", []byte(body))
		if code != http.StatusConflict || !strings.Contains(string(out), `"MessageConflict"`) {
			t.Fatalf("conflict: %d %s", code, out)
		}
		if n := len(b.messages(t)); n != 15 {
			t.Fatalf("a refused request changed the messages from 15 to %d", n)
		}

		code, out = b.do(t, http.MethodGet, "scopes/user:ana/export", "", nil)
		if code != http.StatusOK || strings.Count(string(out), `"kind":"message"`) != 15 || !strings.Contains(string(out), `"source":"assistant"`) {
			t.Fatalf("export: %d %s", code, out)
		}
		code, out = b.do(t, http.MethodDelete, "scopes/user:ana", "", nil)
		var erased consolidation.Erasure
		if code != http.StatusOK || json.Unmarshal(out, &erased) != nil || erased.Messages != 15 {
			t.Fatalf("erasure: %d %s", code, out)
		}
		if n := len(b.messages(t)); n != 0 {
			t.Fatalf("%d messages left after the scope's erasure", n)
		}
	})
}

// Bad conversations and messages are 400 InvalidMessage naming the field,
// too many 413 TooManyMessages, a body over the limit 413
// RequestTooLarge; none stores anything.
func TestRetainMessagesBounds(t *testing.T) {
	b := newBankServer(t, "sqlite://"+t.TempDir()+"/bank.db", nil, BankLimits{MaxMessagesPerRequest: 10, MaxRetainBytes: 8 << 10}, nil)
	for _, tc := range []struct {
		name, body string
		status     int
		code       Code
		msg        string
	}{
		{"not JSON", `{`, http.StatusBadRequest, CodeMalformed, ""},
		{"unknown field", `{"conversation": "c", "messages": [], "user": "ana"}`, http.StatusBadRequest, CodeInvalidMessage, "user: is not a field of a conversation"},
		{"no conversation", `{"messages": [{"role": "user", "content": "a", "at": "2026-03-01T09:00:00Z"}]}`, http.StatusBadRequest, CodeInvalidMessage, "conversation: is required"},
		{"bad scope", `{"scope": "a b", "conversation": "c", "messages": [{"role": "user", "content": "a", "at": "2026-03-01T09:00:00Z"}]}`, http.StatusBadRequest, CodeInvalidMessage, "scope: "},
		{"bad role", `{"conversation": "c", "messages": [{"role": "user", "content": "a", "at": "2026-03-01T09:00:00Z"}, {"role": "bot", "content": "a", "at": "2026-03-01T09:00:00Z"}]}`, http.StatusBadRequest, CodeInvalidMessage, `messages[1].role: \"bot\" is not one of`},
		{"no at", `{"conversation": "c", "messages": [{"role": "user", "content": "a"}]}`, http.StatusBadRequest, CodeInvalidMessage, "messages[0].at: is required"},
		{"eleven", string(messagesBody(0, 11)), http.StatusRequestEntityTooLarge, CodeTooManyMessages, "messages: 11 items, at most 10 per request (--max-messages-per-request)"},
		{"too large", `{"conversation": "c", "messages": [{"role": "user", "content": "` + strings.Repeat("a", 9<<10) + `", "at": "2026-03-01T09:00:00Z"}]}`, http.StatusRequestEntityTooLarge, CodeTooLarge, ""},
	} {
		code, out := b.post(t, "messages", "", []byte(tc.body))
		got, msg := errorCode(t, out)
		if code != tc.status || got != tc.code || !strings.Contains(string(out), tc.msg) {
			t.Errorf("%s: %d %s %q, want %d %s with %q", tc.name, code, got, msg, tc.status, tc.code, tc.msg)
		}
	}
	if n := len(b.messages(t)); n != 0 {
		t.Fatalf("refused requests stored %d messages", n)
	}
}

// Contents are redacted before ids are derived (posting the same secret
// again stores nothing new), and under Reject a secret stores nothing and
// is named by field, never quoted.
func TestRetainMessagesRedaction(t *testing.T) {
	eachBankStore(t, func(t *testing.T, url string) {
		var logs strings.Builder
		const secret = "hunter2-Xq9zzT"
		body := []byte(`{"scope": "user:ana", "conversation": "c1", "messages": [{"role": "user", "content": "my password is ` + secret + `", "at": "2026-03-01T09:00:00Z"}]}`)
		b := redactingServer(t, url, newRedactor(t, redact.Config{}), &logs)
		ans := postMessages(t, b, body)
		if ans.Stored != 1 || ans.Redacted["credential-in-sentence"] != 1 {
			t.Fatalf("retain: %+v", ans)
		}
		msgs := b.messages(t)
		if len(msgs) != 1 || strings.Contains(msgs[0].Content, secret) || !strings.Contains(msgs[0].Content, "[REDACTED:credential-in-sentence]") {
			t.Fatalf("stored %+v", msgs)
		}
		if again := postMessages(t, b, body); again.Stored != 0 || again.Unchanged != 1 {
			t.Fatalf("the same message again: %+v", again)
		}
		r := redactingServer(t, url, newRedactor(t, redact.Config{Secrets: redact.Reject}), &logs)
		code, out := r.post(t, "messages", "", []byte(strings.Replace(string(body), "09:00", "09:01", 1)))
		if code != http.StatusUnprocessableEntity || !strings.Contains(string(out), `"SecretInMessage"`) || !strings.Contains(string(out), "messages[0].content") || strings.Contains(string(out), secret) {
			t.Fatalf("under Reject: %d %s", code, out)
		}
		if n := len(r.messages(t)); n != 1 {
			t.Fatalf("a refused request changed the messages from 1 to %d", n)
		}
		if strings.Contains(logs.String(), secret) {
			t.Fatal("the logs hold the secret")
		}
	})
}

// factsOnly is a bank store that retains facts and keeps no messages.
type factsOnly struct{ BankStore }

// A bank whose store keeps no messages answers 501 NotImplemented.
func TestRetainMessagesNotImplemented(t *testing.T) {
	b := newBankServer(t, "sqlite://"+t.TempDir()+"/bank.db", nil, BankLimits{}, nil)
	s := New(Options{Log: b.srv.log, Banks: []*Bank{{Namespace: "team-a", Name: "support", Store: factsOnly{b.store}, Recaller: b.rec, Encoding: "cl100k_base"}}})
	s.Apply(map[string][]byte{})
	ts := newServer(t, s.Handler())
	t.Cleanup(ts.Close)
	b.ts = ts
	code, out := b.post(t, "messages", "", messagesBody(0, 1))
	if got, _ := errorCode(t, out); code != http.StatusNotImplemented || got != CodeNotImplemented {
		t.Fatalf("%d %s", code, out)
	}
}

// Retained messages are counted by bank and result, as retained facts
// are; no series carries a scope, a conversation, an id or content.
func TestRetainMessagesMetrics(t *testing.T) {
	b := newBankServer(t, "sqlite://"+t.TempDir()+"/bank.db", nil, BankLimits{}, nil)
	first := postMessages(t, b, messagesBody(0, 10))
	postMessages(t, b, messagesBody(0, 15))
	if code, out := b.post(t, "facts", "", []byte(`{"facts": [{"text": "Ana likes tea"}]}`)); code != http.StatusOK {
		t.Fatalf("retain: %d %s", code, out)
	}
	resp, err := http.Get(b.ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	metrics := string(body)
	for _, want := range []string{
		`promptops_serve_bank_messages_total{name="support",namespace="team-a",result="stored"} 15`,
		`promptops_serve_bank_messages_total{name="support",namespace="team-a",result="unchanged"} 10`,
		`promptops_serve_bank_facts_total{name="support",namespace="team-a",result="stored"} 1`,
		`promptops_serve_bank_requests_total{code="200",endpoint="messages",name="support",namespace="team-a"} 2`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, secret := range []string{"user:ana", `"c1"`, "message 3", first.IDs[0], "Ana likes tea"} {
		if strings.Contains(metrics, secret) {
			t.Errorf("metrics hold %q", secret)
		}
	}
}
