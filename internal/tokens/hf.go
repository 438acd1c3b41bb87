package tokens

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// hfTokenizer is the part of a Hugging Face tokenizer.json that a BPE
// model's counts depend on, but for the merges (hfMerges): the two are
// decoded side by side.
type hfTokenizer struct {
	AddedTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	Model struct {
		Type  string         `json:"type"`
		Vocab map[string]int `json:"vocab"`
		// ByteFallback marks a SentencePiece BPE model, whose tokens are
		// text and whose characters without a token are <0xNN> tokens.
		ByteFallback bool `json:"byte_fallback"`
	} `json:"model"`
}

// hfMerges is the model's merges: "a b" (a byte-level token holds no
// space) or ["a", "b"], decoded as what the first one is.
type hfMerges struct {
	Model struct {
		Merges json.RawMessage `json:"merges"`
	} `json:"model"`
}

func (m *hfMerges) decode() ([][2]string, error) {
	if len(m.Model.Merges) == 0 {
		return nil, nil
	}
	raw := bytes.TrimLeft(bytes.TrimPrefix(bytes.TrimSpace(m.Model.Merges), []byte("[")), " \t\r\n")
	if len(raw) > 0 && raw[0] == '"' {
		var list []string
		if err := json.Unmarshal(m.Model.Merges, &list); err != nil {
			return nil, err
		}
		pairs := make([][2]string, len(list))
		for i, s := range list {
			var ok bool
			if pairs[i][0], pairs[i][1], ok = strings.Cut(s, " "); !ok {
				return nil, fmt.Errorf("merge %d %q is not two tokens", i, s)
			}
		}
		return pairs, nil
	}
	var pairs [][2]string
	err := json.Unmarshal(m.Model.Merges, &pairs)
	return pairs, err
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

// hfVocab is what parseHF reads from a BPE tokenizer.json.
type hfVocab struct {
	// text and offs hold every token's bytes in id order (ids dense from
	// 0); a SentencePiece model's tokens are their own strings.
	text string
	offs []uint32
	// sentencePiece: the model is SentencePiece BPE with byte fallback.
	sentencePiece bool
	// specials are the added tokens, by their strings; control those of
	// them the file marks special.
	specials, control map[string]uint32
	// merges are the model's merges as token ids, in rank order.
	merges [][2]uint32
	// sum is vocabSum of all of it.
	sum string
}

// parseHF reads a BPE tokenizer.json, byte-level or SentencePiece. name
// prefixes errors.
func parseHF(name string, data []byte) (*hfVocab, error) {
	var t hfTokenizer
	var merges [][2]string
	var merr error
	var wg sync.WaitGroup
	wg.Go(func() {
		var tm hfMerges
		if json.Unmarshal(data, &tm) == nil {
			if merges, merr = tm.decode(); merr != nil {
				merr = fmt.Errorf("%s: model.merges: %w", name, merr)
			}
		}
	})
	err := json.Unmarshal(data, &t)
	wg.Wait()
	if err != nil {
		return nil, fmt.Errorf("%s: not a tokenizer.json: %w", name, err)
	}
	if merr != nil {
		return nil, merr
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
	hv := &hfVocab{offs: make([]uint32, 1, n+1), sentencePiece: t.Model.ByteFallback,
		specials: make(map[string]uint32, len(t.AddedTokens)), control: make(map[string]uint32)}
	for _, a := range t.AddedTokens {
		if a.ID < 0 || a.Content == "" || !utf8.ValidString(a.Content) || (a.ID < n && byID[a.ID] != a.Content) {
			return nil, fmt.Errorf("%s: added token %d %q is neither past the vocabulary nor its token", name, a.ID, a.Content)
		}
		added[a.ID] = a.Content
		hv.specials[a.Content] = uint32(a.ID)
		if a.Special {
			hv.control[a.Content] = uint32(a.ID)
		}
	}
	var b strings.Builder
	for id, tok := range byID {
		if tok == "" {
			return nil, fmt.Errorf("%s: token %d is empty", name, id)
		}
		if added[id] == tok || hv.sentencePiece {
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
	hv.merges = make([][2]uint32, len(merges))
	for i, m := range merges {
		a, aok := t.Model.Vocab[m[0]]
		c, cok := t.Model.Vocab[m[1]]
		if !aok || !cok {
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
