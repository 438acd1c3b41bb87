package tokens

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// nodePreTokenizer is hack/tokenizers/pretokenize.mjs, started once: the
// reference pre-tokenizers of the supplied encodings, run by
// @huggingface/tokenizers from the models' own tokenizer.json.
type nodePreTokenizer struct {
	mu  sync.Mutex
	in  *json.Encoder
	out *bufio.Scanner
}

var (
	nodeOnce sync.Once
	nodePT   *nodePreTokenizer
	nodeErr  error
)

func startNodePreTokenizer(t testing.TB) *nodePreTokenizer {
	t.Helper()
	nodeOnce.Do(func() {
		script, _ := filepath.Abs("../../hack/tokenizers/pretokenize.mjs")
		cmd := exec.Command("node", script, Dir())
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			nodeErr = err
			return
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			nodeErr = err
			return
		}
		if nodeErr = cmd.Start(); nodeErr != nil {
			return
		}
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<26)
		nodePT = &nodePreTokenizer{in: json.NewEncoder(stdin), out: sc}
	})
	if nodeErr != nil {
		t.Fatalf("starting the reference pre-tokenizer: %v (make tokenizers installs @huggingface/tokenizers)", nodeErr)
	}
	return nodePT
}

func (n *nodePreTokenizer) pieces(t testing.TB, encoding, text string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.in.Encode(map[string]string{"encoding": encoding, "text": text}); err != nil {
		t.Fatal(err)
	}
	if !n.out.Scan() {
		t.Fatalf("the reference pre-tokenizer stopped: %v", n.out.Err())
	}
	var out []string
	if err := json.Unmarshal(n.out.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// byteLevel writes s in the byte-level alphabet, as the reference's pieces.
func byteLevel(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteRune(byteLevelRune[s[i]])
	}
	return b.String()
}

// FuzzSuppliedPreTokenizers compares each supplied encoding's pre-tokenizer
// with the reference's own, run in Node on the model's tokenizer.json: the
// same pieces for any valid UTF-8 text (the reference's texts are
// JavaScript strings).
//
//	go test -run '^$' -fuzz FuzzSuppliedPreTokenizers ./internal/tokens/
func FuzzSuppliedPreTokenizers(f *testing.F) {
	splits := map[string]splitFunc{Llama3: splitCL100K, Qwen3: splitQwen, DeepSeekV3: splitDeepSeek, Tekken: splitTekken}
	for name := range splits {
		if _, err := os.Stat(File(Dir(), name)); err != nil {
			if os.Getenv("PROMPTOPS_TOKENIZERS_REQUIRED") != "" {
				f.Fatal(err)
			}
			f.Skipf("no %s vocabulary (make tokenizers fetches it; make test sets %s)", name, EnvDir)
		}
	}
	for _, s := range []string{
		"Hello, world! It's 12345 o'clock.", "统计分析 12345 ひらがな カタカナ ・ 中文。", "  \n\n x\t\ty  ", "a\u0085b\ufeffc\u200bd",
		"don'T WE'LL I'M", "x1234567y", "e\u0301\u0316 ñ", "!!!abc ...def", "\r\n\r\n", "😀😀 👍🏽", "ſ's", "   123   ", "Ⅻ²½",
		"[INST]hi[/INST]", "<|eot_id|>", "\u0000\u0001abc", "\u30fb\u30a0x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if !utf8.ValidString(text) || text == "" {
			return
		}
		// tokenizers.js folds only ASCII letters in the patterns' (?i:'s|…),
		// where the Rust tokenizers (Oniguruma) and tiktoken, which Llama 3
		// was built with, also take ſ (U+017F) for s; promptops counts as
		// they do (TestReference against tiktoken has "'ſ").
		if strings.Contains(text, "'\u017f") {
			return
		}
		ref := startNodePreTokenizer(t)
		for name, split := range splits {
			var got []string
			for i := 0; i < len(text); {
				end := split(text, i)
				got = append(got, byteLevel(text[i:end]))
				i = end
			}
			if want := ref.pieces(t, name, text); !slices.Equal(got, want) {
				t.Errorf("%s %+q: pieces %q, the reference's %q", name, text, got, want)
			}
		}
	})
}
