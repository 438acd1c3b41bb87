package tokens

import (
	"fmt"
	"hash/maphash"
	"strings"
	"unicode/utf8"
)

// SentencePiece BPE (Gemma 3), as Hugging Face's tokenizer.json runs it:
// the text between added tokens is normalized (a space is U+2581 "▁") and
// is one piece; each character is its token, or, when it has none, its
// UTF-8 bytes' <0xNN> tokens (byte fallback); then the listed merges merge
// the adjacent pair of lowest merge rank, the leftmost among equals, until
// none does. A merge's rank is its place in the list, not its token's id
// (several merges make one token, and some are out of id order), so a pair
// maps to its rank and the rank to the token it makes.
//
// A whole text as one piece would make a heap as large as the text. It is
// cut, exactly, before a "▁" whose preceding character no token has in
// front of a "▁" (joins): no merge can make a token across such a place, so
// the two sides merge alone and their tokens are the whole's.

// spSpace is the character a space is normalized to.
const spSpace = '\u2581'

// spModel is a SentencePiece BPE vocabulary, read-only once built.
type spModel struct {
	// charTok is the token of each character below len(charTok), plus
	// one (0: none); charOther those of the others.
	charTok   []uint32
	charOther map[rune]uint32
	// byteTok is each byte's <0xNN> token.
	byteTok [256]uint32
	// pairs maps two adjacent tokens to their merge's rank (open
	// addressing; a slot is (a<<spIDBits|b)<<spRankBits | rank+1, 0 when
	// empty), and made a rank to the token its merge makes.
	pairs     []uint64
	pairShift uint
	made      []uint32
	// joins holds the characters that some token has right before a "▁".
	joins map[rune]bool
	// text holds every token as it decodes ("▁" a space, <0xNN> its
	// byte), spans[id] its length in characters of the text it comes from
	// (0 for a byte token, which covers one byte), maxSpan the largest.
	text    string
	offs    []uint32
	spans   []uint8
	maxSpan int
	// norm holds every token as it is in normalized text ("▁" itself), for
	// the giant merge, which runs on normalized text.
	norm     string
	normOffs []uint32
	giant    *chunkCache
	seed     maphash.Seed
}

const (
	spIDBits   = 18
	spRankBits = 20
	// spDenseChars is how many characters charTok holds by value.
	spDenseChars = 1 << 16
)

// buildSP builds the model from a tokenizer.json's tokens (their own
// strings, in id order) and merges (as ids, in rank order).
func buildSP(name string, hv *hfVocab) (*spModel, error) {
	n := len(hv.offs) - 1
	if n > 1<<spIDBits || len(hv.merges) >= 1<<spRankBits-1 {
		return nil, fmt.Errorf("%s: %d tokens and %d merges do not fit the pair table", name, n, len(hv.merges))
	}
	m := &spModel{
		charTok:   make([]uint32, spDenseChars),
		charOther: make(map[rune]uint32),
		joins:     make(map[rune]bool),
		offs:      make([]uint32, 1, n+1),
		normOffs:  make([]uint32, 1, n+1),
		spans:     make([]uint8, n),
		made:      make([]uint32, len(hv.merges)),
		giant:     new(chunkCache),
		seed:      maphash.MakeSeed(),
	}
	var found [256]bool
	var b, nb strings.Builder
	b.Grow(len(hv.text))
	nb.Grow(len(hv.text))
	for id := range n {
		tok := hv.text[hv.offs[id]:hv.offs[id+1]]
		if c, ok := byteToken(tok); ok {
			if found[c] {
				return nil, fmt.Errorf("%s: byte token %s twice", name, tok)
			}
			found[c], m.byteTok[c] = true, uint32(id)
			b.WriteByte(c)
			nb.WriteByte(c)
			m.offs = append(m.offs, uint32(b.Len()))
			m.normOffs = append(m.normOffs, uint32(nb.Len()))
			continue
		}
		nb.WriteString(tok)
		m.normOffs = append(m.normOffs, uint32(nb.Len()))
		chars, prev := 0, rune(-1)
		for _, r := range tok {
			if r == spSpace {
				if prev >= 0 {
					m.joins[prev] = true
				}
				b.WriteByte(' ')
			} else {
				b.WriteRune(r)
			}
			prev = r
			chars++
		}
		if chars > 255 {
			return nil, fmt.Errorf("%s: token %d is longer than 255 characters", name, id)
		}
		m.spans[id] = uint8(chars)
		m.maxSpan = max(m.maxSpan, chars)
		if r, size := utf8.DecodeRuneInString(tok); size == len(tok) {
			if r < spDenseChars {
				m.charTok[r] = uint32(id) + 1
			} else {
				m.charOther[r] = uint32(id)
			}
		}
		m.offs = append(m.offs, uint32(b.Len()))
	}
	for c, ok := range found {
		if !ok {
			return nil, fmt.Errorf("%s: byte fallback token <0x%02X> is missing", name, c)
		}
	}
	if m.charTok[spSpace] == 0 {
		return nil, fmt.Errorf("%s: %q is not a token", name, string(spSpace))
	}
	m.text, m.norm = b.String(), nb.String()
	bits := uint(1)
	for 1<<bits < 2*len(hv.merges) {
		bits++
	}
	m.pairs, m.pairShift = make([]uint64, 1<<bits), 64-bits
	tok := func(id uint32) string { return hv.text[hv.offs[id]:hv.offs[id+1]] }
	ids := make(map[string]uint32, n)
	for id := range n {
		ids[tok(uint32(id))] = uint32(id)
	}
	for rank, p := range hv.merges {
		a, c := p[0], p[1]
		made, ok := ids[tok(a)+tok(c)]
		if !ok {
			return nil, fmt.Errorf("%s: merge %d makes no token", name, rank)
		}
		if !m.putPair(a, c, uint32(rank)) {
			return nil, fmt.Errorf("%s: merge %d repeats an earlier pair", name, rank)
		}
		m.made[rank] = made
	}
	return m, nil
}

// byteToken reads a byte fallback token, <0xNN>.
func byteToken(tok string) (byte, bool) {
	if len(tok) != 6 || tok[:3] != "<0x" || tok[5] != '>' {
		return 0, false
	}
	hex := func(c byte) (byte, bool) {
		switch {
		case c >= '0' && c <= '9':
			return c - '0', true
		case c >= 'A' && c <= 'F':
			return c - 'A' + 10, true
		}
		return 0, false
	}
	hi, ok1 := hex(tok[3])
	lo, ok2 := hex(tok[4])
	return hi<<4 | lo, ok1 && ok2
}

func (m *spModel) slot(key uint64) uint64 {
	return key * 0x9e3779b97f4a7c15 >> m.pairShift
}

// putPair records the rank of merging a and b; false if they have one.
func (m *spModel) putPair(a, b, rank uint32) bool {
	key := uint64(a)<<spIDBits | uint64(b)
	mask := uint64(len(m.pairs) - 1)
	for i := m.slot(key); ; i = (i + 1) & mask {
		s := m.pairs[i]
		if s == 0 {
			m.pairs[i] = key<<spRankBits | uint64(rank+1)
			return true
		}
		if s>>spRankBits == key {
			return false
		}
	}
}

// rank is the rank of merging a and b, noRank if they do not merge.
func (m *spModel) rank(a, b uint32) uint32 {
	key := uint64(a)<<spIDBits | uint64(b)
	mask := uint64(len(m.pairs) - 1)
	for i := m.slot(key); ; i = (i + 1) & mask {
		s := m.pairs[i]
		if s == 0 {
			return noRank
		}
		if s>>spRankBits == key {
			return uint32(s&(1<<spRankBits-1)) - 1
		}
	}
}

// spNorm is a character as the normalizer leaves it.
func spNorm(r rune) rune {
	if r == ' ' {
		return spSpace
	}
	return r
}

// charToken is the token of character r, if it has one.
func (m *spModel) charToken(r rune) (uint32, bool) {
	if r < spDenseChars {
		t := m.charTok[r]
		return t - 1, t != 0
	}
	t, ok := m.charOther[r]
	return t, ok
}

// pieceEnd is the end of the piece that starts at s[i]: the next "▁" (or
// space) not preceded by a character of joins.
func (m *spModel) pieceEnd(s string, i int) int {
	_, size := utf8.DecodeRuneInString(s[i:])
	for j := i + size; j < len(s); {
		c := s[j]
		if c == ' ' || (c == 0xe2 && strings.HasPrefix(s[j:], "\u2581")) {
			prev, _ := utf8.DecodeLastRuneInString(s[:j])
			if !m.joins[spNorm(prev)] {
				return j
			}
		}
		if c < utf8.RuneSelf {
			j++
		} else {
			_, size := utf8.DecodeRuneInString(s[j:])
			j += size
		}
	}
	return len(s)
}

// appendPiece appends the tokens of one piece (raw text) to dst.
func (m *spModel) appendPiece(dst []int, piece string) []int {
	sc := scratchPool.Get().(*mergeScratch)
	defer scratchPool.Put(sc)
	nodes := sc.nodes[:0]
	for i := 0; i < len(piece); {
		r, size := utf8.DecodeRuneInString(piece[i:])
		if r == utf8.RuneError && size == 1 {
			nodes = append(nodes, node{tok: m.byteTok[piece[i]]})
		} else if t, ok := m.charToken(spNorm(r)); ok {
			nodes = append(nodes, node{tok: t})
		} else {
			for k := range size {
				nodes = append(nodes, node{tok: m.byteTok[piece[i+k]]})
			}
		}
		i += size
	}
	n := len(nodes)
	h := sc.heap[:0]
	for k := range nodes {
		nodes[k].prev, nodes[k].next, nodes[k].rank = int32(k-1), int32(k+1), noRank
		if k+1 < n {
			if r := m.rank(nodes[k].tok, nodes[k+1].tok); r != noRank {
				nodes[k].rank = r
				h = append(h, uint64(r)<<32|uint64(k))
			}
		}
	}
	nodes[n-1].next = -1
	sc.nodes = nodes
	return mergeNodes(spRanks{m}, dst, sc, nodes, h)
}

// spRanks is SentencePiece's rule: a merge ranks by its place in the list.
type spRanks struct{ m *spModel }

func (s spRanks) rank(a, b uint32) uint32 { return s.m.rank(a, b) }
func (s spRanks) made(r uint32) uint32    { return s.m.made[r] }

// encode appends the tokens of text, which holds no added token, to dst.
func (m *spModel) encode(dst []int, text string) []int {
	last, lastAt := "", 0
	for i := 0; i < len(text); {
		end := m.pieceEnd(text, i)
		piece := text[i:end]
		i = end
		start := len(dst)
		switch {
		case piece == last:
			dst = append(dst, dst[lastAt:start]...)
		case len(piece) >= giantPiece:
			dst = mergeGiant(m, dst, spNormalize(piece))
			last = piece
		default:
			dst = m.appendPiece(dst, piece)
			last = piece
		}
		lastAt = start
	}
	return dst
}

// count counts the tokens of text, which holds no added token, stopping
// past limit when limit >= 0.
func (m *spModel) count(text string, limit int) (int, bool) {
	bp := countBufs.Get().(*[]int)
	buf := (*bp)[:0]
	n := 0
	last, lastN := "", 0
	for i := 0; i < len(text); {
		end := m.pieceEnd(text, i)
		piece := text[i:end]
		i = end
		// A token covers at most maxSpan characters of at most 4 bytes:
		// a piece longer than that many tokens' worth is over the limit
		// without being merged.
		if least := len(piece) / (4 * m.maxSpan); limit >= 0 && n+least > limit {
			n += least
			break
		}
		switch {
		case piece == last:
		case len(piece) >= giantPiece:
			last, lastN = piece, countGiant(m, spNormalize(piece))
		default:
			buf = m.appendPiece(buf[:0], piece)
			last, lastN = piece, len(buf)
		}
		n += lastN
		if limit >= 0 && n > limit {
			break
		}
	}
	*bp = buf[:0]
	countBufs.Put(bp)
	return n, limit >= 0 && n > limit
}

// truncate is Truncate of a text that holds no added token. The pieces
// before the one the cut falls in are the prefix's own; in that one, the
// cut is where token maxTokens ends (a byte token backed off to its
// character's start), moved back a token at a time until the cut piece's
// own count fits.
func (m *spModel) truncate(text string, maxTokens int) (string, int) {
	if limit := maxTokens * m.maxSpan * 4; limit < len(text) {
		text = text[:backOffToRune(text, limit)]
	}
	bp := countBufs.Get().(*[]int)
	defer countBufs.Put(bp)
	n := 0
	for i := 0; i < len(text); {
		end := m.pieceEnd(text, i)
		toks := m.appendPiece((*bp)[:0], text[i:end])
		*bp = toks[:0]
		if n+len(toks) <= maxTokens {
			n += len(toks)
			i = end
			continue
		}
		for kept := maxTokens - n; kept > 0; kept-- {
			c := i
			for _, id := range toks[:kept] {
				if m.spans[id] == 0 {
					c++
					continue
				}
				for range m.spans[id] {
					_, size := utf8.DecodeRuneInString(text[c:])
					c += size
				}
			}
			c = backOffToRune(text, c)
			if c == i {
				break
			}
			got, _ := m.count(text[i:c], -1)
			if n+got <= maxTokens {
				return text[:c], n + got
			}
		}
		return text[:i], n
	}
	return text, n
}

// spNormalize is s normalized: its spaces are "▁".
func spNormalize(s string) string { return strings.ReplaceAll(s, " ", string(spSpace)) }

// The giant merge's view of the model (giant.go), over normalized text.
func (m *spModel) pureMerge(dst []int, s string) []int  { return m.appendPiece(dst, s) }
func (m *spModel) mergeWhole(dst []int, s string) []int { return m.appendPiece(dst, s) }
func (m *spModel) merges(a, b uint32) bool              { return m.rank(a, b) != noRank }
func (m *spModel) tokenLen(id uint32) int               { return int(m.normOffs[id+1] - m.normOffs[id]) }
func (m *spModel) chunkCache() (*chunkCache, maphash.Seed) {
	return m.giant, m.seed
}

// token is the text token id decodes to; ok is false for an id that is
// not the model's.
func (m *spModel) decoded(id int) (string, bool) {
	if uint(id) >= uint(len(m.offs)-1) {
		return "", false
	}
	return m.text[m.offs[id]:m.offs[id+1]], true
}

// token is a token as it is in normalized text.
func (m *spModel) token(id uint32) string { return m.norm[m.normOffs[id]:m.normOffs[id+1]] }
