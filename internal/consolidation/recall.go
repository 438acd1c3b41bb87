package consolidation

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Trigrams returns the set of rune trigrams of a text's normalised form,
// padded so short words count. It works for Chinese (characters) as for
// English (letters).
func Trigrams(s string) map[string]struct{} {
	out := map[string]struct{}{}
	eachGram(s, func(g []byte) { out[string(g)] = struct{}{} })
	return out
}

// eachGram calls fn with every gram of Trigrams, repeats included; g is
// valid only during the call.
func eachGram(s string, fn func(g []byte)) {
	var buf []byte
	eachGramRunes(s, func(rs []rune) {
		buf = buf[:0]
		for _, c := range rs {
			buf = utf8.AppendRune(buf, c)
		}
		fn(buf)
	})
}

// eachGramRunes calls fn with the runes of every gram of Trigrams,
// repeats included; rs is valid only during the call.
func eachGramRunes(s string, fn func(rs []rune)) {
	var r []rune
	for _, w := range strings.Fields(Normalize(s)) {
		r = append(r[:0], ' ')
		for _, c := range w {
			r = append(r, c)
		}
		r = append(r, ' ')
		if isHan(r[1]) {
			r = r[1 : len(r)-1]
		}
		if len(r) < 3 {
			fn(r)
			continue
		}
		for i := 0; i+3 <= len(r); i++ {
			fn(r[i : i+3])
		}
		if isHan(r[0]) {
			for i := 0; i+2 <= len(r); i++ {
				fn(r[i : i+2]) // bigrams help short CJK words
			}
		}
	}
}

// gramPad fills a gram key's places past a gram's last rune: above
// every rune, so no rune can stand for it.
const gramPad = 0x1fffff

// eachGramKey calls fn with every gram of eachGram (repeats included) as
// a key: its up to three runes in 21 bits each, padded with gramPad. Two
// grams have the same key exactly when they have the same runes.
func eachGramKey(s string, fn func(k uint64)) {
	eachGramRunes(s, func(rs []rune) {
		k := uint64(0)
		for i := 0; i < 3; i++ {
			c := uint64(gramPad)
			if i < len(rs) {
				c = uint64(rs[i])
			}
			k = k<<21 | c
		}
		fn(k)
	})
}

func isHan(r rune) bool { return unicode.Is(unicode.Han, r) }

// Similarity is the Jaccard similarity of two texts' trigram sets.
func Similarity(a, b map[string]struct{}) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	inter := 0
	for k := range a {
		if _, ok := b[k]; ok {
			inter++
		}
	}
	return float64(inter) / float64(len(a)+len(b)-inter)
}

// sharedEntities counts entities two lists share, ignoring case.
func sharedEntities(a, b []string) int {
	set := map[string]bool{}
	for _, e := range a {
		set[strings.ToLower(strings.TrimSpace(e))] = true
	}
	n := 0
	for _, e := range b {
		if set[strings.ToLower(strings.TrimSpace(e))] {
			n++
		}
	}
	return n
}

// RelatedScore ranks an observation for a fact: trigram similarity plus a
// bonus per shared entity.
func RelatedScore(fact Fact, factGrams map[string]struct{}, obs Observation) float64 {
	return Similarity(factGrams, Trigrams(obs.Text)) + 0.25*float64(sharedEntities(fact.Entities, obs.Entities))
}

// Rank orders candidates for a fact, best first, and keeps those that are
// related at all, at most limit.
func Rank(fact Fact, cands []Candidate, limit int) []Candidate {
	grams := Trigrams(fact.Text)
	type scored struct {
		c Candidate
		s float64
	}
	var ss []scored
	for _, c := range cands {
		if s := RelatedScore(fact, grams, c.Observation); s > 0.05 {
			ss = append(ss, scored{c, s})
		}
	}
	sort.SliceStable(ss, func(i, j int) bool {
		if ss[i].s != ss[j].s {
			return ss[i].s > ss[j].s
		}
		return ss[i].c.ID < ss[j].c.ID
	})
	out := make([]Candidate, 0, min(limit, len(ss)))
	for i := 0; i < len(ss) && i < limit; i++ {
		out = append(out, ss[i].c)
	}
	return out
}
