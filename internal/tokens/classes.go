package tokens

import (
	"sort"
	"unicode/utf8"
)

// Class bits of a code point, as the pre-tokenizer patterns use them. A code
// point with none of cL, cN, cS is what the patterns write [^\s\p{L}\p{N}].
const (
	cL uint8 = 1 << iota // \p{L}
	cN                   // \p{N}
	cS                   // \s, Unicode White_Space
	cU                   // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] (o200k_base)
	cW                   // [\p{Ll}\p{Lm}\p{Lo}\p{M}] (o200k_base)
	cP                   // [\p{P}\p{S}] (deepseek_v3)
	cM                   // \p{M} (deepseek_v3)
)

// classRange gives the class bits of the code points lo..hi inclusive.
type classRange struct {
	lo, hi rune
	bits   uint8
}

// bmpClass holds the bits of every code point below U+10000 so that the hot
// loop never searches; the rarer supplementary planes use a binary search.
var (
	bmpClass   [0x10000]uint8
	astralFrom int // index of the first range above the BMP in classRanges
)

func init() {
	for i, r := range classRanges {
		if r.lo > 0xffff {
			astralFrom = i
			break
		}
		for c := r.lo; c <= r.hi && c <= 0xffff; c++ {
			bmpClass[c] = r.bits
		}
		if r.hi > 0xffff {
			panic("tokens: a class range straddles U+FFFF")
		}
	}
}

// classOf returns the class bits of r. Invalid UTF-8 decodes as U+FFFD, an
// Other_Symbol, so it has no bits, like the replacement character itself.
func classOf(r rune) uint8 {
	if r < 0x10000 {
		return bmpClass[r]
	}
	rs := classRanges[astralFrom:]
	i := sort.Search(len(rs), func(i int) bool { return rs[i].hi >= r })
	if i < len(rs) && rs[i].lo <= r {
		return rs[i].bits
	}
	return 0
}

// classAt returns the class bits and byte width of the character at s[i].
func classAt(s string, i int) (uint8, int) {
	b := s[i]
	if b < utf8.RuneSelf {
		return bmpClass[b], 1
	}
	// Three bytes (CJK text) decode here; anything else, or an invalid or
	// surrogate sequence, as the utf8 package does.
	if b&0xf0 == 0xe0 && i+2 < len(s) {
		b1, b2 := s[i+1], s[i+2]
		if b1&0xc0 == 0x80 && b2&0xc0 == 0x80 {
			r := rune(b&0x0f)<<12 | rune(b1&0x3f)<<6 | rune(b2&0x3f)
			if r >= 0x800 && (r < 0xd800 || r > 0xdfff) {
				return bmpClass[r], 3
			}
		}
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return classOf(r), n
}
