package plan

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/promptfit"
	"github.com/promptops/promptops/internal/tokens"
)

// hostileAtoms are runs that tokenize as one long piece, or with no line
// feed before a letter or number to split them at, in sizes up to a few KB.
func hostileAtom(r *rand.Rand) string {
	chars := []string{"!", " ", "a", "7", "中", "😀", "\n", "\t", "/", "é", "\u0301", "'"}
	return strings.Repeat(chars[r.IntN(len(chars))], 1+r.IntN(1500))
}

// randomText mixes ordinary atoms with, sometimes, hostile runs at the
// edges or in the middle.
func randomText(r *rand.Rand) string {
	atoms := []string{"a", "Word", " ", "\n", "\n\n", "\r\n", ".", "/", "'s", "123", "4", "你好", "世界。", "😀", "👩‍💻", "\u0301", "\t", "  ", "é", "## H", "-", "x\n", "\n/", "Invoices", " code", "    if x:\n", "| a | b |\n"}
	var b strings.Builder
	for n := r.IntN(40); n > 0; n-- {
		if r.IntN(12) == 0 {
			b.WriteString(hostileAtom(r))
			continue
		}
		b.WriteString(atoms[r.IntN(len(atoms))])
	}
	return b.String()
}

// randomPlan is a valid plan of 1 to 6 sections; runtime its contents.
func randomPlan(r *rand.Rand, enc string) (*Plan, map[string]string) {
	p := &Plan{APIVersion: PlanAPIVersion, Kind: PlanKind, Name: "r", Encoding: enc, Separator: Separator, MaxTokens: r.IntN(300)}
	runtime := map[string]string{}
	intent := Intent{Name: "i", Instruction: randomText(r)}
	hasIntent := false
	for i, n := 0, 1+r.IntN(6); i < n; i++ {
		s := Section{Name: fmt.Sprintf("s%d", i), Policy: PolicyPriority, Priority: r.IntN(4), MinTokens: r.IntN(3) * r.IntN(20)}
		if r.IntN(6) == 0 {
			s.Policy = PolicyNever
		}
		if r.IntN(2) == 0 {
			s.Heading = []string{"## H", "# 数据", "Notes:", " x", "!", "7"}[r.IntN(6)]
		}
		switch k := r.IntN(4); {
		case k == 0:
			s.Kind, s.Text = KindStatic, randomText(r)
			if r.IntN(4) == 0 {
				intent.StaticCuts = append(intent.StaticCuts, StaticCut{Section: s.Name, Text: randomText(r)})
			}
		case k == 1 && !hasIntent:
			s.Kind, hasIntent = KindIntent, true
		default:
			s.Kind = KindRuntime
			if r.IntN(5) != 0 {
				runtime[s.Name] = randomText(r)
			}
		}
		p.Sections = append(p.Sections, s)
	}
	p.Intents = []Intent{intent}
	if err := p.Validate(); err != nil {
		panic(err)
	}
	return p, runtime
}

// The bounded-cost assembly gives what the algorithm before it gave (kept
// in reference_test.go), byte for byte and count for count, on random plans
// with ordinary and hostile contents.
func TestAssembleMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	n := 500
	if testing.Short() {
		n = 200
	}
	for _, enc := range []string{tokens.CL100K, tokens.O200K} {
		for i := 0; i < n; i++ {
			p, runtime := randomPlan(r, enc)
			want, err := refAssemble(p, "i", runtime)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Assemble(context.Background(), "i", runtime)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s case %d: plan %+v runtime %q:\n got %+v\nwant %+v", enc, i, p.Sections, runtime, got, want)
			}
		}
	}
}

// The same with large hostile values, each beside ordinary text at its
// edges, in the sample plan and a plan whose runtime section is last.
func TestAssembleHostileMatchesReference(t *testing.T) {
	sample := loadSample(t)
	last := loadSample(t)
	last.Sections = last.Sections[:len(last.Sections)-1] // tool_outputs ends the prompt
	sizes := []int{16 << 10}
	// Megabytes take seconds a count until the tokenizer merges long
	// pieces fast: PLAN_HOSTILE_MIB=4 adds 4 MiB values.
	if mib, err := strconv.Atoi(os.Getenv("PLAN_HOSTILE_MIB")); err == nil && mib > 0 {
		sizes = append(sizes, mib<<20)
	}
	for _, size := range sizes {
		testHostileMatchesReference(t, sample, last, size)
	}
}

func testHostileMatchesReference(t *testing.T, sample, last *Plan, size int) {
	for _, c := range []string{"!", " ", "a", "7", "中", "😀", "\n", " \n"} {
		v := strings.Repeat(c, size/len(c))
		for _, edge := range []string{"", "Mean 45.2\n", "\n\nx", "  ", "统计 "} {
			for _, p := range []*Plan{sample, last} {
				for _, rt := range []map[string]string{
					{"tool_outputs": edge + v + edge},
					{"tool_outputs": edge + v, "data_context": v + edge},
					{"variable_dictionary": edge + v[:len(v)/16] + edge, "tool_outputs": "ok"},
				} {
					want, err := refAssemble(p, "analyze", rt)
					if err != nil {
						t.Fatal(err)
					}
					got, err := p.Assemble(context.Background(), "analyze", rt)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("%q with edge %q: got %d tokens %v, want %d tokens %v", c, edge, got.Tokens, got.Sections, want.Tokens, want.Sections)
					}
				}
			}
		}
	}
}

func loadSample(t testing.TB) *Plan {
	t.Helper()
	p, err := Load(mustRead(t, "../internal/serve/testdata/ssa-pro.plan.json"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A done context stops the assembly with an error that wraps ctx.Err().
func TestAssembleStops(t *testing.T) {
	p := loadSample(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Assemble(ctx, "analyze", map[string]string{"tool_outputs": "x"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithDeadline(context.Background(), timeZero)
	defer cancel()
	if _, err := p.Assemble(ctx, "analyze", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}
	// Stopping between cut steps: a counter that cancels after its first
	// counts.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	cc := &cancelAfter{Counter: tokens.MustGet(p.Encoding), n: 3, cancel: cancel}
	_, err = p.assemble(ctx, cc, p.intent("analyze"), map[string]string{"tool_outputs": strings.Repeat("统计结果 ", 5000), "data_context": strings.Repeat("n=200\n", 3000)}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

type cancelAfter struct {
	promptfit.Counter
	n      int
	cancel func()
}

func (c *cancelAfter) Count(s string) int {
	if c.n--; c.n == 0 {
		c.cancel()
	}
	return c.Counter.Count(s)
}

var timeZero = time.Unix(0, 0)

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
