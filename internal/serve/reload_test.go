package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/promptops/promptops/plan"
)

// kubeletDir lays out dir as the kubelet mounts a ConfigMap: the files live
// in a ..<timestamp> directory, ..data links to it, and each key links into
// ..data. swap replaces the content the way the kubelet does: a new
// timestamped directory, then an atomic rename of a new ..data link.
type kubeletDir struct {
	t   *testing.T
	dir string
	n   int
}

func (k *kubeletDir) swap(files map[string][]byte) {
	k.t.Helper()
	k.n++
	ts := fmt.Sprintf("..2026_12_01_00_00_%02d.%d", k.n, k.n)
	if err := os.Mkdir(filepath.Join(k.dir, ts), 0o755); err != nil {
		k.t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(k.dir, ts, name), data, 0o644); err != nil {
			k.t.Fatal(err)
		}
	}
	old, _ := os.Readlink(filepath.Join(k.dir, "..data"))
	tmp := filepath.Join(k.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		k.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(k.dir, "..data")); err != nil {
		k.t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(k.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				k.t.Fatal(err)
			}
		}
	}
	if old != "" {
		os.RemoveAll(filepath.Join(k.dir, old))
	}
}

// secondVersion is the plan with the analyze instruction changed, so its
// prompt and revision differ.
func secondVersion(t *testing.T, data []byte) []byte {
	p, err := plan.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range p.Intents {
		if p.Intents[i].Name == "analyze" {
			p.Intents[i].Instruction += "\n（第二版）"
		}
	}
	p.Revision = p.Digest()
	out, _ := json.Marshal(p)
	return out
}

func TestReloadUnderLoadIsAtomic(t *testing.T) {
	v1 := fixture(t, "ssa-pro")
	v2 := secondVersion(t, v1)
	runtime := map[string]string{"data_context": "数据概览：共 200 行。", "tool_outputs": strings.Repeat("描述性统计结果：均值、标准差、四分位数。\n", 400)}
	want := map[string]string{} // revision -> prompt
	for _, data := range [][]byte{v1, v2} {
		p, err := plan.Load(data)
		if err != nil {
			t.Fatal(err)
		}
		a, err := p.Assemble(context.Background(), "analyze", runtime)
		if err != nil {
			t.Fatal(err)
		}
		want[p.Revision] = a.Text
	}
	if len(want) != 2 {
		t.Fatal("the two versions must differ")
	}
	kd := &kubeletDir{t: t, dir: t.TempDir()}
	kd.swap(map[string][]byte{"plan.json": v1, "analyze.txt": []byte("static")})

	s, ts := newTestServer(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.WatchDir(ctx, kd.dir, 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"namespace": "default", "name": "ssa-pro", "intent": "analyze", "runtime": runtime})
	var stop atomic.Bool
	var wg sync.WaitGroup
	var seen sync.Map // revision -> *atomic.Int64
	errs := make(chan string, 8)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				status, out := post(t, ts.URL, string(body))
				var a AssembleResponse
				if err := json.Unmarshal(out, &a); status != 200 || err != nil {
					errs <- fmt.Sprintf("status %d: %.200s", status, out)
					return
				}
				if p, ok := want[a.Revision]; !ok || p != a.Prompt {
					errs <- fmt.Sprintf("revision %s answered with another version's prompt", a.Revision)
					return
				}
				n, _ := seen.LoadOrStore(a.Revision, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			}
		}()
	}
	revOf := func(data []byte) string { p, _ := plan.Load(data); return p.Revision }
	waitFor := func(rev string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for s.Snapshot().Plan(Key{"default", "ssa-pro"}).Revision != rev {
			if time.Now().After(deadline) {
				t.Fatalf("revision %s never served", rev)
			}
			time.Sleep(time.Millisecond)
		}
		// Let requests run against this version too.
		n := func() int64 {
			v, ok := seen.Load(rev)
			if !ok {
				return 0
			}
			return v.(*atomic.Int64).Load()
		}
		for start := n(); n() < start+20 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	for i := 0; i < 6; i++ {
		next := v2
		if i%2 == 1 {
			next = v1
		}
		kd.swap(map[string][]byte{"plan.json": next, "analyze.txt": []byte("static")})
		waitFor(revOf(next))
	}
	// A broken plan.json keeps the version served.
	kd.swap(map[string][]byte{"plan.json": []byte(`{"kind": "PromptPlan", `), "analyze.txt": []byte("static")})
	deadline := time.Now().Add(10 * time.Second)
	for testutilValue(s.metrics.loadErrors) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if testutilValue(s.metrics.loadErrors) != 1 {
		t.Fatal("the broken plan was not reported")
	}
	if got := s.Snapshot().Plan(Key{"default", "ssa-pro"}).Revision; got != revOf(v1) {
		t.Fatalf("serving %s after a broken swap, want the previous %s", got, revOf(v1))
	}
	for rev := range want {
		if _, ok := seen.Load(rev); !ok {
			t.Errorf("revision %s never answered", rev)
		}
	}
}

// "Plan loaded" is logged when a source's plan is new or its revision
// changed, not again for the same plan.
func TestPlanLoadedLoggedOnChange(t *testing.T) {
	logs := &syncBuffer{}
	s := New(Options{Log: funcr.New(logs.add, funcr.Options{})})
	ssa := fixture(t, "ssa-pro")
	s.Apply(map[string][]byte{"ssa": ssa})
	s.Apply(map[string][]byte{"ssa": ssa})
	if n := strings.Count(logs.String(), `"Plan loaded"`); n != 1 {
		t.Fatalf("%d Plan loaded after loading one plan twice:\n%s", n, logs.String())
	}
	s.Apply(map[string][]byte{"ssa": withInstruction(t, ssa, "Be brief.")})
	if n := strings.Count(logs.String(), `"Plan loaded"`); n != 2 {
		t.Fatalf("%d Plan loaded after a new revision:\n%s", n, logs.String())
	}
}

// Templates are listed by namespace, then name.
func TestTemplatesListedInOrder(t *testing.T) {
	s := New(Options{Log: logr.Discard()})
	ssa := fixture(t, "ssa-pro")
	src := map[string][]byte{}
	for i, k := range []Key{{"b", "a"}, {"a", "z"}, {"c", "c"}, {"a", "b"}, {"b", "b"}} {
		p := mustLoad(t, ssa)
		p.Namespace, p.Name = k.Namespace, k.Name
		p.Revision = p.Digest()
		data, _ := json.Marshal(p)
		src[fmt.Sprint(i)] = data
	}
	s.Apply(src)
	want := []Key{{"a", "b"}, {"a", "z"}, {"b", "a"}, {"b", "b"}, {"c", "c"}}
	if got := s.Snapshot().keys; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
}

// A source with a version (a ConfigMap's resourceVersion) is read again
// only when its version moves; one without is compared by its bytes.
func TestLoaderReadsASourceAgainWhenItsVersionMoves(t *testing.T) {
	s := New(Options{Log: logr.Discard()})
	ssa := fixture(t, "ssa-pro")
	brief := withInstruction(t, ssa, "Be brief.")
	instruction := func() string {
		t.Helper()
		p := s.Snapshot().Plan(Key{"default", "ssa-pro"})
		if p == nil {
			t.Fatal("not loaded")
		}
		return p.Intents[0].Instruction
	}
	s.loader.load(map[string]source{"cm": {data: ssa, version: "1"}})
	first := instruction()
	s.loader.load(map[string]source{"cm": {data: brief, version: "1"}})
	if instruction() != first {
		t.Errorf("read again at the same version")
	}
	s.loader.load(map[string]source{"cm": {data: brief, version: "2"}})
	if instruction() == first || !strings.HasSuffix(instruction(), "Be brief.") {
		t.Errorf("not read again after the version moved: %q", instruction())
	}
	s.loader.load(map[string]source{"cm": {data: ssa}})
	if instruction() != first {
		t.Errorf("a source without a version not compared by its bytes")
	}
}

// A rendered ConfigMap's bytes are released once loaded (heldPlans): a
// source without them is read through fetch only when the loader needs
// them, a refused one is never fetched, and a fetch that fails is a load
// error that keeps the previous version.
func TestLoaderFetchesOnlyWhatItNeeds(t *testing.T) {
	s := New(Options{Log: logr.Discard()})
	ssa := fixture(t, "ssa-pro")
	want := Key{"default", "ssa-pro"}
	fetches := 0
	fetch := func(data []byte, err error) func() (planFiles, error) {
		return func() (planFiles, error) { fetches++; return planFiles{plan: data}, err }
	}
	s.loader.load(map[string]source{"cm": {data: ssa, version: "1", want: want}})
	if !s.loader.parsed("cm", "1") || s.loader.parsed("cm", "2") {
		t.Fatal("parsed at version 1 only")
	}
	// The same version without its bytes: nothing to read.
	s.loader.load(map[string]source{"cm": {fetch: fetch(nil, errors.New("unreachable")), version: "1", want: want}})
	if fetches != 0 || s.Snapshot().Plan(want) == nil {
		t.Fatalf("%d fetches at an unchanged version", fetches)
	}
	// Refused (its owner gone), then back at the same version: read again.
	s.loader.load(map[string]source{"cm": {fetch: fetch(nil, errors.New("unreachable")), version: "1", refused: "its owner is gone"}})
	if fetches != 0 || s.Snapshot().Plan(want) != nil || s.loader.parsed("cm", "1") {
		t.Fatalf("a refused source: %d fetches", fetches)
	}
	s.loader.load(map[string]source{"cm": {fetch: fetch(ssa, nil), version: "1", want: want}})
	if fetches != 1 || s.Snapshot().Plan(want) == nil {
		t.Fatalf("back at the same version: %d fetches, plan %v", fetches, s.Snapshot().Plan(want) != nil)
	}
	// A fetch that fails is a load error; the plan held stays.
	errs := testutilValue(s.metrics.loadErrors)
	s.loader.load(map[string]source{"cm": {fetch: fetch(nil, errors.New("forbidden")), version: "2", want: want}})
	if fetches != 2 || testutilValue(s.metrics.loadErrors) != errs+1 || s.Snapshot().Plan(want) == nil {
		t.Fatalf("a failed fetch: %d fetches, %v load errors", fetches, testutilValue(s.metrics.loadErrors)-errs)
	}
}
