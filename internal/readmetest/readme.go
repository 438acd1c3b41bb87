// Package readmetest runs the checked code blocks of README.md and of the
// pages under docs/ and compares their output with the one documented
// there.
//
// A ```sh block is checked when the line before it (blank lines aside) is
//
//	<!-- readme-check -->               run by `make readme-check` (TestReadme), anywhere Go runs
//	<!-- readme-check cluster -->       run by `make readme-check-cluster` (TestReadmeOnTheDemoCluster,
//	                                    build tag e2e) on the one-node cluster of `make cluster`
//	<!-- readme-check cluster NAME -->  run by `make readme-check-cluster` (TestReadmeDeploying) in the
//	                                    order that test gives the names, between its own steps
//	<!-- readme-check store NAME -->    run by TestOperationsBackupRestore against a real PostgreSQL and
//	                                    SQLite bank, between its own steps (docs/operations.md's backups)
//
// A fenced block after <!-- readme-check file PATH --> (PATH relative to
// the repository's root) must equal that file byte for byte
// (TestReadmeFiles): a sample a page shows is the sample.
//
// A ```go block marked <!-- readme-check go --> is a program (package
// main) of this module that TestReadme builds and runs where the page's
// shell is at that point: an example of the public packages that compiles
// against the code as it is.
//
// The blocks of the first kind run as one bash script per page under `set
// -euo pipefail`, in the page's order, in a fresh copy of config/ and
// examples/, so a block sees the files, variables and background jobs of
// the blocks before it on its page, as a newcomer's shell would; those of
// the second kind likewise, in one script across the pages.
// Named blocks stand alone: the README's Deploying section shows
// alternatives (kustomize or Helm, and how to remove each), which no one
// runs top to bottom. Whole-line comments after
// a command are its documented output: each must match a whole line of what
// the commands since the previous documented output printed, in order;
// other lines may come between them. In a documented line:
//
//   - "…" stands for any text, also none (ages, UIDs, times, ports, a table's
//     other rows: `# …` alone on a line matches any one line);
//   - a run of spaces matches any run of spaces or tabs (kubectl's column
//     widths follow the longest value);
//   - trailing spaces do not count.
//
// A command that exits non-zero fails the check; write `|| echo "exit $?"`
// and document the exit line where a failure is the point.
package readmetest

import (
	"bufio"
	"fmt"
	"regexp"
	"strings"
)

// Marker is the HTML comment that marks the next ```sh block as checked
// without a cluster; ClusterMarker marks one that needs the demo cluster,
// and with a name before its "-->" one that a test runs by that name.
const (
	Marker        = "<!-- readme-check -->"
	ClusterMarker = "<!-- readme-check cluster -->"
	GoMarker      = "<!-- readme-check go -->"
)

// Chunk is commands of a checked block and the output documented after
// them: the whole-line comments that follow a command are its output.
type Chunk struct {
	File     string // the page, README.md or docs/...: set by the caller
	Line     int    // the page's line of the first command
	Commands string
	Expected []string
	Cluster  bool   // the block is marked ClusterMarker, with a name or without
	Block    string // the name of a named cluster or store block
	Store    bool   // the block is marked <!-- readme-check store NAME -->
	Go       bool   // the block is a Go program (GoMarker); Commands is its source
}

var (
	namedMark = regexp.MustCompile(`^<!-- readme-check cluster ([a-z][a-z0-9-]*) -->$`)
	storeMark = regexp.MustCompile(`^<!-- readme-check store ([a-z][a-z0-9-]*) -->$`)
	fileMark  = regexp.MustCompile(`^<!-- readme-check file ([A-Za-z0-9._/-]+) -->$`)
)

// FileBlock is a fenced block marked <!-- readme-check file PATH -->: its
// content must be the file's.
type FileBlock struct {
	Line    int // the page's line of the mark
	Path    string
	Content string
}

// Files returns a page's blocks marked <!-- readme-check file PATH -->, in
// page order.
func Files(page string) ([]FileBlock, error) {
	var out []FileBlock
	lines := strings.SplitAfter(page, "\n")
	for i := 0; i < len(lines); i++ {
		m := fileMark.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		b := FileBlock{Line: i + 1, Path: m[1]}
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j == len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[j]), "```") {
			return nil, fmt.Errorf("line %d: %s is not followed by a fenced block", i+1, strings.TrimSpace(lines[i]))
		}
		var content strings.Builder
		for j++; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			content.WriteString(lines[j])
		}
		if j == len(lines) {
			return nil, fmt.Errorf("line %d: the block of %s does not end", i+1, m[1])
		}
		b.Content = content.String()
		out = append(out, b)
		i = j
	}
	return out, nil
}

// mark returns whether line is a readme-check mark, and which: a store
// block's name comes with the prefix "store:".
func mark(line string) (ok, cluster bool, name string) {
	line = strings.TrimSpace(line)
	if m := storeMark.FindStringSubmatch(line); m != nil {
		return true, false, "store:" + m[1]
	}
	switch {
	case line == Marker:
		return true, false, ""
	case line == ClusterMarker:
		return true, true, ""
	case line == GoMarker:
		return true, false, "go"
	}
	if m := namedMark.FindStringSubmatch(line); m != nil {
		return true, true, m[1]
	}
	return false, false, ""
}

// Parse returns the chunks of a page's checked blocks, in page order.
func Parse(readme string) ([]Chunk, error) {
	var chunks []Chunk
	sc := bufio.NewScanner(strings.NewReader(readme))
	n, marked, cluster, inBlock := 0, false, false, false
	name := ""
	var cur *Chunk
	flush := func() {
		if cur != nil && strings.TrimSpace(cur.Commands) != "" {
			chunks = append(chunks, *cur)
		}
		cur = nil
	}
	for sc.Scan() {
		n++
		line := sc.Text()
		isMark, isCluster, isName := mark(line)
		switch {
		case !inBlock && isMark:
			marked, cluster, name = true, isCluster, isName
		case !inBlock && fileMark.MatchString(strings.TrimSpace(line)):
			// Checked by Files, not run.
		case !inBlock && strings.HasPrefix(strings.TrimSpace(line), "<!-- readme-check"):
			return nil, fmt.Errorf("line %d: unknown mark %q (%s, %s, %s, <!-- readme-check cluster NAME -->, <!-- readme-check store NAME --> or <!-- readme-check file PATH -->)", n, strings.TrimSpace(line), Marker, ClusterMarker, GoMarker)
		case !inBlock && marked && strings.TrimSpace(line) == "":
		case !inBlock && marked && name == "go" && !cluster:
			if strings.TrimSpace(line) != "```go" {
				return nil, fmt.Errorf("line %d: %s is not followed by a ```go block", n, GoMarker)
			}
			inBlock, marked = true, false
			cur = &Chunk{Line: n + 1, Go: true}
		case !inBlock && marked:
			if strings.TrimSpace(line) != "```sh" {
				return nil, fmt.Errorf("line %d: a readme-check mark is not followed by a ```sh block", n)
			}
			inBlock, marked = true, false
		case inBlock && cur != nil && cur.Go && strings.TrimSpace(line) != "```":
			cur.Commands += line + "\n"
		case inBlock && strings.TrimSpace(line) == "```":
			flush()
			inBlock, name = false, ""
		case inBlock && strings.HasPrefix(line, "#"):
			if cur == nil || strings.TrimSpace(cur.Commands) == "" {
				return nil, fmt.Errorf("line %d: documented output without a command before it", n)
			}
			cur.Expected = append(cur.Expected, strings.TrimPrefix(strings.TrimPrefix(line, "#"), " "))
		case inBlock:
			if cur != nil && len(cur.Expected) > 0 {
				flush()
			}
			if cur == nil {
				cur = &Chunk{Line: n, Cluster: cluster, Block: name}
				if b, ok := strings.CutPrefix(name, "store:"); ok {
					cur.Block, cur.Store = b, true
				}
			}
			cur.Commands += line + "\n"
		}
	}
	if inBlock {
		return nil, fmt.Errorf("README ends inside a checked block")
	}
	return chunks, sc.Err()
}

// Match reports the first documented line that the output does not have.
// The documented lines must appear in order, each matching a whole output
// line (see the package comment for "…" and spaces).
func Match(expected []string, output string) error {
	lines := strings.Split(output, "\n")
	i := 0
	for _, e := range expected {
		re := pattern(e)
		for ; i < len(lines); i++ {
			if re.MatchString(strings.TrimRight(lines[i], " \t\r")) {
				break
			}
		}
		if i == len(lines) {
			return fmt.Errorf("documented output %q not found (in order)", e)
		}
		i++
	}
	return nil
}

var spaces = regexp.MustCompile(` +`)

func pattern(e string) *regexp.Regexp {
	parts := strings.Split(strings.TrimRight(e, " \t"), "…")
	for i, p := range parts {
		quoted := spaces.Split(p, -1)
		for j, q := range quoted {
			quoted[j] = regexp.QuoteMeta(q)
		}
		parts[i] = strings.Join(quoted, `[ \t]+`)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}
