package tokens

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/promptops/promptops/internal/tokens/corpus"
)

// BenchmarkScript splits the benchmark corpus by line into Chinese lines
// (any multi-byte character) and the rest, to see where time goes.
func BenchmarkScript(b *testing.B) {
	text := corpus.Generate(1 << 20)
	var zh, other strings.Builder
	for _, line := range strings.SplitAfter(text, "\n") {
		if utf8.RuneCountInString(line) != len(line) {
			zh.WriteString(line)
		} else {
			other.WriteString(line)
		}
	}
	for _, sub := range []struct{ name, text string }{{"zh", zh.String()}, {"other", other.String()}} {
		cs := corpus.Chunks(sub.text, 4096)
		for _, name := range []string{CL100K, O200K} {
			b.Run(sub.name+"/"+name, func(b *testing.B) {
				e := MustGet(name)
				b.SetBytes(int64(len(sub.text)))
				for i := 0; i < b.N; i++ {
					for _, c := range cs {
						_ = e.CountUncached(c)
					}
				}
			})
		}
	}
}
