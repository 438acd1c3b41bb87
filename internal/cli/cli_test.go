package cli

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestUsageErrorsExit2: in every verb a usage error (no verb, an unknown
// one, a missing required flag or argument, a flag's bad value) exits 2
// with a message on stderr and nothing on stdout.
func TestUsageErrorsExit2(t *testing.T) {
	store := "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
	withEnv(t, map[string]string{"PROMPTOPS_STORE": store})
	for _, args := range [][]string{
		{}, {"frobnicate"},
		{"facts"}, {"facts", "frobnicate"}, {"facts", "list"}, {"facts", "list", "--bank", "nobank"},
		{"facts", "list", "--bank", "a/b", "-o", "yaml"}, {"facts", "list", "--bank", "a/b", "--status", "done"}, {"facts", "list", "--bank", "a/b", "--limit", "0"},
		{"facts", "import", "--bank", "a/b"}, {"facts", "retry"}, {"facts", "delete", "--bank", "a/b"},
		{"observations"}, {"observations", "list"}, {"observations", "list", "--bank", "a/b", "-o", "yaml"},
		{"scopes"}, {"scopes", "list"}, {"scopes", "list", "--bank", "a/b", "-o", "yaml"}, {"scopes", "export", "--bank", "a/b"}, {"scopes", "delete", "--bank", "a/b"},
		{"messages"}, {"messages", "import", "--bank", "a/b"},
		{"consolidate"}, {"consolidate", "--bank", "a/b"},
		{"serve"}, {"render"}, {"render", "-f", "x.yaml", "-o", "yaml"}, {"assemble"},
		{"tokens"}, {"tokens", "count", "a", "b"}, {"tokenizers"}, {"tokenizers", "pack"},
		{"rollout"}, {"rollout", "status"}, {"version", "extra"},
	} {
		code, out, errOut := run(t, "", args...)
		if code != ExitInvalid || out != "" || errOut == "" {
			t.Errorf("promptops %s: exit %d, stdout %q, stderr %q; want exit %d and a message on stderr", strings.Join(args, " "), code, out, errOut, ExitInvalid)
		}
	}
	withEnv(t, map[string]string{"PROMPTOPS_STORE": ""})
	if code, _, errOut := run(t, "", "facts", "list", "--bank", "a/b"); code != ExitInvalid || !strings.Contains(errOut, "$PROMPTOPS_STORE") {
		t.Errorf("facts list without a store: exit %d, %q; want %d naming $PROMPTOPS_STORE", code, errOut, ExitInvalid)
	}
}

// TestUnknownBank: a verb that reads a bank the store does not know fails
// naming it, rather than printing an empty table; once something was
// imported into the bank it is known.
func TestUnknownBank(t *testing.T) {
	store := "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
	withEnv(t, map[string]string{"PROMPTOPS_STORE": store})
	if code, out, errOut := run(t, factsJSONL, "facts", "import", "--bank", "team/known", "-"); code != ExitOK {
		t.Fatalf("facts import: exit %d: %s%s", code, out, errOut)
	}
	for _, args := range [][]string{
		{"facts", "list"}, {"facts", "retry"}, {"facts", "delete", "00000000-0000-4000-8000-000000000001"},
		{"observations", "list"}, {"scopes", "list"}, {"scopes", "export", "s"}, {"scopes", "delete", "s"},
	} {
		all := append(append(append([]string{}, args[:2]...), "--bank", "nope/nope"), args[2:]...)
		code, out, errOut := run(t, "", all...)
		if code != ExitFailed || out != "" || !strings.Contains(errOut, "bank nope/nope is not in this store") {
			t.Errorf("promptops %s: exit %d, stdout %q, stderr %q; want exit %d naming the bank", strings.Join(all, " "), code, out, errOut, ExitFailed)
		}
		known := append(append(append([]string{}, args[:2]...), "--bank", "team/known"), args[2:]...)
		if code, _, errOut := run(t, "", known...); strings.Contains(errOut, "not in this store") {
			t.Errorf("promptops %s: exit %d, %q; the bank is known", strings.Join(known, " "), code, errOut)
		}
	}
}

// flagLineRE is a flag's line in -h: its name, then a placeholder that
// says what it takes (an upper-case word such as DIR, URL, NAMESPACE/NAME,
// or a number's or duration's type); never words of the usage
// ("render --out-dir") or "string" and "value".
var flagLineRE = regexp.MustCompile(`^  -[a-z0-9-]+( [A-Z][A-Z0-9_:/.,|-]*| int| float| duration)?$`)

// TestHelpPlaceholders: every flag line of every verb's -h has a
// placeholder that reads as one, and serve -h lists every field of the
// bodies it shows.
func TestHelpPlaceholders(t *testing.T) {
	for _, path := range verbPaths() {
		args := append(append([]string{}, path...), "-h")
		_, out, _ := run(t, "", args...)
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "  -") && !flagLineRE.MatchString(line) {
				t.Errorf("promptops %s: flag line %q: want a placeholder such as DIR, URL or FILE", strings.Join(args, " "), line)
			}
		}
	}
	_, out, _ := run(t, "", "serve", "-h")
	for _, want := range []string{
		`"query"?, "scope"?, "assignmentKey"?}`,
		`{"facts": [{"id"?, "scope"?, "text"`,
		`"includePending"?, "scope"?, "includeShared"?, "trustedOnly"?}`,
		"-plans-dir DIR\n", "-store URL\n", "-bank NAMESPACE/NAME\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("serve -h lacks %q:\n%s", want, out)
		}
	}
}
