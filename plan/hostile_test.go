package plan

import (
	"os"
	"strings"
	"testing"
)

// BenchmarkAssembleHostile: 256 KB runtime values built to be slow to
// tokenize (one long piece each), cut to the sample's budget. The cost is
// linear in the value; -benchtime shows by how much per kind.
func BenchmarkAssembleHostile(b *testing.B) {
	data, err := os.ReadFile("../internal/serve/testdata/ssa-pro.plan.json")
	if err != nil {
		b.Fatal(err)
	}
	p, err := Load(data)
	if err != nil {
		b.Fatal(err)
	}
	const n = 256 << 10
	for _, c := range []struct{ name, v string }{
		{"letters", strings.Repeat("a", n)},
		{"cjk", strings.Repeat("统", n/3)},
		{"spaces", strings.Repeat(" ", n)},
		{"punct", strings.Repeat("!", n)},
		{"emoji", strings.Repeat("😀", n/4)},
		{"text", strings.Repeat("ab 1\n", n/5)},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				// A new value each time: nothing from the count cache.
				v := string(rune('b'+i%20)) + c.v[1:]
				if _, err := p.Assemble("analyze", map[string]string{"tool_outputs": v}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
