package tokens

import (
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go"
)

// referenceMerge is tiktoken's byte-pair merge as written in its Rust core:
// byte strings looked up in the rank table, a linear scan for the lowest
// rank at every step. Quadratic, so only for the short inputs of the fuzz.
func referenceMerge(v *vocab, piece string) []int {
	if id, ok := v.lookup(piece); ok {
		return []int{int(id)}
	}
	rank := func(s string) uint32 {
		if id, ok := v.lookup(s); ok {
			return id
		}
		return noRank
	}
	type part struct {
		start int
		rank  uint32
	}
	parts := make([]part, 0, len(piece)+1)
	for i := 0; i < len(piece)-1; i++ {
		parts = append(parts, part{i, rank(piece[i : i+2])})
	}
	parts = append(parts, part{len(piece) - 1, noRank}, part{len(piece), noRank})
	getRank := func(i int) uint32 {
		if i+3 < len(parts) {
			return rank(piece[parts[i].start:parts[i+3].start])
		}
		return noRank
	}
	for {
		best, at := noRank, -1
		for i := 0; i < len(parts)-1; i++ {
			if parts[i].rank < best {
				best, at = parts[i].rank, i
			}
		}
		if at < 0 {
			break
		}
		if at > 0 {
			parts[at-1].rank = getRank(at - 1)
		}
		parts[at].rank = getRank(at)
		parts = slices.Delete(parts, at+1, at+2)
	}
	ids := make([]int, 0, len(parts)-1)
	for i := 0; i+1 < len(parts); i++ {
		id, _ := v.lookup(piece[parts[i].start:parts[i+1].start])
		ids = append(ids, int(id))
	}
	return ids
}

// goClass is classOf from Go's own (older) Unicode tables.
func goClass(r rune) uint8 {
	var c uint8
	if unicode.IsLetter(r) {
		c |= cL
	}
	if unicode.IsNumber(r) {
		c |= cN
	}
	if unicode.IsSpace(r) {
		c |= cS
	}
	if unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M) {
		c |= cU
	}
	if unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M) {
		c |= cW
	}
	return c
}

// tiktokenGoComparable reports whether tiktoken-go must agree on s: valid
// UTF-8 whose characters are classed alike by Unicode 15 and 16, without
// the long s that only a Unicode-aware case fold matches.
func tiktokenGoComparable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r == 'ſ' || goClass(r) != classOf(r) {
			return false
		}
	}
	return true
}

// FuzzEncode checks Encode against tiktoken's quadratic merge applied to the
// pieces of our pre-tokenizer, against tiktoken-go where the Unicode
// versions agree, and decode(encode(s)) == s for every input. go test runs
// the seeds only; go test -fuzz=FuzzEncode explores.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{
		"", "Hello, world!", "don't WON'T 'ſ 'LL", "  \n\r\n \t x  ", "的的的的的的的", "1234567 ١٢٣",
		"👨‍👩‍👧‍👦🇺🇸", "e\u0301\u0301 ʰA'sǅ", "a/b//c\n/", "\xff\xfe invalid \xc3", "\u2028\u3000x\u00a0",
		strings.Repeat("ab", 40), strings.Repeat("中文", 50),
	} {
		f.Add(s)
	}
	tk := map[string]*tiktoken.Tiktoken{}
	for _, name := range []string{CL100K, O200K} {
		t, err := tiktoken.GetEncoding(name)
		if err != nil {
			f.Fatal(err)
		}
		tk[name] = t
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4096 {
			s = s[:4096]
		}
		for _, name := range []string{CL100K, O200K} {
			e := MustGet(name)
			ids := e.Encode(s)
			if got := e.Decode(ids); got != s {
				t.Fatalf("%s: %q decodes to %q", name, s, got)
			}
			var want []int
			for i := 0; i < len(s); {
				end := e.split(s, i)
				if end <= i || end > len(s) {
					t.Fatalf("%s: piece at %d of %q ends at %d", name, i, s, end)
				}
				want = append(want, referenceMerge(e.vocab, s[i:end])...)
				i = end
			}
			if !slices.Equal(ids, want) {
				t.Fatalf("%s %q: merge gives %v, reference merge %v", name, s, ids, want)
			}
			if tiktokenGoComparable(s) {
				if ref := tk[name].EncodeOrdinary(s); !slices.Equal(ids, ref) && !(len(ids) == 0 && len(ref) == 0) {
					t.Fatalf("%s %q: %v, tiktoken-go %v", name, s, ids, ref)
				}
			}
			if n := e.CountUncached(s); n != len(ids) {
				t.Fatalf("%s %q: count %d, encode %d", name, s, n, len(ids))
			}
			for max := 1; max < len(ids); max += 1 + len(ids)/8 {
				got, n := e.Truncate(s, max)
				if !strings.HasPrefix(s, got) || n > max || n != e.CountUncached(got) {
					t.Fatalf("%s %q: Truncate(%d) = %q, %d; its count is %d", name, s, max, got, n, e.CountUncached(got))
				}
				if utf8.ValidString(s) && !utf8.ValidString(got) {
					t.Fatalf("%s %q: Truncate(%d) split a character: %q", name, s, max, got)
				}
			}
		}
	})
}
