package tokens

import (
	"strings"
	"testing"
)

// TestSpecials: the leftmost special, the longest at its place, as the
// reference tokenizers split added tokens out of the text.
func TestSpecials(t *testing.T) {
	type match struct {
		start, end int
		id         uint32
	}
	all := func(s *specials, text string) []match {
		var out []match
		for from := 0; ; {
			start, end, id, ok := s.next(text, from)
			if !ok {
				return out
			}
			out = append(out, match{start, end, id})
			from = end
		}
	}
	one := newSpecials(map[string]uint32{"<|eot|>": 100, "<|eot|>x": 101, "<|e|>": 102})
	multi := newSpecials(map[string]uint32{"<s>": 7, "<s>>": 8, "s>": 9, "[INST]": 10})
	if one.start != '<' || multi.start != -1 {
		t.Fatalf("start bytes %d, %d", one.start, multi.start)
	}
	for _, c := range []struct {
		s    *specials
		text string
		want []match
	}{
		{one, "", nil},
		{one, "no specials", nil},
		{one, "a<|eot|>b", []match{{1, 8, 100}}},
		{one, "<|eot|>x<|e|><|eot", []match{{0, 8, 101}, {8, 13, 102}}},
		{one, "<|<|eot|>|>", []match{{2, 9, 100}}},
		{one, strings.Repeat("<|", 1000) + "<|e|>", []match{{2000, 2005, 102}}},
		{multi, "x<s>>s>[INST]", []match{{1, 5, 8}, {5, 7, 9}, {7, 13, 10}}},
		{multi, "<s[INST", nil},
	} {
		got := all(c.s, c.text)
		if len(got) != len(c.want) {
			t.Errorf("%q: %v, want %v", c.text, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%q: %v, want %v", c.text, got, c.want)
			}
		}
	}
	if s, ok := one.get(101); !ok || s != "<|eot|>x" {
		t.Errorf("get(101) = %q, %v", s, ok)
	}
	for _, id := range []int{99, 103, -1} {
		if _, ok := one.get(id); ok {
			t.Errorf("get(%d) found a special", id)
		}
	}
	var none *specials
	if _, ok := none.get(0); ok || newSpecials(nil) != nil {
		t.Error("no specials")
	}
	if one.hasNewline() || none.hasNewline() {
		t.Error("no special holds a line feed")
	}
	// A special with a line feed: a text is not cut after line feeds, and
	// the tiktoken encodings have none.
	e := MustGet(CL100K)
	sp := newSpecials(map[string]uint32{"<x\ny>": 200000})
	nl := &Encoder{name: "test", vocab: e.vocab, split: e.split, specials: sp, control: sp, cache: newCountCache(16)}
	text := strings.Repeat("words here <x\ny> and\nmore words\n", 1<<16)
	if !nl.specials.hasNewline() || nl.CountParallel(text, 4) != nl.CountUncached(text) || !nl.HasSpecials() {
		t.Error("a special with a line feed")
	}
	if e.HasSpecials() {
		t.Error("cl100k_base has no specials")
	}
	if s, ok := e.Special("<|endoftext|>"); ok || s != "" {
		t.Errorf("cl100k_base counts <|endoftext|> as text, found %q", s)
	}
	if s, ok := nl.Special("a <x\ny> b"); !ok || s != "<x\ny>" {
		t.Errorf("Special: %q, %v", s, ok)
	}
}
