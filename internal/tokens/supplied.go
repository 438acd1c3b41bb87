package tokens

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// EnvDir names the directory of supplied vocabularies: <dir>/<encoding>/
// tokenizer.json, the file as the model's repository publishes it.
const EnvDir = "PROMPTOPS_TOKENIZERS_DIR"

// dir is the directory set by SetDir; empty means EnvDir's.
var dir atomic.Pointer[string]

// SetDir sets the directory of supplied vocabularies for this process, in
// place of EnvDir's (a verb's --tokenizers-dir).
func SetDir(d string) { dir.Store(&d) }

// Dir is the directory of supplied vocabularies, empty when none is set.
func Dir() string {
	if d := dir.Load(); d != nil {
		return *d
	}
	return os.Getenv(EnvDir)
}

// File is where the vocabulary of a supplied encoding is looked for under d.
func File(d, encoding string) string {
	return filepath.Join(d, encoding, "tokenizer.json")
}

// UnavailableError is a supplied encoding whose vocabulary is not there, or
// is not the one the encoding names. Its message says how to supply it.
type UnavailableError struct {
	Encoding string
	// Reason is what was found: no directory, no file, or another file.
	Reason string
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("encoding %s needs its vocabulary, which is not built in: %s; put the model's tokenizer.json at <dir>/%s/tokenizer.json, where <dir> is %s or --tokenizers-dir (the Helm chart's tokenizers values mount one)", e.Encoding, e.Reason, e.Encoding, EnvDir)
}

// supplied is an encoding whose vocabulary is read from the tokenizers
// directory, and accepted only when its checksum is sum.
type supplied struct {
	model string
	// sum is vocabSum of the model's tokenizer.json, packSum the SHA-256
	// of its pack's payload (pack.go).
	sum, packSum string
	// mergesOnly: only the file's merges merge, ranked in their order
	// (which is their tokens' id order), and a piece that is a token is
	// merged like any other (ignore_merges false): a vocabulary trained as
	// BPE, not converted from tiktoken.
	mergesOnly bool
	// nfc: the text between specials is normalized to NFC first.
	nfc bool
	// addedAsText: the added tokens are the vocabulary's first ids and are
	// counted as text, as Mistral's own tokenizer counts them; the ranks
	// start after them.
	addedAsText bool
	// sentencePiece: a SentencePiece BPE model (sentencepiece.go), whose
	// added tokens include plain text (line feeds, runs of "▁", HTML
	// tags): only those the file marks special are control tokens.
	sentencePiece bool

	enc atomic.Pointer[Encoder]
	mu  sync.Mutex
	// tried is the file last tried and what it was then; err is why it
	// was refused. A Get sees the same error until the file changes.
	tried fileState
	err   error
}

type fileState struct {
	path  string
	size  int64
	mtime time.Time
}

func (s *supplied) get(name string, split splitFunc) (*Encoder, error) {
	if e := s.enc.Load(); e != nil {
		return e, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.enc.Load(); e != nil {
		return e, nil
	}
	d := Dir()
	if d == "" {
		return nil, &UnavailableError{Encoding: name, Reason: EnvDir + " is not set"}
	}
	// The model's tokenizer.json, or else its pack.
	path := File(d, name)
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if pfi, perr := os.Stat(PackFile(d, name)); perr == nil {
			path, fi, err = PackFile(d, name), pfi, nil
		} else if !errors.Is(perr, fs.ErrNotExist) {
			err = perr
		}
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &UnavailableError{Encoding: name, Reason: "there is no " + path + " (nor tokenizer.pack beside it)"}
		}
		return nil, &UnavailableError{Encoding: name, Reason: err.Error()}
	}
	st := fileState{path, fi.Size(), fi.ModTime()}
	if s.err != nil && st == s.tried {
		return nil, s.err
	}
	s.tried, s.err = st, nil
	enc, err := s.load(name, path, split)
	if err != nil {
		s.err = err
		return nil, err
	}
	s.enc.Store(enc)
	return enc, nil
}

func (s *supplied) load(name, path string, split splitFunc) (*Encoder, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &UnavailableError{Encoding: name, Reason: err.Error()}
	}
	var hv *hfVocab
	if filepath.Base(path) == "tokenizer.pack" {
		hv, err = readPack(path, data, s.packSum, s.sentencePiece)
	} else if hv, err = parseHF(path, data); err == nil && hv.sum != s.sum {
		err = fmt.Errorf("%s is not %s's vocabulary (checksum %.12s, want %.12s): it is another model's tokenizer", path, s.model, hv.sum, s.sum)
	}
	if err != nil {
		return nil, &UnavailableError{Encoding: name, Reason: err.Error()}
	}
	if s.sentencePiece {
		m, err := buildSP(path, hv)
		if err != nil {
			return nil, &UnavailableError{Encoding: name, Reason: err.Error()}
		}
		return &Encoder{name: name, sp: m, specials: newSpecials(hv.specials), control: newSpecials(hv.control), cache: newCountCache(DefaultCacheEntries)}, nil
	}
	var merges [][2]uint32
	if s.mergesOnly {
		merges = hv.merges
	}
	text, offs, specials, base := hv.text, hv.offs, newSpecials(hv.specials), 0
	if s.addedAsText {
		base = len(hv.specials)
		for _, id := range hv.specials {
			if int(id) >= base {
				return nil, &UnavailableError{Encoding: name, Reason: fmt.Sprintf("%s: added token %d is not among the first %d ids", path, id, base)}
			}
		}
		text, offs, specials = text[offs[base]:], slices.Clone(offs[base:]), nil
		for i := range offs {
			offs[i] -= hv.offs[base]
		}
	}
	v, err := buildVocab(path, text, offs, merges)
	if err != nil {
		return nil, &UnavailableError{Encoding: name, Reason: err.Error()}
	}
	return &Encoder{name: name, vocab: v, split: split, nfc: s.nfc, specials: specials, control: specials, idBase: base, cache: newCountCache(DefaultCacheEntries)}, nil
}

// The checksums (vocabSum) of the supplied vocabularies, of the files the
// models' repositories publish, and of their packs' payloads.
const (
	llama3Sum     = "cbc4e5aec1d6530fd3daa4a5db5abd5ffee21b309cfcf55cf4cb460d71cdd9dc"
	qwen3Sum      = "e94a80a4726c52e0aa9e0396f9cf8ce9bb6e152540db4856aa521226c7485d7a"
	deepSeekV3Sum = "bd01eb3a47247de0f3815bbf01482cf5fc7287ae1d81c1424670ff4adc7ba273"
	tekkenSum     = "6b5b990b9e5c770a5c8175c4cfac8905e06689b72f40ccbf2fcafcb18a76d9bc"
	gemma3Sum     = "cddb22aa22e7184f0dbfba312e7ac7cdf0db5f8114d5fb0996a9296b6d3725f7"

	llama3PackSum     = "635dae6c95dd7d86f6a2205c03ae15c96a3f0d81a935615f353b89c5426b3040"
	qwen3PackSum      = "8b9eb12d94b9ad9ee07b2adb7b30bc63e379392dee4ebf2be874d5a542f024fa"
	deepSeekV3PackSum = "e5c72eff0b550fccf8ca7f94f5a9694498195901120f90abeb56c3113c549afe"
	tekkenPackSum     = "a549d0c4c7cdca1e9fa628783ae6e100b4e4561c1c4fe0e468d47470060aedfc"
	gemma3PackSum     = "cc56707a591eb239022b34ba5d3769e60b115991a3613dcb2490542040f1041b"
)
