package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/tokens"
)

func TestTokensCount(t *testing.T) {
	text := "Hello, world! 你好，世界！\n"
	file := filepath.Join(t.TempDir(), "prompt.txt")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		enc   string
	}{
		{"file, default encoding", "", []string{"tokens", "count", file}, tokens.O200K},
		{"file, cl100k", "", []string{"tokens", "count", "-e", "cl100k_base", file}, tokens.CL100K},
		{"stdin", text, []string{"tokens", "count", "-e", "o200k_base"}, tokens.O200K},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, tc.stdin, tc.args...)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			want := tokens.MustGet(tc.enc).Count(text)
			if got, err := strconv.Atoi(strings.TrimSpace(out)); err != nil || got != want {
				t.Fatalf("printed %q, want %d", out, want)
			}
		})
	}
}

func TestTokensCountJSONL(t *testing.T) {
	texts := []string{"", "one", "don't stop\n", "统计分析", "one"}
	var in strings.Builder
	for _, s := range texts {
		in.WriteString(`{"id": 7, "text": ` + strconv.Quote(s) + "}\n")
	}
	input := strings.TrimSuffix(in.String(), "\n") // the last line may lack its newline
	code, out, errOut := run(t, input, "tokens", "count", "--jsonl", "-e", "cl100k_base")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var want strings.Builder
	for _, s := range texts {
		want.WriteString(`{"tokens":` + strconv.Itoa(tokens.MustGet(tokens.CL100K).Count(s)) + "}\n")
	}
	if out != want.String() {
		t.Fatalf("got\n%swant\n%s", out, want.String())
	}
}

func TestTokensCountInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, stdin string
		args        []string
		stderr      string
		stdout      string
	}{
		{"no subcommand", "", []string{"tokens"}, "Usage", ""},
		{"unknown encoding", "x", []string{"tokens", "count", "-e", "p50k_base"}, "unsupported encoding", ""},
		{"missing file", "", []string{"tokens", "count", filepath.Join(t.TempDir(), "nope")}, "no such file", ""},
		{"two files", "", []string{"tokens", "count", "a", "b"}, "at most one FILE", ""},
		{"bad line", "{\"text\": \"ok\"}\nnot json\n", []string{"tokens", "count", "--jsonl"}, "line 2", "{\"tokens\":1}\n"},
		{"no text", "{\"body\": \"x\"}\n", []string{"tokens", "count", "--jsonl"}, `no "text" field`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, tc.stdin, tc.args...)
			if code != ExitInvalid || !strings.Contains(errOut, tc.stderr) || out != tc.stdout {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2, stdout %q, stderr with %q", code, out, errOut, tc.stdout, tc.stderr)
			}
		})
	}
	if code, _, _ := run(t, "", "tokens", "count", "-h"); code != ExitOK {
		t.Fatalf("-h: exit %d, want 0", code)
	}
}
