package tokens

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/promptops/promptops/internal/tokens/corpus"
)

func init() {
	// tiktoken-go serves as a second reference in tests and benchmarks; its
	// default loader would download rank files.
	tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader())
}

var (
	corpusOnce   sync.Once
	corpusChunks []string
	corpusBytes  int64
)

// chunks is the ~1 MB benchmark corpus in ~4 KB pieces, the size of a
// prompt section.
func chunks() []string {
	corpusOnce.Do(func() {
		text := corpus.Generate(1 << 20)
		corpusChunks = corpus.Chunks(text, 4096)
		corpusBytes = int64(len(text))
	})
	return corpusChunks
}

// The figures side by side, in one run:
//
//	go test -run '^$' -bench 'RawTiktoken|EncodeUncached|CountCold|LongRun' -benchmem ./internal/tokens/
//
// and the npm reference on the same corpus:
//
//	go run ./hack/tokencorpus > /tmp/corpus.txt && node hack/tokenfixtures/bench.mjs /tmp/corpus.txt
//
// Whole process against whole process, loading included, on 10 MB:
//
//	go run ./hack/tokencorpus -size 10000000 > /tmp/corpus10.txt
//	go build -o /tmp/tokbench ./hack/tokbench
//	time /tmp/tokbench -encoding o200k_base /tmp/corpus10.txt
//	time node hack/tokenfixtures/count.mjs o200k_base /tmp/corpus10.txt

// BenchmarkRawTiktokenEncode is tiktoken-go alone, for comparison.
func BenchmarkRawTiktokenEncode(b *testing.B) {
	for _, name := range []string{CL100K, O200K} {
		b.Run(name, func(b *testing.B) {
			t, err := tiktoken.GetEncoding(name)
			if err != nil {
				b.Fatal(err)
			}
			cs := chunks()
			b.SetBytes(corpusBytes)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, c := range cs {
					_ = t.Encode(c, nil, nil)
				}
			}
		})
	}
}

// BenchmarkCountCold counts every chunk as new text: hash, encode, insert.
func BenchmarkCountCold(b *testing.B) {
	for _, name := range []string{CL100K, O200K} {
		b.Run(name, func(b *testing.B) {
			e := MustGet(name)
			cs := chunks()
			b.SetBytes(corpusBytes)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				e.cache = newCountCache(DefaultCacheEntries)
				b.StartTimer()
				for _, c := range cs {
					_ = e.Count(c)
				}
			}
		})
	}
}

// BenchmarkCountCached counts chunks seen before: hash and look up.
func BenchmarkCountCached(b *testing.B) {
	for _, name := range []string{CL100K, O200K} {
		b.Run(name, func(b *testing.B) {
			e := MustGet(name)
			cs := chunks()
			for _, c := range cs {
				_ = e.Count(c)
			}
			b.SetBytes(corpusBytes)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, c := range cs {
					_ = e.Count(c)
				}
			}
		})
	}
}

// BenchmarkEncodeUncached is the core alone on the same corpus: pre-tokenize
// and merge, no hashing and no cache, beside BenchmarkRawTiktokenEncode.
func BenchmarkEncodeUncached(b *testing.B) {
	for _, name := range []string{CL100K, O200K} {
		b.Run(name, func(b *testing.B) {
			e := MustGet(name)
			cs := chunks()
			b.SetBytes(corpusBytes)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, c := range cs {
					_ = e.CountUncached(c)
				}
			}
		})
	}
}

// BenchmarkLongRun counts one run of Chinese characters with no space or
// punctuation, a single piece: time per character should stay flat as the
// run grows ten- and a hundredfold, where a quadratic merge grows with it.
func BenchmarkLongRun(b *testing.B) {
	const chars = "统计分析数据变量均值标准差置信区间检验用户研究结果方法模型样本分布缺失"
	rs := []rune(chars)
	for _, n := range []int{5_000, 50_000, 500_000} {
		var sb strings.Builder
		for i := 0; i < n; i++ {
			sb.WriteRune(rs[(i*7+i/len(rs))%len(rs)])
		}
		text := sb.String()
		for _, name := range []string{CL100K, O200K} {
			b.Run(fmt.Sprintf("%s/%dk", name, n/1000), func(b *testing.B) {
				e := MustGet(name)
				b.SetBytes(int64(len(text)))
				for i := 0; i < b.N; i++ {
					_ = e.CountUncached(text)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/char")
			})
		}
	}
}
