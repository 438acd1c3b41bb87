// Package tokens counts, cuts and decodes tokens exactly and offline: the
// tiktoken encodings cl100k_base and o200k_base, built in, and open models'
// byte-level BPE encodings, whose vocabularies the platform team supplies
// (supplied.go). It owns its own pre-tokenizers (Unicode 16 tables), rank
// tables and merge; counts are cached.
package tokens

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// Encodings supported by promptops.
const (
	CL100K = "cl100k_base"
	O200K  = "o200k_base"
	// Llama3 is Llama 3.0-3.3's encoding (128,000 ranks and 256 specials).
	Llama3 = "llama3"
	// Qwen3 is Qwen 3's encoding (151,643 ranks and 26 added tokens); Qwen
	// 2.5 shares its BPE vocabulary.
	Qwen3 = "qwen3"
	// DeepSeekV3 is DeepSeek V3's and R1's encoding (128,000 ranks and 818
	// added tokens).
	DeepSeekV3 = "deepseek_v3"
	// Tekken is Mistral's tiktoken-based encoding (Mistral NeMo, Pixtral,
	// Ministral): 130,072 ranks after 1,000 special ids.
	Tekken = "tekken"
	// Gemma3 is Gemma 3's SentencePiece encoding (262,144 tokens, 514,906
	// merges).
	Gemma3 = "gemma3"
)

// Names lists every encoding, built in first.
var Names = []string{O200K, CL100K, Llama3, Qwen3, DeepSeekV3, Tekken, Gemma3}

// DefaultCacheEntries bounds the count cache of each encoder.
const DefaultCacheEntries = 16384

// Encoder counts, cuts and decodes text in one encoding. It is safe for
// concurrent use: everything but the count cache is read-only once built.
type Encoder struct {
	name  string
	vocab *vocab
	split splitFunc
	// specials are the special-token strings the reference tokenizer
	// counts as one control token each wherever they are in the text; nil
	// for the tiktoken encodings, which count them as text.
	specials *specials
	// control are the specials that end a turn or stand for markup, which
	// a runtime value must not hold (Special): all of them but Gemma's
	// plain-text added tokens.
	control *specials
	// sp is a SentencePiece model, which counts in place of vocab and
	// split (Gemma).
	sp *spModel
	// nfc: the text between specials is normalized to NFC before it is
	// pre-tokenized (Qwen's normalizer).
	nfc bool
	// idBase is the id of rank 0: Tekken's ranks follow its 1,000 special
	// ids.
	idBase int
	cache  *countCache
}

var encoders = map[string]*encoderOnce{
	CL100K: {file: "cl100k_base.tiktoken", split: splitCL100K},
	O200K:  {file: "o200k_base.tiktoken", split: splitO200K},
	Llama3: {supplied: &supplied{
		model: "Llama 3.0-3.3 (meta-llama/Llama-3.1-8B-Instruct and its family)",
		sum:   llama3Sum, packSum: llama3PackSum,
	}, split: splitCL100K},
	Qwen3: {supplied: &supplied{
		model: "Qwen 3 (Qwen/Qwen3-8B and its family)",
		sum:   qwen3Sum, packSum: qwen3PackSum, mergesOnly: true, nfc: true,
	}, split: splitQwen},
	DeepSeekV3: {supplied: &supplied{
		model: "DeepSeek V3 (deepseek-ai/DeepSeek-V3, and R1)",
		sum:   deepSeekV3Sum, packSum: deepSeekV3PackSum, mergesOnly: true,
	}, split: splitDeepSeek},
	Tekken: {supplied: &supplied{
		model: "Mistral Tekken (mistralai/Mistral-Nemo-Instruct-2407 and its family)",
		sum:   tekkenSum, packSum: tekkenPackSum, addedAsText: true,
	}, split: splitTekken},
	Gemma3: {supplied: &supplied{
		model: "Gemma 3 (google/gemma-3-4b-it and its family)",
		sum:   gemma3Sum, packSum: gemma3PackSum, sentencePiece: true,
	}},
}

type encoderOnce struct {
	// file is the embedded rank file of a built-in encoding; supplied
	// says where the vocabulary of the others comes from.
	file     string
	supplied *supplied
	split    splitFunc
	once     sync.Once
	enc      *Encoder
	err      error
}

// Get returns the shared encoder for name, building its tables on first use
// (about 0.1 s and 16 MB for o200k_base). A supplied encoding whose
// vocabulary is not there yet is an *UnavailableError, and is looked for
// again at the next Get once its file has changed.
func Get(name string) (*Encoder, error) {
	e, ok := encoders[name]
	if !ok {
		return nil, fmt.Errorf("unsupported encoding %q: use one of %s", name, strings.Join(Names, ", "))
	}
	if e.supplied != nil {
		return e.supplied.get(name, e.split)
	}
	e.once.Do(func() {
		v, err := loadVocab(e.file)
		if err != nil {
			e.err = fmt.Errorf("loading encoding %s: %w", name, err)
			return
		}
		e.enc = &Encoder{name: name, vocab: v, split: e.split, cache: newCountCache(DefaultCacheEntries)}
	})
	return e.enc, e.err
}

// MustGet is Get for encodings known to be valid (validated by the CRD).
func MustGet(name string) *Encoder {
	e, err := Get(name)
	if err != nil {
		panic(err)
	}
	return e
}

// Name is the encoding's name.
func (e *Encoder) Name() string { return e.name }

// Encode returns the tokens of text, as tiktoken's encode_ordinary does.
// Special-token strings such as <|endoftext|> are encoded as plain text, so
// user text can never inject a control token. Bytes that are not valid UTF-8
// are kept as byte tokens, so Decode(Encode(s)) == s for every s.
func (e *Encoder) Encode(text string) []int {
	if text == "" {
		return nil
	}
	ids := e.encode(make([]int, 0, len(text)/4+1), text)
	if e.idBase != 0 {
		for i := range ids {
			ids[i] += e.idBase
		}
	}
	return ids
}

// encode appends the tokens of text to dst.
func (e *Encoder) encode(dst []int, text string) []int {
	if e.specials == nil {
		return e.encodePlain(dst, text)
	}
	for sg := range e.specials.segments(text) {
		if sg.special >= 0 {
			dst = append(dst, sg.special)
		} else {
			dst = e.encodePlain(dst, text[sg.start:sg.end])
		}
	}
	return dst
}

// encodePlain appends the tokens of text, which holds no special, to dst.
func (e *Encoder) encodePlain(dst []int, text string) []int {
	if e.sp != nil {
		return e.sp.encode(dst, text)
	}
	if e.nfc {
		text = nfc(text)
	}
	v, split := e.vocab, e.split
	// last is the previous piece, whose tokens are dst[lastAt:]: a run of
	// one piece is merged once.
	last, lastAt := "", 0
	for i := 0; i < len(text); {
		end := split(text, i)
		piece := text[i:end]
		i = end
		start := len(dst)
		if len(piece) == len(last) && piece == last {
			dst = append(dst, dst[lastAt:start]...)
		} else {
			dst = v.appendPiece(dst, piece)
			last = piece
		}
		lastAt = start
	}
	return dst
}

// countBufs recycles the token buffers of counts, which keep no tokens.
var countBufs = sync.Pool{New: func() any { b := make([]int, 0, 1024); return &b }}

// count counts the tokens of text, stopping past limit when limit >= 0.
func (e *Encoder) count(text string, limit int) (int, bool) {
	if e.specials == nil {
		return e.countPlain(text, limit)
	}
	n := 0
	for sg := range e.specials.segments(text) {
		if sg.special >= 0 {
			n++
		} else {
			rest := -1
			if limit >= 0 {
				rest = limit - n
			}
			m, over := e.countPlain(text[sg.start:sg.end], rest)
			n += m
			if over {
				return n, true
			}
		}
		if limit >= 0 && n > limit {
			return n, true
		}
	}
	return n, false
}

// countPlain counts the tokens of text, which holds no special, stopping
// past limit when limit >= 0. Tokens are flushed piece by piece, so the
// buffer stays small.
func (e *Encoder) countPlain(text string, limit int) (int, bool) {
	if e.sp != nil {
		return e.sp.count(text, limit)
	}
	if e.nfc {
		text = nfc(text)
	}
	bp := countBufs.Get().(*[]int)
	buf := (*bp)[:0]
	v, split := e.vocab, e.split
	n := 0
	// last is the previous piece and lastN its count: runs of one piece
	// ("777" in a long number, "\t\t" in deep code) count once.
	last, lastN := "", 0
	for i := 0; i < len(text); {
		end := split(text, i)
		piece := text[i:end]
		i = end
		switch {
		case len(piece) == len(last) && piece == last:
		case len(piece) < giantPiece:
			buf = v.appendPiece(buf[:0], piece)
			last, lastN = piece, len(buf)
		case limit >= 0 && n+(len(piece)+v.maxLen-1)/v.maxLen > limit:
			// No token is longer than maxLen, so the piece has at least
			// this many tokens: enough to know the count is over the
			// limit without merging it.
			last, lastN = "", (len(piece)+v.maxLen-1)/v.maxLen
		default:
			last, lastN = piece, v.countGiant(piece)
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

// Count returns the number of tokens of text, from the cache when the same
// text was counted before.
func (e *Encoder) Count(text string) int {
	if text == "" {
		return 0
	}
	key := textKey(text)
	if n, ok := e.cache.get(key); ok {
		return n
	}
	n, _ := e.count(text, -1)
	e.cache.put(key, n)
	return n
}

// textKey is the cache key of text. Sum256 only reads its input, so the
// text's bytes are hashed in place instead of copied: a cache hit then
// allocates nothing.
func textKey(text string) [32]byte {
	return sha256.Sum256(unsafe.Slice(unsafe.StringData(text), len(text)))
}

// CountUncached counts without the cache, for benchmarks and for text that
// is counted once.
func (e *Encoder) CountUncached(text string) int {
	n, _ := e.count(text, -1)
	return n
}

// CountUpTo counts the tokens of text but stops soon after the count passes
// limit: a budget check on a long text then costs about limit tokens of
// work. over reports n > limit; n is exact only when over is false. A
// negative limit counts as 0.
func (e *Encoder) CountUpTo(text string, limit int) (n int, over bool) {
	if limit < 0 {
		limit = 0
	}
	return e.count(text, limit)
}

// Decode returns the text of tokens. Ids that are not in the encoding decode
// to U+FFFD, so a foreign id shows instead of vanishing.
func (e *Encoder) Decode(ids []int) string {
	size := 0
	for _, id := range ids {
		size += len(e.tokenText(id))
	}
	var b strings.Builder
	b.Grow(size)
	for _, id := range ids {
		b.WriteString(e.tokenText(id))
	}
	return b.String()
}

// tokenText is the text of token id, U+FFFD for an id not the encoding's.
func (e *Encoder) tokenText(id int) string {
	if e.sp != nil {
		if s, ok := e.sp.decoded(id); ok {
			return s
		}
	} else if r := id - e.idBase; uint(r) < uint(len(e.vocab.offs)-1) {
		return e.vocab.token(uint32(r))
	}
	if s, ok := e.specials.get(id); ok {
		return s
	}
	return string(utf8.RuneError)
}

// restartBack is how many pieces before the cut Truncate re-counts from. A
// piece's match looks at most one character past the white-space run it
// ends in, so the pieces before these are the same in the prefix.
const restartBack = 3

// Truncate returns the prefix of text that keeps its first maxTokens tokens,
// ending on a character boundary, and the prefix's own token count, which
// is at most maxTokens. It encodes text once, only as far as the cut: the
// cut falls where token maxTokens ends, backed off to the start of the
// character it may split. Since a cut piece can pre-tokenize differently at
// its new end, the last few pieces are re-counted; should they no longer
// fit, the cut moves back one token.
func (e *Encoder) Truncate(text string, maxTokens int) (string, int) {
	if maxTokens <= 0 || text == "" {
		return "", 0
	}
	if e.specials == nil {
		return e.truncatePlain(text, maxTokens)
	}
	// A special is one token and a boundary: the text before it counts
	// alone, so the cut falls in the first segment that does not fit.
	n := 0
	for sg := range e.specials.segments(text) {
		if sg.special >= 0 {
			if n == maxTokens {
				return text[:sg.start], n
			}
			n++
			continue
		}
		kept, m := e.truncatePlain(text[sg.start:sg.end], maxTokens-n)
		n += m
		if len(kept) < sg.end-sg.start {
			return text[:sg.start+len(kept)], n
		}
	}
	return text, n
}

// truncatePlain is Truncate of a text that holds no special.
func (e *Encoder) truncatePlain(text string, maxTokens int) (string, int) {
	if maxTokens <= 0 || text == "" {
		return "", 0
	}
	if e.sp != nil {
		return e.sp.truncate(text, maxTokens)
	}
	if e.nfc && nfc(text) != text {
		return e.truncateUnnormalized(text, maxTokens)
	}
	// No prefix longer than maxTokens of the longest token can be within
	// maxTokens, so nothing past that is read: a hostile megabyte-long
	// piece costs what its kept part costs. Prefixes are counted on their
	// own, so the answer is the same as for the whole text.
	if limit := maxTokens * e.vocab.maxLen; limit < len(text) {
		text = text[:backOffToRune(text, limit)]
	}
	v, split := e.vocab, e.split
	// recent[k%restartBack] is the start of piece k and the tokens before it.
	type mark struct{ at, before int }
	var recent [restartBack]mark
	pieces := 0
	bp := countBufs.Get().(*[]int)
	defer countBufs.Put(bp)
	toks := (*bp)[:0]
	i := 0
	for i < len(text) {
		recent[pieces%restartBack] = mark{i, len(toks)}
		pieces++
		end := split(text, i)
		toks = v.appendPiece(toks, text[i:end])
		i = end
		if len(toks) > maxTokens {
			break
		}
	}
	*bp = toks[:0]
	if len(toks) <= maxTokens {
		return text, len(toks)
	}
	restart := recent[0]
	if pieces >= restartBack {
		restart = recent[pieces%restartBack] // the oldest of the last few
	}
	// cut is the end of token maxTokens, walking from the restart point.
	cut := restart.at
	for _, id := range toks[restart.before:maxTokens] {
		cut += v.tokenLen(uint32(id))
	}
	for kept := maxTokens; kept > 0; kept-- {
		c := backOffToRune(text, cut)
		// The white space that ends the prefix is pre-tokenized as a run
		// at the end of text, which can join pieces that the following
		// character split (\s+(?!\S)), back to before the run.
		if ws := spaceRunStart(text, c); c < restart.at || (ws < c && restart.at >= ws) {
			restart = mark{0, 0}
		}
		n, _ := e.countPlain(text[restart.at:c], -1)
		n += restart.before
		if n <= maxTokens {
			return text[:c], n
		}
		cut -= v.tokenLen(uint32(toks[kept-1]))
	}
	return "", 0
}

// truncateUnnormalized is truncatePlain of a text that NFC changes, so
// that its tokens do not map back to its bytes: the longest prefix found by
// bisection over character boundaries whose own count is within maxTokens.
// A token spans at most maxLen normalized bytes, and NFC at most triples a
// text's length, so nothing past maxTokens*maxLen*3 bytes is read.
func (e *Encoder) truncateUnnormalized(text string, maxTokens int) (string, int) {
	if limit := maxTokens * e.vocab.maxLen * 3; limit < len(text) {
		text = text[:backOffToRune(text, limit)]
	}
	if n, _ := e.countPlain(text, maxTokens); n <= maxTokens {
		return text, n
	}
	lo, hi, best := 0, len(text), 0 // text[:lo] fits; text[:hi] does not
	for hi-lo > 1 {
		mid := backOffToRune(text, lo+(hi-lo)/2)
		if mid <= lo {
			mid = lo + 1
			for mid < hi && !utf8.RuneStart(text[mid]) {
				mid++
			}
			if mid >= hi {
				break
			}
		}
		if n, over := e.countPlain(text[:mid], maxTokens); !over {
			lo, best = mid, n
		} else {
			hi = mid
		}
	}
	return text[:lo], best
}

// spaceRunStart returns the start of the run of white space that ends at
// text[:n], n when there is none.
func spaceRunStart(text string, n int) int {
	for n > 0 {
		r, size := utf8.DecodeLastRuneInString(text[:n])
		if classOf(r)&cS == 0 {
			break
		}
		n -= size
	}
	return n
}

// backOffToRune moves a byte offset back to the start of the character it
// falls in, so text[:n] is valid UTF-8 when text is.
func backOffToRune(text string, n int) int {
	if n >= len(text) {
		return len(text)
	}
	for n > 0 && !utf8.RuneStart(text[n]) {
		n--
	}
	return n
}

// HasSpecials reports whether the encoding counts special-token strings in
// text as control tokens (the supplied encodings; not the tiktoken ones).
func (e *Encoder) HasSpecials() bool { return e.control != nil }

// Special returns the first special-token string in text, if the encoding
// has specials and text holds one.
func (e *Encoder) Special(text string) (string, bool) {
	if e.control == nil {
		return "", false
	}
	start, end, _, ok := e.control.next(text, 0)
	return text[start:end], ok
}

// parallelMin is the length from which CountParallel splits a text.
const parallelMin = 1 << 20

// CountParallel counts a long text on up to workers goroutines, for a
// one-off count of a large file: the text is cut after line feeds followed
// by a letter or a number (StartsPiece), where a count is the sum of the
// counts of the two sides, and the parts are counted uncached side by side.
// A text with no such place, a short one, or an encoding whose specials
// hold a line feed is counted whole.
func (e *Encoder) CountParallel(text string, workers int) int {
	if workers < 2 || len(text) < parallelMin || e.specials.hasNewline() {
		return e.CountUncached(text)
	}
	var cuts []int
	for k := 1; k < workers; k++ {
		at := k * len(text) / workers
		for at < len(text) && !(text[at-1] == '\n' && StartsPiece(text[at:])) {
			if j := strings.IndexByte(text[at:], '\n'); j >= 0 {
				at += j + 1
			} else {
				at = len(text)
			}
		}
		if at < len(text) && (len(cuts) == 0 || at > cuts[len(cuts)-1]) {
			cuts = append(cuts, at)
		}
	}
	cuts = append(cuts, len(text))
	counts := make([]int, len(cuts))
	var wg sync.WaitGroup
	from := 0
	for i, to := range cuts {
		wg.Add(1)
		go func(i int, part string) {
			defer wg.Done()
			counts[i] = e.CountUncached(part)
		}(i, text[from:to])
		from = to
	}
	wg.Wait()
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}
