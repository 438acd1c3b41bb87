package assembler

import (
	"strings"
	"testing"
)

// A memory section's bounds, each value at its edge: the edge is
// accepted, one past it refused naming the field.
func TestMemorySectionBounds(t *testing.T) {
	const field = "memory: {bankRef: {name: support}, query: {fromRuntime: question}, reserveTokens: 300, minScore: 250}"
	name63 := "b" + strings.Repeat("x", 62)
	for _, tc := range []struct {
		memory, refused string
	}{
		{"memory: {bankRef: {name: " + name63 + "}, query: {fromRuntime: question}, reserveTokens: 300}", ""},
		{"memory: {bankRef: {name: " + name63 + "x}, query: {fromRuntime: question}, reserveTokens: 300}", ".bankRef.name"},
		{"memory: {bankRef: {name: support}, query: {fromRuntime: question}, reserveTokens: 1}", ""},
		{"memory: {bankRef: {name: support}, query: {fromRuntime: question}, reserveTokens: 0}", ".reserveTokens"},
		{"memory: {bankRef: {name: support}, query: {fromRuntime: question}, reserveTokens: 300, maxItems: 1000}", ""},
		{"memory: {bankRef: {name: support}, query: {fromRuntime: question}, reserveTokens: 300, maxItems: 1001}", ".maxItems"},
		{"memory: {bankRef: {name: support}, query: {fromRuntime: question}, reserveTokens: 300, minScore: 0}", ""},
		{"memory: {bankRef: {name: support}, query: {fromRuntime: question}, reserveTokens: 300, minScore: -1}", ".minScore"},
		{"memory: {bankRef: {name: support}, query: {fromRuntime: question}, reserveTokens: 300, minScore: 1000}", ""},
		{"memory: {bankRef: {name: support}, query: {fromRuntime: question}, reserveTokens: 300, minScore: 1001}", ".minScore"},
	} {
		err := Validate(spec(t, strings.Replace(withMemory, field, tc.memory, 1)))
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.memory, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), "sections[2].memory"+tc.refused)):
			t.Errorf("%s: error %v, want one naming %s", tc.memory, err, tc.refused)
		}
	}
}
