package tokens

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestSentencePieceCuts checks that where Gemma's text is cut (before a
// "▁" no token joins, and giant pieces in chunks) no token changes: the
// tokens are those of the whole text merged as one piece by the plain heap,
// the reference's own rule (TestSuppliedReference compares that with
// Hugging Face's ids).
func TestSentencePieceCuts(t *testing.T) {
	e := suppliedEncoder(t, Gemma3)
	m := e.sp
	texts := []string{
		strings.Repeat("a", 20000),
		strings.Repeat(" ", 20000),
		strings.Repeat("\u2581", 9000),
		strings.Repeat(" \u2581", 5000),
		strings.Repeat("中", 9000),
		strings.Repeat("ab ", 7000),
		strings.Repeat("> </", 5000) + "x",
		strings.Repeat("<td>a</td> ", 2000),
		strings.Repeat("\U0001FAE8", 3000),     // no token: byte fallback
		strings.Repeat("\xff\xfea", 5000),      // not UTF-8
		strings.Repeat("e\u0301", 6000),        // combining marks, not composed
		strings.Repeat("the quick brown", 999), // words without spaces between repeats
		strings.Repeat("=", 17000) + " " + strings.Repeat("-", 9001),
	}
	rows := loadReference(t)
	var long strings.Builder
	for i, r := range rows {
		if i%9 == 0 {
			texts = append(texts, r.Text)
		}
		if i%97 == 0 && long.Len() < 1<<17 {
			long.WriteString(strings.ReplaceAll(r.Text, " ", ""))
		}
	}
	texts = append(texts, long.String())
	for _, text := range texts {
		if text == "" {
			continue
		}
		whole := m.appendPiece(nil, spNormalize(text))
		if got := m.encode(nil, text); !slices.Equal(got, whole) {
			t.Fatalf("%q: cut %d tokens %v, whole %d %v", abbrev(text), len(got), abbrevIDs(got), len(whole), abbrevIDs(whole))
		}
		if n, _ := m.count(text, -1); n != len(whole) {
			t.Fatalf("%q: count %d, whole %d", abbrev(text), n, len(whole))
		}
		if n, over := m.count(text, len(whole)/2); len(whole) > 1 && !over {
			t.Fatalf("%q: count up to %d = %d, not over", abbrev(text), len(whole)/2, n)
		}
		for _, max := range []int{1, len(whole) / 3, len(whole) - 1} {
			if max < 1 {
				continue
			}
			got, n := e.Truncate(text, max)
			if n > max || n != e.CountUncached(got) || !strings.HasPrefix(text, got) || (utf8.ValidString(text) && !utf8.ValidString(got)) {
				t.Fatalf("%q: Truncate(%d) = %q, %d (count %d)", abbrev(text), max, abbrev(got), n, e.CountUncached(got))
			}
			// The kept prefix is as long as fits: one more character is
			// over (or the cut fell inside a character without a token).
			if rest := text[len(got):]; rest != "" {
				_, size := utf8.DecodeRuneInString(rest)
				if c := e.CountUncached(text[:len(got)+size]); c <= max && n < max-1 {
					t.Fatalf("%q: Truncate(%d) keeps %d tokens, but one more character is %d", abbrev(text), max, n, c)
				}
			}
		}
	}
}

// TestSentencePieceSpecials checks Gemma's added tokens: every one is one
// token wherever it is, and only those its file marks special are control
// tokens that a runtime value must not hold.
func TestSentencePieceSpecials(t *testing.T) {
	e := suppliedEncoder(t, Gemma3)
	if !e.HasSpecials() {
		t.Fatal("gemma3 has no specials")
	}
	for _, s := range []string{"<start_of_turn>", "<end_of_turn>", "<eos>", "<bos>"} {
		if got, ok := e.Special("hi " + s + "\nthere"); !ok || got != s {
			t.Errorf("Special(%q) = %q, %v", s, got, ok)
		}
		if ids := e.Encode(s); len(ids) != 1 || e.Decode(ids) != s {
			t.Errorf("%q: %v decodes to %q", s, ids, e.Decode(ids))
		}
	}
	for _, s := range []string{"a\nb\n\n\nc", "<table><tr><td>1</td></tr></table>", "x\u2581\u2581\u2581y", "<unused3>", "<mask>"} {
		if got, ok := e.Special(s); ok {
			t.Errorf("Special(%q) = %q: plain text taken for a control token", s, got)
		}
	}
	// A run of line feeds is its added tokens, the longest first.
	if ids := e.Encode(strings.Repeat("\n", 40)); len(ids) != 2 || e.Decode(ids) != strings.Repeat("\n", 40) {
		t.Errorf("40 line feeds: %v", ids)
	}
	// A "▁" in the text decodes as a space, as Gemma's tokenizer has it.
	if got := e.Decode(e.Encode("a\u2581b c")); got != "a b c" {
		t.Errorf("decoded %q", got)
	}
}
