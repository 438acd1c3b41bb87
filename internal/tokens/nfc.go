package tokens

import (
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// nfc normalizes s to NFC as Unicode defines it, as the reference
// tokenizers do. x/text's norm also applies the Stream-Safe Text Format: in
// a run of more than 30 non-starters it inserts U+034F, which NFC does not
// and which would count as tokens. So a text where it did is normalized
// again segment by segment (a segment starts at a character that combines
// with nothing before it), and a segment where it does so again is
// normalized by UAX #15's algorithm from x/text's character properties.
func nfc(s string) string {
	out := norm.NFC.String(s)
	if len(out) == len(s) || strings.Count(out, cgj) == strings.Count(s, cgj) {
		return out
	}
	var b strings.Builder
	b.Grow(len(s))
	start := 0
	for i := 0; i < len(s); {
		p := norm.NFC.PropertiesString(s[i:])
		if i > start && p.BoundaryBefore() {
			b.WriteString(nfcSegment(s[start:i]))
			start = i
		}
		i += max(p.Size(), 1)
	}
	b.WriteString(nfcSegment(s[start:]))
	return b.String()
}

const cgj = "\u034f"

// nfcSegment normalizes one segment: decompose, order the non-starters by
// combining class (stably), compose each with the last starter when nothing
// between blocks it.
func nfcSegment(seg string) string {
	if out := norm.NFC.String(seg); strings.Count(out, cgj) == strings.Count(seg, cgj) {
		return out
	}
	var rs []rune
	for _, r := range seg {
		if d := norm.NFD.PropertiesString(string(r)).Decomposition(); len(d) > 0 {
			for _, c := range string(d) {
				rs = append(rs, c)
			}
		} else {
			rs = append(rs, r)
		}
	}
	ccc := func(r rune) int { return int(norm.NFD.PropertiesString(string(r)).CCC()) }
	for i := 0; i < len(rs); {
		j := i
		for j < len(rs) && ccc(rs[j]) != 0 {
			j++
		}
		slices.SortStableFunc(rs[i:j], func(a, b rune) int { return ccc(a) - ccc(b) })
		i = j + 1
	}
	out := rs[:0:0]
	starter, last := -1, -1 // the last starter's index in out; the class before
	for _, r := range rs {
		c := ccc(r)
		if starter >= 0 && (last < c || last == 0) {
			if composed := norm.NFC.String(string(out[starter]) + string(r)); utf8.RuneCountInString(composed) == 1 {
				out[starter], _ = utf8.DecodeRuneInString(composed)
				continue
			}
		}
		if c == 0 {
			starter = len(out)
		}
		last = c
		out = append(out, r)
	}
	return string(out)
}
