package tokens

// Tests that pin Truncate's and Decode's contracts tightly enough that the
// mutants of issue 21 in tokens.go change a result (docs/mutation.md).

import (
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"
)

// truncateFragments are the pieces the random texts are built from: the
// places where pre-tokenization at a cut differs from the whole text (white
// space runs before a word, newlines, digits, contractions) and characters
// that one token can split (CJK, emoji, combining marks).
var truncateFragments = []string{
	"a", "b", "Zy", "word", " ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", " \n",
	"\u00a0", "\u3000", "的", "文本", "😀", "👨‍👩‍👧", "🎉", "e\u0301", "\u0301",
	"1", "123", "4567", "'s", "'T", ".", "!?", "...", "ǅ", "Привет", "x",
	// Bytes that are not UTF-8: a stray continuation byte, a cut
	// character, a byte that never starts one.
	"\x80", "\x80\x80", "\xe7\x9a", "\xff",
}

// truncateTexts returns deterministic random texts of a few fragments.
func truncateTexts(n int) []string {
	r := rand.New(rand.NewPCG(21, 4))
	texts := make([]string, 0, n)
	for range n {
		var b strings.Builder
		for k := 1 + r.IntN(10); k > 0; k-- {
			b.WriteString(truncateFragments[r.IntN(len(truncateFragments))])
		}
		texts = append(texts, b.String())
	}
	return texts
}

// charStarts lists the offsets where a prefix of s may end: 0, len(s) and
// every byte that starts a character.
func charStarts(s string) []int {
	var at []int
	for i := 0; i < len(s); i++ {
		if utf8.RuneStart(s[i]) {
			at = append(at, i)
		}
	}
	return append(at, len(s))
}

// TestTruncateIsTheLongestPrefixThatFits compares Truncate with a brute
// force: the longest prefix ending on a character boundary whose own count
// is at most maxTokens. A cut one token short, or one that gives up on a
// prefix that fits, shows as a shorter result.
func TestTruncateIsTheLongestPrefixThatFits(t *testing.T) {
	texts := truncateTexts(300)
	for _, name := range []string{CL100K, O200K} {
		e := MustGet(name)
		for _, s := range texts {
			toks := e.Encode(s)
			// ends[k] is where the prefix of the first k tokens ends, backed
			// off to a character boundary, and counts[k] that prefix's count.
			ends := make([]int, len(toks)+1)
			counts := make([]int, len(toks)+1)
			at := 0
			for k := range ends {
				if k > 0 {
					at += len(e.Decode(toks[k-1 : k]))
				}
				ends[k] = at
				for ends[k] > 0 && ends[k] < len(s) && !utf8.RuneStart(s[ends[k]]) {
					ends[k]--
				}
				counts[k] = e.CountUncached(s[:ends[k]])
			}
			for max := 0; max <= len(toks)+1; max++ {
				want, wantN := "", 0
				for k := range ends {
					if counts[k] <= max && k <= max && ends[k] >= len(want) {
						want, wantN = s[:ends[k]], counts[k]
					}
				}
				got, n := e.Truncate(s, max)
				if got != want || n != wantN {
					t.Errorf("%s Truncate(%q, %d) = %q, %d; want %q, %d", name, s, max, got, n, want, wantN)
				}
			}
		}
	}
}

// TestDecodeForeignIDs: every id outside the encoding decodes to U+FFFD,
// the first one past the last rank included (it is a special token's
// neighbourhood, the likeliest foreign id), and the last rank still decodes
// to its token; both the size estimate and the writing loop see each id.
func TestDecodeForeignIDs(t *testing.T) {
	for _, c := range []struct {
		name string
		size int
	}{{CL100K, 100256}, {O200K, 199998}} {
		name, size := c.name, c.size
		e := MustGet(name)
		if got := len(e.vocab.offs) - 1; got != size {
			t.Fatalf("%s has %d ranks, want %d", name, got, size)
		}
		last := e.Decode([]int{size - 1})
		if last == "\uFFFD" || last == "" {
			t.Fatalf("%s: the last rank %d decodes to %q", name, size-1, last)
		}
		hi := e.Encode("hi")
		for _, id := range []int{size, size + 1, size + 2, -1, -size, 1 << 40, int(^uint(0) >> 1), -int(^uint(0)>>1) - 1} {
			want := "hi\uFFFD" + last + "\uFFFD"
			if got := e.Decode(append(append([]int{}, hi...), id, size-1, id)); got != want {
				t.Errorf("%s: Decode(hi, %d, %d, %d) = %q, want %q", name, id, size-1, id, got, want)
			}
		}
	}
}

// TestTruncateReadsOnlyWhatCanFit: a megabyte-long piece (one word, no
// space) costs what its kept part costs, as Truncate promises for hostile
// input. Measured in bytes allocated, not time: merging the whole piece
// allocates megabytes, the kept part a few hundred bytes. The letters are
// random, and new for each encoding, so no cache of an earlier merge can
// hide the work.
func TestTruncateReadsOnlyWhatCanFit(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 233))
	word := make([]byte, 1<<20)
	for _, name := range []string{CL100K, O200K} {
		for i := range word {
			word[i] = 'a' + byte(r.IntN(26))
		}
		text := string(word)
		e := MustGet(name)
		e.Truncate("warm the buffer pool", 2)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, n := e.Truncate(text, 4)
		runtime.ReadMemStats(&after)
		if n != 4 || !strings.HasPrefix(text, got) || len(got) == 0 {
			t.Fatalf("%s: Truncate = %d bytes, %d tokens", name, len(got), n)
		}
		alloc := after.TotalAlloc - before.TotalAlloc
		if alloc > 256<<10 {
			t.Errorf("%s: Truncate(1 MB piece, 4) allocated %d bytes; it should read only the first 4 tokens' worth", name, alloc)
		}
	}
}
