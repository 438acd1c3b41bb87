package consolidation

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/redact"
)

// ParseMessages accepts a conversation and names the field of each error.
func TestParseMessages(t *testing.T) {
	msgs, err := ParseMessages([]byte(`{"scope":"ana","conversation":"c1","messages":[
		{"id":"m1","role":"user","content":"I moved to Lyon yesterday","at":"2026-03-01T09:00:00+01:00"},
		{"role":"assistant","content":"Noted.","at":"2026-03-01T08:00:05Z"}]}`), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 {
		t.Fatalf("%d messages", len(msgs))
	}
	m := msgs[0]
	if m.ID != "m1" || m.Scope != "ana" || m.Conversation != "c1" || m.Role != RoleUser || m.Source() != "user" || m.Content != "I moved to Lyon yesterday" ||
		!m.At.Equal(time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)) || m.At.Location() != time.UTC || m.Status != MessagePending {
		t.Fatalf("%+v", m)
	}
	if msgs[1].ID != "" || msgs[1].Role != RoleAssistant || msgs[1].Scope != "ana" {
		t.Fatalf("%+v", msgs[1])
	}
	long := strings.Repeat("a", MaxMessageContentBytes+1)
	for _, tc := range []struct {
		in, field, msg string
	}{
		{"{\"conversation\":\"a\xff\"}", "", "not valid UTF-8"},
		{`{"conversation":"c","messages":[],"colour":1}`, "colour", `unknown field "colour"`},
		{`{"messages":[{"role":"user","content":"a","at":"2026-03-01T09:00:00Z"}]}`, "conversation", "conversation is required"},
		{`{"conversation":"` + strings.Repeat("c", MaxConversationBytes+1) + `","messages":[]}`, "conversation", "conversation: 257 bytes, at most 256"},
		{`{"conversation":"c","messages":[]}`, "messages", "messages: at least one message is required"},
		{`{"conversation":"c","scope":"a b","messages":[]}`, "scope", ""},
		{`{"conversation":"c","messages":{}}`, "messages", "messages: a JSON object where an array is wanted"},
		{`{"conversation":"c","messages":[{"role":"user","content":"a"}]}`, "messages[0].at", "messages[0].at is required"},
		{`{"conversation":"c","messages":[{"role":"user","content":"a","at":"2026-03-01"}]}`, "messages[0].at", `messages[0].at "2026-03-01" is not RFC 3339`},
		{`{"conversation":"c","messages":[{"role":"robot","content":"a","at":"2026-03-01T09:00:00Z"}]}`, "messages[0].role", `messages[0].role: "robot" is not one of user, assistant, tool, system`},
		{`{"conversation":"c","messages":[{"content":"a","at":"2026-03-01T09:00:00Z"}]}`, "messages[0].role", "messages[0].role is required"},
		{`{"conversation":"c","messages":[{"role":"user","content":"a","at":"2026-03-01T09:00:00Z"},{"role":"user","content":" ","at":"2026-03-01T09:00:00Z"}]}`, "messages[1].content", "messages[1].content is required"},
		{`{"conversation":"c","messages":[{"role":"user","content":"` + long + `","at":"2026-03-01T09:00:00Z"}]}`, "messages[0].content", "messages[0].content: 3145729 bytes, at most 3145728"},
		{`{"conversation":"c","messages":[{"id":"` + strings.Repeat("i", MaxMessageIDBytes+1) + `","role":"user","content":"a","at":"2026-03-01T09:00:00Z"}]}`, "messages[0].id", "messages[0].id: 129 bytes, at most 128"},
		{`{"conversation":"c","messages":[{"role":"user","text":"a"}]}`, "messages[0].text", `unknown field "text"`},
		{`{"conversation":"c","messages":[{"role":"user","role":"user"}]}`, "messages[0].role", "messages[0].role appears twice"},
	} {
		_, err := ParseMessages([]byte(tc.in), 10)
		if err == nil || tc.msg != "" && err.Error() != tc.msg {
			t.Errorf("%s: error %v, want %q", tc.in, err, tc.msg)
			continue
		}
		var fe *FieldError
		if got := errors.As(err, &fe); got != (tc.field != "") || got && fe.Field != tc.field {
			t.Errorf("%s: field error %v %+v, want field %q", tc.in, got, fe, tc.field)
		}
	}
	var many strings.Builder
	many.WriteString(`{"conversation":"c","messages":[`)
	for i := range 11 {
		if i > 0 {
			many.WriteString(",")
		}
		many.WriteString(`{"role":"user","content":"a","at":"2026-03-01T09:00:00Z"}`)
	}
	many.WriteString("]}")
	var tooMany *TooManyMessagesError
	if _, err := ParseMessages([]byte(many.String()), 10); !errors.As(err, &tooMany) || tooMany.Count != 11 || tooMany.Most != 10 {
		t.Fatalf("11 messages, at most 10: %v", err)
	}
}

// A message without an id gets one from its scope, conversation, role,
// time and content: the same again gets the same id, any of them changed
// another.
func TestDerivedMessageID(t *testing.T) {
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	base := Message{Scope: "ana", Conversation: "c1", Role: RoleUser, Content: "I like tea", At: at}
	id := DerivedMessageID("ns/bank", base)
	same := base
	same.At, same.ID, same.Status = at.In(time.FixedZone("CET", 3600)), "ignored", MessageFailed
	if DerivedMessageID("ns/bank", same) != id {
		t.Fatal("the same message at the same instant in another zone changed the id")
	}
	seen := map[string]string{id: "base"}
	for name, tc := range map[string]struct {
		bank BankID
		m    Message
	}{
		"bank":         {"ns/other", base},
		"scope":        {"ns/bank", Message{Scope: "bob", Conversation: "c1", Role: RoleUser, Content: "I like tea", At: at}},
		"conversation": {"ns/bank", Message{Scope: "ana", Conversation: "c2", Role: RoleUser, Content: "I like tea", At: at}},
		"role":         {"ns/bank", Message{Scope: "ana", Conversation: "c1", Role: RoleAssistant, Content: "I like tea", At: at}},
		"content":      {"ns/bank", Message{Scope: "ana", Conversation: "c1", Role: RoleUser, Content: "I like tea.", At: at}},
		"at":           {"ns/bank", Message{Scope: "ana", Conversation: "c1", Role: RoleUser, Content: "I like tea", At: at.Add(time.Nanosecond)}},
		"shifted":      {"ns/bank", Message{Scope: "ana", Conversation: "c", Role: RoleUser, Content: "1I like tea", At: at}},
	} {
		got := DerivedMessageID(tc.bank, tc.m)
		if other, dup := seen[got]; dup {
			t.Errorf("%s: same id as %s", name, other)
		}
		seen[got] = name
	}
}

// RedactMessage redacts a message's content as RedactFact a fact's text,
// and under Reject names the field content.
func TestRedactMessage(t *testing.T) {
	secret := "my password is hunter2-Xq9"
	r, err := redact.New(redact.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m := Message{Content: "hi, " + secret}
	counts := redact.Counts{}
	if err := RedactMessage(r, &m, counts); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(m.Content, "hunter2") || !strings.Contains(m.Content, "[REDACTED:") || len(counts) == 0 {
		t.Fatalf("content %q, counts %v", m.Content, counts)
	}
	rej, err := redact.New(redact.Config{Secrets: redact.Reject})
	if err != nil {
		t.Fatal(err)
	}
	m = Message{Content: "hi, " + secret}
	var se *FactSecretError
	if err := RedactMessage(rej, &m, redact.Counts{}); !errors.As(err, &se) || se.Field != "content" || m.Content != "hi, "+secret {
		t.Fatalf("under Reject: %v, content %q", err, m.Content)
	}
	if err := RedactMessage(nil, &m, redact.Counts{}); err != nil {
		t.Fatal(err)
	}
}

// Every bound of a conversation is inclusive: at the bound, accepted; one
// past it, refused (TestParseMessages).
func TestParseMessagesAtTheBounds(t *testing.T) {
	msg := func(id, content string) string {
		return `{"id":"` + id + `","role":"user","content":"` + content + `","at":"2026-03-01T09:00:00Z"}`
	}
	two := msg("a", "x") + "," + msg("b", "y")
	for name, in := range map[string]string{
		"conversation": `{"conversation":"` + strings.Repeat("c", MaxConversationBytes) + `","messages":[` + msg("a", "x") + `]}`,
		"content":      `{"conversation":"c","messages":[` + msg("a", strings.Repeat("x", MaxMessageContentBytes)) + `]}`,
		"id":           `{"conversation":"c","messages":[` + msg(strings.Repeat("i", MaxMessageIDBytes), "x") + `]}`,
		"messages":     `{"conversation":"c","messages":[` + two + `]}`,
	} {
		if _, err := ParseMessages([]byte(in), 2); err != nil {
			t.Errorf("%s at its bound: %v", name, err)
		}
	}
	var tooMany *TooManyMessagesError
	if _, err := ParseMessages([]byte(`{"conversation":"c","messages":[`+two+`]}`), 1); !errors.As(err, &tooMany) || tooMany.Count != 2 || tooMany.Most != 1 {
		t.Errorf("two messages, at most one: %v", err)
	}
}
