package cli

import (
	"bufio"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/llmtest"
)

const scopedJSONL = `{"id": "00000000-0000-4000-8000-00000000000a", "scope": "user:ana", "text": "Ana's favourite colour is blue"}
{"id": "00000000-0000-4000-8000-00000000000b", "scope": "user:ana", "text": "Ana lives in Lisbon"}
{"id": "00000000-0000-4000-8000-00000000000c", "scope": "user:bob", "text": "Bob's favourite colour is green"}
{"id": "00000000-0000-4000-8000-00000000000d", "text": "The office closes at six"}
`

// TestScopesVerbs walks the erasure verbs as an operator would: list the
// scopes, export one, delete a fact (its observation goes with it), erase a
// scope; every other scope is left as it was.
func TestScopesVerbs(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
	withEnv(t, map[string]string{"PROMPTOPS_STORE": url, "OPENAI_API_KEY": ""})
	if code, out, errOut := run(t, scopedJSONL, "facts", "import", "--bank", "a/b", "-"); code != ExitOK {
		t.Fatalf("import: %d %s %s", code, out, errOut)
	}
	srv := llmtest.New(llmtest.OnePerFact)
	defer srv.Close()
	if code, _, errOut := run(t, "", "consolidate", "--bank", "a/b", "--llm-base-url", srv.BaseURL(), "--model", "m", "--parallelism", "2"); code != ExitOK {
		t.Fatalf("consolidate: %d %s", code, errOut)
	}

	code, out, _ := run(t, "", "scopes", "list", "--bank", "a/b")
	for _, line := range []string{"(shared)  1      1", "user:ana  2      2", "user:bob  1      1"} {
		if code != ExitOK || !strings.Contains(out, line) {
			t.Fatalf("scopes list: want %q:\n%s", line, out)
		}
	}
	code, out, _ = run(t, "", "observations", "list", "--bank", "a/b", "--scope", "user:ana", "-o", "json")
	var obs []consolidation.Observation
	if code != ExitOK || json.Unmarshal([]byte(out), &obs) != nil || len(obs) != 2 {
		t.Fatalf("observations list --scope: %d %s", code, out)
	}
	for _, o := range obs {
		if o.Scope != "user:ana" || len(o.SourceFactIDs) != 1 {
			t.Fatalf("observation %+v", o)
		}
	}
	if code, out, _ = run(t, "", "observations", "list", "--bank", "a/b"); code != ExitOK || strings.Count(out, "user:") != 3 || !strings.Contains(out, "SCOPE") {
		t.Fatalf("observations list:\n%s", out)
	}

	code, out, _ = run(t, "", "scopes", "export", "--bank", "a/b", "user:ana")
	kinds := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var e struct {
			Kind, Scope, Text string
			SourceFactIDs     []string `json:"sourceFactIds"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Scope != "user:ana" || strings.Contains(e.Text, "Bob") {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		if e.Kind == "observation" && len(e.SourceFactIDs) != 1 {
			t.Fatalf("export observation without sources: %s", sc.Text())
		}
		kinds[e.Kind]++
	}
	if code != ExitOK || kinds["fact"] != 2 || kinds["observation"] != 2 {
		t.Fatalf("export: %d %v\n%s", code, kinds, out)
	}

	code, out, errOut := run(t, "", "facts", "delete", "--bank", "a/b", "00000000-0000-4000-8000-00000000000b", "00000000-0000-4000-8000-0000000000ff")
	if code != ExitFailed || !strings.Contains(out, "deleted 1 facts and 1 observations") || !strings.Contains(errOut, "1 of the 2 ids name no fact") {
		t.Fatalf("facts delete: %d %s %s", code, out, errOut)
	}
	if code, out, errOut = run(t, "", "facts", "delete", "--bank", "a/b", "--scope", "user:ana", "00000000-0000-4000-8000-00000000000c"); code != ExitFailed || !strings.Contains(out, "deleted 0 facts") {
		t.Fatalf("facts delete in another scope: %d %s %s", code, out, errOut)
	}
	if code, out, errOut = run(t, "", "scopes", "delete", "--bank", "a/b", "user:ana"); code != ExitOK || out != "scope user:ana erased: 1 facts, 1 observations, 0 messages\n" {
		t.Fatalf("scopes delete: %d %q %s", code, out, errOut)
	}
	if code, out, _ = run(t, "", "scopes", "list", "--bank", "a/b", "-o", "json"); code != ExitOK || strings.Contains(out, "user:ana") || !strings.Contains(out, `"scope": "user:bob"`) {
		t.Fatalf("after the erasure:\n%s", out)
	}
	for _, bad := range [][]string{
		{"scopes", "delete", "--bank", "a/b", ""},
		{"scopes", "delete", "--bank", "a/b", "user/ana"},
		{"scopes", "delete", "--bank", "a/b"},
		{"scopes", "export", "--bank", "a/b"},
		{"facts", "delete", "--bank", "a/b"},
		{"facts", "delete", "--bank", "a/b", "--scope", "a b", "00000000-0000-4000-8000-00000000000c"},
		{"observations", "list", "--bank", "a/b", "--scope", "a b"},
		{"consolidate", "--bank", "a/b", "--llm-base-url", srv.BaseURL(), "--model", "m", "--parallelism", "0"},
	} {
		if code, _, errOut := run(t, "", bad...); code != ExitInvalid || errOut == "" {
			t.Errorf("%v: exit %d, want %d with a message: %s", bad, code, ExitInvalid, errOut)
		}
	}
}
