package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/sqlstore"
)

// conversationLine is a line of messages import: conversation conv of
// scope, with messages from..to-1, user and assistant in turn, a minute
// apart, without ids.
func conversationLine(scope, conv string, from, to int) string {
	var msgs []map[string]string
	for i := from; i < to; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": fmt.Sprintf("%s says %d", conv, i), "at": fmt.Sprintf("2026-03-01T09:%02d:%02dZ", i/60%60, i%60)})
	}
	line, _ := json.Marshal(map[string]any{"scope": scope, "conversation": conv, "messages": msgs})
	return string(line)
}

func writeLines(t *testing.T, lines ...string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "messages.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func scopeMessages(t *testing.T, url, bank, scope string) []consolidation.Message {
	t.Helper()
	st, err := sqlstore.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	msgs, err := st.ListScopeMessages(context.Background(), consolidation.BankID(bank).Scope(scope), "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// messages import on both stores: importing the same file again stores
// nothing new; appending messages to a conversation (on its line, or on a
// line of its own) stores only those; roles are kept as sources; stdin
// works as a file does.
func TestMessagesImportIsIdempotent(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			first := writeLines(t,
				"\xef\xbb\xbf"+conversationLine("user:ana", "c1", 0, 10),
				"",
				conversationLine("user:bo", "c2", 0, 4),
				`{"conversation": "c3", "messages": [{"id": "m-1", "role": "tool", "content": "order 17 shipped", "at": "2026-03-01T10:00:00+01:00"}]}`,
			)
			for i, want := range []string{"stored 15 messages into t/b (0 unchanged)", "stored 0 messages into t/b (15 unchanged)"} {
				if code, out, errOut := run(t, "", "messages", "import", "--bank", "t/b", "--store", url, first); code != ExitOK || !strings.Contains(out, want) {
					t.Fatalf("import %d: exit %d, %q %q; want %q", i+1, code, out, errOut, want)
				}
			}
			// Five appended to c1 on its own line, and c2 written again with two more.
			appended := conversationLine("user:ana", "c1", 10, 15) + "\r\n" + conversationLine("user:bo", "c2", 0, 6) + "\r\n"
			if code, out, errOut := run(t, appended, "messages", "import", "--bank", "t/b", "--store", url, "-"); code != ExitOK || !strings.Contains(out, "stored 7 messages into t/b (4 unchanged)") {
				t.Fatalf("appended: exit %d, %q %q", code, out, errOut)
			}
			ana := scopeMessages(t, url, "t/b", "user:ana")
			if len(ana) != 15 || ana[0].Source() != "user" || ana[1].Source() != "assistant" || ana[14].Content != "c1 says 14" || ana[0].Status != consolidation.MessagePending {
				t.Fatalf("user:ana holds %d messages: %+v", len(ana), ana)
			}
			if ana[0].ID != consolidation.DerivedMessageID("t/b", ana[0]) {
				t.Errorf("id %s is not derived from the bank and the message", ana[0].ID)
			}
			if n := len(scopeMessages(t, url, "t/b", "user:bo")); n != 6 {
				t.Fatalf("user:bo holds %d messages, want 6", n)
			}
			if shared := scopeMessages(t, url, "t/b", ""); len(shared) != 1 || shared[0].ID != "m-1" || shared[0].Source() != "tool" {
				t.Fatalf("the shared scope holds %+v", shared)
			}
		})
	}
}

// More messages than a transaction holds: lines are written whole, a line
// longer than a transaction alone, and nothing is stored twice.
func TestMessagesImportInTransactions(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
	var lines []string
	for i := range 6 {
		lines = append(lines, conversationLine("user:ana", fmt.Sprintf("c%d", i), 0, 300))
	}
	lines = append(lines, conversationLine("user:ana", "long", 0, messagesChunk+200))
	file := writeLines(t, lines...)
	want := fmt.Sprintf("stored %d messages into t/b (0 unchanged)", 1800+messagesChunk+200)
	if code, out, errOut := run(t, "", "messages", "import", "--bank", "t/b", "--store", url, file); code != ExitOK || !strings.Contains(out, want) {
		t.Fatalf("exit %d, %q %q; want %q", code, out, errOut, want)
	}
	if n := len(scopeMessages(t, url, "t/b", "user:ana")); n != 1800+messagesChunk+200 {
		t.Fatalf("%d messages stored", n)
	}
}

// A bad line stops the import naming the line and the field (exit 2): the
// lines before it are stored, nothing from it on.
func TestMessagesImportRejectsBadLines(t *testing.T) {
	ok := conversationLine("user:ana", "c1", 0, 2)
	msg := func(fields string) string {
		return `{"conversation": "c9", "messages": [{"role": "user", "content": "hi", "at": "2026-03-01T09:00:00Z"}, {` + fields + `}]}`
	}
	for _, tc := range []struct {
		name, input, want, stored string
	}{
		{"bad role", msg(`"role": "bot", "content": "a", "at": "2026-03-01T09:00:00Z"`), `line 1: messages[1].role: "bot" is not one of user, assistant, tool, system`, "nothing imported"},
		{"no content", ok + "\n" + msg(`"role": "user", "at": "2026-03-01T09:00:00Z"`), "line 2: messages[1].content: is required", "the lines before line 2 are stored (2 new messages, 0 unchanged)"},
		{"bad at", ok + "\r\n\r\n" + msg(`"role": "user", "content": "a", "at": "yesterday"`), `line 3: messages[1].at: "yesterday" is not RFC 3339`, "the lines before line 3 are stored"},
		{"unknown field of a message", msg(`"role": "user", "content": "a", "at": "2026-03-01T09:00:00Z", "name": "ana"`), "line 1: messages[1].name: is not a field of a message (id, role, content, at)", "nothing imported"},
		{"unknown field of a conversation", `{"conversation": "c", "user": "ana", "messages": []}`, "line 1: user: is not a field of a conversation", "nothing imported"},
		{"no conversation", `{"messages": [{"role": "user", "content": "a", "at": "2026-03-01T09:00:00Z"}]}`, "line 1: conversation: is required", "nothing imported"},
		{"no messages", `{"conversation": "c", "messages": []}`, "line 1: messages: at least one message is required", "nothing imported"},
		{"bad scope", `{"scope": "a b", "conversation": "c", "messages": [{"role": "user", "content": "a", "at": "2026-03-01T09:00:00Z"}]}`, "line 1: scope: ", "nothing imported"},
		{"content too long", msg(`"role": "user", "content": "` + strings.Repeat("a", consolidation.MaxMessageContentBytes+1) + `", "at": "2026-03-01T09:00:00Z"`), fmt.Sprintf("line 1: messages[1].content: %d bytes, at most %d", consolidation.MaxMessageContentBytes+1, consolidation.MaxMessageContentBytes), "nothing imported"},
		{"too many messages", conversationLine("", "c", 0, MaxMessagesPerLine+1), fmt.Sprintf("line 1: messages: %d items, at most %d per line", MaxMessagesPerLine+1, MaxMessagesPerLine), "nothing imported"},
		{"line too long", ok + "\n" + strings.Repeat(" ", MaxMessageLine+3) + "x\n", "line 2: longer than 4 MiB", "the lines before line 2 are stored"},
		{"not JSON", ok + "\n" + ok + "\n{", "line 3: ", "the lines before line 3 are stored (2 new messages, 2 unchanged)"},
		{"invalid UTF-8", "{\"conversation\": \"caf\xe9\"}", "line 1: not valid UTF-8", "nothing imported"},
		{"two on a line", ok + " " + ok, "line 1: more than one JSON value", "nothing imported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
			code, out, errOut := run(t, tc.input, "messages", "import", "--bank", "a/b", "--store", url, "-")
			if code != ExitInvalid || out != "" || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, tc.stored) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and %q, %q", code, out, errOut, tc.want, tc.stored)
			}
			want := 0
			if tc.stored != "nothing imported" {
				want = 2
			}
			if n := len(scopeMessages(t, url, "a/b", "user:ana")); n != want {
				t.Fatalf("%d messages stored, want %d", n, want)
			}
		})
	}
	url := "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
	for _, args := range [][]string{
		{"messages"},
		{"messages", "export"},
		{"messages", "import", "--bank", "a/b", "--store", url},
		{"messages", "import", "--bank", "a/b", "--store", url, filepath.Join(t.TempDir(), "missing.jsonl")},
		{"messages", "import", "--bank", "a/b", "--store", url, "--redact-secrets", "Maybe", "-"},
	} {
		if code, _, _ := run(t, "", args...); code != ExitInvalid {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// An id the bank holds with other content names its line; the lines of
// the transactions before it are stored.
func TestMessagesImportConflict(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			line := func(content string) string {
				return `{"conversation": "c", "messages": [{"id": "m-1", "role": "user", "content": "` + content + `", "at": "2026-03-01T09:00:00Z"}]}`
			}
			if code, out, errOut := run(t, line("I moved to Lisbon"), "messages", "import", "--bank", "a/b", "--store", url, "-"); code != ExitOK {
				t.Fatalf("exit %d %s %s", code, out, errOut)
			}
			input := conversationLine("user:ana", "c1", 0, 3) + "\n" + line("I moved to Porto") + "\n" + conversationLine("user:ana", "c1", 3, 5) + "\n"
			code, out, errOut := run(t, input, "messages", "import", "--bank", "a/b", "--store", url, "-")
			if code != ExitInvalid || out != "" || !strings.Contains(errOut, `line 2: message "m-1" is already in bank a/b with another conversation, role, time or content; nothing imported`) || strings.Contains(errOut, "Porto") {
				t.Fatalf("exit %d, %q %q", code, out, errOut)
			}
			if n := len(scopeMessages(t, url, "a/b", "user:ana")); n != 0 {
				t.Fatalf("the transaction of the conflict stored %d messages", n)
			}
			// A transaction written before the conflict's stays.
			input = conversationLine("user:bo", "c1", 0, messagesChunk) + "\n" + line("I moved to Porto") + "\n" + conversationLine("user:ana", "c1", 0, 2) + "\n"
			code, out, errOut = run(t, input, "messages", "import", "--bank", "a/b", "--store", url, "-")
			if code != ExitInvalid || out != "" || !strings.Contains(errOut, fmt.Sprintf(`line 2: message "m-1" is already in bank a/b with another conversation, role, time or content; the lines before line 2 are stored (%d new messages, 0 unchanged), none from it on`, messagesChunk)) {
				t.Fatalf("exit %d, %q %q", code, out, errOut)
			}
			if bo, ana := len(scopeMessages(t, url, "a/b", "user:bo")), len(scopeMessages(t, url, "a/b", "user:ana")); bo != messagesChunk || ana != 0 {
				t.Fatalf("%d of user:bo's messages and %d of user:ana's stored, want %d and 0", bo, ana, messagesChunk)
			}
		})
	}
}

// Contents are redacted before ids are derived, as POST .../messages
// does: importing the same secret again stores nothing new; under Reject
// a secret stops the import naming the line and the field, never quoting
// the secret.
func TestMessagesImportRedaction(t *testing.T) {
	const secret = "hunter2-Xq9zzT"
	input := `{"scope": "user:ana", "conversation": "c1", "messages": [{"role": "user", "content": "hello", "at": "2026-03-01T09:00:00Z"}, {"role": "user", "content": "my password is ` + secret + `", "at": "2026-03-01T09:01:00Z"}]}`
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			for i, want := range []string{"stored 2 messages into a/b (0 unchanged)", "stored 0 messages into a/b (2 unchanged)"} {
				code, out, errOut := run(t, input, "messages", "import", "--bank", "a/b", "--store", url, "-")
				if code != ExitOK || !strings.Contains(out, want) || !strings.Contains(out, "redacted credential-in-sentence=1") || strings.Contains(out+errOut, secret) {
					t.Fatalf("import %d: exit %d, %q %q; want %q", i+1, code, out, errOut, want)
				}
			}
			msgs := scopeMessages(t, url, "a/b", "user:ana")
			if len(msgs) != 2 || strings.Contains(msgs[1].Content, secret) || !strings.Contains(msgs[1].Content, "[REDACTED:credential-in-sentence]") {
				t.Fatalf("stored %+v", msgs)
			}
			rejected := strings.ReplaceAll(input, "09:0", "10:0")
			code, out, errOut := run(t, rejected, "messages", "import", "--bank", "a/b", "--store", url, "--redact-secrets", "Reject", "-")
			if code != ExitInvalid || out != "" || !strings.Contains(errOut, "line 1: messages[1].content holds a secret (credential-in-sentence) and --redact-secrets is Reject; nothing imported") || strings.Contains(errOut, secret) {
				t.Fatalf("under Reject: exit %d, %q %q", code, out, errOut)
			}
			if n := len(scopeMessages(t, url, "a/b", "user:ana")); n != 2 {
				t.Fatalf("a refused import changed the messages from 2 to %d", n)
			}
		})
	}
}

// scopes list counts each scope's messages, so a scope that holds only
// messages is listed; its export lists them and its erasure counts them.
func TestScopesListCountsMessages(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			if code, out, errOut := run(t, scopedJSONL, "facts", "import", "--bank", "a/b", "--store", url, "-"); code != ExitOK {
				t.Fatalf("facts import: %d %s %s", code, out, errOut)
			}
			input := conversationLine("user:ana", "c1", 0, 2) + "\n" + conversationLine("user:cy", "c2", 0, 3) + "\n"
			if code, out, errOut := run(t, input, "messages", "import", "--bank", "a/b", "--store", url, "-"); code != ExitOK {
				t.Fatalf("messages import: %d %s %s", code, out, errOut)
			}
			code, out, _ := run(t, "", "scopes", "list", "--bank", "a/b", "--store", url)
			for _, line := range []string{"SCOPE     FACTS  OBSERVATIONS  MESSAGES", "(shared)  1      0             0", "user:ana  2      0             2", "user:bob  1      0             0", "user:cy   0      0             3"} {
				if code != ExitOK || !strings.Contains(out, line) {
					t.Fatalf("scopes list: want %q:\n%s", line, out)
				}
			}
			var scopes []consolidation.ScopeCount
			code, out, _ = run(t, "", "scopes", "list", "--bank", "a/b", "--store", url, "-o", "json")
			if code != ExitOK || json.Unmarshal([]byte(out), &scopes) != nil || len(scopes) != 4 || scopes[3] != (consolidation.ScopeCount{Scope: "user:cy", Messages: 3}) || !strings.Contains(out, `"messages": 3`) {
				t.Fatalf("scopes list -o json: %d %s", code, out)
			}
			if code, out, _ := run(t, "", "scopes", "export", "--bank", "a/b", "--store", url, "user:cy"); code != ExitOK || strings.Count(out, `"kind":"message"`) != 3 {
				t.Fatalf("scopes export: %d %s", code, out)
			}
			if code, out, errOut := run(t, "", "scopes", "delete", "--bank", "a/b", "--store", url, "user:cy"); code != ExitOK || out != "scope user:cy erased: 0 facts, 0 observations, 3 messages\n" {
				t.Fatalf("scopes delete: %d %q %s", code, out, errOut)
			}
			if _, out, _ := run(t, "", "scopes", "list", "--bank", "a/b", "--store", url); strings.Contains(out, "user:cy") {
				t.Fatalf("an erased scope is listed:\n%s", out)
			}
		})
	}
}
