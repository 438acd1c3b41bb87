package tokens

import "sync"

// The merge rule is tiktoken's: repeatedly merge the adjacent pair whose
// merged token has the lowest rank, the leftmost among equals, until no
// pair merges. Short pieces use tiktoken's own linear scan over a small
// array; long ones a min-heap of (rank, position) over a linked list, which
// makes the same choices in O(n log n) instead of O(n²). Long pieces of
// CJK text start the heap from their characters' tokens and check the
// result (chars.go); giant pieces are merged in chunks joined where
// provably exact (giant.go). mergeLong stays the reference of both.

// shortPiece is the longest piece merged by linear scans.
const shortPiece = 12

// appendPiece appends the tokens of one piece to dst.
func (v *vocab) appendPiece(dst []int, piece string) []int {
	if len(piece) == 1 {
		return append(dst, int(v.byteToken[piece[0]]))
	}
	// The pure merge below (chars.go and giant.go included) follows the
	// rule for any rank table; a merges-only vocabulary lacks only the
	// whole-piece lookup.
	if id, ok := v.lookup(piece); ok && !v.mergesOnly {
		return append(dst, int(id))
	}
	if len(piece) <= shortPiece {
		return v.mergeShort(dst, piece)
	}
	if len(piece) >= giantPiece {
		return v.mergeGiant(dst, piece)
	}
	return v.pureFast(dst, piece)
}

// pureFast is the pure merge of s, by mergeChars when s starts (after one
// leading character) with a three-byte character.
func (v *vocab) pureFast(dst []int, s string) []int {
	if len(s) > shortPiece && (s[0]&0xf0 == 0xe0 || s[1]&0xf0 == 0xe0) {
		return v.mergeChars(dst, s)
	}
	return v.pure(dst, s)
}

func (v *vocab) mergeShort(dst []int, piece string) []int {
	var toks, ranks [shortPiece]uint32
	n := len(piece)
	for k := 0; k < n; k++ {
		toks[k] = v.byteToken[piece[k]]
	}
	for k := 0; k < n-1; k++ {
		ranks[k] = v.bytePairs[uint16(piece[k])<<8|uint16(piece[k+1])]
	}
	ranks[n-1] = noRank
	for {
		best, at := noRank, 0
		for k := 0; k < n-1; k++ {
			if ranks[k] < best {
				best, at = ranks[k], k
			}
		}
		if best == noRank {
			break
		}
		toks[at] = best
		copy(toks[at+1:n-1], toks[at+2:n])
		copy(ranks[at+1:n-1], ranks[at+2:n])
		n--
		ranks[at] = noRank
		if at+1 < n {
			ranks[at] = v.pairs.get(toks[at], toks[at+1])
		}
		if at > 0 {
			ranks[at-1] = v.pairs.get(toks[at-1], toks[at])
		}
	}
	for k := 0; k < n; k++ {
		dst = append(dst, int(toks[k]))
	}
	return dst
}

// mergeScratch is the reusable memory of mergeLong.
type mergeScratch struct {
	nodes []node
	heap  []uint64
}

// node is one part of a piece being merged: its token, the rank of merging
// it with the next part (noRank if none), and the list links; next is -2
// once the node is merged into its left neighbour.
type node struct {
	tok, rank  uint32
	next, prev int32
}

var scratchPool = sync.Pool{New: func() any { return new(mergeScratch) }}

func (v *vocab) mergeLong(dst []int, piece string) []int {
	sc := scratchPool.Get().(*mergeScratch)
	defer scratchPool.Put(sc)
	n := len(piece)
	if cap(sc.nodes) < n {
		sc.nodes = make([]node, n)
	}
	nodes := sc.nodes[:n]
	h := sc.heap[:0]
	for k := 0; k < n-1; k++ {
		r := v.bytePairs[uint16(piece[k])<<8|uint16(piece[k+1])]
		nodes[k] = node{tok: v.byteToken[piece[k]], rank: r, next: int32(k + 1), prev: int32(k - 1)}
		if r != noRank {
			h = append(h, uint64(r)<<32|uint64(k))
		}
	}
	nodes[n-1] = node{tok: v.byteToken[piece[n-1]], rank: noRank, next: -1, prev: int32(n - 2)}
	return v.mergeNodes(dst, sc, nodes, h)
}

// mergeNodes runs the merge over a list of nodes whose mergeable pairs are
// in h, and appends the resulting tokens to dst.
func (v *vocab) mergeNodes(dst []int, sc *mergeScratch, nodes []node, h []uint64) []int {
	return mergeNodes(tokenRanks{&v.pairs}, dst, sc, nodes, h)
}

// ranks is a rule's view of its merges: the rank of merging two tokens
// (noRank: they do not merge) and the token a rank's merge makes. Each
// implementation is a struct of its own shape, so that mergeNodes is
// compiled for each with direct calls.
type ranks interface {
	rank(a, b uint32) uint32
	made(r uint32) uint32
}

// tokenRanks is tiktoken's rule: a merge ranks as the token it makes.
type tokenRanks struct{ pairs *pairTable }

func (t tokenRanks) rank(a, b uint32) uint32 { return t.pairs.get(a, b) }
func (t tokenRanks) made(r uint32) uint32    { return r }

// mergeNodes is the merge of nodes by the rule of rk.
func mergeNodes[R ranks](rk R, dst []int, sc *mergeScratch, nodes []node, h []uint64) []int {
	// A heap entry packs rank over position, so the smallest word is the
	// lowest rank and, among equal ranks, the leftmost pair. Entries go stale
	// when a neighbour merges; a stale one no longer matches its node.
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
	for len(h) > 0 {
		top := h[0]
		r, k := uint32(top>>32), int32(uint32(top))
		nk := &nodes[k]
		if nk.rank != r || nk.next == -2 {
			h = pop(h)
			continue
		}
		j := nk.next
		nj := nodes[j].next
		nodes[j].next = -2
		nk.tok, nk.next, nk.rank = rk.made(r), nj, noRank
		if nj >= 0 {
			nodes[nj].prev = k
			nk.rank = rk.rank(nk.tok, nodes[nj].tok)
		}
		// The merged node's new pair takes the popped entry's place: one
		// sift instead of a pop and a push.
		if nk.rank != noRank {
			h[0] = uint64(nk.rank)<<32 | uint64(k)
			siftDown(h, 0)
		} else {
			h = pop(h)
		}
		if p := nk.prev; p >= 0 {
			np := &nodes[p]
			np.rank = rk.rank(np.tok, nk.tok)
			if np.rank != noRank {
				h = push(h, uint64(np.rank)<<32|uint64(p))
			}
		}
	}
	for k := int32(0); k >= 0; k = nodes[k].next {
		dst = append(dst, int(nodes[k].tok))
	}
	sc.heap = h
	return dst
}

// pop removes the heap's smallest entry.
func pop(h []uint64) []uint64 {
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	if last > 0 {
		siftDown(h, 0)
	}
	return h
}

func push(h []uint64, x uint64) []uint64 {
	h = append(h, x)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p] <= x {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = x
	return h
}

func siftDown(h []uint64, i int) {
	n := len(h)
	x := h[i]
	for {
		c := 2*i + 1
		if c+1 >= n {
			if c < n && h[c] < x {
				h[i] = h[c]
				i = c
			}
			break
		}
		// The smaller child, chosen without a branch: which one it is is
		// a coin flip the predictor cannot learn.
		a, b := h[c], h[c+1]
		d := 0
		if b < a {
			d = 1
		}
		a = min(a, b)
		c += d
		if x <= a {
			break
		}
		h[i] = a
		i = c
	}
	h[i] = x
}
