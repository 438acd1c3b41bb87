package tokens

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

// A pack is a supplied vocabulary in a compact form, small enough for a
// ConfigMap's binaryData (1 MiB): promptops tokenizers pack writes it from
// the model's tokenizer.json, and <dir>/<encoding>/tokenizer.pack is taken
// where <dir>/<encoding>/tokenizer.json is not there. After packMagic it is
// gzip of: the tokens' bytes in id order, the added tokens by id, and for a
// merges-only vocabulary each merge as the id of the token it makes (a
// rising delta) and where that token splits into the two it merges. It is
// accepted when the SHA-256 of that payload is the encoding's pack sum.
const packMagic = "promptops tokenizer pack 1\n"

// MaxPackBytes is a ConfigMap's limit, which a pack must fit.
const MaxPackBytes = 1 << 20

// PackFile is where a packed vocabulary is looked for under d.
func PackFile(d, encoding string) string {
	return filepath.Join(d, encoding, "tokenizer.pack")
}

// Pack returns the pack of a supplied encoding's tokenizer.json, which is
// refused unless it is that encoding's vocabulary.
func Pack(encoding string, tokenizerJSON []byte) ([]byte, error) {
	e, ok := encoders[encoding]
	if !ok || e.supplied == nil {
		return nil, fmt.Errorf("%q is not a supplied encoding: use one of %s", encoding, strings.Join(Names[2:], ", "))
	}
	hv, err := parseHF(encoding, tokenizerJSON)
	if err != nil {
		return nil, err
	}
	if hv.sum != e.supplied.sum {
		return nil, fmt.Errorf("this tokenizer.json is not %s's vocabulary (checksum %.12s, want %.12s)", e.supplied.model, hv.sum, e.supplied.sum)
	}
	payload, err := packPayload(hv, e.supplied.mergesOnly || e.supplied.sentencePiece)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(packMagic)
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	zw.Write(payload)
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func packPayload(hv *hfVocab, withMerges bool) ([]byte, error) {
	var b []byte
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	n := len(hv.offs) - 1
	b = binary.AppendUvarint(b, uint64(n))
	byText := make(map[string]uint32, n)
	for id := range n {
		t := hv.text[hv.offs[id]:hv.offs[id+1]]
		str(t)
		byText[t] = uint32(id)
	}
	type added struct {
		id   uint32
		text string
	}
	specials := make([]added, 0, len(hv.specials))
	for t, id := range hv.specials {
		specials = append(specials, added{id, t})
	}
	slices.SortFunc(specials, func(a, b added) int { return int(a.id) - int(b.id) })
	b = binary.AppendUvarint(b, uint64(len(specials)))
	for _, a := range specials {
		b = binary.AppendUvarint(b, uint64(a.id))
		str(a.text)
	}
	if !withMerges {
		return binary.AppendUvarint(b, 0), nil
	}
	b = binary.AppendUvarint(b, uint64(len(hv.merges)))
	prev := uint32(0)
	token := func(id uint32) string { return hv.text[hv.offs[id]:hv.offs[id+1]] }
	for i, m := range hv.merges {
		left := token(m[0])
		made, ok := byText[left+token(m[1])]
		switch {
		case !ok:
			return nil, fmt.Errorf("merge %d makes no token", i)
		case hv.sentencePiece:
			// Merges rank apart from ids: a signed step.
			b = binary.AppendVarint(b, int64(made)-int64(prev))
		case i > 0 && made <= prev:
			return nil, fmt.Errorf("merge %d makes a token out of id order", i)
		default:
			b = binary.AppendUvarint(b, uint64(made-prev))
		}
		b = binary.AppendUvarint(b, uint64(len(left)))
		prev = made
	}
	if hv.sentencePiece {
		// Which added tokens are control tokens, by id.
		control := slices.Sorted(maps.Values(hv.control))
		b = binary.AppendUvarint(b, uint64(len(control)))
		for _, id := range control {
			b = binary.AppendUvarint(b, uint64(id))
		}
	}
	return b, nil
}

// readPack reads a pack (path names it in errors) whose payload must have
// the sum want; sentencePiece is the encoding's.
func readPack(path string, data []byte, want string, sentencePiece bool) (*hfVocab, error) {
	if !bytes.HasPrefix(data, []byte(packMagic)) {
		return nil, fmt.Errorf("%s is not a promptops tokenizers pack", path)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data[len(packMagic):]))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	payload, err := io.ReadAll(io.LimitReader(zr, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sum := sha256.Sum256(payload)
	if got := hex.EncodeToString(sum[:]); got != want {
		return nil, fmt.Errorf("%s is not this encoding's pack (checksum %.12s, want %.12s): pack the model's tokenizer.json with promptops tokenizers pack", path, got, want)
	}
	// The sum vouches for the payload, which Pack wrote: a short read is
	// a bug, not input.
	r := bytes.NewReader(payload)
	num := func() int {
		v, err := binary.ReadUvarint(r)
		if err != nil {
			panic(err)
		}
		return int(v)
	}
	str := func() string {
		s := make([]byte, num())
		if _, err := io.ReadFull(r, s); err != nil {
			panic(err)
		}
		return string(s)
	}
	var text strings.Builder
	hv := &hfVocab{sum: want, sentencePiece: sentencePiece}
	n := num()
	hv.offs = make([]uint32, 1, n+1)
	byText := make(map[string]uint32, n)
	for id := range n {
		t := str()
		byText[t] = uint32(id)
		text.WriteString(t)
		hv.offs = append(hv.offs, uint32(text.Len()))
	}
	hv.text = text.String()
	ns := num()
	hv.specials = make(map[string]uint32, ns)
	for range ns {
		id := num()
		hv.specials[str()] = uint32(id)
	}
	nm, made := num(), 0
	hv.merges = make([][2]uint32, nm)
	for i := range nm {
		if sentencePiece {
			step, err := binary.ReadVarint(r)
			if err != nil {
				panic(err)
			}
			made += int(step)
		} else {
			made += num()
		}
		split := num()
		t := hv.text[hv.offs[made]:hv.offs[made+1]]
		hv.merges[i] = [2]uint32{byText[t[:split]], byText[t[split:]]}
	}
	hv.control = hv.specials
	if sentencePiece {
		byID := make(map[uint32]string, len(hv.specials))
		for t, id := range hv.specials {
			byID[id] = t
		}
		hv.control = make(map[string]uint32)
		for range num() {
			id := uint32(num())
			hv.control[byID[id]] = id
		}
	}
	return hv, nil
}
