package tokens

// Tests that fail when a count is wrong in one of the ways a reviewer would
// try (issue 21, docs/mutation.md).

import (
	"strings"
	"testing"
)

// The count cache is keyed by the whole text: texts that share a long
// prefix, or differ in one byte anywhere, get their own counts, also after
// the first was cached.
func TestCountCacheKeysTheWholeText(t *testing.T) {
	for _, name := range []string{CL100K, O200K} {
		e := MustGet(name)
		base := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40) // 1,800 bytes
		texts := []string{
			base,
			base + " and then some more words at the end",
			base[:256] + "!",
			base[:255] + "数据",
			base[:1024] + " 😀 emoji",
			"x" + base,
			strings.Replace(base, "lazy", "LAZY", 1),
			strings.Replace(base, "dog.", "dog!", 40),
		}
		for round := 0; round < 2; round++ {
			for _, s := range texts {
				if got, want := e.Count(s), e.CountUncached(s); got != want {
					t.Errorf("%s round %d: Count of %d bytes ending %q = %d, want %d", name, round, len(s), s[len(s)-12:], got, want)
				}
			}
		}
	}
}
