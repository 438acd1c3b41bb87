package readmetest

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"sigs.k8s.io/yaml"

	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/pgtest"
	"github.com/promptops/promptops/internal/promtest"
	"github.com/promptops/promptops/internal/testenv"
)

// operationsBank is the bank docs/operations.md's backup blocks name.
const operationsBank = "team/support"

// TestOperationsBackupRestore runs the backup and restore blocks of
// docs/operations.md (<!-- readme-check store NAME -->) against a real
// PostgreSQL and a SQLite bank: the bank holds examples/facts.jsonl
// consolidated by a scripted model; after the backup a fact is deleted
// (erasing the observations citing it), and the restored bank must
// recall what it recalled before, through promptops serve --bank. The
// whole PostgreSQL store is also restored into an empty database.
func TestOperationsBackupRestore(t *testing.T) {
	root := testenv.Root()
	blocks := blocksOf(t, root, true)
	for _, name := range []string{"postgres-backup", "postgres-restore", "postgres-bank-backup", "postgres-bank-restore", "sqlite-backup", "sqlite-restore"} {
		if len(blocks[name]) == 0 {
			t.Fatalf("docs/operations.md has no block marked <!-- readme-check store %s -->", name)
		}
	}
	for name := range blocks {
		if !strings.HasPrefix(name, "postgres-") && !strings.HasPrefix(name, "sqlite-") {
			t.Fatalf("store block %q: no test runs it", name)
		}
	}
	for _, tool := range []string{"sqlite3", "pg_dump", "pg_restore", "psql"} {
		if _, err := exec.LookPath(tool); err != nil {
			if _, err := os.Stat(filepath.Join(pgBinDir(), tool)); err != nil {
				t.Fatalf("%s is not installed: the backup commands of docs/operations.md need it", tool)
			}
		}
	}
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-C", root, "-o", filepath.Join(bin, "promptops"), ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	llm := llmtest.New(llmtest.OnePerFact)
	defer llm.Close()
	pg, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()

	newStore := func(t *testing.T, kind, work string) string {
		if kind == "sqlite" {
			return "sqlite://" + filepath.Join(work, "data", "bank.db")
		}
		dsn, err := pg.NewDatabase(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return dsn
	}
	for _, kind := range []string{"postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			work := t.TempDir()
			if err := os.MkdirAll(filepath.Join(work, "data"), 0o755); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("cp", "-r", filepath.Join(root, "examples"), filepath.Join(work, "examples")).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v %s", err, out)
			}
			store := newStore(t, kind, work)
			env := func(store string) []string {
				return []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH") + string(os.PathListSeparator) + pgBinDir(),
					"HOME=" + work, "LANG=C.UTF-8", "TMPDIR=" + work, "PROMPTOPS_STORE=" + store}
			}
			shell(t, work, env(store), fmt.Sprintf(`promptops facts import --bank %[1]s examples/facts.jsonl
promptops consolidate --bank %[1]s --llm-base-url %[2]s --model scripted >/dev/null`, operationsBank, llm.BaseURL()))
			before := recallAll(t, bin, work, env(store))
			t.Logf("the bank recalls:\n%s", before)
			if !strings.Contains(before, "vol-17") {
				t.Fatalf("the seeded bank recalls nothing of vol-17: %s", before)
			}
			if kind == "postgres" {
				checkBankTables(t, store, blocks["postgres-bank-backup"])
			}

			runChunks(t, blocks[kind+"-backup"], work, env(store), 2*time.Minute)
			if kind == "postgres" {
				runChunks(t, blocks["postgres-bank-backup"], work, env(store), 2*time.Minute)
			}
			erase := func() {
				t.Helper()
				shell(t, work, env(store), "promptops facts delete --bank "+operationsBank+" 2f1c7a52-3b0e-4c1d-9a77-0d6b1e5a4c01 >/dev/null")
				if got := recallAll(t, bin, work, env(store)); got == before {
					t.Fatalf("deleting a fact changed nothing the bank recalls: %s", got)
				}
			}
			erase()
			runChunks(t, blocks[kind+"-restore"], work, env(store), 2*time.Minute)
			if got := recallAll(t, bin, work, env(store)); got != before {
				t.Fatalf("restored from %s-backup, the bank recalls\n%s\nwhere it recalled\n%s", kind, got, before)
			}
			if kind != "postgres" {
				return
			}
			// The whole store into an empty database.
			fresh := newStore(t, kind, work)
			runChunks(t, blocks["postgres-restore"], work, env(fresh), 2*time.Minute)
			if got := recallAll(t, bin, work, env(fresh)); got != before {
				t.Fatalf("restored into an empty database, the bank recalls\n%s\nwhere it recalled\n%s", got, before)
			}
			// One bank, the way back from its CSV files.
			erase()
			shell(t, work, env(store), "promptops facts import --bank team/other examples/facts.jsonl >/dev/null")
			runChunks(t, blocks["postgres-bank-restore"], work, env(store), 2*time.Minute)
			if got := recallAll(t, bin, work, env(store)); got != before {
				t.Fatalf("restored from postgres-bank-backup, the bank recalls\n%s\nwhere it recalled\n%s", got, before)
			}
			shell(t, work, env(store), "promptops scopes list --bank team/other | grep -q '^(shared) *4 '")
		})
	}
}

// pgBinDir is where Debian keeps PostgreSQL's programs, for a machine whose
// PATH has only the server's.
func pgBinDir() string {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	if len(matches) == 0 {
		return "/usr/lib/postgresql/15/bin"
	}
	return matches[len(matches)-1]
}

// shell runs script under bash in dir with env and fails the test when it
// fails.
func shell(t *testing.T, dir string, env []string, script string) {
	t.Helper()
	cmd := exec.Command("bash", "-c", "set -euo pipefail\n"+script)
	cmd.Dir, cmd.Env = dir, env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

// recallAll starts promptops serve --bank on the store of env and returns
// its answers to a few recalls, one line each.
func recallAll(t *testing.T, bin, dir string, env []string) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var logs bytes.Buffer
	cmd := exec.Command(filepath.Join(bin, "promptops"), "serve", "--bank", operationsBank, "--listen", addr)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve --bank did not start: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	var out strings.Builder
	for _, q := range []string{"backup failures on vol-17", "Dana Ruiz", "张伟 续约", "snapshot quota"} {
		body := fmt.Sprintf(`{"query": %q, "maxTokens": 2000, "maxItems": 10, "includePending": true}`, q)
		resp, err := http.Post(base+"/v1/banks/"+operationsBank+"/recall", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("recall %s: %d %s\n%s", body, resp.StatusCode, data, logs.String())
		}
		fmt.Fprintf(&out, "%s\n", bytes.TrimSpace(data))
	}
	return out.String()
}

// checkBankTables holds the table list of the one-bank backup to the
// store's tables: every promptops_* table but the migrations' must be in
// it, or a bank restored from it would miss rows.
func checkBankTables(t *testing.T, dsn string, chunks []Chunk) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_name LIKE 'promptops\_%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var commands string
	for _, c := range chunks {
		commands += c.Commands
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		if name == "promptops_schema_migrations" {
			continue
		}
		if !regexp.MustCompile(`[\s']` + strings.TrimPrefix(name, "promptops_") + `:`).MatchString(commands) {
			t.Errorf("docs/operations.md's one-bank backup leaves out table %s", name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// alertRules is the Prometheus rule file format, as far as
// docs/operations.md uses it.
type alertRules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

// TestOperationsAlerts checks docs/operations.md's alert rules and
// dashboard queries: the rules are a rule file (no unknown field), every
// alert has a severity and a summary, every expression parses in a real
// Prometheus (an instant query answers 400 to one that does not), and
// every promptops_* metric they name is registered by the code.
func TestOperationsAlerts(t *testing.T) {
	root := testenv.Root()
	page, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(page)
	if _, after, ok := strings.Cut(section, "\n## Alerts and a dashboard\n"); ok {
		section, _, _ = strings.Cut(after, "\n## ")
	} else {
		t.Fatal(`docs/operations.md has no section "## Alerts and a dashboard"`)
	}
	_, rest, ok := strings.Cut(section, "```yaml\ngroups:\n")
	if !ok {
		t.Fatal("the alerts section has no ```yaml block of rule groups")
	}
	block, dashboard, _ := strings.Cut(rest, "```")
	var rules alertRules
	if err := yaml.UnmarshalStrict([]byte("groups:\n"+block), &rules); err != nil {
		t.Fatalf("the alert rules: %v", err)
	}
	var exprs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %+v: an alert needs a name, an expression, a severity and a summary", r)
			}
			exprs = append(exprs, r.Expr)
		}
	}
	if len(exprs) < 8 {
		t.Fatalf("%d alert rules; the block was cut?", len(exprs))
	}
	// The dashboard's queries: the code spans after the rules that name a
	// metric.
	for _, m := range regexp.MustCompile("`([^`]*promptops_[^`]*)`").FindAllStringSubmatch(dashboard, -1) {
		exprs = append(exprs, m[1])
	}

	code := registeredMetrics(t, root)
	base := promtest.Start(t)
	for _, e := range exprs {
		for _, name := range regexp.MustCompile(`promptops_[a-z_]+`).FindAllString(e, -1) {
			name = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
			if !code[name] {
				t.Errorf("%s: no metric %s is registered by the code", e, name)
			}
		}
		resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(e))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("Prometheus refuses %s: %s", e, body)
		}
	}
}

// registeredMetrics is the set of promptops_* metric names the code's
// (not the tests') string literals hold.
func registeredMetrics(t *testing.T, root string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	lit := regexp.MustCompile(`"(promptops_[a-z_]+)"`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "bin" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range lit.FindAllStringSubmatch(string(data), -1) {
			names[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestTroubleshootingNames holds docs/troubleshooting.md to the code: every
// condition type, reason, error code and enum value it names in backticks
// (a PascalCase word, alone or as Type=Status) is a string the code
// defines in api/v1, internal/serve/errors.go or plan (the memory codes),
// or one of Kubernetes' own; every log line it quotes is a string literal
// of the code; every promptops_* metric is registered.
func TestTroubleshootingNames(t *testing.T) {
	root := testenv.Root()
	page, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	literal := regexp.MustCompile(`"([A-Za-z0-9]+)"`)
	known := map[string]bool{
		// Kubernetes' own: condition statuses, a Job's failure reasons,
		// access modes.
		"True": true, "False": true, "Unknown": true, "BackoffLimitExceeded": true, "DeadlineExceeded": true,
		"ReadWriteOnce": true, "ReadWriteMany": true,
	}
	var sources []string
	for _, glob := range []string{"api/v1/*.go", "internal/serve/errors.go", "plan/*.go"} {
		files, _ := filepath.Glob(filepath.Join(root, glob))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") || strings.HasSuffix(f, "zz_generated.deepcopy.go") {
				continue
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			sources = append(sources, string(data))
			for _, m := range literal.FindAllStringSubmatch(string(data), -1) {
				known[m[1]] = true
			}
		}
	}
	if !known["ReferenceNotFound"] || !known["StoreUnavailable"] || !known["TimedOut"] {
		t.Fatal("the code's reasons and codes were not found; did api/v1, internal/serve/errors.go or plan move?")
	}
	word := regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	checked := 0
	for _, m := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(string(page), -1) {
		for _, part := range strings.Split(m[1], "=") {
			if !word.MatchString(part) || part == strings.ToUpper(part) || strings.HasPrefix(part, "Test") {
				continue // a column of kubectl's, or a test's name
			}
			checked++
			name := strings.TrimRight(part, "0123456789") // RecallHTTPError403
			if !known[name] {
				t.Errorf("docs/troubleshooting.md names %s, which neither the code (api/v1, internal/serve/errors.go, plan) nor Kubernetes defines", part)
			}
		}
	}
	if checked < 30 {
		t.Fatalf("only %d names checked in docs/troubleshooting.md; the page lost its reasons?", checked)
	}

	// Log lines: what follows "log line", up to the end of the clause.
	var code strings.Builder
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "bin" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			data, err := os.ReadFile(path)
			code.Write(data)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, m := range regexp.MustCompile(`log lines?\s+([^;.]*)`).FindAllStringSubmatch(string(page), -1) {
		for _, q := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(m[1], -1) {
			lines++
			if !strings.Contains(code.String(), `"`+q[1]+`"`) {
				t.Errorf("docs/troubleshooting.md quotes the log line %q, which no code writes", q[1])
			}
		}
	}
	if lines == 0 {
		t.Error("docs/troubleshooting.md quotes no log line; the check found none to check")
	}
	metrics := registeredMetrics(t, root)
	for _, name := range regexp.MustCompile(`\bpromptops_[a-z][a-z_]*[a-z]\b`).FindAllString(string(page), -1) {
		if !metrics[name] {
			t.Errorf("docs/troubleshooting.md names the metric %s, which the code does not register", name)
		}
	}
}
