package promptfit

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/tokens"
)

// counts.total must equal counting the joined text, whatever the texts'
// edges: white space, punctuation, line feeds, CJK, emoji, marks, and long
// runs of one character.
func TestCountJoinedIsExact(t *testing.T) {
	atoms := []string{"a", "Word", " ", "\n", "\n\n", "\r\n", ".", "/", "'s", "123", "4", "你好", "世界。", "😀", "👩‍💻", "\u0301", "\t", "  ", "é", "## H", "-", "x\n", "\n/"}
	runs := []string{"!", " ", "a", "7", "中", "😀", "\n", "\t", "/"}
	r := rand.New(rand.NewPCG(1, 2))
	text := func() string {
		var b strings.Builder
		for n := r.IntN(12); n > 0; n-- {
			if r.IntN(8) == 0 {
				// A hostile run: one character, up to a few hundred times.
				b.WriteString(strings.Repeat(runs[r.IntN(len(runs))], 1+r.IntN(400)))
				continue
			}
			b.WriteString(atoms[r.IntN(len(atoms))])
		}
		return b.String()
	}
	for _, name := range []string{tokens.CL100K, tokens.O200K} {
		e := tokens.MustGet(name)
		for i := 0; i < 2000; i++ {
			parts := make([]part, 1+r.IntN(4))
			for j := range parts {
				if r.IntN(2) == 0 {
					parts[j].heading = text()
				}
				parts[j].body = text()
				// Some counts known, as after a cut; the others lazy.
				parts[j].tokens = -1
				if r.IntN(2) == 0 {
					parts[j].tokens = e.CountUncached(parts[j].body)
				}
			}
			c := &counts{ctx: context.Background(), e: e, parts: parts}
			// Change bodies between totals, as cuts do: the remembered
			// glue counts must follow.
			for round := 0; round < 3; round++ {
				want := e.CountUncached(join(parts, func(p *part) string { return Block(p.heading, p.body) }))
				got, err := c.total()
				if err != nil || got != want {
					t.Fatalf("%s: %+v: total %d (%v), joined text %d", name, parts, got, err, want)
				}
				for j := range parts {
					got, err := c.blockTokens(&parts[j])
					if want := e.CountUncached(Block(parts[j].heading, parts[j].body)); err != nil || got != want {
						t.Fatalf("%s: %+v: blockTokens %d (%v), want %d", name, parts[j], got, err, want)
					}
					got, err = c.tokensOf(&parts[j])
					if want := e.CountUncached(parts[j].body); err != nil || got != want {
						t.Fatalf("%s: %+v: tokensOf %d (%v), want %d", name, parts[j], got, err, want)
					}
				}
				p := &parts[r.IntN(len(parts))]
				p.body, p.tokens = text(), -1
				if r.IntN(2) == 0 {
					p.tokens = e.CountUncached(p.body)
				}
				p.ver++
				p.split = false
			}
		}
	}
}

// splitPoints is every offset i > 0 with a line feed before it and a piece
// starting at it.
func splitPoints(s string) []int {
	var out []int
	for i := 1; i <= len(s); i++ {
		if s[i-1] == '\n' && tokens.StartsPiece(s[i:]) {
			out = append(out, i)
		}
	}
	return out
}

// The split points are where the counts are exact; one missed is text
// counted again, one wrong a wrong count.
func TestSplitPoints(t *testing.T) {
	atoms := []string{"\n", "\n", "a", "Bc", " ", "1", ".", "!!", "é", "'s", "\r", "\t", "咖啡", "🙂"}
	rng := rand.New(rand.NewPCG(3, 4))
	cases := []string{"", "\n", "a", "\na", "\n\na", "x\n\nabc", "x\nabc\n", "x\n\n", "ab\n\ncd\n\nef."}
	for range 3000 {
		var b strings.Builder
		for range rng.IntN(10) {
			b.WriteString(atoms[rng.IntN(len(atoms))])
		}
		cases = append(cases, b.String())
	}
	for _, s := range cases {
		points := splitPoints(s)
		first := -1
		if len(points) > 0 {
			first = points[0]
		}
		if got := nextSplit(s); got != first {
			t.Fatalf("nextSplit(%q) = %d, want %d (split points %v)", s, got, first, points)
		}
		for k, from := range append([]int{0}, points...) {
			want := from
			if k < len(points) {
				want = points[len(points)-1]
			}
			if from == 0 && len(points) > 0 {
				want = points[len(points)-1]
			}
			if got := lastSplit(s, from); got != want {
				t.Fatalf("lastSplit(%q, %d) = %d, want %d (split points %v)", s, from, got, want, points)
			}
		}
	}
}
