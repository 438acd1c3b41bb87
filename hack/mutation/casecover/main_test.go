package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMarksEvaluatedConditions runs the real `go test -coverprofile` on
// testdata/sw, whose lines say whether their condition must come out
// covered, and checks the blocks casecover adds.
func TestMarksEvaluatedConditions(t *testing.T) {
	dir := t.TempDir()
	for from, to := range map[string]string{"sw.go.txt": "sw.go", "sw_test.go.txt": "sw_test.go"} {
		b, err := os.ReadFile(filepath.Join("testdata", "sw", from))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, to), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/sw\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(dir, "cover.out")
	cmd := exec.Command("go", "test", "-count=1", "-cover", "-coverprofile", profile, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test: %v\n%s", err, out)
	}
	before, err := os.ReadFile(profile)
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	if err := run("example.com/sw", profile); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(profile)
	if err != nil {
		t.Fatal(err)
	}
	_, was, _, err := parseProfile(string(before))
	if err != nil {
		t.Fatal(err)
	}
	_, now, _, err := parseProfile(string(after))
	if err != nil {
		t.Fatal(err)
	}
	const name = "example.com/sw/sw.go"
	if len(now[name]) < len(was[name]) {
		t.Fatalf("blocks lost: %d before, %d after", len(was[name]), len(now[name]))
	}
	for i, b := range was[name] {
		if now[name][i] != b {
			t.Fatalf("block %d changed: %+v to %+v", i, b, now[name][i])
		}
	}
	covered := map[int]bool{}
	for _, b := range now[name][len(was[name]):] {
		if b.count != 1 || b.startLine != b.endLine {
			t.Errorf("added block %+v: want one line, count 1", b)
		}
		covered[b.startLine] = true
	}
	src, _ := os.ReadFile(filepath.Join(dir, "sw.go"))
	checked := 0
	for n, line := range strings.Split(string(src), "\n") {
		switch {
		case strings.Contains(line, "// covered:"):
			checked++
			if !covered[n+1] {
				t.Errorf("line %d not marked covered: %s", n+1, strings.TrimSpace(line))
			}
		case strings.Contains(line, "// uncovered:"):
			checked++
			if covered[n+1] {
				t.Errorf("line %d marked covered: %s", n+1, strings.TrimSpace(line))
			}
		}
	}
	if checked != 11 {
		t.Fatalf("checked %d lines, want 11", checked)
	}
}

func TestRefusesAForeignModule(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cover.out")
	if err := os.WriteFile(p, []byte("mode: set\nother.org/x/a.go:1.1,2.2 1 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run("example.com", p); err == nil || !strings.Contains(err.Error(), "not in module") {
		t.Fatalf("err = %v, want one naming the module", err)
	}
}
