package tokens

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strconv"

	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// vocab is one encoding's rank table, built once and shared read-only by
// every goroutine. A token's id is its merge rank.
type vocab struct {
	// byteToken is the token of each single byte (all 256 are tokens).
	byteToken [256]uint32
	// whole finds the token that a whole piece is, when it is one: tiktoken
	// checks this before merging, and some tokens are not reachable by
	// merges. Keys are substrings of text.
	whole map[string]uint32
	// pairs gives the token of two adjacent tokens' bytes, so merging works
	// on ids and never hashes byte strings.
	pairs pairTable
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
	type entry struct{ start, end uint32 }
	entries := make([]entry, 0, n)
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
		if err != nil || rank != len(entries) {
			return nil, fmt.Errorf("%s: rank %q out of order", name, line[sp+1:])
		}
		start := len(buf)
		buf = buf[:start+base64.StdEncoding.DecodedLen(sp)]
		m, err := base64.StdEncoding.Decode(buf[start:], line[:sp])
		if err != nil {
			return nil, fmt.Errorf("%s: rank %d: %w", name, rank, err)
		}
		buf = buf[:start+m]
		entries = append(entries, entry{uint32(start), uint32(start + m)})
	}
	if len(entries) >= 1<<pairIDBits {
		return nil, fmt.Errorf("%s: %d tokens do not fit the pair table", name, len(entries))
	}
	v := &vocab{text: string(buf), offs: make([]uint32, len(entries)+1), whole: make(map[string]uint32, len(entries))}
	for id, e := range entries {
		v.offs[id] = e.start
		v.offs[id+1] = e.end
		v.whole[v.text[e.start:e.end]] = uint32(id)
	}
	for b := 0; b < 256; b++ {
		id, ok := v.whole[string([]byte{byte(b)})]
		if !ok {
			return nil, fmt.Errorf("%s: byte %#x is not a token", name, b)
		}
		v.byteToken[b] = id
	}
	// Every way to split a token into two tokens is a merge that can produce
	// it; this covers exactly the lookups tiktoken makes while merging,
	// since both sides of a pair are always tokens.
	type pair struct{ a, b, merged uint32 }
	var pairs []pair
	for id := range entries {
		t := v.token(uint32(id))
		for k := 1; k < len(t); k++ {
			a, ok := v.whole[t[:k]]
			if !ok {
				continue
			}
			if b, ok := v.whole[t[k:]]; ok {
				pairs = append(pairs, pair{a, b, uint32(id)})
			}
		}
	}
	v.pairs = newPairTable(len(pairs))
	for _, p := range pairs {
		v.pairs.put(p.a, p.b, p.merged)
	}
	return v, nil
}

// token returns the bytes of token id.
func (v *vocab) token(id uint32) string { return v.text[v.offs[id]:v.offs[id+1]] }

// tokenLen returns the byte length of token id.
func (v *vocab) tokenLen(id uint32) int { return int(v.offs[id+1] - v.offs[id]) }

// pairIDBits bounds token ids in the pair table's packed keys.
const pairIDBits = 18

// pairTable is an open-addressing hash table from a pair of token ids to the
// id of their concatenation. A slot packs key and value in one word:
// a<<38 | b<<20 | merged+1, zero when empty; lookups cost one multiply and,
// almost always, one cache line.
type pairTable struct {
	slots []uint64
	shift uint
}

func newPairTable(n int) pairTable {
	size, bits := 1, uint(0)
	for size < 2*n+1 {
		size <<= 1
		bits++
	}
	return pairTable{slots: make([]uint64, size), shift: 64 - bits}
}

func (t *pairTable) put(a, b, merged uint32) {
	key := uint64(a)<<pairIDBits | uint64(b)
	mask := uint64(len(t.slots) - 1)
	for i := (key * 0x9e3779b97f4a7c15) >> t.shift; ; i = (i + 1) & mask {
		if t.slots[i] == 0 {
			t.slots[i] = key<<20 | uint64(merged+1)
			return
		}
	}
}

// get returns the token that a followed by b merges into, or noRank.
func (t *pairTable) get(a, b uint32) uint32 {
	key := uint64(a)<<pairIDBits | uint64(b)
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
