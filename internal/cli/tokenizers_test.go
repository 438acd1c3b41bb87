package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/tokens"
	"github.com/promptops/promptops/internal/tokens/tokenstest"
)

// TestTokenizersPack: the verb writes a supplied encoding's pack, which
// fits a ConfigMap; bad input exits 2 saying why.
func TestTokenizersPack(t *testing.T) {
	tokenstest.Encoder(t, tokens.Llama3) // skips without the vocabulary
	src := tokens.File(tokens.Dir(), tokens.Llama3)
	d := t.TempDir()
	out := filepath.Join(d, "llama3", "tokenizer.pack")
	os.MkdirAll(filepath.Dir(out), 0o755)
	code, _, stderr := run(t, "", "tokenizers", "pack", "-e", "llama3", "-f", src, "-o", out)
	if fi, err := os.Stat(out); code != ExitOK || err != nil || fi.Size() > tokens.MaxPackBytes || !strings.Contains(stderr, "kubectl create configmap") {
		t.Fatalf("exit %d, %v: %s", code, err, stderr)
	}
	// The verb writes what the tokens package packs (which TestPack loads
	// from a directory that has only the pack).
	data, _ := os.ReadFile(src)
	written, _ := os.ReadFile(out)
	if p, err := tokens.Pack(tokens.Llama3, data); err != nil || string(p) != string(written) {
		t.Fatalf("the written pack is not tokens.Pack's: %v", err)
	}
	tokens.SetDir(filepath.Dir(filepath.Dir(src)))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tokenizers", "pack", "-e", "o200k_base", "-f", src}, "not a supplied encoding"},
		{[]string{"tokenizers", "pack", "-e", "qwen3", "-f", src}, "is not Qwen 3"},
		{[]string{"tokenizers", "pack", "-e", "llama3", "-f", filepath.Join(d, "nope.json")}, "no such file"},
		{[]string{"tokenizers", "pack"}, "Usage"},
		{[]string{"tokenizers"}, "Usage"},
	} {
		if code, _, stderr := run(t, "", c.args...); code != ExitInvalid || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d: %s", c.args, code, stderr)
		}
	}
}
