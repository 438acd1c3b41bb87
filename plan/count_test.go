package plan

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/tokens"
)

// countJoined must equal counting the joined text, whatever the texts'
// edges: white space, punctuation, line feeds, CJK, emoji, marks.
func TestCountJoinedIsExact(t *testing.T) {
	atoms := []string{"a", "Word", " ", "\n", "\n\n", "\r\n", ".", "/", "'s", "123", "4", "你好", "世界。", "😀", "👩‍💻", "\u0301", "\t", "  ", "é", "## H", "-", "x\n", "\n/"}
	r := rand.New(rand.NewPCG(1, 2))
	text := func() string {
		var b strings.Builder
		for n := r.IntN(12); n > 0; n-- {
			b.WriteString(atoms[r.IntN(len(atoms))])
		}
		return b.String()
	}
	for _, name := range []string{tokens.CL100K, tokens.O200K} {
		e := tokens.MustGet(name)
		for i := 0; i < 3000; i++ {
			parts := make([]part, 1+r.IntN(4))
			for j := range parts {
				if r.IntN(2) == 0 {
					parts[j].heading = text()
				}
				parts[j].body = text()
				parts[j].tokens = e.CountUncached(parts[j].body)
			}
			want := e.CountUncached(join(parts, func(p *part) string { return block(p.heading, p.body) }))
			if got := countJoined(e, parts); got != want {
				t.Fatalf("%s: %+v: countJoined %d, joined text %d", name, parts, got, want)
			}
			for j := range parts {
				if got, want := blockTokens(e, &parts[j]), e.CountUncached(block(parts[j].heading, parts[j].body)); got != want {
					t.Fatalf("%s: %+v: blockTokens %d, want %d", name, parts[j], got, want)
				}
			}
		}
	}
}
