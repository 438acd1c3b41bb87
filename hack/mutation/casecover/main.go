// Command casecover adds to a Go coverage profile the conditions that
// `go test -cover` leaves outside every block, so that gremlins (which
// calls a mutant "not covered" when no executed block contains it) judges
// the mutants on them. hack/mutation/go runs it on gremlins' coverage
// profile.
//
// The Go cover tool counts statements in blocks; a block ends at a
// `switch`'s opening brace, and each `case` clause's block starts after its
// colon, so the expressions of a `case` are in no block. Likewise an `if`
// whose init statement holds a function literal: its block ends where the
// literal starts, and the condition is in no block. This adds a block over
// each such condition when the run shows it was evaluated:
//
//   - a `case` clause's expressions were evaluated when a later clause's body
//     ran, or its own (Go evaluates the cases top to bottom, and `default`
//     only after every case), not counting a body entered by the previous
//     clause's `fallthrough`;
//   - an `if` condition was evaluated when its body or its `else` ran.
//
// It never marks a condition that was not reached, so a mutant it makes
// "covered" is one the tests ran through; gremlins then runs the tests on
// it like any other. Usage: casecover -module <module path> <profile>
// (rewritten in place; run from the module's root).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strconv"
	"strings"
)

// block is one line of a coverage profile.
type block struct {
	startLine, startCol, endLine, endCol int
	stmts, count                         int
}

// startsBefore reports whether b starts before p.
func (b block) startsBefore(p token.Position) bool {
	return b.startLine < p.Line || b.startLine == p.Line && b.startCol < p.Column
}

func main() {
	module := flag.String("module", "", "the module path, as the profile's file names start")
	flag.Parse()
	if *module == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: casecover -module <module path> <profile>")
		os.Exit(2)
	}
	if err := run(*module, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "casecover:", err)
		os.Exit(1)
	}
}

func run(module, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	mode, files, order, err := parseProfile(string(data))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var out strings.Builder
	out.WriteString("mode: " + mode + "\n")
	for _, name := range order {
		local, ok := strings.CutPrefix(name, module+"/")
		if !ok {
			return fmt.Errorf("%s: %s is not in module %s", path, name, module)
		}
		added, err := conditions(local, files[name])
		if err != nil {
			return err
		}
		for _, b := range append(files[name], added...) {
			fmt.Fprintf(&out, "%s:%d.%d,%d.%d %d %d\n", name, b.startLine, b.startCol, b.endLine, b.endCol, b.stmts, b.count)
		}
	}
	return os.WriteFile(path, []byte(out.String()), 0o644)
}

// parseProfile reads a profile in the text format `go test -coverprofile`
// writes: a mode line, then "file:line.col,line.col statements count".
func parseProfile(text string) (mode string, files map[string][]block, order []string, err error) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	files = map[string][]block{}
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if n == 1 {
			m, ok := strings.CutPrefix(line, "mode: ")
			if !ok {
				return "", nil, nil, fmt.Errorf("line 1: no mode line")
			}
			mode = m
			continue
		}
		if line == "" {
			continue
		}
		b, name, err := parseBlock(line)
		if err != nil {
			return "", nil, nil, fmt.Errorf("line %d: %w", n, err)
		}
		if _, seen := files[name]; !seen {
			order = append(order, name)
		}
		files[name] = append(files[name], b)
	}
	if mode == "" {
		return "", nil, nil, fmt.Errorf("empty profile")
	}
	return mode, files, order, sc.Err()
}

func parseBlock(line string) (block, string, error) {
	colon := strings.LastIndexByte(line, ':')
	if colon < 0 {
		return block{}, "", fmt.Errorf("no file name in %q", line)
	}
	f := strings.FieldsFunc(line[colon+1:], func(r rune) bool { return r == '.' || r == ',' || r == ' ' })
	if len(f) != 6 {
		return block{}, "", fmt.Errorf("malformed block %q", line)
	}
	var v [6]int
	for i, s := range f {
		n, err := strconv.Atoi(s)
		if err != nil {
			return block{}, "", fmt.Errorf("malformed block %q", line)
		}
		v[i] = n
	}
	return block{v[0], v[1], v[2], v[3], v[4], v[5]}, line[:colon], nil
}

// conditions returns the blocks to add to file's profile: one over each
// case clause's expressions and each if condition that the run evaluated
// and no block holds.
func conditions(file string, blocks []block) ([]block, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	// ran reports whether a block that ran starts within [from, to).
	ran := func(from, to token.Pos) bool {
		a, z := fset.Position(from), fset.Position(to)
		for _, b := range blocks {
			if b.count > 0 && !b.startsBefore(a) && b.startsBefore(z) {
				return true
			}
		}
		return false
	}
	span := func(from, to token.Pos) block {
		a, z := fset.Position(from), fset.Position(to)
		return block{startLine: a.Line, startCol: a.Column, endLine: z.Line, endCol: z.Column, count: 1}
	}
	var added []block
	ast.Inspect(f, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.SwitchStmt:
			clauses := s.Body.List
			// entered[i]: clause i's body ran, and not by a fallthrough
			// (then its expressions were evaluated, and every earlier
			// case's too).
			entered := make([]bool, len(clauses))
			for i, c := range clauses {
				cc := c.(*ast.CaseClause)
				if i > 0 && fallsThrough(clauses[i-1].(*ast.CaseClause)) {
					continue
				}
				entered[i] = ran(cc.Colon+1, cc.End()+1)
			}
			defaultRan := false
			for i, c := range clauses {
				if c.(*ast.CaseClause).List == nil && entered[i] {
					defaultRan = true
				}
			}
			later := defaultRan
			for i := len(clauses) - 1; i >= 0; i-- {
				cc := clauses[i].(*ast.CaseClause)
				if cc.List == nil {
					continue
				}
				later = later || entered[i]
				if later {
					added = append(added, span(cc.Case, cc.Colon))
				}
			}
		case *ast.IfStmt:
			if s.Init == nil || !hasFuncLit(s.Init) {
				return true
			}
			evaluated := ran(s.Body.Lbrace, s.Body.End()+1)
			if s.Else != nil {
				evaluated = evaluated || ran(s.Else.Pos(), s.Else.End()+1)
			}
			if evaluated {
				added = append(added, span(s.Cond.Pos(), s.Cond.End()))
			}
		}
		return true
	})
	sort.Slice(added, func(i, j int) bool {
		a, b := added[i], added[j]
		return a.startLine < b.startLine || a.startLine == b.startLine && a.startCol < b.startCol
	})
	return added, nil
}

func fallsThrough(c *ast.CaseClause) bool {
	if len(c.Body) == 0 {
		return false
	}
	br, ok := c.Body[len(c.Body)-1].(*ast.BranchStmt)
	return ok && br.Tok == token.FALLTHROUGH
}

func hasFuncLit(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if _, ok := n.(*ast.FuncLit); ok {
			found = true
		}
		return !found
	})
	return found
}
