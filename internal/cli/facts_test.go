package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
)

// longFact is a valid fact line of exactly n bytes.
func longFact(n int) string {
	const pre, post = `{"text": "`, `"}`
	return pre + strings.Repeat("a", n-len(pre)-len(post)) + post
}

func TestFactsImportRejectsBadLines(t *testing.T) {
	ok := `{"id": "x", "text": "Alice works at Acme"}`
	for _, tc := range []struct {
		name, input, want string
	}{
		{"line over the limit", ok + "\n" + longFact(MaxFactLine+1) + "\n", "line 2: longer than 4 MiB"},
		{"line over the scanner buffer", ok + "\r\n" + longFact(MaxFactLine+3) + "\r\n" + ok + "\r\n", "line 2: longer than 4 MiB"},
		{"last line over the limit without newline", ok + "\n\n" + longFact(MaxFactLine+1), "line 3: longer than 4 MiB"},
		{"id repeated with different text", "\n" + ok + "\n\n" + `{"id": "x", "text": "Alice works at Initech"}` + "\n", `line 4: id "x" repeats line 2 with different text or source`},
		{"id repeated with different text, CRLF", ok + "\r\n" + `{"id": "x", "text": "Alice works at Acme "}` + "\r\n", `line 2: id "x" repeats line 1 with different text or source`},
		{"id repeated with another source", ok + "\n" + `{"id": "x", "text": "Alice works at Acme", "source": "crm"}` + "\n", `line 2: id "x" repeats line 1 with different text or source`},
		{"occurred_end before occurred_start", `{"text": "a trip", "occurredStart": "2024-02-01", "occurredEnd": "2024-01-31T23:00:00Z"}`, `line 1: occurredEnd "2024-01-31T23:00:00Z" is before occurredStart "2024-02-01"`},
		{"bad occurred_end", ok + "\r\n" + `{"text": "a trip", "occurredEnd": "soon"}` + "\r\n", `line 2: occurredEnd "soon" is neither RFC 3339 nor YYYY-MM-DD`},
		{"text of the wrong type", `{"text": 42}`, "line 1: text: a JSON number where a string is wanted"},
		{"entities of the wrong type", `{"text": "t", "entities": "Alice"}`, "line 1: entities: a JSON string where an array is wanted"},
		{"missing text", "\xef\xbb\xbf" + `{"id": "y"}` + "\r\n", "line 1: text is required"},
		{"invalid UTF-8", ok + "\n" + "{\"text\": \"caf\xe9\"}\n", "line 2: not valid UTF-8"},
		{"UTF-16 input", "\xff\xfe{\x00}\x00", "line 1: not valid UTF-8"},
		{"two facts on one line", ok + "\n" + `{"text": "a"} {"text": "b"}` + "\n", "line 2: more than one JSON value on the line"},
		{"byte order mark after line 1", ok + "\n\xef\xbb\xbf" + `{"text": "b"}` + "\n", "line 2: not a JSON object"},
		{"a bad source", ok + "\n" + `{"text": "b", "source": "Tool.Web"}` + "\n", "line 2: source: must start with a lowercase letter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
			code, out, errOut := run(t, tc.input, "facts", "import", "--bank", "a/b", "--store", url, "-")
			if code != ExitInvalid || out != "" || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "nothing imported") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, tc.want)
			}
			assertNoFacts(t, url, "a/b")
		})
	}
}

// assertNoFacts checks that the store holds no fact of bank: facts list
// finds none, or does not know the bank (nothing was ever imported).
func assertNoFacts(t *testing.T, url, bank string) {
	t.Helper()
	code, out, errOut := run(t, "", "facts", "list", "--bank", bank, "--store", url, "-o", "json")
	if code == ExitFailed && strings.Contains(errOut, "bank "+bank+" is not in this store") {
		return
	}
	if code != ExitOK || strings.TrimSpace(out) != "[]" {
		t.Fatalf("something was imported: exit %d, stdout %s, stderr %s", code, out, errOut)
	}
}

func TestParseFactsLineAtTheLimit(t *testing.T) {
	for _, ending := range []string{"\n", "\r\n", ""} {
		facts, _, err := parseFacts(strings.NewReader(longFact(MaxFactLine) + ending))
		if err != nil || len(facts) != 1 || len(facts[0].Text) != MaxFactLine-len(`{"text": ""}`) {
			t.Fatalf("ending %q: %d facts, %v", ending, len(facts), err)
		}
	}
}

func TestFactsImportBOMAndCRLF(t *testing.T) {
	input := "\xef\xbb\xbf" + strings.Join([]string{
		`{"id": "f1", "text": "Alice works at Acme Corp", "entities": ["Alice"], "occurredStart": "2024-01-15", "occurredEnd": "2024-01-15", "tags": ["work"]}`,
		"",
		`{"id": "f2", "text": "Bob has a dog named Rex", "entities": ["Bob", "Rex"]}`,
		"\r",
		"  \t",
		`{"id": "f1", "text": "Alice works at Acme Corp", "entities": ["someone else"]}`,
		`{"text": "张伟在北京工作", "mentionedAt": "2024-05-01T08:00:00Z"}`,
	}, "\r\n") + "\r\n"
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "facts.jsonl")
			if err := os.WriteFile(file, []byte(input), 0o644); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := run(t, "", "facts", "import", "--bank", "a/b", "--store", url, file)
			if code != ExitOK || !strings.Contains(out, "imported 3 facts into a/b (1 already present)") {
				t.Fatalf("import: %d %q %q", code, out, errOut)
			}
			code, out, errOut = run(t, "", "facts", "list", "--bank", "a/b", "--store", url, "-o", "json")
			var facts []consolidation.Fact
			if code != ExitOK || json.Unmarshal([]byte(out), &facts) != nil || len(facts) != 3 {
				t.Fatalf("list: %d %s %s", code, out, errOut)
			}
			if strings.Contains(out, `\r`) || strings.Contains(out, "\r") || strings.Contains(out, "\ufeff") {
				t.Fatalf("a CR or BOM got into the facts: %s", out)
			}
			want := []consolidation.Fact{
				{ID: "f1", Text: "Alice works at Acme Corp", Entities: []string{"Alice"}, Tags: []string{"work"}},
				{ID: "f2", Text: "Bob has a dog named Rex", Entities: []string{"Bob", "Rex"}},
				{Text: "张伟在北京工作"},
			}
			for i, f := range facts {
				w := want[i]
				if (w.ID != "" && f.ID != w.ID) || f.Text != w.Text || !reflect.DeepEqual(f.Entities, w.Entities) || !reflect.DeepEqual(f.Tags, w.Tags) {
					t.Errorf("fact %d = %+v, want %+v", i, f, w)
				}
			}
			if facts[0].OccurredStart == nil || facts[0].OccurredStart.Format("2006-01-02") != "2024-01-15" || facts[2].MentionedAt == nil {
				t.Errorf("dates lost: %+v %+v", facts[0], facts[2])
			}
			if code, out, _ = run(t, "", "facts", "import", "--bank", "a/b", "--store", url, file); code != ExitOK || !strings.Contains(out, "imported 0 facts into a/b (4 already present)") {
				t.Fatalf("re-import: %d %q", code, out)
			}
		})
	}
}

// Facts without an id get one derived from the bank, the text and the
// times, so a second import of the same file adds nothing, in either store.
func TestFactsImportWithoutIDIsIdempotent(t *testing.T) {
	input := strings.Join([]string{
		`{"text": "Alice works at Acme Corp", "occurredStart": "2024-01-15"}`,
		`{"text": "Alice works at Acme Corp", "occurredStart": "2024-01-15", "entities": ["Alice"]}`,
		`{"text": "Alice works at Acme Corp", "occurredStart": "2024-01-16"}`,
		`{"text": "Alice works at Acme Corp", "occurredStart": "2024-01-15", "mentionedAt": "2024-02-01T00:00:00+01:00"}`,
		`{"text": "Alice works at Acme Corp", "occurredStart": "2024-01-15", "mentionedAt": "2024-01-31T23:00:00Z"}`,
		`{"text": "Bob has a dog"}`,
	}, "\n") + "\n"
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "facts.jsonl")
			if err := os.WriteFile(file, []byte(input), 0o644); err != nil {
				t.Fatal(err)
			}
			// Lines 2 and 5 repeat lines 1 and 4 (entities do not count; the
			// same instant in another zone is the same time).
			for i, want := range []string{"imported 4 facts into t/b (2 already present)", "imported 0 facts into t/b (6 already present)"} {
				if code, out, errOut := run(t, "", "facts", "import", "--bank", "t/b", "--store", url, file); code != ExitOK || !strings.Contains(out, want) {
					t.Fatalf("import %d: exit %d, %q %q; want %q", i+1, code, out, errOut, want)
				}
			}
			if code, out, errOut := run(t, "", "facts", "import", "--bank", "t/other", "--store", url, file); code != ExitOK || !strings.Contains(out, "imported 4 facts into t/other (2 already present)") {
				t.Fatalf("another bank: exit %d, %q %q", code, out, errOut)
			}
			var facts []consolidation.Fact
			if _, out, _ := run(t, "", "facts", "list", "--bank", "t/b", "--store", url, "-o", "json"); json.Unmarshal([]byte(out), &facts) != nil || len(facts) != 4 {
				t.Fatalf("list: %s", out)
			}
			if facts[0].ID != derivedFactID("t/b", facts[0]) || facts[0].ID == derivedFactID("t/other", facts[0]) {
				t.Errorf("id %s is not derived from the bank and the fact", facts[0].ID)
			}
		})
	}
}

func TestDerivedFactIDIsStable(t *testing.T) {
	d := time.Date(2024, 1, 15, 0, 0, 0, 0, time.UTC)
	// Changing this value changes the id of every fact imported without one:
	// a re-import would then store those facts twice.
	if got, want := derivedFactID("team/support", consolidation.Fact{Text: "Alice works at Acme Corp", OccurredStart: &d}), "c64913ea-0e0c-852d-ac5c-5666e92d9959"; got != want {
		t.Fatalf("derivedFactID = %s, want %s", got, want)
	}
}
