package tokens

// Tests of the character classes and the character merge that fail when a
// comparison or an offset of classes.go or chars.go is off in one of the
// ways a reviewer would try (issue 21, docs/mutation.md).

import (
	"slices"
	"testing"
)

// cmReference is the tokens of s from the pre-tokenizer and the pure merge
// of each piece, without the character merge, the chunked giant merge or
// any cache.
func cmReference(e *Encoder, s string) []int {
	var out []int
	for i := 0; i < len(s); {
		end := e.split(s, i)
		if id, ok := e.vocab.lookup(s[i:end]); ok {
			out = append(out, int(id))
		} else {
			out = e.vocab.pure(out, s[i:end])
		}
		i = end
	}
	return out
}

// cmFreshChars empties the character caches of e so that what a test checks
// is not already decided by an earlier test (tests do not run in parallel).
func cmFreshChars(e *Encoder) {
	e.vocab.chars = newCharTables(len(e.vocab.offs) - 1)
}

// cmCheckEncode compares Encode and Count with the reference and checks that
// the tokens decode to s.
func cmCheckEncode(t *testing.T, name string, e *Encoder, s string) {
	t.Helper()
	got, want := e.Encode(s), cmReference(e, s)
	if !slices.Equal(got, want) {
		t.Errorf("%s: Encode(%q) = %v, want %v", name, s, got, want)
	}
	if d := e.Decode(got); d != s {
		t.Errorf("%s: Decode(Encode(%q)) = %q", name, s, d)
	}
	if n := e.CountUncached(s); n != len(want) {
		t.Errorf("%s: CountUncached(%q) = %d, want %d", name, s, n, len(want))
	}
}

// A byte sequence that only looks like a three-byte character is not one
// character: its bytes are invalid UTF-8, each a [^\s\p{L}\p{N}] of its own
// one byte wide, so the letters after it are not joined to it as to an
// optional leading character. classAt's fast three-byte decode must leave
// overlong forms, surrogates and sequences with a byte that is not a
// continuation byte to the utf8 package.
func TestClassAtInvalidThreeByteSequences(t *testing.T) {
	cases := []struct{ in, first string }{
		{"\xe4a\x80bc", "\xe4a"},               // second byte not a continuation: "\xe4" leads "a"
		{"\xe4\x80abc", "\xe4\x80"},            // third byte not a continuation
		{"\xe0\x81\x81bc", "\xe0\x81\x81"},     // overlong "A"
		{"\xed\xa0\x80abc", "\xed\xa0\x80"},    // U+D800, the first surrogate
		{"\xed\xbf\xbfabc", "\xed\xbf\xbf"},    // U+DFFF, the last surrogate
		{"\xed\x9f\xbfabc", "\xed\x9f\xbfabc"}, // U+D7FF, a letter before the surrogates
		{"\xee\x80\x80abc", "\xee\x80\x80abc"}, // U+E000, private use after them, leads
		{"\xe0\xa0\x80abc", "\xe0\xa0\x80abc"}, // U+0800, the first three-byte letter
	}
	for _, sp := range []struct {
		name  string
		split splitFunc
	}{{"cl100k", splitCL100K}, {"o200k", splitO200K}} {
		for _, c := range cases {
			got := pieces(sp.split, c.in)
			if got[0] != c.first || len(got) > 2 {
				t.Errorf("%s %q: pieces %q, want %q first", sp.name, c.in, got, c.first)
			}
		}
	}
}

// A piece of the character merge (over 12 bytes, a three-byte character
// first) that ends in the first two bytes of a three-byte character: the
// lead byte has no third byte to decode, and stays a byte token.
func TestCharMergeTruncatedCharacterAtTheEnd(t *testing.T) {
	for _, name := range []string{CL100K, O200K} {
		e := MustGet(name)
		for _, s := range []string{"。。。。。\xe4\xb8", "。。。。。\xe4", "「」「」「」\xe4\xb8\xad\xe4\xb8"} {
			cmCheckEncode(t, name, e, s)
		}
	}
}

// Only a lead byte 1110xxxx starts a three-byte character. The first three
// bytes of a four-byte emoji are one token ("\xf0\x9f\x98"), and a stray
// '@' (0x40) with the same two continuation bytes decodes, bits masked as
// for a lead byte, to the same code point: a merge that took any byte as a
// lead would learn the emoji's token for that code point and give it to the
// '@' too.
func TestCharMergeOnlyLeadBytesStartCharacters(t *testing.T) {
	for _, name := range []string{CL100K, O200K} {
		e := MustGet(name)
		cmFreshChars(e)
		for _, s := range []string{"。😀@\x9f\x98。。。", "。。。。@\x9f\x98。。。", "、😀😃\x80\x9f\x98、、、"} {
			cmCheckEncode(t, name, e, s)
		}
	}
}

// A repaired guess teaches the merge which characters a token boundary
// falls inside (置信 is "\xe7\xbd", "\xae信" in o200k_base), so the same
// text is not repaired twice: the second encoding starts those characters
// from their bytes and guesses right.
func TestCharMergeLearnsWhereTokensSplitCharacters(t *testing.T) {
	e := MustGet(O200K)
	cmFreshChars(e)
	s := "置信区间的置信水平"
	before := charRepairs.Load()
	cmCheckEncode(t, O200K, e, s)
	first := charRepairs.Load() - before
	if first == 0 {
		t.Fatalf("%q: no guess repaired on the first encoding; the test needs a text that is", s)
	}
	cmCheckEncode(t, O200K, e, s)
	if again := charRepairs.Load() - before - first; again != 0 {
		t.Errorf("%q: %d guesses repaired again on the second encoding", s, again)
	}
}

// A repair whose window reaches the end of a piece that ends in the first
// two bytes of a character: in cl100k_base † ("\xe2\x80\xa0") is a token
// and "\xa0\xed" merges first, so the guess †, "\xed\x81" is merged again as
// "\xe2\x80", "\xa0\xed", "\x81", whose last boundary falls inside the
// truncated "\xed\x81". Learning from it must not read past the piece.
func TestCharMergeRepairAtATruncatedEnd(t *testing.T) {
	e := MustGet(CL100K)
	for _, s := range []string{"。。。。†\xed\x81", "†††††\xed\x81"} {
		cmFreshChars(e)
		cmCheckEncode(t, CL100K, e, s)
	}
}

// The ASCII-letter shortcuts of the pre-tokenizers test (b|0x20)-'a' < 26
// in wrapping byte arithmetic, which holds for the 52 letters only; with the
// sign wrong it would hold for the continuation bytes 0x80-0x98 and
// 0xa0-0xb8. Those, like DEL, are [^\s\p{L}\p{N}] and run on with the
// punctuation after them instead of starting a letter run.
func TestPreTokenizerASCIILetterShortcuts(t *testing.T) {
	for _, c := range []struct {
		name  string
		split splitFunc
		in    string
		want  []string
	}{
		{"cl100k DEL", splitCL100K, "\x7f!!", []string{"\x7f!!"}},
		{"cl100k continuation byte", splitCL100K, "\x80!!x", []string{"\x80!!", "x"}},
		{"cl100k space, DEL", splitCL100K, " \x7f!!", []string{" \x7f!!"}},
		{"cl100k space, continuation byte", splitCL100K, " \xb8!!", []string{" \xb8!!"}},
		{"cl100k letters", splitCL100K, "Ab Cd", []string{"Ab", " Cd"}},
		{"o200k DEL", splitO200K, "\x7f!!", []string{"\x7f!!"}},
		{"o200k continuation byte", splitO200K, "\x80!!x", []string{"\x80!!", "x"}},
		{"o200k space, DEL", splitO200K, " \x7f!!", []string{" \x7f!!"}},
	} {
		if got := pieces(c.split, c.in); !slices.Equal(got, c.want) {
			t.Errorf("%s %q: pieces %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

// asciiWord, o200k_base's shortcut for ASCII words, must give way where the
// pattern's letter alternatives do not match as it would: a lower-case
// letter is not an optional leading character of the word after it, a line
// break is never one, and '[' (just after 'Z') is no upper-case letter.
func TestPreTokenizerASCIIWordShortcut(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"aBc", []string{"a", "Bc"}},
		{"\rabc", []string{"\r", "abc"}},
		{"\nabc", []string{"\n", "abc"}},
		{"A[b", []string{"A", "[b"}},
		{"Z[b", []string{"Z", "[b"}},
	} {
		if got := pieces(splitO200K, c.in); !slices.Equal(got, c.want) {
			t.Errorf("o200k %q: pieces %q, want %q", c.in, got, c.want)
		}
	}
}

// \p{N}{1,3} takes ASCII digits only up to '9': ':' (just after it) is
// punctuation and starts the next piece.
func TestPreTokenizerDigitsStopBeforeColon(t *testing.T) {
	for _, sp := range []struct {
		name  string
		split splitFunc
	}{{"cl100k", splitCL100K}, {"o200k", splitO200K}} {
		for _, c := range []struct {
			in   string
			want []string
		}{
			{"1:2", []string{"1", ":", "2"}},
			{"12:30", []string{"12", ":", "30"}},
		} {
			if got := pieces(sp.split, c.in); !slices.Equal(got, c.want) {
				t.Errorf("%s %q: pieces %q, want %q", sp.name, c.in, got, c.want)
			}
		}
	}
}
