package tokens

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/promptops/promptops/internal/tokens/corpus"
)

// giantCases returns long random pieces of the kinds that pre-tokenize into
// one piece or are adversarial to a chunked merge: runs of one character,
// periodic patterns, random CJK, punctuation and emoji runs, spaces, and
// those with other text at the edges.
func giantCases(r *rand.Rand, n int) []string {
	alphabets := [][]string{
		{"a"}, {"!"}, {" "}, {"7"}, {"中"}, {"😀"}, {"\n"}, {"="}, {"-"}, {"\t"},
		{"a", "b"}, {"a", "aa", "ab"}, {"中", "文", "的"}, {"!", "?", ".", "*", "#"},
		{"😀", "🇺", "🇸", "\u200d"}, {"e", "\u0301"}, {"ab", "ba", "abc"},
		strings.Split("统计分析数据变量均值标准差置信区间检验用户研究结果方法模型样本分布缺失", ""),
		strings.Split("的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生", ""),
		strings.Split("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", ""),
		strings.Split("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", ""),
		{"\xf0", "\x9f", "\x98", "\x80", "\xe4", "\xb8"}, // bytes, not characters
	}
	edges := []string{"", " ", "x", "Hello, world ", "中文", "!?", "😀", " 7", "\xff"}
	var out []string
	for len(out) < n {
		al := alphabets[r.IntN(len(alphabets))]
		size := 1 + r.IntN(40_000)
		if r.IntN(8) == 0 {
			size = 40_000 + r.IntN(300_000)
		}
		var b strings.Builder
		switch r.IntN(4) {
		case 0: // one character repeated
			c := al[r.IntN(len(al))]
			for b.Len() < size {
				b.WriteString(c)
			}
		case 1: // a random period repeated
			period := make([]string, 1+r.IntN(12))
			for i := range period {
				period[i] = al[r.IntN(len(al))]
			}
			p := strings.Join(period, "")
			for b.Len() < size {
				b.WriteString(p)
			}
		case 2: // random
			for b.Len() < size {
				b.WriteString(al[r.IntN(len(al))])
			}
		default: // runs of random lengths
			for b.Len() < size {
				c := al[r.IntN(len(al))]
				for k := r.IntN(300); k >= 0; k-- {
					b.WriteString(c)
				}
			}
		}
		s := edges[r.IntN(len(edges))] + b.String() + edges[r.IntN(len(edges))]
		out = append(out, s)
	}
	return out
}

// TestGiantMergeDifferential compares the chunked merge of long pieces with
// the heap merge, with the chunk lengths of production and tiny ones that
// put a junction every few tokens.
// withSupplied is names and the supplied encodings whose vocabularies are
// there (all of them where make test requires them): the chunked and
// character merges must be exact for a merges-only vocabulary too.
func withSupplied(t testing.TB, names ...string) []string {
	for _, name := range []string{Llama3, Qwen3, DeepSeekV3, Tekken} {
		if _, err := Get(name); err == nil {
			names = append(names, name)
		} else if os.Getenv("PROMPTOPS_TOKENIZERS_REQUIRED") != "" {
			t.Fatal(err)
		}
	}
	return names
}

func TestGiantMergeDifferential(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 40
	}
	for _, name := range withSupplied(t, CL100K, O200K) {
		v := MustGet(name).vocab
		if v.maxLen >= giantPiece {
			t.Fatalf("%s: a token of %d bytes: giant pieces could be tokens", name, v.maxLen)
		}
		r := rand.New(rand.NewPCG(16, uint64(len(name))))
		cases := giantCases(r, n)
		pieces, bytes, lost, repairs := 0, 0, 0, 0
		for i, s := range cases {
			if len(s) < 2 {
				continue
			}
			want := v.mergeLong(nil, s)
			for _, chunk := range []int{giantChunk, 7 + r.IntN(200)} {
				g := giantMerge{v: v, chunk: chunk, chunks: map[string][]int{}, compat: map[[2]int32]bool{}}
				got := g.run(nil, s)
				repairs += g.repairs
				if g.lost {
					lost++
				}
				// Counting keeps only the last tokens; with few kept, some
				// repairs reach past them and fall back to the heap merge.
				gc := giantMerge{v: v, chunk: chunk, chunks: map[string][]int{}, compat: map[[2]int32]bool{}, keep: 1 + r.IntN(64)}
				n := len(gc.merge(nil, s)) + gc.dropped
				if gc.lost {
					n = len(want)
					lost++
				}
				if n != len(want) {
					t.Fatalf("%s case %d (%d bytes, starts %q), chunk %d, keep %d: counts %d, want %d",
						name, i, len(s), s[:min(len(s), 40)], chunk, gc.keep, n, len(want))
				}
				if !slices.Equal(got, want) {
					at := 0
					for at < min(len(got), len(want)) && got[at] == want[at] {
						at++
					}
					t.Fatalf("%s case %d (%d bytes, starts %q), chunk %d: differs at token %d of %d/%d",
						name, i, len(s), s[:min(len(s), 40)], chunk, at, len(got), len(want))
				}
			}
			pieces++
			bytes += len(s)
		}
		t.Logf("%s: %d pieces, %d bytes, each merged and counted with two chunk lengths: %d junctions repaired, %d merges and counts fell back", name, pieces, bytes, repairs, lost)
	}
}

// TestGiantPieces checks the six 1 MiB one-character values through the
// public API: Encode against the heap merge of its pieces, Count,
// CountUpTo and Truncate.
func TestGiantPieces(t *testing.T) {
	if testing.Short() {
		t.Skip("1 MiB values")
	}
	for _, name := range withSupplied(t, CL100K, O200K) {
		e := MustGet(name)
		for _, c := range []string{"a", "!", " ", "7", "中", "😀"} {
			s := "x" + strings.Repeat(c, 1<<20/len(c)) + " end"
			ids := e.Encode(s)
			var want []int
			for i := 0; i < len(s); {
				end := e.split(s, i)
				want = e.vocab.mergeLongOrLookup(want, s[i:end])
				i = end
			}
			for i := range want {
				want[i] += e.idBase // ranks, Encode's ids
			}
			if !slices.Equal(ids, want) {
				t.Fatalf("%s %q: chunked merge differs from the heap merge", name, c)
			}
			if n := e.CountUncached(s); n != len(ids) {
				t.Fatalf("%s %q: count %d, encode %d", name, c, n, len(ids))
			}
			if n, over := e.CountUpTo(s, 1000); !over || n <= 1000 {
				t.Fatalf("%s %q: CountUpTo(1000) = %d, %v", name, c, n, over)
			}
			if n, over := e.CountUpTo(s, len(ids)); over || n != len(ids) {
				t.Fatalf("%s %q: CountUpTo(%d) = %d, %v", name, c, len(ids), n, over)
			}
			for _, max := range []int{1, 1000, len(ids) / 2} {
				got, n := e.Truncate(s, max)
				if n > max || n != e.CountUncached(got) || !strings.HasPrefix(s, got) {
					t.Fatalf("%s %q: Truncate(%d) = %d bytes, %d tokens", name, c, max, len(got), n)
				}
			}
			t.Log(fmt.Sprintf("%s %q: %d tokens", name, c, len(ids)))
		}
	}
}

// mergeLongOrLookup is appendPiece with the heap merge for long pieces.
func (v *vocab) mergeLongOrLookup(dst []int, piece string) []int {
	if id, ok := v.lookup(piece); ok {
		return append(dst, int(id))
	}
	return v.pure(dst, piece)
}

// BenchmarkGiantPiece counts, encodes, truncates to 1000 tokens and
// budget-checks against 1000 tokens 4 MiB values of one character
// repeated, beside 4 MiB of ordinary mixed text. Every iteration works on
// new content (a different first line), so the count cache never answers:
//
//	go test -run '^$' -bench GiantPiece -benchmem ./internal/tokens/
func BenchmarkGiantPiece(b *testing.B) {
	const size = 4 << 20
	cases := []struct{ name, text string }{{"ordinary", corpus.Generate(size)}}
	for _, c := range []string{"a", "!", " ", "7", "中", "😀"} {
		cases = append(cases, struct{ name, text string }{fmt.Sprintf("%q", c), strings.Repeat(c, size/len(c))})
	}
	ops := []struct {
		name string
		do   func(e *Encoder, s string)
	}{
		{"Count", func(e *Encoder, s string) { _ = e.Count(s) }},
		{"Encode", func(e *Encoder, s string) { _ = e.Encode(s) }},
		{"Truncate1k", func(e *Encoder, s string) { _, _ = e.Truncate(s, 1000) }},
		{"CountUpTo1k", func(e *Encoder, s string) { _, _ = e.CountUpTo(s, 1000) }},
	}
	for _, name := range withSupplied(b, CL100K, O200K) {
		e := MustGet(name)
		for _, op := range ops {
			for _, c := range cases {
				b.Run(name+"/"+op.name+"/"+c.name, func(b *testing.B) {
					b.SetBytes(int64(len(c.text)))
					for i := 0; i < b.N; i++ {
						op.do(e, strconv.Itoa(i)+"\n"+c.text)
					}
				})
			}
		}
	}
}

// TestCharMergeDifferential compares mergeChars, which starts from the
// tokens of three-byte characters and checks its guess, with the heap merge
// from bytes, on random pieces of CJK and other three-byte characters.
func TestCharMergeDifferential(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	common := []rune("统计分析数据变量均值标准差置信区间检验用户研究结果方法模型样本分布缺失的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生。，、「」한국어日本語のカタカナ")
	for _, name := range withSupplied(t, CL100K, O200K) {
		v := MustGet(name).vocab
		// Fresh guesses: no character learnt to start from its bytes yet,
		// so that the repairs run (tests do not run in parallel here).
		v.chars = newCharTables(len(v.offs) - 1)
		r := rand.New(rand.NewPCG(17, uint64(len(name))))
		before := charRepairs.Load()
		bytes := 0
		for c := 0; c < n; c++ {
			// The first half with no learning of characters to split, so
			// that guesses fail and are repaired often.
			learnSplits = c >= n/2
			var b strings.Builder
			size := 13 + r.IntN(300)
			if r.IntN(20) == 0 {
				size = 300 + r.IntN(4000)
			}
			if r.IntN(2) == 0 {
				b.WriteString([]string{" ", "!", "a", "\xe4", "😀"}[r.IntN(5)])
			}
			for b.Len() < size {
				switch k := r.IntN(20); {
				case k < 14:
					b.WriteRune(common[r.IntN(len(common))])
				case k < 18: // any three-byte character
					x := rune(0x800 + r.IntN(0x10000-0x800))
					if x >= 0xd800 && x <= 0xdfff {
						x = 0x4e00
					}
					b.WriteRune(x)
				case k < 19:
					b.WriteString([]string{"a", " ", "😀", "7", "é"}[r.IntN(5)])
				default: // a stray byte
					b.WriteByte(byte(0x80 + r.IntN(0x80)))
				}
			}
			s := b.String()
			want := v.mergeLong(nil, s)
			if got := v.mergeChars(nil, s); !slices.Equal(got, want) {
				t.Fatalf("%s %q: mergeChars %v, mergeLong %v", name, s, got, want)
			}
			bytes += len(s)
		}
		learnSplits = true
		t.Logf("%s: %d pieces, %d bytes; %d guesses repaired", name, n, bytes, charRepairs.Load()-before)
	}
}

// TestGiantAndCharsParallel counts giant pieces and CJK text from several
// goroutines at once, which share the chunk cache and the character
// tables (run it with -race).
func TestGiantAndCharsParallel(t *testing.T) {
	r := rand.New(rand.NewPCG(18, 1))
	texts := giantCases(r, 6)
	for i := range texts {
		texts[i] = texts[i][:min(len(texts[i]), 20_000)]
	}
	texts = append(texts, strings.Repeat("中", 3000), strings.Repeat("置信区间统计", 300), strings.Repeat("!", 9000))
	for _, name := range withSupplied(t, CL100K, O200K) {
		e := MustGet(name)
		want := make([]int, len(texts))
		for i, s := range texts {
			for j := 0; j < len(s); {
				end := e.split(s, j)
				want[i] += len(e.vocab.mergeLongOrLookup(nil, s[j:end]))
				j = end
			}
		}
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range texts {
					i := (k + g) % len(texts)
					if n := e.CountUncached(texts[i]); n != want[i] {
						t.Errorf("%s text %d: count %d, want %d", name, i, n, want[i])
					}
					if n := len(e.Encode(texts[i])); n != want[i] {
						t.Errorf("%s text %d: encode %d tokens, want %d", name, i, n, want[i])
					}
				}
			}()
		}
		wg.Wait()
	}
}
