package plan

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// hostileSize is the size of a runtime value in BenchmarkAssembleHostile.
const hostileSize = 4 << 20

// hostileValues are 4 MiB runtime values built to be slow to tokenize (one
// long piece, or none that a line feed splits), and "text", ordinary mixed
// text of the same size, the anchor each hostile case is compared with.
func hostileValues() []struct{ name, v string } {
	rep := func(s string) string { return strings.Repeat(s, hostileSize/len(s)) }
	return []struct{ name, v string }{
		{"text", rep("Mean 45.2, sd 3.1 (n=200).\n  x = f(y) // 统计结果：显著。 😀\n")},
		{"punct", rep("!")},
		{"spaces", rep(" ")},
		{"letters", rep("a")},
		{"digits", rep("7")},
		{"cjk", rep("中")},
		{"emoji", rep("😀")},
	}
}

// BenchmarkAssembleHostile: 4 MiB runtime values, cut to the sample's
// budget, beside 4 MiB of ordinary text in the same run. Each hostile case
// should cost about what the text does: the value is counted once and cut
// as far as the budget reaches. cpu-ms/op is the process's CPU time per
// assembly.
func BenchmarkAssembleHostile(b *testing.B) {
	data, err := os.ReadFile("../internal/serve/testdata/ssa-pro.plan.json")
	if err != nil {
		b.Fatal(err)
	}
	p, err := Load(data)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range hostileValues() {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.v)))
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				// Fresh content each time: nothing from the count cache.
				b.StopTimer()
				v := freshen(c.v, i)
				b.StartTimer()
				start := cpuTime()
				if _, err := p.Assemble(context.Background(), "analyze", map[string]string{"tool_outputs": v}); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime() - start
			}
			// CPU time of the process (all threads) per assembly: what a
			// loaded machine's wall clock hides.
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}

// freshen returns s with a middle byte changed for iteration i, so no two
// iterations assemble the same value; the value's kind (one long piece) is
// kept unless s is a single repeated character, whose middle then carries
// one different character of the same class.
func freshen(s string, i int) string {
	b := []byte(s)
	m := len(b) / 2
	for m > 0 && b[m]&0xC0 == 0x80 {
		m--
	}
	switch c := b[m]; {
	case c == ' ':
		b[m] = "\t\v\f"[i%3] // other white space
	case c == '!':
		b[m] = "#$%&*+-=?@^~"[i%12]
	case c >= 'a' && c <= 'z':
		b[m] = byte('a' + (int(c-'a')+1+i%25)%26)
	case c >= '0' && c <= '9':
		b[m] = byte('0' + (int(c-'0')+1+i%9)%10)
	default:
		// A multi-byte character: change its last byte within the block
		// (中 U+4E2D -> U+4E20..U+4E3F, 😀 U+1F600 -> U+1F600..U+1F63F).
		n := m + 1
		for n < len(b) && b[n]&0xC0 == 0x80 {
			n++
		}
		b[n-1] = 0x80 | byte((int(b[n-1]&0x3F)+1+i%31)%64)
	}
	return string(b)
}
