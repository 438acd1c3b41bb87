package tokens

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
)

// Giant pieces (a megabyte of one letter, of '!', of spaces, of one emoji)
// are merged in chunks, exactly.
//
// Write BPE(s) for the pure merge of s: tiktoken's rule with no whole-piece
// lookup (mergeShort and mergeLong). A token t is reachable when
// BPE(t) = [t], and two tokens a, b are compatible when BPE(a‖b) = [a, b].
//
// Theorem: a sequence T of reachable tokens is BPE(s) for s its bytes iff
// every adjacent pair of T is compatible.
//
// Only if: take t, u adjacent in BPE(s) and run the merge of s and the merge
// of t‖u side by side. Until the merge of s completes t and u, every merge
// it makes inside the span of t‖u is the lowest ranked (leftmost among
// equals) of all its pairs, so also of the span's pairs, the same pairs the
// merge of t‖u sees; the pair across the t|u border exists in both and is
// never the one taken. So the merge of t‖u makes the same merges, reaches
// [t, u], and stops there: were t‖u a token, the merge of s would have
// merged t and u.
//
// If: suppose the merge of s does cross a border of T, and look at the first
// merge that does, between t and u. Up to it, every merge inside t‖u was
// the lowest of all pairs of s, so the merge of t‖u makes the same ones, and
// then finds the same crossing pair lowest among its own: it crosses too,
// and t, u are not compatible. So no merge crosses a border; inside each
// token the merges are those of the token alone, which end at the token as
// it is reachable; and the merge stops there, since no pair of T merges.
//
// Every token of a pure merge is reachable (the merges inside its span are
// those of the span alone) and, by the theorem, every adjacent pair is
// compatible. So the pure merges of consecutive chunks of a piece, joined,
// are the pure merge of the piece exactly when each pair across a junction
// is compatible, which is one small merge to check, cached per pair. A
// junction that fails is repaired by merging a window of tokens around it
// again, widened until the pairs at the window's edges are compatible; at
// worst the window is all the piece, which is the plain merge.
//
// A giant piece is longer than any token (128 bytes in both encodings,
// checked by TestGiantMergeDifferential), so tiktoken's whole-piece lookup
// never applies to it, and its merge is the pure merge.

// giantPiece is the length from which a piece is merged in chunks.
const giantPiece = 4 << 10

// giantChunk is the length of a chunk. Chunks restart at a token boundary a
// few tokens before the previous chunk's end, where the chunk's cut has not
// changed the merge, so that junctions rarely need repair.
const giantChunk = 1 << 10

// giantBack is how many tokens at the end of a chunk are dropped and merged
// again at the start of the next chunk.
const giantBack = 4

// giantRepairMax bounds the tokens a repair merges again on each side of a
// junction, so that no junction costs more than a few chunks.
const giantRepairMax = 1 << 10

// giantChunkCache is the number of chunk merges an encoder keeps across
// calls, about 1 KB of text and 2 KB of tokens each.
const giantChunkCache = 256

// chunkEntry is a chunk's text and its pure merge, shared read-only.
type chunkEntry struct {
	text string
	toks []int
}

// chunkCache is a direct-mapped cache of chunk merges, safe for concurrent
// use: an entry is never changed, only replaced.
type chunkCache [giantChunkCache]atomic.Pointer[chunkEntry]

// giantVocab is what a giant merge needs of a vocabulary: the byte-level
// one (vocab), or SentencePiece's (spModel) over normalized text, for which
// the theorem above holds alike (its rule is the same over merge ranks of
// pairs, from characters).
type giantVocab interface {
	// pureMerge is the pure merge of s, mergeWhole the same by the plain
	// heap, the fallback.
	pureMerge(dst []int, s string) []int
	mergeWhole(dst []int, s string) []int
	// token is a token's bytes in the merged text, tokenLen their length.
	token(id uint32) string
	tokenLen(id uint32) int
	// merges reports whether a listed merge joins a and b.
	merges(a, b uint32) bool
	// chunkCache is the process-wide cache of chunk merges and its seed.
	chunkCache() (*chunkCache, maphash.Seed)
}

func (v *vocab) pureMerge(dst []int, s string) []int  { return v.pureFast(dst, s) }
func (v *vocab) mergeWhole(dst []int, s string) []int { return v.mergeLong(dst, s) }
func (v *vocab) merges(a, b uint32) bool              { return v.pairs.get(a, b) != noRank }
func (v *vocab) chunkCache() (*chunkCache, maphash.Seed) {
	return v.giantChunks, v.pieceSeed
}

// giantMerge is the state of one giant piece's merge.
type giantMerge struct {
	v      giantVocab
	chunk  int               // chunk length in bytes
	chunks map[string][]int  // pure merges of chunks by content
	compat map[[2]int32]bool // compatibility of token pairs
	misses int               // chunk merges not found in chunks
	hits   int               // chunk merges found in chunks
	buf    []byte
	// keep, when not 0, bounds the tokens kept: older ones are only counted
	// (dropped), for counts of pieces with millions of tokens. lost is set
	// when a repair gives up (see repair).
	keep    int
	dropped int
	lost    bool
	repairs int // junctions repaired, for tests
}

// mergeGiant appends the tokens of a piece longer than any token to dst:
// the same tokens as mergeLong.
func (v *vocab) mergeGiant(dst []int, piece string) []int { return mergeGiant(v, dst, piece) }

func mergeGiant(v giantVocab, dst []int, piece string) []int {
	g := giantMerge{v: v, chunk: giantChunk, chunks: map[string][]int{}, compat: map[[2]int32]bool{}}
	return g.run(dst, piece)
}

// run is merge, or mergeLong when merge gives up.
func (g *giantMerge) run(dst []int, piece string) []int {
	base := len(dst)
	dst = g.merge(dst, piece)
	if g.lost {
		return g.v.mergeWhole(dst[:base], piece)
	}
	return dst
}

// countGiant returns the number of tokens of a piece longer than any token,
// keeping only the last few thousand tokens in memory.
func (v *vocab) countGiant(piece string) int { return countGiant(v, piece) }

func countGiant(v giantVocab, piece string) int {
	g := giantMerge{v: v, chunk: giantChunk, chunks: map[string][]int{}, compat: map[[2]int32]bool{}, keep: 1 << 13}
	toks := g.merge(make([]int, 0, 2*g.keep+giantChunk), piece)
	if g.lost {
		return len(v.mergeWhole(nil, piece))
	}
	return g.dropped + len(toks)
}

// pure is the pure merge of s.
func (v *vocab) pure(dst []int, s string) []int {
	switch {
	case len(s) == 1:
		return append(dst, int(v.byteToken[s[0]]))
	case len(s) <= shortPiece:
		return v.mergeShort(dst, s)
	}
	return v.mergeLong(dst, s)
}

func (g *giantMerge) merge(dst []int, piece string) []int {
	v := g.v
	base := len(dst)
	pos := 0
	for pos < len(piece) {
		end := len(piece)
		if len(piece)-pos >= 2*g.chunk {
			end = pos + g.chunk
			for end < len(piece) && !runeStart(piece[end]) && end < pos+g.chunk+3 {
				end++
			}
		}
		toks := g.merged(piece[pos:end])
		keep := len(toks)
		if end < len(piece) {
			keep = max(len(toks)-giantBack, (len(toks)+1)/2)
		}
		kept := 0
		for _, t := range toks[:keep] {
			kept += v.tokenLen(uint32(t))
		}
		if len(dst) > base && !g.compatible(dst[len(dst)-1], toks[0]) {
			dst = g.repair(dst, base, piece, pos, toks[:keep])
			if g.lost {
				return dst
			}
		} else {
			dst = append(dst, toks[:keep]...)
		}
		pos += kept
		if g.keep > 0 && len(dst)-base > 2*g.keep {
			drop := len(dst) - base - g.keep
			g.dropped += drop
			dst = dst[:base+copy(dst[base:], dst[base+drop:])]
		}
	}
	return dst
}

// runeStart reports whether b starts a UTF-8 character (or is not part of
// one).
func runeStart(b byte) bool { return b&0xc0 != 0x80 }

// merged is the pure merge of a chunk, from the chunk cache when the same
// content was merged before. The map keeps the first 64 chunks and grows
// past them only while at least one lookup in four of its entries hits,
// so a count of text that never repeats (a long run of CJK without
// punctuation) holds 64 chunks, not one per chunk of the text.
func (g *giantMerge) merged(s string) []int {
	if toks, ok := g.chunks[s]; ok {
		g.hits++
		return toks
	}
	v := g.v
	// Then the process-wide cache, for values counted again and again
	// (budget checks that cut one long value at many places).
	cache, seed := v.chunkCache()
	slot := &cache[maphash.String(seed, s)%uint64(len(cache))]
	if e := slot.Load(); e != nil && e.text == s {
		g.chunks[s] = e.toks
		return e.toks
	}
	toks := v.pureMerge(nil, s)
	if len(s) >= g.chunk {
		// A copy, so that the cache never holds on to the caller's text.
		slot.Store(&chunkEntry{text: strings.Clone(s), toks: toks})
	}
	g.misses++
	if len(g.chunks) < 64 || len(g.chunks) < 4*g.hits {
		g.chunks[s] = toks
	}
	return toks
}

// compatible reports whether BPE(a‖b) = [a, b].
func (g *giantMerge) compatible(a, b int) bool {
	key := [2]int32{int32(a), int32(b)}
	if ok, seen := g.compat[key]; seen {
		return ok
	}
	v := g.v
	ok := false
	if !v.merges(uint32(a), uint32(b)) {
		g.buf = append(append(g.buf[:0], v.token(uint32(a))...), v.token(uint32(b))...)
		var arr [8]int
		got := v.pureMerge(arr[:0], string(g.buf))
		ok = len(got) == 2 && got[0] == a && got[1] == b
	}
	g.compat[key] = ok
	return ok
}

// repair appends right, the tokens of a chunk starting at byte pos of piece,
// to dst[base:], the tokens of piece[:pos], whose last token is not
// compatible with right's first. It merges again a window of the last j
// tokens of dst and the first j of right, doubling j until the window's
// tokens are compatible with their neighbours outside it.
func (g *giantMerge) repair(dst []int, base int, piece string, pos int, right []int) []int {
	v := g.v
	g.repairs++
	left := dst[base:]
	for j := 2; ; j *= 2 {
		jl, jr := min(j, len(left)), min(j, len(right))
		// A window that reaches past the kept tokens cannot be checked;
		// one that keeps growing would make the merge quadratic. Both are
		// left to the heap merge of the whole piece.
		if (jl == len(left) && g.dropped > 0) || j > giantRepairMax {
			g.lost = true
			return dst
		}
		from, to := pos, pos
		for _, t := range left[len(left)-jl:] {
			from -= v.tokenLen(uint32(t))
		}
		for _, t := range right[:jr] {
			to += v.tokenLen(uint32(t))
		}
		w := v.pureMerge(nil, piece[from:to])
		if (jl < len(left) && !g.compatible(left[len(left)-jl-1], w[0])) ||
			(jr < len(right) && !g.compatible(w[len(w)-1], right[jr])) {
			continue
		}
		dst = append(dst[:len(dst)-jl], w...)
		return append(dst, right[jr:]...)
	}
}
