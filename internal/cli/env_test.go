package cli

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/tokens"
)

func TestMaskSecrets(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://app:s3cret@db.example:5432/bank?sslmode=require", "postgres://app:***@db.example:5432/bank?sslmode=require"},
		{"postgresql://app:p%40ss@db/bank", "postgresql://app:***@db/bank"},
		{"postgres://app@db/bank?sslmode=require&password=s3cret", "postgres://app@db/bank?sslmode=require&password=***"},
		{"postgres://app:a@b@db/bank", "postgres://app:***@db/bank"},
		{"host=db user=app password=s3cret dbname=bank", "host=db user=app password=*** dbname=bank"},
		{"host=db password='s3 cret' dbname=bank", "host=db password=*** dbname=bank"},
		{"http://user:s3cret@vllm:8000/v1", "http://user:***@vllm:8000/v1"},
		{"http://vllm:8000/v1?api_key=s3cret", "http://vllm:8000/v1?api_key=***"},
		// Nothing to mask.
		{"sqlite:///data/bank.db", "sqlite:///data/bank.db"},
		{"postgres://app@db/bank", "postgres://app@db/bank"},
		{"http://vllm:8000/v1", "http://vllm:8000/v1"},
		{"Redact", "Redact"},
		{"team-a/support", "team-a/support"},
		{"", ""},
	} {
		if got := maskSecrets(tc.in); got != tc.want {
			t.Errorf("maskSecrets(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for env, hidden := range map[string]bool{
		"OPENAI_API_KEY": true, "PROMPTOPS_EMBEDDINGS_API_KEY": true, "GITHUB_TOKEN": true, "PGPASSWORD": false, "DB_PASSWORD": true,
		"PROMPTOPS_API_KEY_FILE": false, "PROMPTOPS_REDACT_SECRETS": false, "PROMPTOPS_STORE": false,
	} {
		if got := shownDefault(env, "value") == ""; got != hidden {
			t.Errorf("shownDefault(%s) hides the value: %v, want %v", env, got, hidden)
		}
	}
}

// envReaders are the calls through which the package reads a variable,
// with the index of the argument that names it.
var envReaders = map[string]int{"envStringVar": 3, "intFlag": 4, "envDefault": 1, "lookupEnv": 0, "getenv": 0, "os.Getenv": 0, "os.LookupEnv": 0}

// envConstants are the named constants that name variables.
var envConstants = map[string]string{"memoryLimitEnv": memoryLimitEnv, "tokens.EnvDir": tokens.EnvDir, "env": "", "k": ""}

// variablesRead lists every variable the package's code names in a call
// that reads one, found in its source, so that a new variable cannot miss
// TestNoSecretInHelpUsageOrLogs.
func variablesRead(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			name := exprName(call.Fun)
			i, ok := envReaders[name]
			if !ok || i >= len(call.Args) {
				return true
			}
			switch a := call.Args[i].(type) {
			case *ast.BasicLit:
				v, err := strconv.Unquote(a.Value)
				if err != nil {
					t.Fatal(err)
				}
				seen[v] = true
			default:
				v, ok := envConstants[exprName(a)]
				if !ok {
					t.Errorf("%s: %s reads a variable named by %s: add it to envConstants", fset.Position(call.Pos()), name, exprName(a))
				}
				if v != "" {
					seen[v] = true
				}
			}
			return true
		})
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func exprName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprName(e.X) + "." + e.Sel.Name
	}
	return ""
}

// secretMark is in every secret-looking value the test sets; no output may
// hold it.
const secretMark = "Sekr3t"

// secretVariables are the variables that hold a secret or may hold one in
// a URL. Every other variable the package reads holds settings that -h
// shows as they are (a model's name, a bank, an encoding, a number).
var secretVariables = []string{
	"PROMPTOPS_STORE", "PROMPTOPS_LLM_BASE_URL", "PROMPTOPS_EMBEDDINGS_BASE_URL",
	"OPENAI_API_KEY", "PROMPTOPS_EMBEDDINGS_API_KEY", "PROMPTOPS_API_KEY_FILE", "PROMPTOPS_EMBEDDINGS_API_KEY_FILE",
}

// verbPaths are every verb and subcommand of the binary.
func verbPaths() [][]string {
	subcommands := map[string][]string{
		"facts": {"import", "list", "retry", "delete"}, "observations": {"list"}, "scopes": {"list", "export", "delete"},
		"messages": {"import"}, "tokens": {"count"}, "tokenizers": {"pack"}, "rollout": {"status", "promote", "abort"},
	}
	var out [][]string
	for name := range commands {
		out = append(out, []string{name})
		for _, sub := range subcommands[name] {
			out = append(out, []string{name, sub})
		}
	}
	sort.Slice(out, func(i, j int) bool { return strings.Join(out[i], " ") < strings.Join(out[j], " ") })
	return out
}

// TestNoSecretInHelpUsageOrLogs sets every variable the binary reads to a
// secret-looking value and checks that no verb's -h, usage error, store
// error or startup log prints it: -h shows a URL's password as ***, a key
// not at all.
func TestNoSecretInHelpUsageOrLogs(t *testing.T) {
	read := variablesRead(t)
	for _, must := range append([]string{"PROMPTOPS_STORE", "OPENAI_API_KEY", "PROMPTOPS_EMBEDDINGS_API_KEY", "PROMPTOPS_BANK", "PROMPTOPS_BATCH_SIZE", memoryLimitEnv}, secretVariables...) {
		if !strings.Contains(strings.Join(read, " "), must) {
			t.Fatalf("the source scan misses %s: %v", must, read)
		}
	}
	t.Logf("variables read: %s", strings.Join(read, " "))

	t.Run("help and usage errors", func(t *testing.T) {
		// Every variable holds a URL with a password and a key: the
		// settings' values are not secret, but -h must mask whatever the
		// environment holds the same way.
		env := map[string]string{}
		for _, name := range read {
			env[name] = "postgres://app:" + secretMark + "-" + name + "@db.example/bank?sslmode=require&password=" + secretMark
		}
		for _, name := range []string{"OPENAI_API_KEY", "PROMPTOPS_EMBEDDINGS_API_KEY"} {
			env[name] = "sk-" + secretMark + "-" + name
		}
		withEnv(t, env)
		for _, path := range verbPaths() {
			for _, help := range []string{"-h", "--help"} {
				args := append(append([]string{}, path...), help)
				code, out, errOut := run(t, "", args...)
				if code != ExitOK || errOut != "" || !strings.Contains(out, "Usage: promptops") {
					t.Errorf("promptops %s: exit %d, stderr %q; want exit 0 and the usage on stdout", strings.Join(args, " "), code, errOut)
				}
				if strings.Contains(out+errOut, secretMark) {
					t.Errorf("promptops %s prints a secret:\n%s%s", strings.Join(args, " "), out, errOut)
				}
			}
			args := append(append([]string{}, path...), "--no-such-flag")
			code, out, errOut := run(t, "", args...)
			if code != ExitInvalid || out != "" || errOut == "" {
				t.Errorf("promptops %s: exit %d, stdout %q; want exit %d and the error on stderr", strings.Join(args, " "), code, out, ExitInvalid)
			}
			if strings.Contains(out+errOut, secretMark) {
				t.Errorf("promptops %s prints a secret:\n%s", strings.Join(args, " "), errOut)
			}
		}
		// The store's URL is shown, masked: -h says where it comes from.
		_, out, _ := run(t, "", "facts", "list", "-h")
		if want := `(default "postgres://app:***@db.example/bank?sslmode=require&password=***")`; !strings.Contains(out, want) {
			t.Errorf("facts list -h does not show the store's URL masked, %s:\n%s", want, out)
		}
	})

	t.Run("store errors", func(t *testing.T) {
		for _, store := range []string{
			"postgres://app:" + secretMark + "@127.0.0.1:1/bank?sslmode=disable",
			"postgres://app:" + secretMark + "@127.0.0.1:1/bank?sslmode=bogus",
			"postgres://app@127.0.0.1:1/bank?sslmode=bogus&password=" + secretMark,
			"postgres://app:" + secretMark + "@[::1/bank",
			"host=127.0.0.1 password=" + secretMark,
		} {
			withEnv(t, map[string]string{"PROMPTOPS_STORE": store})
			for _, args := range [][]string{{"facts", "list", "--bank", "a/b"}, {"scopes", "list", "--bank", "a/b"}, {"consolidate", "--bank", "a/b", "--llm-base-url", "http://127.0.0.1:1/v1", "--model", "m"}} {
				code, out, errOut := run(t, "", args...)
				if code == ExitOK || strings.Contains(out+errOut, secretMark) {
					t.Errorf("%s with a store that fails: exit %d, printed %s%s", strings.Join(args, " "), code, out, errOut)
				}
			}
		}
	})

	t.Run("startup logs", func(t *testing.T) {
		dir := t.TempDir()
		keyFile, embKeyFile := filepath.Join(dir, "key"), filepath.Join(dir, "embeddings-key")
		_ = os.WriteFile(keyFile, []byte("sk-"+secretMark+"-file\n"), 0o600)
		_ = os.WriteFile(embKeyFile, []byte("sk-"+secretMark+"-embeddings-file\n"), 0o600)
		// A real store whose URL holds a password (the test server
		// trusts local connections and ignores it).
		pgURL := storeURLs(t)["postgres"]
		store := strings.Replace(pgURL, "postgres://postgres@", "postgres://postgres:"+secretMark+"@", 1)
		if store == pgURL {
			t.Fatalf("no user in %s", pgURL)
		}
		facts := filepath.Join(dir, "facts.jsonl")
		_ = os.WriteFile(facts, []byte(factsJSONL), 0o644)
		env := map[string]string{
			"PROMPTOPS_STORE":                      store,
			"PROMPTOPS_LLM_BASE_URL":               "http://llm:" + secretMark + "@127.0.0.1:1/v1",
			"PROMPTOPS_EMBEDDINGS_BASE_URL":        "http://embeddings:" + secretMark + "@127.0.0.1:1/v1",
			"PROMPTOPS_EMBEDDINGS_MODEL":           "m",
			"PROMPTOPS_MODEL":                      "m",
			"OPENAI_API_KEY":                       "sk-" + secretMark + "-openai",
			"PROMPTOPS_EMBEDDINGS_API_KEY":         "sk-" + secretMark + "-embeddings",
			"PROMPTOPS_EMBEDDINGS_TIMEOUT_SECONDS": "2",
			"PROMPTOPS_LLM_TIMEOUT_SECONDS":        "2",
			"PROMPTOPS_LLM_RETRIES":                "0",
		}
		withEnv(t, env)
		if code, out, errOut := run(t, "", "facts", "import", "--bank", "team/secrets", facts); code != ExitOK || strings.Contains(out+errOut, secretMark) {
			t.Fatalf("facts import: exit %d: %s%s", code, out, errOut)
		}
		for _, keys := range []map[string]string{{}, {"PROMPTOPS_API_KEY_FILE": keyFile, "PROMPTOPS_EMBEDDINGS_API_KEY_FILE": embKeyFile}} {
			withEnv(t, keys)
			code, out, errOut := run(t, "", "consolidate", "--bank", "team/secrets", "--max-attempts", "1")
			if !strings.HasPrefix(out, "{") {
				t.Errorf("consolidate with an unreachable LLM: exit %d, summary %s, stderr %s", code, out, errOut)
			}
			if strings.Contains(out+errOut, secretMark) {
				t.Errorf("consolidate prints a secret:\n%s%s", out, errOut)
			}
		}
		// startServe returns once serve listens, after its Serving line.
		s := startServe(t, "team/secrets", "")
		logs := s.stop()
		if !strings.Contains(logs, "Serving") || strings.Contains(logs, secretMark) {
			t.Errorf("serve --bank's logs hold a secret or no Serving line:\n%s", logs)
		}
	})
}
