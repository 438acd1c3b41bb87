package tokens

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// hfTokenizer is the part of a Hugging Face tokenizer.json that a
// byte-level BPE model's counts depend on.
type hfTokenizer struct {
	AddedTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
	} `json:"added_tokens"`
	Model struct {
		Type   string         `json:"type"`
		Vocab  map[string]int `json:"vocab"`
		Merges []any          `json:"merges"`
	} `json:"model"`
}

// byteLevelRune is GPT-2's byte-to-character map, in which a byte-level
// BPE vocabulary writes its tokens: printable Latin-1 bytes stand for
// themselves, the others for U+0100 and on, in byte order.
var byteLevelRune = func() (m [256]rune) {
	next := rune(256)
	for b := range 256 {
		switch {
		case b >= '!' && b <= '~', b >= 0xa1 && b <= 0xac, b >= 0xae:
			m[b] = rune(b)
		default:
			m[b] = next
			next++
		}
	}
	return m
}()

// byteOfLevelRune inverts byteLevelRune, whose characters are all below
// U+0144; -1 for the others.
var byteOfLevelRune = func() (m [0x144]int16) {
	for i := range m {
		m[i] = -1
	}
	for b, r := range byteLevelRune {
		m[r] = int16(b)
	}
	return m
}()

// byteOfRune inverts byteLevelRune; -1 for a character that is no byte.
func byteOfRune(r rune) int {
	if r < 0 || int(r) >= len(byteOfLevelRune) {
		return -1
	}
	return int(byteOfLevelRune[r])
}

// hfVocab is what parseHF reads from a byte-level BPE tokenizer.json.
type hfVocab struct {
	// text and offs hold every token's bytes in id order (ids dense from 0).
	text string
	offs []uint32
	// specials are the added tokens, by their strings.
	specials map[string]uint32
	// merges are the model's merges as token ids, in rank order.
	merges [][2]uint32
	// sum is vocabSum of all of it.
	sum string
}

// parseHF reads a byte-level BPE tokenizer.json. name prefixes errors.
func parseHF(name string, data []byte) (*hfVocab, error) {
	var t hfTokenizer
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("%s: not a tokenizer.json: %w", name, err)
	}
	if t.Model.Type != "BPE" {
		return nil, fmt.Errorf("%s: model type %q, want BPE", name, t.Model.Type)
	}
	n := len(t.Model.Vocab)
	byID := make([]string, n)
	for tok, id := range t.Model.Vocab {
		if id < 0 || id >= n || byID[id] != "" {
			return nil, fmt.Errorf("%s: token ids are not dense from 0 (id %d)", name, id)
		}
		byID[id] = tok
	}
	// An added token may also be in the vocabulary (DeepSeek's are), as its
	// own text rather than byte-level: merges never make it.
	added := make(map[int]string, len(t.AddedTokens))
	hv := &hfVocab{offs: make([]uint32, 1, n+1), specials: make(map[string]uint32, len(t.AddedTokens))}
	for _, a := range t.AddedTokens {
		if a.ID < 0 || a.Content == "" || !utf8.ValidString(a.Content) || (a.ID < n && byID[a.ID] != a.Content) {
			return nil, fmt.Errorf("%s: added token %d %q is neither past the vocabulary nor its token", name, a.ID, a.Content)
		}
		added[a.ID] = a.Content
		hv.specials[a.Content] = uint32(a.ID)
	}
	var b strings.Builder
	for id, tok := range byID {
		if tok == "" {
			return nil, fmt.Errorf("%s: token %d is empty", name, id)
		}
		if added[id] == tok {
			b.WriteString(tok)
		} else {
			for _, r := range tok {
				c := byteOfRune(r)
				if c < 0 {
					return nil, fmt.Errorf("%s: token %d %q is not byte-level", name, id, tok)
				}
				b.WriteByte(byte(c))
			}
		}
		hv.offs = append(hv.offs, uint32(b.Len()))
	}
	merges := make([][2]string, len(t.Model.Merges))
	hv.merges = make([][2]uint32, len(t.Model.Merges))
	for i, m := range t.Model.Merges {
		var ok bool
		switch m := m.(type) {
		case string: // "a b": a byte-level token holds no space
			merges[i][0], merges[i][1], ok = strings.Cut(m, " ")
		case []any:
			if len(m) == 2 {
				merges[i][0], ok = m[0].(string)
				if ok {
					merges[i][1], ok = m[1].(string)
				}
			}
		}
		a, aok := t.Model.Vocab[merges[i][0]]
		c, cok := t.Model.Vocab[merges[i][1]]
		if !ok || !aok || !cok {
			return nil, fmt.Errorf("%s: merge %d is not a pair of tokens", name, i)
		}
		hv.merges[i] = [2]uint32{uint32(a), uint32(c)}
	}
	hv.text = b.String()
	hv.sum = vocabSum(hv.text, hv.offs, hv.specials, merges)
	return hv, nil
}

// vocabSum is the checksum that names a vocabulary: the SHA-256 of every
// token's bytes in id order, of the added tokens in id order and of the
// merges in their order, each string with its length. Two files with the
// same sum count every text alike.
func vocabSum(text string, offs []uint32, specials map[string]uint32, merges [][2]string) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	put := func(s string) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	for id := 0; id+1 < len(offs); id++ {
		put(text[offs[id]:offs[id+1]])
	}
	type added struct {
		id      uint32
		content string
	}
	list := make([]added, 0, len(specials))
	for c, id := range specials {
		list = append(list, added{id, c})
	}
	slices.SortFunc(list, func(a, b added) int { return int(a.id) - int(b.id) })
	for _, a := range list {
		h.Write(n[:binary.PutUvarint(n[:], uint64(a.id))])
		put(a.content)
	}
	for _, m := range merges {
		put(m[0])
		put(m[1])
	}
	return hex.EncodeToString(h.Sum(nil))
}
