package plan

import (
	"context"
	"testing"
	"unicode/utf8"
)

// runeCounter counts a rune as a token and records how many bytes it was
// given: the work an assembly asks of the tokenizer, whatever its speed.
type runeCounter struct{ counted, truncated int }

func (c *runeCounter) Count(s string) int { c.counted += len(s); return utf8.RuneCountInString(s) }

func (c *runeCounter) CountUncached(s string) int { return c.Count(s) }

func (c *runeCounter) Truncate(s string, n int) (string, int) {
	i, k := 0, 0
	for ; i < len(s) && k < n; k++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	c.truncated += i
	return s[:i], k
}

// A 4 MiB value is counted once when it starts and ends with a letter or a
// number or has a line feed before one near each edge; otherwise once alone
// and once with its heading and separators, the edges that change with
// them. Cut or not, nothing more of it is counted; a cut keeps no more than
// the budget. The algorithm before counted such a value three times when it
// fitted.
func TestAssembleCountsAValueOnce(t *testing.T) {
	p := loadSample(t)
	for _, c := range hostileValues() {
		for _, budget := range []int{4000, 1 << 30} {
			p.MaxTokens = budget
			runtime := map[string]string{"tool_outputs": c.v}
			rc := &runeCounter{}
			if _, err := p.assemble(context.Background(), rc, p.intent("analyze"), runtime, nil); err != nil {
				t.Fatal(err)
			}
			before := &runeCounter{}
			if _, err := refAssembleWith(p, before, "analyze", runtime); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s, budget %d: counted %d bytes per byte of the value + %d (before: %d + %d); kept %d bytes of cuts", c.name, budget,
				rc.counted/len(c.v), rc.counted%len(c.v), before.counted/len(c.v), before.counted%len(c.v), rc.truncated)
			times := 1
			if c.name == "punct" || c.name == "spaces" || c.name == "emoji" {
				times = 2
			}
			if rc.counted > times*len(c.v)+64<<10 || rc.truncated > 64<<10 {
				t.Errorf("%s, budget %d: counted %d bytes, kept %d of cuts; want at most %d x %d + 64 KiB and 64 KiB", c.name, budget, rc.counted, rc.truncated, times, len(c.v))
			}
		}
	}
}
