package tokens

import (
	"sync/atomic"
	"unsafe"
)

// Long pieces of CJK text (most of o200k_base's merge time) are merged from
// their characters' tokens instead of their bytes: each three-byte
// character whose pure merge is one token starts as that token, which
// skips two thirds of the merges and of the list. That is a guess, since a
// byte of a character could merge with its neighbour's first; the theorem
// of giant.go checks it: if every token of the result is reachable and
// every adjacent pair compatible, the result is the pure merge of the
// piece. Where a token fails, it is merged again from its bytes with a few
// neighbours (o200k_base does merge across characters: 置信 is "\xe7\xbd",
// "\xae信"). Both checks are cached for the life of the process.

// charTables are the lazily filled caches of the character merge.
type charTables struct {
	// char3 is, for each code point below U+10000 written in three bytes,
	// 0 when not known yet, id+1 when its pure merge is the token id, and
	// noRank when it is not one token.
	char3 []atomic.Uint32
	// reach is, for each token, 0 when not known yet, 1 when reachable, 2
	// when not.
	reach []atomic.Uint32
	// compat is a direct-mapped cache of compatible pairs: valid<<63 |
	// ok<<62 | a<<pairIDBits | b.
	compat []atomic.Uint64
}

const compatBits = 16

// learnSplits turns splitChars on; tests turn it off to run more repairs.
var learnSplits = true

// charRepairs counts the pieces whose guess mergeChars repaired, for tests.
var charRepairs atomic.Int64

func newCharTables(tokens int) charTables {
	return charTables{
		char3:  make([]atomic.Uint32, 1<<16),
		reach:  make([]atomic.Uint32, tokens),
		compat: make([]atomic.Uint64, 1<<compatBits),
	}
}

// charToken returns the token that the three-byte character c (r its code
// point) merges into alone, or noRank.
func (v *vocab) charToken(r rune, c string) uint32 {
	if x := v.chars.char3[r].Load(); x != 0 {
		if x == noRank {
			return noRank
		}
		return x - 1
	}
	var arr [3]int
	got := v.mergeShort(arr[:0], c)
	x := noRank
	if len(got) == 1 {
		x = uint32(got[0]) + 1
	}
	v.chars.char3[r].Store(x)
	if x == noRank {
		return noRank
	}
	return x - 1
}

// reachable reports whether the pure merge of token t's bytes is t.
func (v *vocab) reachable(t uint32) bool {
	switch v.chars.reach[t].Load() {
	case 1:
		return true
	case 2:
		return false
	}
	var arr [4]int
	got := v.pure(arr[:0], v.token(t))
	ok := len(got) == 1 && got[0] == int(t)
	x := uint32(2)
	if ok {
		x = 1
	}
	v.chars.reach[t].Store(x)
	return ok
}

// pairCompatible reports whether the pure merge of a‖b is [a, b].
func (v *vocab) pairCompatible(a, b uint32) bool {
	if v.pairs.get(a, b) != noRank {
		return false
	}
	return v.unmergedCompatible(a, b)
}

// unmergedCompatible is pairCompatible for a and b that do not merge.
func (v *vocab) unmergedCompatible(a, b uint32) bool {
	key := uint64(a)<<pairIDBits | uint64(b)
	slot := &v.chars.compat[(key*0x9e3779b97f4a7c15)>>(64-compatBits)]
	if e := slot.Load(); e>>63 != 0 && e&(1<<62-1) == key {
		return e>>62&1 != 0
	}
	var buf [512]byte
	ta, tb := v.token(a), v.token(b)
	n := copy(buf[:], ta)
	n += copy(buf[n:], tb)
	var arr [8]int
	got := v.pure(arr[:0], unsafe.String(&buf[0], n))
	ok := len(got) == 2 && got[0] == int(a) && got[1] == int(b)
	e := uint64(1)<<63 | key
	if ok {
		e |= 1 << 62
	}
	slot.Store(e)
	return ok
}

// mergeChars is mergeLong for a piece with three-byte characters: the same
// tokens.
func (v *vocab) mergeChars(dst []int, piece string) []int {
	if v.maxLen > 256 {
		return v.mergeLong(dst, piece) // pairCompatible's buffer
	}
	sc := scratchPool.Get().(*mergeScratch)
	n := len(piece)
	if cap(sc.nodes) < n {
		sc.nodes = make([]node, n)
	}
	nodes := sc.nodes[:0]
	for i := 0; i < n; {
		if b := piece[i]; b&0xf0 == 0xe0 && i+2 < n {
			b1, b2 := piece[i+1], piece[i+2]
			if b1&0xc0 == 0x80 && b2&0xc0 == 0x80 {
				r := rune(b&0x0f)<<12 | rune(b1&0x3f)<<6 | rune(b2&0x3f)
				if t := v.charToken(r, piece[i:i+3]); t != noRank {
					nodes = append(nodes, node{tok: t})
					i += 3
					continue
				}
			}
		}
		nodes = append(nodes, node{tok: v.byteToken[piece[i]]})
		i++
	}
	h := sc.heap[:0]
	last := len(nodes) - 1
	for k := range nodes {
		nd := &nodes[k]
		nd.next, nd.prev, nd.rank = int32(k+1), int32(k-1), noRank
		if k < last {
			nd.rank = v.pairs.get(nd.tok, nodes[k+1].tok)
			if nd.rank != noRank {
				h = append(h, uint64(nd.rank)<<32|uint64(k))
			}
		}
	}
	nodes[last].next = -1
	base := len(dst)
	dst = v.mergeNodes(dst, sc, nodes, h)
	scratchPool.Put(sc)
	prev := uint32(noRank)
	for i, t := range dst[base:] {
		tok := uint32(t)
		// Adjacent tokens of a finished merge do not merge.
		if !v.reachable(tok) || (prev != noRank && !v.unmergedCompatible(prev, tok)) {
			charRepairs.Add(1)
			guess := append([]int(nil), dst[base+i:]...)
			return v.repairGuess(dst[:base+i], base, piece, guess)
		}
		prev = tok
	}
	return dst
}

// repairGuess appends to dst, whose tokens from base on are the verified
// pure merge of the start of piece, the rest of the piece, whose guessed
// tokens are guess: guess[0] is the first one that fails the checks. Each
// failing token is merged again from its bytes with a window of tokens on
// both sides, widened until the window's edges are compatible.
func (v *vocab) repairGuess(dst []int, base int, piece string, guess []int) []int {
	pos := 0
	for _, t := range dst[base:] {
		pos += v.tokenLen(uint32(t))
	}
	checked := false // whether dst's last token and guess[i] are known compatible
	for i := 0; i < len(guess); {
		tok := uint32(guess[i])
		if v.reachable(tok) && (checked || len(dst) == base || v.pairCompatible(uint32(dst[len(dst)-1]), tok)) {
			dst = append(dst, guess[i])
			pos += v.tokenLen(tok)
			i++
			checked = false
			continue
		}
		left, rest := dst[base:], guess[i:]
		for j := 1; ; j *= 2 {
			jl, jr := min(j, len(left)), min(j, len(rest))
			from, to := pos, pos
			for _, t := range left[len(left)-jl:] {
				from -= v.tokenLen(uint32(t))
			}
			for _, t := range rest[:jr] {
				to += v.tokenLen(uint32(t))
			}
			var arr [16]int
			w := v.pure(arr[:0], piece[from:to])
			if jl < len(left) && !v.pairCompatible(uint32(left[len(left)-jl-1]), uint32(w[0])) {
				continue
			}
			if jr < len(rest) && !v.pairCompatible(uint32(w[len(w)-1]), uint32(rest[jr])) {
				continue
			}
			dst = append(dst[:len(dst)-jl], w...)
			if learnSplits {
				v.splitChars(piece, from, w)
			}
			pos, i, checked = to, i+jr, true
			break
		}
	}
	return dst
}

// splitChars marks the three-byte characters that a token boundary of w,
// the tokens of piece[from:], falls inside as not to be merged alone: the
// next pieces start them from their bytes, and so guess right where a byte
// of them merges with a neighbour (置信 in o200k_base). Only the guesses
// change, never the result.
func (v *vocab) splitChars(piece string, from int, w []int) {
	p := from
	for _, t := range w[:len(w)-1] {
		p += v.tokenLen(uint32(t))
		if runeStart(piece[p]) {
			continue
		}
		for q := p - 1; q >= max(0, p-2); q-- {
			if b := piece[q]; b&0xf0 == 0xe0 && q+2 < len(piece) {
				r := rune(b&0x0f)<<12 | rune(piece[q+1]&0x3f)<<6 | rune(piece[q+2]&0x3f)
				v.chars.char3[r].Store(noRank)
				break
			}
			if runeStart(piece[q]) {
				break
			}
		}
	}
}
