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

// TestReadme runs the README's checked blocks as a newcomer would type them,
// one shell from the first block to the last, in a directory holding what a
// clone has (config/, examples/) and with `make build`'s promptops on PATH.
// A command that fails, or output that differs from the documented one,
// fails the test and names the README line.
func TestReadme(t *testing.T) {
	root := testenv.Root()
	chunks := readmeChunks(t, root, false)
	if len(chunks) < 8 {
		t.Fatalf("%d checked chunks in the README; the marks were lost?", len(chunks))
	}

	bin := t.TempDir()
	if out, err := exec.Command("make", "-C", root, "build", "BIN="+bin).CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	work := t.TempDir()
	for _, d := range []string{"config", "examples"} {
		if out, err := exec.Command("cp", "-r", filepath.Join(root, d), filepath.Join(work, d)).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
	}
	// Only what a newcomer's shell would have that matters here: no
	// PROMPTOPS_* or OPENAI_API_KEY of the developer's.
	env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + work, "LANG=C.UTF-8", "TMPDIR=" + work}
	runChunks(t, chunks, work, env, 3*time.Minute)
}

// readmeChunks returns the README's checked chunks of one kind: those that
// need the demo cluster (not the named ones) or those that do not.
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
	blocks := map[string][]Chunk{}
	for _, c := range parseReadme(t, root) {
		if c.Block != "" {
			blocks[c.Block] = append(blocks[c.Block], c)
		}
	}
	return blocks
}

func parseReadme(t *testing.T, root string) []Chunk {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	all, err := Parse(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// runChunks runs the chunks as one bash script in dir with env, and fails
// the test at the first chunk whose commands fail, naming its README line,
// and for every chunk whose documented output is not in what it printed.
// It returns what the script printed.
func runChunks(t *testing.T, chunks []Chunk, dir string, env []string, timeout time.Duration) string {
	t.Helper()
	port := freePort(t)
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	for i, c := range chunks {
		fmt.Fprintf(&script, "%s\necho %s\n", onPort(c.Commands, port), marker(i))
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
			t.Fatalf("README line %d: the commands failed (%v):\n%s\noutput:\n%s", c.Line, runErr, c.Commands, rest)
		}
		if err := Match(c.Expected, before); err != nil {
			t.Errorf("README line %d: %v\ncommands:\n%s\noutput:\n%s", c.Line, err, c.Commands, before)
		}
		rest = after
	}
	if runErr != nil {
		t.Fatalf("the script failed after its last block: %v\n%s", runErr, rest)
	}
	return output
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
	if _, err := Parse("<!-- readme-check cluster Helm -->\n```sh\n```\n"); err == nil || !regexp.MustCompile("unknown mark").MatchString(err.Error()) {
		t.Fatalf("a name in capitals: %v", err)
	}
}
