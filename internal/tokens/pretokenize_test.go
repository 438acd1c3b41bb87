package tokens

import (
	"slices"
	"testing"
)

func pieces(split splitFunc, s string) []string {
	var out []string
	for i := 0; i < len(s); {
		end := split(s, i)
		out = append(out, s[i:end])
		i = end
	}
	return out
}

// TestPreTokenizers pins the pattern corners that the reference corpus
// exercises in bulk, one readable case each.
func TestPreTokenizers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		split splitFunc
		in    string
		want  []string
	}{
		{"cl100k contraction", splitCL100K, "don't", []string{"don", "'t"}},
		{"cl100k contraction case-folds", splitCL100K, "I'LL we'Re", []string{"I", "'LL", " we", "'Re"}},
		{"cl100k long s folds to s", splitCL100K, "it'ſ", []string{"it", "'ſ"}},
		{"cl100k typographic apostrophe is punctuation", splitCL100K, "it’s", []string{"it", "’s"}},
		{"cl100k space leads a word", splitCL100K, "a  b", []string{"a", " ", " b"}},
		{"cl100k tab leads a word", splitCL100K, "\tb", []string{"\tb"}},
		{"cl100k digits in threes", splitCL100K, "1234567", []string{"123", "456", "7"}},
		{"cl100k space before digits stays alone", splitCL100K, "x 12", []string{"x", " ", "12"}},
		{"cl100k punctuation takes line breaks", splitCL100K, "x.\n\ny", []string{"x", ".\n\n", "y"}},
		{"cl100k white space up to the last line break", splitCL100K, "x \n \n  y", []string{"x", " \n \n", " ", " y"}},
		{"cl100k trailing white space is one piece", splitCL100K, "x   ", []string{"x", "   "}},
		{"cl100k mark is not a letter", splitCL100K, "\u0301ab", []string{"\u0301ab"}},
		{"o200k contraction joins the word", splitO200K, "don't", []string{"don't"}},
		{"o200k upper run then lower", splitO200K, "HTMLParser", []string{"HTMLParser"}},
		{"o200k lower then upper splits", splitO200K, "camelCase", []string{"camel", "Case"}},
		{"o200k all caps with contraction", splitO200K, "HELLO'S", []string{"HELLO'S"}},
		{"o200k modifier letter ends the upper run", splitO200K, "ABʰC", []string{"ABʰ", "C"}},
		{"o200k slash after punctuation", splitO200K, "a+/b", []string{"a", "+/", "b"}},
		{"o200k CJK run is one piece", splitO200K, "统计分析。", []string{"统计分析", "。"}},
	} {
		if got := pieces(tc.split, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q splits into %q, want %q", tc.name, tc.in, got, tc.want)
		}
	}
}

// StartsPiece's promise, checked on texts built to straddle the boundary.
func TestStartsPieceSplitsCounts(t *testing.T) {
	heads := []string{"a\n", "a \n", ".\n", "x.\n", "  \n", "\r\n", "你好\n", "1\n", "'s\n", "/\n", "a\n\n", "\t\n"}
	tails := []string{"a", "A", "abc def", "1", "123456", "你好", "ç", "ǅx", "Ünicode", "x\n y", "7/8", "é's"}
	for _, name := range []string{CL100K, O200K} {
		e := MustGet(name)
		for _, h := range heads {
			for _, s := range tails {
				if !StartsPiece(s) {
					t.Fatalf("%q should start a piece", s)
				}
				a := "prefix " + h
				if got, want := e.CountUncached(a+s), e.CountUncached(a)+e.CountUncached(s); got != want {
					t.Errorf("%s: %q + %q: %d tokens, parts %d", name, a, s, got, want)
				}
			}
		}
	}
	for _, s := range []string{"", " a", "\na", "/a", ".a", "'s", "\u0301a"} {
		if StartsPiece(s) {
			t.Errorf("%q does not always start a piece", s)
		}
	}
}

// EndsPiece's promise, on texts built to straddle the boundary.
func TestEndsPieceSplitsCounts(t *testing.T) {
	heads := []string{"a", "A", "abc def", "1", "123456", "你好", "ç", "x\n y", "7/8", "don't", "it's", "Ünicode", "e\u0301e"}
	tails := []string{"\n", "\n\n", "\n a", "\n\n## H\nx", "\n/", "\n'", "\n's", "\n ", "\r\n"}
	for _, name := range []string{CL100K, O200K} {
		e := MustGet(name)
		for _, h := range heads {
			if !EndsPiece(h) {
				t.Fatalf("%q should end a piece", h)
			}
			for _, s := range tails {
				a := "prefix " + h
				if got, want := e.CountUncached(a+s), e.CountUncached(a)+e.CountUncached(s); got != want {
					t.Errorf("%s: %q + %q: %d tokens, parts %d", name, a, s, got, want)
				}
			}
		}
	}
	for _, s := range []string{"", "a ", "a.", "a\n", "e\u0301", "a'"} {
		if EndsPiece(s) {
			t.Errorf("%q does not always end a piece", s)
		}
	}
}
