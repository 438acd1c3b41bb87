package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/promptops/promptops/internal/tokens"
	"github.com/promptops/promptops/plan"
)

const casesDir = "../../testdata/conformance/cases"

// Re-running the generator changes nothing: the vectors are what the code
// answers today.
func TestGenerateChangesNothing(t *testing.T) {
	dir := t.TempDir()
	if _, err := generate(dir); err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.Glob(filepath.Join(casesDir, "*.json"))
	got, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(got) != len(want) {
		t.Fatalf("generated %d cases, testdata has %d: run go run ./hack/conformance", len(got), len(want))
	}
	for _, w := range want {
		a, err := os.ReadFile(w)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, filepath.Base(w)))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs from what the generator writes (%v): run go run ./hack/conformance", filepath.Base(w), err)
		}
	}
}

type vector struct {
	Name     string                 `json:"name"`
	Plan     json.RawMessage        `json:"plan"`
	Intent   string                 `json:"intent"`
	Runtime  map[string]string      `json:"runtime"`
	Query    string                 `json:"query"`
	Scope    string                 `json:"scope"`
	Memory   map[string]MemoryInput `json:"memory"`
	Expected docResult              `json:"expected"`
}

// docResult is what a case expects, as docs/plan.md lists it.
type docResult struct {
	Prompt       string           `json:"prompt"`
	Tokens       int              `json:"tokens"`
	MaxTokens    int              `json:"maxTokens"`
	WithinBudget bool             `json:"withinBudget"`
	Cut          []string         `json:"cut"`
	Sections     []Section        `json:"sections"`
	Memory       []MemoryExpected `json:"memory,omitempty"`
	// CacheableTokens is the count of the blocks before the first runtime
	// or memory section, joined by the separator.
	CacheableTokens int `json:"cacheableTokens"`
}

func vectors(t *testing.T) []vector {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(casesDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vectors: %v", err)
	}
	var out []vector
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v vector
		// encoding/json reads a lone surrogate as U+FFFD, as docs/plan.md
		// says a reader must.
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, v)
	}
	return out
}

// cutFunc cuts body to target tokens, as one wording of the contract says.
type cutFunc func(e *tokens.Encoder, body string, target int) string

// newWording is the cut as docs/plan.md states it: the bytes of the
// body's first target tokens, backed off to the start of the character the
// end falls in; if that prefix, encoded on its own, has more than target
// tokens, the same with one token fewer, and so on.
func newWording(e *tokens.Encoder, body string, target int) string {
	toks := e.Encode(body)
	if len(toks) <= target {
		return body
	}
	for k := target; k >= 1; k-- {
		c := len(e.Decode(toks[:k]))
		for c > 0 && c < len(body) && !utf8.RuneStart(body[c]) {
			c--
		}
		if e.CountUncached(body[:c]) <= target {
			return body[:c]
		}
	}
	return ""
}

// oldWording is the cut as docs/plan.md stated it before: "the longest
// prefix of its body, ending on a character boundary, whose own count is at
// most target".
func oldWording(e *tokens.Encoder, body string, target int) string {
	for c := len(body); c > 0; c-- {
		if c < len(body) && !utf8.RuneStart(body[c]) {
			continue
		}
		if e.CountUncached(body[:c]) <= target {
			return body[:c]
		}
	}
	return ""
}

// docAssemble follows "Finishing a prompt" of docs/plan.md step by step,
// counting the whole prompt each time, with the given cut.
func docAssemble(p *plan.Plan, intent string, runtime map[string]string, query, scope string, memory map[string]MemoryInput, cut cutFunc) (docResult, error) {
	e := tokens.MustGet(p.Encoding)
	var in *plan.Intent
	for i := range p.Intents {
		if p.Intents[i].Name == intent {
			in = &p.Intents[i]
		}
	}
	if in == nil {
		return docResult{}, fmt.Errorf("no intent %q", intent)
	}
	for name := range runtime {
		ok := false
		for _, s := range p.Sections {
			ok = ok || (s.Name == name && s.Kind == plan.KindRuntime)
		}
		if !ok {
			return docResult{}, fmt.Errorf("no runtime section %q", name)
		}
	}
	// Memory sections: the query, the answer, minScore and trustedOnly, maxItems, then
	// FitMemory with the reserve (docFit).
	items := make([][]plan.MemoryItem, len(p.Sections))
	var mems []MemoryExpected
	memIndex := map[int]int{}
	for i, s := range p.Sections {
		if s.Kind != plan.KindMemory {
			continue
		}
		q := query
		if s.Memory.Query.FromRuntime != "" {
			q = runtime[s.Memory.Query.FromRuntime]
		}
		sc := ""
		if s.Memory.Scope != nil {
			sc = scope
			if s.Memory.Scope.FromRuntime != "" {
				sc = runtime[s.Memory.Scope.FromRuntime]
			}
		}
		m, in := MemoryExpected{Section: s.Name, Items: []string{}}, memory[s.Name]
		switch {
		case docTrim(q) == "":
			m.Error = plan.MemoryNoQuery
		case s.Memory.Scope != nil && sc == "":
			m.Error = plan.MemoryNoScope
		case s.Memory.Scope != nil && !scopeName.MatchString(sc):
			m.Error = plan.MemoryInvalidScope
		case in.TimedOut:
			m.Scope = sc
			m.TimedOut, m.Error = true, plan.MemoryTimedOut
		case in.Error != "":
			m.Scope = sc
			m.Error = in.Error
		default:
			m.Scope = sc
			m.Recalled = len(in.Items)
			var kept []plan.MemoryItem
			for _, it := range planItems(in.Items) {
				if it.Score >= plan.ScoreOfPerMille(s.Memory.MinScorePerMille) && (it.Trusted || !s.Memory.TrustedOnly) {
					kept = append(kept, it)
				}
			}
			if s.Memory.MaxItems > 0 && len(kept) > s.Memory.MaxItems {
				kept = kept[:s.Memory.MaxItems]
			}
			items[i] = docFit(e, kept, s.ReserveTokens)
		}
		memIndex[i] = len(mems)
		mems = append(mems, m)
	}
	// 1. Bodies.
	bodies := make([]string, len(p.Sections))
	for i, s := range p.Sections {
		switch s.Kind {
		case plan.KindMemory:
			bodies[i] = docLines(items[i])
		case plan.KindStatic:
			bodies[i] = s.Text
		case plan.KindIntent:
			bodies[i] = in.Instruction
		case plan.KindRuntime:
			bodies[i] = runtime[s.Name]
		}
		for _, c := range in.StaticCuts { // whatever onExceed says; the last entry wins
			if c.Section == s.Name {
				bodies[i] = c.Text
			}
		}
	}
	// 2. Blocks; 3. joined by the separator.
	blockOf := func(i int) string {
		switch {
		case bodies[i] == "":
			return ""
		case p.Sections[i].Heading == "":
			return bodies[i]
		}
		return p.Sections[i].Heading + "\n" + bodies[i]
	}
	prompt := func() string {
		var blocks []string
		for i := range bodies {
			if b := blockOf(i); b != "" {
				blocks = append(blocks, b)
			}
		}
		return strings.Join(blocks, "\n\n")
	}
	// 4. Cut runtime sections, highest priority first, the later on a tie.
	original := make([]int, len(bodies))
	for i := range bodies {
		original[i] = e.CountUncached(bodies[i])
	}
	var order []int
	for i, s := range p.Sections {
		if (s.Kind == plan.KindRuntime || s.Kind == plan.KindMemory) && s.Policy != plan.PolicyNever {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		sa, sb := p.Sections[order[a]], p.Sections[order[b]]
		if sa.Priority != sb.Priority {
			return sa.Priority > sb.Priority
		}
		return order[a] > order[b]
	})
	r := docResult{MaxTokens: p.MaxTokens, Cut: []string{}}
	// The cacheable prefix: the blocks before the first runtime or memory
	// section (static text is never cut at request time).
	var lead []string
	for i, s := range p.Sections {
		if s.Kind == plan.KindRuntime || s.Kind == plan.KindMemory {
			break
		}
		if b := blockOf(i); b != "" {
			lead = append(lead, b)
		}
	}
	r.CacheableTokens = e.CountUncached(strings.Join(lead, "\n\n"))
	limit := p.MaxTokens
	t := e.CountUncached(prompt())
	for _, i := range order {
		s := p.Sections[i]
		n := e.CountUncached(bodies[i])
		for t > limit && n > s.MinTokens {
			target := max(s.MinTokens, n-(t-limit))
			if target >= n {
				target = n - 1
			}
			if s.Kind == plan.KindMemory {
				items[i] = docFit(e, items[i], target)
				bodies[i] = docLines(items[i])
			} else {
				bodies[i] = cut(e, bodies[i], target)
			}
			n = e.CountUncached(bodies[i])
			if len(r.Cut) == 0 || r.Cut[len(r.Cut)-1] != s.Name {
				r.Cut = append(r.Cut, s.Name)
			}
			t = e.CountUncached(prompt())
		}
	}
	// 5. Memory never keeps the prompt over budget.
	for _, i := range order {
		if t <= limit {
			break
		}
		if p.Sections[i].Kind == plan.KindMemory && bodies[i] != "" {
			items[i], bodies[i] = nil, ""
			if !contains(r.Cut, p.Sections[i].Name) {
				r.Cut = append(r.Cut, p.Sections[i].Name)
			}
			t = e.CountUncached(prompt())
		}
	}
	for i, k := range memIndex {
		for _, it := range items[i] {
			mems[k].Items = append(mems[k].Items, it.ID)
		}
		mems[k].Omitted = mems[k].Recalled - len(items[i])
	}
	r.Memory = mems
	r.Prompt, r.Tokens, r.WithinBudget = prompt(), t, t <= limit
	for i, s := range p.Sections {
		r.Sections = append(r.Sections, Section{s.Name, e.CountUncached(blockOf(i)), original[i] - e.CountUncached(bodies[i])})
	}
	return r, nil
}

// docLines is the items' lines joined by a line feed.
func docLines(items []plan.MemoryItem) string {
	lines := make([]string, 0, len(items))
	for _, it := range items {
		lines = append(lines, docLine(it))
	}
	return strings.Join(lines, "\n")
}

// scopeName is a valid scope as docs/plan.md words it.
var scopeName = regexp.MustCompile(`^[A-Za-z0-9._:@-]{1,253}$`)

// docWhite is white space as docs/plan.md defines it: Unicode's
// White_Space property.
func docWhite(r rune) bool { return unicode.Is(unicode.White_Space, r) }

// docTrim is the text with every run of white space made one space and
// white space removed at both ends.
func docTrim(s string) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		if docWhite(r) {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	return b.String()
}

// docLine is an item's line as docs/plan.md words it.
func docLine(it plan.MemoryItem) string {
	text := docTrim(it.Text)
	day := func(t *time.Time) string { return t.UTC().Format("2006-01-02") }
	s, e := it.OccurredStart, it.OccurredEnd
	switch {
	case s != nil && e != nil && day(s) != day(e):
		return text + " (" + day(s) + " to " + day(e) + ")"
	case s != nil:
		return text + " (" + day(s) + ")"
	case e != nil:
		return text + " (until " + day(e) + ")"
	}
	return text
}

// docFit is FitMemory as docs/plan.md words it: items with an empty line
// left out, then the longest prefix whose joined lines count at most limit.
func docFit(e *tokens.Encoder, items []plan.MemoryItem, limit int) []plan.MemoryItem {
	var nonEmpty []plan.MemoryItem
	for _, it := range items {
		if docLine(it) != "" {
			nonEmpty = append(nonEmpty, it)
		}
	}
	for k := len(nonEmpty); k > 0; k-- {
		if e.CountUncached(docLines(nonEmpty[:k])) <= limit {
			return nonEmpty[:k]
		}
	}
	return nil
}

// A reader who follows docs/plan.md passes every vector; one who follows
// its old wording of the cut fails some, the Invoices case among them.
func TestDocsWordingAgainstVectors(t *testing.T) {
	var oldFails []string
	for _, v := range vectors(t) {
		p, err := plan.Load(v.Plan)
		if err != nil {
			t.Fatal(err)
		}
		got, err := docAssemble(p, v.Intent, v.Runtime, v.Query, v.Scope, v.Memory, newWording)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		if !reflect.DeepEqual(got, v.Expected) {
			t.Errorf("%s: the documented algorithm gives %d tokens cut %v sections %v prompt %q;\nthe vector says %d cut %v sections %v prompt %q",
				v.Name, got.Tokens, got.Cut, got.Sections, got.Prompt, v.Expected.Tokens, v.Expected.Cut, v.Expected.Sections, v.Expected.Prompt)
		}
		// The old wording's longest prefix is searched prefix by prefix:
		// only on vectors of ordinary size.
		large := false
		for _, s := range v.Runtime {
			large = large || len(s) > 4<<10
		}
		if large {
			continue
		}
		old, err := docAssemble(p, v.Intent, v.Runtime, v.Query, v.Scope, v.Memory, oldWording)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		if old.Prompt != v.Expected.Prompt || old.Tokens != v.Expected.Tokens {
			oldFails = append(oldFails, v.Name)
		}
	}
	t.Logf("the old wording fails %d vectors: %v", len(oldFails), oldFails)
	if !contains(oldFails, "cut-invoices") {
		t.Errorf("the old wording must fail the cut-invoices vector; it fails %v", oldFails)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Re-running the generator writes the same assignment vectors.
func TestGenerateAssignmentChangesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "assignment.json")
	if err := generateAssignment(path); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want, err := os.ReadFile("../../testdata/conformance/assignment.json")
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("testdata/conformance/assignment.json differs from what the generator writes (%v): run go run ./hack/conformance", err)
	}
}

// docs/plan.md's "Rollout assignment", followed literally, gives every
// vector: this implementation reads only the steps written there.
func TestDocsAssignmentAgainstVectors(t *testing.T) {
	data, err := os.ReadFile("../../testdata/conformance/assignment.json")
	if err != nil {
		t.Fatal(err)
	}
	var v Assignment
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	for _, c := range v.Cases {
		// Step 1: SHA-256 of namespace, "/", name, a line feed, the key.
		msg := append(append(append(append([]byte(c.Namespace), '/'), c.Name...), 0x0A), c.Key...)
		sum := sha256.Sum256(msg)
		// Step 2: the first 8 bytes, big-endian, modulo 10,000.
		var n uint64
		for _, b := range sum[:8] {
			n = n<<8 | uint64(b)
		}
		bucket := int(n % 10000)
		if bucket != c.Bucket {
			t.Errorf("%s/%s %q: the docs give bucket %d, the vector %d", c.Namespace, c.Name, c.Key, bucket, c.Bucket)
		}
		// Step 3: on the canary when the bucket is below weight x 100.
		first := 101
		for w := 100; w >= 0; w-- {
			if bucket < w*100 {
				first = w
			}
		}
		if first != c.FirstWeight {
			t.Errorf("%s/%s %q: the docs give first weight %d, the vector %d", c.Namespace, c.Name, c.Key, first, c.FirstWeight)
		}
	}
}
