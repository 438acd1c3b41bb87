package tokens

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"hash/maphash"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// vocab is one encoding's rank table, built once and shared read-only by
// every goroutine. A token's id is its merge rank.
type vocab struct {
	// byteToken is the token of each single byte (all 256 are tokens).
	byteToken [256]uint32
	// pieces finds the token that a whole piece is, when it is one: tiktoken
	// checks this before merging, and some tokens are not reachable by
	// merges. It is the one lookup most pieces need, so it is a flat
	// open-addressing table; a slot is hash-tag<<32 | id+1, zero when empty.
	pieces     []uint64
	pieceShift uint
	pieceSeed  maphash.Seed
	// maxLenFrom is the length of the longest token that starts with each
	// byte: a long piece of CJK text is longer than any token that starts
	// like it, and needs no hashing to know it is not one.
	maxLenFrom [256]int
	// maxLen is the length of the longest token.
	maxLen int
	// chars caches what mergeChars needs (chars.go).
	chars charTables
	// giantChunks caches the merges of giant pieces' chunks (giant.go).
	giantChunks *chunkCache
	// shorts finds the tokens of up to 8 bytes, most pieces, by their
	// bytes alone: one probe that compares a number, with no hashing of a
	// string and no reading of the token's text.
	shorts shortTable
	// bytePairs is pairs for two single-byte tokens, indexed by the two
	// bytes: the first round of every merge reads it, from 256 KB instead of
	// a random place in the pair table.
	bytePairs []uint32
	// pairs gives the token of two adjacent tokens' bytes, so merging works
	// on ids and never hashes byte strings.
	pairs pairTable
	// mergesOnly: only the vocabulary's listed merges merge, and a piece
	// that is a token is merged like any other (a BPE-trained vocabulary,
	// Hugging Face's ignore_merges false): no whole-piece lookup.
	mergesOnly bool
	// text holds every token's bytes; token id spans text[offs[id]:offs[id+1]].
	text string
	offs []uint32
}

// noRank marks a pair of tokens that does not merge.
const noRank = ^uint32(0)

// loadVocab parses the rank file that tiktoken-go-loader embeds (name is
// e.g. "o200k_base.tiktoken"): one "base64-bytes rank" per line, ranks dense
// from 0. Nothing is downloaded.
func loadVocab(name string) (*vocab, error) {
	data, err := assets.Assets.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading embedded rank file %s: %w", name, err)
	}
	n := bytes.Count(data, []byte{'\n'}) + 1
	offs := make([]uint32, 1, n+1)
	buf := make([]byte, 0, len(data))
	for line := range bytes.Lines(data) {
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			continue
		}
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("%s: malformed line %q", name, line)
		}
		rank, err := strconv.Atoi(string(line[sp+1:]))
		if err != nil || rank != len(offs)-1 {
			return nil, fmt.Errorf("%s: rank %q out of order", name, line[sp+1:])
		}
		start := len(buf)
		buf = buf[:start+base64.StdEncoding.DecodedLen(sp)]
		m, err := base64.StdEncoding.Decode(buf[start:], line[:sp])
		if err != nil {
			return nil, fmt.Errorf("%s: rank %d: %w", name, rank, err)
		}
		buf = buf[:start+m]
		offs = append(offs, uint32(start+m))
	}
	return buildVocab(name, string(buf), offs, nil)
}

// buildVocab builds the tables of a vocabulary whose token id spans
// text[offs[id]:offs[id+1]], ranked by id: a pair of tokens merges into the
// token of their bytes, the lowest id first. With merges (pairs of token
// ids, in rank order) only those pairs merge, and a piece that is a token
// is merged like any other (mergesOnly); their tokens' ids must rise with
// their rank, so that the id still ranks them.
func buildVocab(name, text string, offs []uint32, merges [][2]uint32) (*vocab, error) {
	n := len(offs) - 1
	if n >= 1<<pairIDBits {
		return nil, fmt.Errorf("%s: %d tokens do not fit the pair table", name, n)
	}
	v := &vocab{text: text, offs: offs}
	// The two token tables are independent: built side by side.
	var tables sync.WaitGroup
	tables.Add(1)
	go func() {
		defer tables.Done()
		v.buildPieces()
	}()
	v.chars = newCharTables(n)
	v.giantChunks = new(chunkCache)
	v.shorts = newShortTable(v)
	tables.Wait()
	v.maxLen = v.maxTokenLen()
	for b := 0; b < 256; b++ {
		id, ok := v.lookup(string([]byte{byte(b)}))
		if !ok {
			return nil, fmt.Errorf("%s: byte %#x is not a token", name, b)
		}
		v.byteToken[b] = id
	}
	// Every way to split a token into two tokens is a merge that can produce
	// it; this covers exactly the lookups tiktoken makes while merging,
	// since both sides of a pair are always tokens.
	// A pair is a<<40 | b<<20 | merged; there are about three per token.
	// Parts of one and two bytes, a third of all, are looked up in a
	// table by their bytes.
	var two [1 << 16]uint32
	for x := range two {
		two[x] = noRank
		if id, ok := v.shorts.get(string([]byte{byte(x >> 8), byte(x)})); ok {
			two[x] = id
		}
	}
	part := func(s string) (uint32, bool) {
		switch len(s) {
		case 1:
			return v.byteToken[s[0]], true
		case 2:
			id := two[uint16(s[0])<<8|uint16(s[1])]
			return id, id != noRank
		}
		return v.lookup(s)
	}
	// The tokens are split in as many ranges as there are processors (up
	// to 4), each enumerated by its own goroutine: the tables are only
	// read. The pairs come out in the same order as from one loop.
	splits := func(lo, hi int) []uint64 {
		pairs := make([]uint64, 0, 4*(hi-lo))
		for id := lo; id < hi; id++ {
			t := v.token(uint32(id))
			for k := 1; k < len(t); k++ {
				a, ok := part(t[:k])
				if !ok {
					continue
				}
				if b, ok := part(t[k:]); ok {
					pairs = append(pairs, uint64(a)<<40|uint64(b)<<20|uint64(id))
				}
			}
		}
		return pairs
	}
	var pairs []uint64
	if merges != nil {
		v.mergesOnly = true
		pairs = make([]uint64, 0, len(merges))
		last := -1
		for i, m := range merges {
			if int(m[0]) >= n || int(m[1]) >= n {
				return nil, fmt.Errorf("%s: merge %d names no token", name, i)
			}
			id, ok := v.lookup(v.token(m[0]) + v.token(m[1]))
			if !ok {
				return nil, fmt.Errorf("%s: merge %d makes no token", name, i)
			}
			if int(id) <= last {
				return nil, fmt.Errorf("%s: merge %d makes token %d after token %d: merges out of id order are not supported", name, i, id, last)
			}
			last = int(id)
			pairs = append(pairs, uint64(m[0])<<40|uint64(m[1])<<20|uint64(id))
		}
	} else {
		workers := min(runtime.GOMAXPROCS(0), 4)
		found := make([][]uint64, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				found[w] = splits(w*n/workers, (w+1)*n/workers)
			}()
		}
		wg.Wait()
		pairs = slices.Concat(found...)
	}
	v.pairs = newPairTable(len(pairs))
	// Inserted in the order of their home slots, the pairs fill the table
	// front to back instead of missing the cache at every one.
	for _, p := range sortBySlot(pairs, &v.pairs) {
		v.pairs.put(uint32(p>>40), uint32(p>>20)&(1<<20-1), uint32(p)&(1<<20-1))
	}
	v.bytePairs = make([]uint32, 1<<16)
	for x := 0; x < 1<<16; x++ {
		v.bytePairs[x] = v.pairs.get(v.byteToken[x>>8], v.byteToken[x&0xff])
	}
	return v, nil
}

func (v *vocab) buildPieces() {
	// Only tokens longer than shortToken go in: lookup finds the others in
	// the short table. The table is then a quarter of the size, and the
	// lookups of loadVocab, most of them misses, stay in the cache more.
	n, long := len(v.offs)-1, 0
	for id := 0; id < n; id++ {
		t := v.token(uint32(id))
		v.maxLenFrom[t[0]] = max(v.maxLenFrom[t[0]], len(t))
		if len(t) > shortToken {
			long++
		}
	}
	size, bits := 1, uint(0)
	for size < 2*long+1 {
		size <<= 1
		bits++
	}
	v.pieces, v.pieceShift, v.pieceSeed = hugeSlice[uint64](size), 64-bits, maphash.MakeSeed()
	mask := uint64(size - 1)
	for id := 0; id < n; id++ {
		t := v.token(uint32(id))
		if len(t) <= shortToken {
			continue
		}
		h := maphash.String(v.pieceSeed, t)
		for i := h >> v.pieceShift; ; i = (i + 1) & mask {
			if v.pieces[i] == 0 {
				v.pieces[i] = h&^(1<<32-1) | uint64(id+1)
				break
			}
		}
	}
}

// lookup returns the token that piece is, if it is one.
func (v *vocab) lookup(piece string) (uint32, bool) {
	if len(piece) <= shortToken {
		return v.shorts.get(piece)
	}
	if len(piece) > v.maxLenFrom[piece[0]] {
		return 0, false
	}
	h := maphash.String(v.pieceSeed, piece)
	tag := h &^ (1<<32 - 1)
	mask := uint64(len(v.pieces) - 1)
	for i := h >> v.pieceShift; ; i = (i + 1) & mask {
		s := v.pieces[i]
		if s == 0 {
			return 0, false
		}
		if s&^(1<<32-1) == tag {
			if id := uint32(s) - 1; v.token(id) == piece {
				return id, true
			}
		}
	}
}

// token returns the bytes of token id.
func (v *vocab) token(id uint32) string { return v.text[v.offs[id]:v.offs[id+1]] }

// tokenLen returns the byte length of token id.
func (v *vocab) tokenLen(id uint32) int { return int(v.offs[id+1] - v.offs[id]) }

// maxTokenLen is the length in bytes of the longest token.
func (v *vocab) maxTokenLen() int {
	n := 0
	for _, l := range v.maxLenFrom {
		n = max(n, l)
	}
	return n
}

// pairIDBits bounds token ids in the pair table's packed keys.
const pairIDBits = 18

// pairTable is an open-addressing hash table from a pair of token ids to the
// id of their concatenation. A slot packs key and value in one word:
// a<<38 | b<<20 | merged+1, zero when empty; lookups cost one multiply and,
// almost always, one cache line.
//
// Most lookups while merging are of pairs that do not merge, so a one-bit
// filter small enough for the L2 cache answers most of them without
// touching the table.
type pairTable struct {
	slots  []uint64
	shift  uint
	filter []uint64
	fshift uint
}

func newPairTable(n int) pairTable {
	size, bits := 1, uint(0)
	for size < 2*n+1 {
		size <<= 1
		bits++
	}
	fbits := bits + 2 // about 8 filter bits per pair: one in ten misses gets through
	return pairTable{slots: hugeSlice[uint64](size), shift: 64 - bits, filter: make([]uint64, 1<<fbits/64), fshift: 64 - fbits}
}

// filterBit is the filter bit of key, from a hash independent of the slot's.
func (t *pairTable) filterBit(key uint64) (word uint64, bit uint64) {
	h := (key * 0xc2b2ae3d27d4eb4f) >> t.fshift
	return h >> 6, 1 << (h & 63)
}

func (t *pairTable) put(a, b, merged uint32) {
	key := uint64(a)<<pairIDBits | uint64(b)
	w, bit := t.filterBit(key)
	t.filter[w] |= bit
	mask := uint64(len(t.slots) - 1)
	for i := (key * 0x9e3779b97f4a7c15) >> t.shift; ; i = (i + 1) & mask {
		if t.slots[i] == 0 {
			t.slots[i] = key<<20 | uint64(merged+1)
			return
		}
	}
}

// home is the first slot probed for a followed by b.
func (t *pairTable) home(a, b uint32) uint64 {
	key := uint64(a)<<pairIDBits | uint64(b)
	return (key * 0x9e3779b97f4a7c15) >> t.shift
}

// sortBySlot returns pairs (a<<40 | b<<20 | merged) ordered by their home
// slot in t, by a radix sort of two passes.
func sortBySlot(pairs []uint64, t *pairTable) []uint64 {
	bits := 64 - t.shift
	lo := bits / 2
	home := func(p uint64) uint64 { return t.home(uint32(p>>40), uint32(p>>20)&(1<<20-1)) }
	out := make([]uint64, len(pairs))
	for _, pass := range [2]struct{ shift, width uint }{{0, lo}, {lo, bits - lo}} {
		counts := make([]int, 1<<pass.width+1)
		mask := uint64(1)<<pass.width - 1
		for _, p := range pairs {
			counts[(home(p)>>pass.shift)&mask+1]++
		}
		for i := 1; i < len(counts); i++ {
			counts[i] += counts[i-1]
		}
		for _, p := range pairs {
			d := (home(p) >> pass.shift) & mask
			out[counts[d]] = p
			counts[d]++
		}
		pairs, out = out, pairs
	}
	return pairs
}

// get returns the token that a followed by b merges into, or noRank.
func (t *pairTable) get(a, b uint32) uint32 {
	key := uint64(a)<<pairIDBits | uint64(b)
	if w, bit := t.filterBit(key); t.filter[w]&bit == 0 {
		return noRank
	}
	mask := uint64(len(t.slots) - 1)
	for i := (key * 0x9e3779b97f4a7c15) >> t.shift; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return noRank
		}
		if s>>20 == key {
			return uint32(s&(1<<20-1)) - 1
		}
	}
}

// shortToken is the longest token in the short table.
const shortToken = 8

// shortTable is an open-addressing table from strings of 1 to 8 bytes to
// their tokens. A slot holds the string's bytes as a number (shortKey), its
// length and id+1; id+1 is zero when the slot is empty.
type shortTable struct {
	slots []shortSlot
	shift uint
}

type shortSlot struct {
	key    uint64
	n, id1 uint32
}

// shortKey packs s, 1 to 8 bytes long, into a number that, with len(s),
// identifies it: its bytes, or from 4 bytes on its first four and its last
// four.
func shortKey(s string) uint64 {
	n := len(s)
	if n >= 4 {
		t := s[n-4:]
		lo := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
		hi := uint64(t[0]) | uint64(t[1])<<8 | uint64(t[2])<<16 | uint64(t[3])<<24
		return lo | hi<<32
	}
	var k uint64
	for i := 0; i < n; i++ {
		k |= uint64(s[i]) << (8 * i)
	}
	return k
}

func (t *shortTable) slot(key uint64, n int) uint64 {
	return ((key ^ uint64(n)<<61) * 0x9e3779b97f4a7c15) >> t.shift
}

func newShortTable(v *vocab) shortTable {
	count := 0
	for id := 0; id < len(v.offs)-1; id++ {
		if v.tokenLen(uint32(id)) <= shortToken {
			count++
		}
	}
	size, bits := 1, uint(0)
	for size < count*3/2+1 {
		size <<= 1
		bits++
	}
	t := shortTable{slots: hugeSlice[shortSlot](size), shift: 64 - bits}
	mask := uint64(size - 1)
	for id := 0; id < len(v.offs)-1; id++ {
		s := v.token(uint32(id))
		if len(s) > shortToken {
			continue
		}
		key := shortKey(s)
		for i := t.slot(key, len(s)); ; i = (i + 1) & mask {
			if t.slots[i].id1 == 0 {
				t.slots[i] = shortSlot{key: key, n: uint32(len(s)), id1: uint32(id + 1)}
				break
			}
		}
	}
	return t
}

// get returns the token that s, 1 to 8 bytes long, is, if it is one.
func (t *shortTable) get(s string) (uint32, bool) {
	key, n := shortKey(s), uint32(len(s))
	mask := uint64(len(t.slots) - 1)
	for i := t.slot(key, len(s)); ; i = (i + 1) & mask {
		sl := &t.slots[i]
		if sl.id1 == 0 {
			return 0, false
		}
		if sl.key == key && sl.n == n {
			return sl.id1 - 1, true
		}
	}
}
