package plan

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
				want := e.CountUncached(join(parts, func(p *part) string { return block(p.heading, p.body) }))
				got, err := c.total()
				if err != nil || got != want {
					t.Fatalf("%s: %+v: total %d (%v), joined text %d", name, parts, got, err, want)
				}
				for j := range parts {
					got, err := c.blockTokens(&parts[j])
					if want := e.CountUncached(block(parts[j].heading, parts[j].body)); err != nil || got != want {
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
