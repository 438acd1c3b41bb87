// Package tokens counts tokens exactly with tiktoken encodings, offline: the
// rank files are compiled into the binary and nothing is ever downloaded.
// Encoders are built once per encoding and shared; counts are cached.
package tokens

import (
	"crypto/sha256"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// Encodings supported by promptops.
const (
	CL100K = "cl100k_base"
	O200K  = "o200k_base"
)

// DefaultCacheEntries bounds the count cache of each encoder.
const DefaultCacheEntries = 16384

func init() {
	// Set before any encoding is built: the default loader downloads rank
	// files at run time, which must never happen.
	tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader())
}

// Encoder counts and cuts text in one encoding. It is safe for concurrent use.
type Encoder struct {
	name  string
	enc   *tiktoken.Tiktoken
	cache *lru
	// enc needs no lock: tiktoken-go's CoreBPE is read-only after it is
	// built and regexp2 guards its own runner cache. TestParallelSharing
	// checks this under -race.
}

var (
	encodersMu sync.Mutex
	encoders   = map[string]*encoderOnce{}
)

type encoderOnce struct {
	once sync.Once
	enc  *Encoder
	err  error
}

// Get returns the shared encoder for name, building it on first use
// (about 0.5 s for o200k_base).
func Get(name string) (*Encoder, error) {
	if name != CL100K && name != O200K {
		return nil, fmt.Errorf("unsupported encoding %q: use %s or %s", name, CL100K, O200K)
	}
	encodersMu.Lock()
	e, ok := encoders[name]
	if !ok {
		e = &encoderOnce{}
		encoders[name] = e
	}
	encodersMu.Unlock()
	e.once.Do(func() {
		t, err := tiktoken.GetEncoding(name)
		if err != nil {
			e.err = fmt.Errorf("loading encoding %s: %w", name, err)
			return
		}
		e.enc = &Encoder{name: name, enc: t, cache: newLRU(DefaultCacheEntries)}
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

// Encode returns the tokens of text. Special-token strings such as
// <|endoftext|> in the text are encoded as plain text: user text can never
// inject a control token, and the library's panic on disallowed special
// tokens can never be reached.
func (e *Encoder) Encode(text string) []int {
	if text == "" {
		return nil
	}
	return e.enc.EncodeOrdinary(text)
}

// Count returns the number of tokens of text, from the cache when the same
// text was counted before.
func (e *Encoder) Count(text string) int {
	if text == "" {
		return 0
	}
	key := sha256.Sum256([]byte(text))
	if n, ok := e.cache.get(key); ok {
		return n
	}
	n := len(e.Encode(text))
	e.cache.put(key, n)
	return n
}

// CountUncached counts without the cache, for benchmarks.
func (e *Encoder) CountUncached(text string) int { return len(e.Encode(text)) }

// Truncate returns the longest prefix of text that has at most maxTokens
// tokens and is valid UTF-8, and its token count. A cut between two tokens
// can fall inside a multi-byte character; the cut then backs off to the
// character's start.
func (e *Encoder) Truncate(text string, maxTokens int) (string, int) {
	if maxTokens <= 0 || text == "" {
		return "", 0
	}
	toks := e.Encode(text)
	if len(toks) <= maxTokens {
		return text, len(toks)
	}
	prefixLen := e.decodedLen(toks[:maxTokens])
	for prefixLen > 0 {
		cut := backOffToRune(text, prefixLen)
		prefix := text[:cut]
		// Re-encoding a prefix may merge differently at its end; shrink
		// until the prefix itself fits. Prefixes are not cached: most are
		// thrown away.
		if n := e.CountUncached(prefix); n <= maxTokens {
			return prefix, n
		}
		prefixLen = cut - 1
	}
	return "", 0
}

// decodedLen is the byte length of the text the tokens decode to.
func (e *Encoder) decodedLen(toks []int) int {
	return len(e.enc.Decode(toks))
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
