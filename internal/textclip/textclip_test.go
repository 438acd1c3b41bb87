package textclip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestHead(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"", 3, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc..."},
		{"ab界", 3, "ab..."}, // the character cut in two is dropped
		{"abc", 0, "..."},
		{"abc", -1, "..."},
	} {
		if got := Head(tc.s, tc.n, "..."); got != tc.want {
			t.Errorf("Head(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestFit(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"abcdef", 6, "abcdef"},
		{"abcdefg", 6, "abc..."},
		{"ab界界", 6, "ab..."},
	} {
		if got := Fit(tc.s, tc.n, "..."); got != tc.want {
			t.Errorf("Fit(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
	long := strings.Repeat("界", 2000)
	if got := Fit(long, 1024, " [shortened]"); len(got) > 1024 || !utf8.ValidString(got) || !strings.HasSuffix(got, " [shortened]") {
		t.Errorf("Fit of 6,000 bytes to 1,024: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}
