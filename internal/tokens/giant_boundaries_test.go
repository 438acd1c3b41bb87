package tokens

// Tests of the giant merge's boundaries and of the count cache's figures
// that the mutation run of issue 21 found untested (docs/mutation.md).

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// freshChunkCache gives v an empty process-wide chunk cache for the test, so
// that what the test merges is not answered by earlier tests or by an
// earlier run of the same test (-count=2).
func freshChunkCache(t *testing.T, v *vocab) {
	old := v.giantChunks
	v.giantChunks = new(chunkCache)
	t.Cleanup(func() { v.giantChunks = old })
}

// Each cache hit is one hit in CacheStats: a budget dashboard reads the
// figures as counts, so a second and third Count of one text add exactly two
// hits and one miss.
func TestCacheStatsCountsEachHit(t *testing.T) {
	e := MustGet(O200K)
	text := fmt.Sprintf("cache stats probe %p", t)
	before := e.CacheStats()
	for i := 0; i < 3; i++ {
		e.Count(text)
	}
	after := e.CacheStats()
	if hits, misses := after.Hits-before.Hits, after.Misses-before.Misses; hits != 2 || misses != 1 {
		t.Fatalf("three counts of one text: %d hits and %d misses, want 2 and 1", hits, misses)
	}
}

// A count that keeps only the last keep tokens may append to a buffer that
// already holds tokens (merge appends to dst[:base]): those stay as they
// are, and the dropping counts only the piece's own tokens. The prefix is
// longer than 2*keep and the first chunk has fewer than keep tokens, so a
// drop computed from the whole buffer goes wrong at once.
func TestGiantCountKeepsBufferPrefix(t *testing.T) {
	for _, name := range []string{CL100K, O200K} {
		v := MustGet(name).vocab
		for _, c := range []string{"a", "!", " ", "中"} {
			s := strings.Repeat(c, 6000/len(c))
			want := v.mergeLong(nil, s)
			const keep, base = 16, 100
			prefix := make([]int, base)
			for i := range prefix {
				prefix[i] = -1 - i
			}
			g := giantMerge{v: v, chunk: 64, chunks: map[string][]int{}, compat: map[[2]int32]bool{}, keep: keep}
			got := g.merge(slices.Clone(prefix), s)
			if g.lost {
				t.Fatalf("%s %q: the merge gave up", name, c)
			}
			if !slices.Equal(got[:base], prefix) {
				t.Fatalf("%s %q: the buffer's first %d tokens changed", name, c, base)
			}
			kept := got[base:]
			if g.dropped+len(kept) != len(want) || len(kept) > 2*keep || !slices.Equal(kept, want[len(want)-len(kept):]) {
				t.Fatalf("%s %q: %d dropped and %d kept, want %d tokens with at most %d kept, the last ones",
					name, c, g.dropped, len(kept), len(want), 2*keep)
			}
		}
	}
}

// keep k holds up to 2k tokens before it drops any: a piece of exactly 2k
// tokens is counted with all its tokens in memory and none dropped.
func TestGiantCountDropsOnlyPastTwiceKeep(t *testing.T) {
	for _, name := range []string{CL100K, O200K} {
		v := MustGet(name).vocab
		tried := 0
		for _, c := range []string{"a", "!", " ", "7", "中", "😀", "ab", "!?"} {
			s := strings.Repeat(c, 3000/len(c))
			want := v.mergeLong(nil, s)
			if len(want)%2 != 0 {
				continue
			}
			tried++
			g := giantMerge{v: v, chunk: 64, chunks: map[string][]int{}, compat: map[[2]int32]bool{}, keep: len(want) / 2}
			got := g.merge(nil, s)
			if g.lost || g.dropped != 0 || !slices.Equal(got, want) {
				t.Fatalf("%s %q: %d tokens with keep %d: %d dropped, %d kept (lost %v), want none dropped",
					name, c, len(want), g.keep, g.dropped, len(got), g.lost)
			}
		}
		if tried == 0 {
			t.Fatalf("%s: no piece with an even number of tokens", name)
		}
	}
}

// A full chunk merged once is kept process-wide, so counting the same long
// value again (a budget check that cuts it at many places) does not merge
// its chunks again.
func TestGiantFullChunkCachedAcrossMerges(t *testing.T) {
	for _, name := range []string{CL100K, O200K} {
		v := MustGet(name).vocab
		freshChunkCache(t, v)
		s := strings.Repeat("q", 64) // exactly one chunk
		g := giantMerge{v: v, chunk: len(s), chunks: map[string][]int{}, compat: map[[2]int32]bool{}}
		want := g.merged(s)
		again := giantMerge{v: v, chunk: len(s), chunks: map[string][]int{}, compat: map[[2]int32]bool{}}
		if got := again.merged(s); again.misses != 0 || !slices.Equal(got, want) {
			t.Fatalf("%s: a chunk of %d bytes was merged again by the next merge (%d misses)", name, len(s), again.misses)
		}
	}
}

// A merge's own map of chunk merges keeps the first 64 chunks and then
// grows only while at least one lookup in four of its entries hits: a
// count of text that never repeats holds 64 chunks, not one per chunk.
func TestGiantChunkMapBoundedOnNewText(t *testing.T) {
	v := MustGet(O200K).vocab
	freshChunkCache(t, v)
	g := giantMerge{v: v, chunk: 64, chunks: map[string][]int{}, compat: map[[2]int32]bool{}}
	chunk := func(i int) string { return fmt.Sprintf("chunk%04d", i) } // shorter than g.chunk: not cached process-wide
	for i := range 100 {
		g.merged(chunk(i))
	}
	if len(g.chunks) != 64 || g.misses != 100 || g.hits != 0 {
		t.Fatalf("100 new chunks: %d kept, %d missed, %d hit; want 64, 100, 0", len(g.chunks), g.misses, g.hits)
	}
	for i := range 20 { // 20 hits: room for 80
		if got, want := g.merged(chunk(i)), v.pureFast(nil, chunk(i)); !slices.Equal(got, want) {
			t.Fatalf("chunk %d from the map: %v, want %v", i, got, want)
		}
	}
	for i := 100; i < 200; i++ {
		g.merged(chunk(i))
	}
	if len(g.chunks) != 80 || g.hits != 20 {
		t.Fatalf("after 20 hits and 100 more new chunks: %d kept, %d hit; want 80, 20", len(g.chunks), g.hits)
	}
	// A long text of random letters: chunk merges miss, 64 are kept.
	r := rand.New(rand.NewPCG(21, 1))
	var b strings.Builder
	for b.Len() < 20_000 {
		b.WriteByte(byte('a' + r.IntN(26)))
	}
	g = giantMerge{v: v, chunk: 64, chunks: map[string][]int{}, compat: map[[2]int32]bool{}}
	g.merge(nil, b.String())
	if g.misses < 200 || len(g.chunks) != 64 {
		t.Fatalf("%d chunk merges missed, %d kept: want at least 200 missed, 64 kept", g.misses, len(g.chunks))
	}
}

// Chunks end a few tokens before their cut, so the tokens kept from a chunk
// are those of the whole piece and a run of one letter, digit, sign or
// emoji is merged with no junction to repair. Keeping a chunk's last tokens
// too gives the same tokens, after repairs: about three times as many over
// TestGiantMergeDifferential's pieces, and counts that fall back to the heap
// merge of the whole piece. (Runs of spaces or of "=" do get a repair or two
// with short chunks, so they are not listed.)
func TestGiantRunsNeedNoRepair(t *testing.T) {
	for _, name := range []string{CL100K, O200K} {
		v := MustGet(name).vocab
		for _, c := range []string{"a", "!", "7", "中", "😀"} {
			for _, chunk := range []int{100, giantChunk} {
				s := strings.Repeat(c, (5*chunk+7)/len(c))
				g := giantMerge{v: v, chunk: chunk, chunks: map[string][]int{}, compat: map[[2]int32]bool{}}
				got := g.run(nil, s)
				if g.repairs != 0 || g.lost || !slices.Equal(got, v.mergeLong(nil, s)) {
					t.Errorf("%s %q, chunk %d: %d junctions repaired (lost %v)", name, c, chunk, g.repairs, g.lost)
				}
			}
		}
	}
}

// Runs of spaces at short chunk lengths do need junction repairs (see
// TestGiantRunsNeedNoRepair): the repair finds the heap merge's tokens within
// a small window, so neither the merge nor a count that keeps only a few
// tokens falls back to the heap merge of the whole piece.
func TestGiantRepairsStayLocal(t *testing.T) {
	for _, name := range []string{CL100K, O200K} {
		v := MustGet(name).vocab
		for _, chunk := range []int{64, 100} {
			s := strings.Repeat(" ", 5*chunk+7)
			want := v.mergeLong(nil, s)
			g := giantMerge{v: v, chunk: chunk, chunks: map[string][]int{}, compat: map[[2]int32]bool{}}
			got := g.run(nil, s)
			if g.repairs < 1 || g.lost || !slices.Equal(got, want) {
				t.Errorf("%s, chunk %d: %d junctions repaired (lost %v), equal %v, want some repaired and none lost",
					name, chunk, g.repairs, g.lost, slices.Equal(got, want))
			}
			long := strings.Repeat(s, 8)
			wantN := len(v.mergeLong(nil, long))
			gc := giantMerge{v: v, chunk: chunk, chunks: map[string][]int{}, compat: map[[2]int32]bool{}, keep: 4}
			kept := gc.merge(nil, long)
			if gc.repairs < 1 || gc.dropped < 1 || gc.lost || gc.dropped+len(kept) != wantN {
				t.Errorf("%s, chunk %d, keep 4: %d repaired, %d dropped, %d kept (lost %v), want some repaired and dropped, none lost, %d in all",
					name, chunk, gc.repairs, gc.dropped, len(kept), gc.lost, wantN)
			}
		}
	}
}
