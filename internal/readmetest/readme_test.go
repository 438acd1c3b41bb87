package readmetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/testenv"
)

// TestReadme runs the checked blocks of README.md and of each page under
// docs/ as a newcomer would type them, one shell per page from its first
// block to its last, in a directory holding what a clone has (config/,
// examples/) and with `make build`'s promptops on PATH. A command that
// fails, or output that differs from the documented one, fails the test
// and names the page and line.
func TestReadme(t *testing.T) {
	root := testenv.Root()
	chunks := readmeChunks(t, root, false)
	if len(chunks) < 8 {
		t.Fatalf("%d checked chunks in README.md and docs/; the marks were lost?", len(chunks))
	}
	byPage := map[string][]Chunk{}
	var pages []string
	for _, c := range chunks {
		if byPage[c.File] == nil {
			pages = append(pages, c.File)
		}
		byPage[c.File] = append(byPage[c.File], c)
	}

	bin := t.TempDir()
	if out, err := exec.Command("make", "-C", root, "build", "BIN="+bin).CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	for _, page := range pages {
		t.Run(page, func(t *testing.T) {
			work := t.TempDir()
			for _, d := range []string{"config", "examples"} {
				if out, err := exec.Command("cp", "-r", filepath.Join(root, d), filepath.Join(work, d)).CombinedOutput(); err != nil {
					t.Fatalf("cp: %v %s", err, out)
				}
			}
			// Only what a newcomer's shell would have that matters here: no
			// PROMPTOPS_* or OPENAI_API_KEY of the developer's.
			env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + work, "LANG=C.UTF-8", "TMPDIR=" + work}
			for _, name := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOFLAGS", "GOPROXY"} {
				if out, err := exec.Command("go", "env", name).Output(); err == nil {
					env = append(env, name+"="+strings.TrimSpace(string(out)))
				}
			}
			runChunks(t, byPage[page], work, env, 3*time.Minute)
		})
	}
}

// readmeChunks returns the checked chunks of one kind, page by page: those
// that need the demo cluster (not the named ones) or those that do not.
func readmeChunks(t *testing.T, root string, cluster bool) []Chunk {
	t.Helper()
	var chunks []Chunk
	for _, c := range parseReadme(t, root) {
		if c.Cluster == cluster && c.Block == "" {
			chunks = append(chunks, c)
		}
	}
	return chunks
}

// namedBlocks returns the chunks of the README's named cluster blocks by
// name, each block's in README order.
func namedBlocks(t *testing.T, root string) map[string][]Chunk {
	t.Helper()
	return blocksOf(t, root, false)
}

// blocksOf returns the chunks of the named cluster blocks (store false) or
// of the store blocks (store true) by name, each block's in page order.
func blocksOf(t *testing.T, root string, store bool) map[string][]Chunk {
	t.Helper()
	blocks := map[string][]Chunk{}
	for _, c := range parseReadme(t, root) {
		if c.Block != "" && c.Store == store {
			blocks[c.Block] = append(blocks[c.Block], c)
		}
	}
	return blocks
}

// parseReadme returns the checked chunks of README.md, then of the pages
// under docs/ in path order.
func parseReadme(t *testing.T, root string) []Chunk {
	t.Helper()
	pages := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			pages = append(pages, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var all []Chunk
	for _, page := range pages {
		text, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		chunks, err := Parse(string(text))
		if err != nil {
			t.Fatalf("%s: %v", page, err)
		}
		for i := range chunks {
			chunks[i].File = page
		}
		all = append(all, chunks...)
	}
	return all
}

// runChunks runs the chunks as one bash script in dir with env, and fails
// the test at the first chunk whose commands fail, naming its page and line,
// and for every chunk whose documented output is not in what it printed.
// It returns what the script printed.
func runChunks(t *testing.T, chunks []Chunk, dir string, env []string, timeout time.Duration) string {
	t.Helper()
	port := freePort(t)
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	for i, c := range chunks {
		commands := c.Commands
		if c.Go {
			commands = goProgram(t, c, i)
		}
		fmt.Fprintf(&script, "%s\necho %s\n", onPort(commands, port), marker(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	outFile, err := os.Create(filepath.Join(t.TempDir(), "output"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = dir
	cmd.Env = env
	// One file for stdout and stderr: a background serve keeps no pipe open.
	cmd.Stdout, cmd.Stderr = outFile, outFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	runErr := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // a serve left running
	}
	_ = outFile.Close()
	data, err := os.ReadFile(outFile.Name())
	if err != nil {
		t.Fatal(err)
	}
	output := string(data)

	rest := output
	for i, c := range chunks {
		before, after, found := strings.Cut(rest, marker(i)+"\n")
		if !found {
			t.Fatalf("%s line %d: the commands failed (%v):\n%s\noutput:\n%s", c.File, c.Line, runErr, c.Commands, rest)
		}
		if err := Match(c.Expected, before); err != nil {
			t.Errorf("%s line %d: %v\ncommands:\n%s\noutput:\n%s", c.File, c.Line, err, c.Commands, before)
		}
		rest = after
	}
	if runErr != nil {
		t.Fatalf("the script failed after its last block: %v\n%s", runErr, rest)
	}
	return output
}

// goProgram returns the commands that build the Go program of c, as a
// package of this module (internal/readmetest/readmego, given by an
// overlay: nothing is written into the checkout), and run it.
func goProgram(t *testing.T, c Chunk, i int) string {
	t.Helper()
	root, dir := testenv.Root(), t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(c.Commands), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay := fmt.Sprintf(`{"Replace":{%q:%q}}`, filepath.Join(root, "internal", "readmetest", "readmego", "main.go"), src)
	if err := os.WriteFile(filepath.Join(dir, "overlay.json"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, fmt.Sprintf("example-%d", i))
	return fmt.Sprintf("go build -C %q -overlay %q -o %q ./internal/readmetest/readmego\n%q\n", root, filepath.Join(dir, "overlay.json"), prog, prog)
}

// onPort moves the README's serve from its default port, 8089, to port, so
// that the check passes with 8089 taken.
func onPort(commands string, port int) string {
	p := strconv.Itoa(port)
	commands = strings.ReplaceAll(commands, "promptops serve ", "promptops serve --listen 127.0.0.1:"+p+" ")
	commands = strings.ReplaceAll(commands, "localhost:8089", "localhost:"+p)
	return strings.ReplaceAll(commands, "127.0.0.1:8089", "127.0.0.1:"+p)
}

// freePort is a loopback port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func marker(i int) string { return fmt.Sprintf("@@readme-check-%d@@", i) }

func TestMatch(t *testing.T) {
	out := "TEMPLATE  INTENT  \nx  chat  286\ny  ok\nexit 1\n"
	for _, tc := range []struct {
		expected []string
		ok       bool
	}{
		{[]string{"TEMPLATE  INTENT", "…", "exit 1"}, true},
		{[]string{"x  chat  2…"}, true},
		{[]string{"exit 1", "TEMPLATE  INTENT"}, false}, // out of order
		{[]string{"x  chat  287"}, false},
		{[]string{"x  chat"}, false},   // a whole line, not a prefix
		{[]string{"x chat 286"}, true}, // spaces match spaces, any number
		{[]string{"xchat 286"}, false},
		{[]string{"…", "y  ok"}, true},
	} {
		if err := Match(tc.expected, out); (err == nil) != tc.ok {
			t.Errorf("Match(%q) = %v, want ok %v", tc.expected, err, tc.ok)
		}
	}
}

func TestParse(t *testing.T) {
	chunks, err := Parse("text\n<!-- readme-check -->\n\n```sh\na \\\n  b\n# out 1\n# out 2\nc\nd\n# out 3\ne\n```\n```sh\nnot checked\n```\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []Chunk{
		{Line: 5, Commands: "a \\\n  b\n", Expected: []string{"out 1", "out 2"}},
		{Line: 9, Commands: "c\nd\n", Expected: []string{"out 3"}},
		{Line: 12, Commands: "e\n"},
	}
	if fmt.Sprint(chunks) != fmt.Sprint(want) {
		t.Fatalf("got %#v\nwant %#v", chunks, want)
	}
	if _, err := Parse("<!-- readme-check -->\n```yaml\n```\n"); err == nil || !regexp.MustCompile("not followed by a ```sh block").MatchString(err.Error()) {
		t.Fatalf("a mark before a yaml block: %v", err)
	}
	if _, err := Parse("<!-- readme-check clusters -->\n```sh\n```\n"); err == nil || !regexp.MustCompile("unknown mark").MatchString(err.Error()) {
		t.Fatalf("a misspelt mark: %v", err)
	}
	chunks, err = Parse("<!-- readme-check cluster -->\n```sh\na\n```\n<!-- readme-check -->\n```sh\nb\n```\n")
	if err != nil || len(chunks) != 2 || !chunks[0].Cluster || chunks[1].Cluster {
		t.Fatalf("cluster marks: %+v, %v", chunks, err)
	}
	chunks, err = Parse("<!-- readme-check cluster helm-delete -->\n```sh\na\n# out\nb\n```\n<!-- readme-check cluster -->\n```sh\nc\n```\n")
	if err != nil || len(chunks) != 3 || chunks[0].Block != "helm-delete" || chunks[1].Block != "helm-delete" ||
		!chunks[1].Cluster || chunks[2].Block != "" || !chunks[2].Cluster {
		t.Fatalf("named cluster marks: %+v, %v", chunks, err)
	}
	chunks, err = Parse("<!-- readme-check store pg-backup -->\n```sh\na\n```\n")
	if err != nil || len(chunks) != 1 || chunks[0].Block != "pg-backup" || !chunks[0].Store || chunks[0].Cluster {
		t.Fatalf("a store mark: %+v, %v", chunks, err)
	}
	if _, err := Parse("<!-- readme-check cluster Helm -->\n```sh\n```\n"); err == nil || !regexp.MustCompile("unknown mark").MatchString(err.Error()) {
		t.Fatalf("a name in capitals: %v", err)
	}
	// A Go program is one chunk, its comments and # lines included.
	chunks, err = Parse("<!-- readme-check go -->\n```go\npackage main\n# not output\n```\n<!-- readme-check -->\n```sh\nx\n```\n")
	if err != nil || len(chunks) != 2 || !chunks[0].Go || chunks[0].Commands != "package main\n# not output\n" || chunks[0].Line != 3 ||
		chunks[1].Go || chunks[1].Commands != "x\n" {
		t.Fatalf("a Go block: %+v, %v", chunks, err)
	}
	if _, err := Parse("<!-- readme-check go -->\n```sh\nx\n```\n"); err == nil || !regexp.MustCompile("not followed by a ```go block").MatchString(err.Error()) {
		t.Fatalf("the Go mark before a sh block: %v", err)
	}
}

// TestReadmeFiles: every block of README.md and docs/ marked
// <!-- readme-check file PATH --> is that file, byte for byte, so that a
// sample a page shows is the one `kubectl apply -k config/samples` applies.
func TestReadmeFiles(t *testing.T) {
	root := testenv.Root()
	pages := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			pages = append(pages, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, page := range pages {
		text, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := Files(string(text))
		if err != nil {
			t.Fatalf("%s: %v", page, err)
		}
		for _, b := range blocks {
			n++
			want, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(b.Path)))
			if err != nil {
				t.Errorf("%s line %d: %v", page, b.Line, err)
				continue
			}
			if b.Content != string(want) {
				t.Errorf("%s line %d: the block differs from %s; show the file as it is, or change both\nblock:\n%s\nfile:\n%s", page, b.Line, b.Path, b.Content, want)
			}
		}
	}
	if n == 0 {
		t.Fatal("no block of README.md or docs/ is marked <!-- readme-check file PATH -->; the README's tour template lost its mark?")
	}
}

func TestFiles(t *testing.T) {
	blocks, err := Files("a\n<!-- readme-check file config/x.yaml -->\n\n```yaml\nk: v\n# c\n```\n")
	if err != nil || len(blocks) != 1 || blocks[0].Path != "config/x.yaml" || blocks[0].Content != "k: v\n# c\n" || blocks[0].Line != 2 {
		t.Fatalf("Files: %+v, %v", blocks, err)
	}
	if _, err := Files("<!-- readme-check file x -->\ntext\n"); err == nil {
		t.Fatal("a file mark without a block: no error")
	}
	// Parse leaves the block alone: it is compared, not run.
	if chunks, err := Parse("<!-- readme-check file x -->\n```yaml\nk: v\n```\n"); err != nil || len(chunks) != 0 {
		t.Fatalf("Parse of a file block: %+v, %v", chunks, err)
	}
}
