package tokens

import (
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

// BenchmarkRawTiktokenEncode is the library alone, for comparison.
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
				e.cache = newLRU(DefaultCacheEntries)
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
