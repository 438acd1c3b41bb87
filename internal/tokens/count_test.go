package tokens

// Tests that fail when a count is wrong in one of the ways a reviewer would
// try (issue 21, docs/mutation.md).

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// The count cache is keyed by the whole text: texts that share a long
// prefix, or differ in one byte anywhere, get their own counts, also after
// the first was cached.
func TestCountCacheKeysTheWholeText(t *testing.T) {
	for _, name := range []string{CL100K, O200K} {
		e := MustGet(name)
		base := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40) // 1,800 bytes
		texts := []string{
			base,
			base + " and then some more words at the end",
			base[:256] + "!",
			base[:255] + "数据",
			base[:1024] + " 😀 emoji",
			"x" + base,
			strings.Replace(base, "lazy", "LAZY", 1),
			strings.Replace(base, "dog.", "dog!", 40),
		}
		for round := 0; round < 2; round++ {
			for _, s := range texts {
				if got, want := e.Count(s), e.CountUncached(s); got != want {
					t.Errorf("%s round %d: Count of %d bytes ending %q = %d, want %d", name, round, len(s), s[len(s)-12:], got, want)
				}
			}
		}
	}
}

// A count cache holds about its Max entries, never many more (each shard
// keeps its share, Max/cacheShards+1), and keeps what it was just given
// even when Max is smaller than the number of shards.
func TestCountCacheHoldsItsMax(t *testing.T) {
	e := *MustGet(O200K) // an encoder of its own, with its own cache
	for _, max := range []int{1, 15, 64} {
		e.cache = newCountCache(max)
		for i := 0; i < 300; i++ {
			text := fmt.Sprintf("cache size probe %d of %d", i, max)
			want := e.CountUncached(text)
			before := e.CacheStats()
			if got := e.Count(text); got != want {
				t.Fatalf("max %d: Count %d, want %d", max, got, want)
			}
			if got := e.Count(text); got != want {
				t.Fatalf("max %d: cached Count %d, want %d", max, got, want)
			}
			if after := e.CacheStats(); after.Hits != before.Hits+1 {
				t.Fatalf("max %d, text %d: counted twice in a row, %d cache hits; want 1", max, i, after.Hits-before.Hits)
			}
		}
		if st := e.CacheStats(); st.Entries > st.Max+cacheShards {
			t.Errorf("max %d: the cache holds %d entries after 300 texts", max, st.Entries)
		}
	}
}

// freshVocab is a copy of the o200k_base vocabulary with empty character
// tables and chunk cache, so that what a merge learns and caches can be
// seen (the shared ones are filled by other tests).
func freshVocab() *vocab {
	v := *MustGet(O200K).vocab
	v.chars = newCharTables(len(v.offs) - 1)
	v.giantChunks = new(chunkCache)
	return &v
}

// The fast paths give the same tokens as the heap merge, so a piece sent
// down another path is still counted right, only with more work or
// memory; tests do not time it, so this one checks the paths by what they
// leave in their caches: CJK pieces, also after one leading character, take the
// character merge, which learns their characters' tokens, and giant
// pieces are merged in chunks, which go to the chunk cache.
func TestFastPathsAreTaken(t *testing.T) {
	v := freshVocab()
	for _, s := range []string{
		"统计分析数据变量均值标准差",   // starts with a three-byte character
		"a置信区间检验用户研究结果方法", // after one leading character
	} {
		got := v.pureFast(nil, s)
		if want := v.mergeLong(nil, s); !slices.Equal(got, want) {
			t.Fatalf("%q: %v, heap merge %v", s, got, want)
		}
		r, _ := utf8.DecodeRuneInString(strings.TrimPrefix(s, "a"))
		if v.chars.char3[r].Load() == 0 {
			t.Errorf("%q: not merged from its characters' tokens (%q not learnt)", s, r)
		}
	}
	giant := strings.Repeat("abcdefghij", giantPiece/10+100)
	got := v.appendPiece(nil, giant)
	if want := v.mergeLong(nil, giant); !slices.Equal(got, want) {
		t.Fatalf("giant piece: %d tokens, heap merge %d", len(got), len(want))
	}
	chunked := false
	for i := range v.giantChunks {
		chunked = chunked || v.giantChunks[i].Load() != nil
	}
	if !chunked {
		t.Errorf("a piece of %d bytes was not merged in chunks", len(giant))
	}
}

// The checks of the character merge answer right from empty tables and
// from their caches: the character of one token is that token, and the
// tokens of a pure merge are reachable and adjacent ones compatible (the
// theorem of giant.go). Wrong "no" answers would only send every piece to
// the slower repair, with the same tokens; wrong "yes" answers would give
// wrong tokens.
func TestCharChecks(t *testing.T) {
	v := freshVocab()
	for pass := 0; pass < 2; pass++ { // empty tables, then cached answers
		for _, c := range []string{"中", "文", "的"} {
			id, ok := v.lookup(c)
			if !ok {
				t.Fatalf("%q is not a token of o200k_base", c)
			}
			r, _ := utf8.DecodeRuneInString(c)
			if got := v.charToken(r, c); got != id {
				t.Errorf("pass %d: charToken(%q) = %d, want %d", pass, c, got, id)
			}
		}
		for _, s := range []string{"统计分析数据变量均值标准差置信区间", "Hello, world! 中文 text", "!!!???...,,,"} {
			toks := v.mergeLong(nil, s)
			for i, tok := range toks {
				if !v.reachable(uint32(tok)) {
					t.Errorf("pass %d, %q: token %d (%q) of its merge not reachable", pass, s, i, v.token(uint32(tok)))
				}
				if i == 0 {
					continue
				}
				a, b := uint32(toks[i-1]), uint32(tok)
				if !v.pairCompatible(a, b) || !v.unmergedCompatible(a, b) {
					t.Errorf("pass %d, %q: adjacent tokens %q %q of its merge not compatible", pass, s, v.token(a), v.token(b))
				}
			}
		}
		// A pair that merges is not compatible.
		if a, b := v.byteToken['a'], v.byteToken['b']; v.pairCompatible(a, b) {
			t.Errorf("pass %d: pairCompatible(a, b) for a pair that merges", pass)
		}
	}
}

// CountUpTo stops soon after the count passes limit (a budget check on a
// long text costs about limit tokens of work), also at a limit of 0: n is
// then the count up to the first piece past the limit, not the whole text.
func TestCountUpToStopsPastTheLimit(t *testing.T) {
	text := strings.Repeat("one two three four five six seven eight nine ten ", 1000)
	for _, name := range []string{CL100K, O200K} {
		e := MustGet(name)
		for _, limit := range []int{-1, 0, 1, 5, 100} {
			n, over := e.CountUpTo(text, limit)
			if !over || n < max(limit, 0)+1 || n > max(limit, 0)+1 {
				t.Errorf("%s: CountUpTo(10,000 words, %d) = %d, %v; want one past the limit (each word is one token), over", name, limit, n, over)
			}
		}
	}
}

// A giant piece (giantPiece bytes or more) under a limit is first judged by
// its lower bound, ceil(bytes / longest token): over only when the bound
// passes the limit, and counted when it reaches it. 4,096 spaces are
// exactly 32 tokens of 128 spaces, the longest token of both encodings, so
// the bound is the count; 4,096 letters have more tokens than their bound.
func TestCountUpToGiantPieceBound(t *testing.T) {
	for _, name := range []string{CL100K, O200K} {
		e := MustGet(name)
		for _, text := range []string{strings.Repeat(" ", giantPiece), strings.Repeat("x", giantPiece), "a " + strings.Repeat(" ", giantPiece)} {
			count := e.Count(text)
			bound := (len(text) + e.vocab.maxLen - 1) / e.vocab.maxLen
			for _, limit := range []int{bound - 1, bound, bound + 1, count - 1, count, count + 1} {
				n, over := e.CountUpTo(text, limit)
				if over != (count > limit) || !over && n != count || over && n <= limit {
					t.Errorf("%s: CountUpTo(%d bytes of %q, %d) = %d, %v; the count is %d", name, len(text), text[:2], limit, n, over, count)
				}
			}
		}
	}
}

// Every token's text looks up to that token: the longest token of each
// first byte included, and long tokens that share a home slot in the
// table of pieces (the probe goes the way the insertion went).
func TestLookupFindsEveryToken(t *testing.T) {
	for _, name := range []string{CL100K, O200K} {
		v := MustGet(name).vocab
		n := len(v.offs) - 1
		for id := 0; id < n; id++ {
			if got, ok := v.lookup(v.token(uint32(id))); !ok || got != uint32(id) {
				t.Fatalf("%s: lookup(token %d, %q) = %d, %v", name, id, v.token(uint32(id)), got, ok)
			}
		}
	}
}
