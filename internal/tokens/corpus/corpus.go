// Package corpus generates a deterministic mixed corpus (English, Chinese,
// code) for token-counting benchmarks, so that Go and Node measure the same
// bytes.
package corpus

import (
	"math/rand/v2"
	"strings"
)

var (
	english = strings.Fields("the model answers questions about statistics and data analysis with care, citing sources " +
		"when possible; users ask for methods, explanations, summaries and next steps in plain language today")
	chinese = []string{"统计", "分析", "数据", "变量", "均值", "标准差", "置信区间", "检验", "用户", "研究", "结果", "方法", "模型", "样本", "分布", "缺失值", "。", "，"}
	code    = []string{
		"func count(s string) int {\n\treturn len(s)\n}\n",
		"for i := 0; i < n; i++ {\n\tsum += xs[i]\n}\n",
		`{"id": "a1b2", "text": "Alice works at Acme", "proof_count": 3}` + "\n",
		"SELECT id, text FROM observations WHERE bank = $1 LIMIT 10;\n",
		"def mean(xs):\n    return sum(xs) / len(xs)\n",
	}
)

// Generate returns about size bytes of text, the same for the same size.
func Generate(size int) string {
	r := rand.New(rand.NewPCG(42, 7))
	var b strings.Builder
	b.Grow(size + 256)
	for b.Len() < size {
		switch r.IntN(3) {
		case 0:
			for i := 0; i < 12+r.IntN(30); i++ {
				b.WriteString(english[r.IntN(len(english))])
				b.WriteByte(' ')
			}
			b.WriteString(".\n")
		case 1:
			for i := 0; i < 10+r.IntN(40); i++ {
				b.WriteString(chinese[r.IntN(len(chinese))])
			}
			b.WriteString("\n")
		default:
			b.WriteString(code[r.IntN(len(code))])
		}
	}
	return b.String()
}

// Chunks splits text into pieces of about n bytes at line ends.
func Chunks(text string, n int) []string {
	var out []string
	for len(text) > 0 {
		end := min(n, len(text))
		if i := strings.IndexByte(text[end:], '\n'); i >= 0 {
			end += i + 1
		} else {
			end = len(text)
		}
		out = append(out, text[:end])
		text = text[end:]
	}
	return out
}
