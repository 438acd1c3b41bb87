package tokens

import (
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// TestNFC: NFC as Unicode defines it, without the Stream-Safe joiner that
// x/text inserts after 30 non-starters; the same as x/text otherwise.
func TestNFC(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"e\u0301", "é"},
		{"e" + strings.Repeat("\u0301", 40), "é" + strings.Repeat("\u0301", 39)},
		// Reordered by combining class, stably, over the whole run; the
		// first of the lowest class composes with the starter.
		{"a" + strings.Repeat("\u0315\u0300", 31), "à" + strings.Repeat("\u0300", 30) + strings.Repeat("\u0315", 31)},
		// A run with no starter before it, then a starter that composes.
		{strings.Repeat("\u0301", 31) + "e\u0301", strings.Repeat("\u0301", 31) + "é"},
		// Hangul: L+V compose, the marks block T.
		{"\u1100\u1161" + strings.Repeat("\u0301", 35) + "\u11a8x", "\uac00" + strings.Repeat("\u0301", 35) + "\u11a8x"},
		// A joiner the text had stays.
		{"a\u034f" + strings.Repeat("\u0301", 32), "a\u034f" + strings.Repeat("\u0301", 32)},
	} {
		if got := nfc(c.in); got != c.want {
			t.Errorf("nfc(%+q) = %+q, want %+q", c.in, got, c.want)
		}
	}
	for _, s := range []string{"Ångström", "한국어", "e\u0301\u0327", "\u0344x", strings.Repeat("ä", 100)} {
		if got := nfc(s); got != norm.NFC.String(s) {
			t.Errorf("nfc(%+q) = %+q, x/text says %+q", s, got, norm.NFC.String(s))
		}
	}
}
