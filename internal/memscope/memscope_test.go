package memscope

import (
	"strings"
	"testing"
)

func TestProblem(t *testing.T) {
	for _, ok := range []string{"", "user:ana@example.com", "A-z_0.9", strings.Repeat("a", MaxBytes)} {
		if p := Problem(ok); p != "" {
			t.Errorf("%q: %s", ok, p)
		}
	}
	for bad, want := range map[string]string{
		strings.Repeat("a", MaxBytes+1): "254 bytes, at most 253",
		"user/ana":                      "byte 5 is not a letter",
		"ana smith":                     "byte 4 is not a letter",
		"é":                             "byte 1 is not a letter",
	} {
		if p := Problem(bad); !strings.Contains(p, want) {
			t.Errorf("%q: %q, want %q", bad, p, want)
		}
	}
}
