package tokens

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPack: each supplied encoding's pack fits a ConfigMap, and loaded
// from a directory that has only the pack it encodes the corpus as the
// model's tokenizer.json does; another encoding's pack, a truncated one
// and a tokenizer.json of another model are refused with the reason.
func TestPack(t *testing.T) {
	rows := loadReference(t)
	orig := Dir()
	defer SetDir(orig)
	var packs = map[string][]byte{}
	for _, name := range Names[2:] {
		want := suppliedEncoder(t, name)
		data, err := os.ReadFile(File(Dir(), name))
		if err != nil {
			t.Fatal(err)
		}
		p, err := Pack(name, data)
		if err != nil {
			t.Fatal(err)
		}
		// Gemma's 262,144 tokens of many scripts are 1.4 MB gzipped alone:
		// its pack is for a volume, not a ConfigMap.
		if len(p) > MaxPackBytes && name != Gemma3 {
			t.Errorf("%s: a pack of %d bytes does not fit a ConfigMap", name, len(p))
		}
		packs[name] = p
		d := t.TempDir()
		if err := os.MkdirAll(filepath.Join(d, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(PackFile(d, name), p, 0o644); err != nil {
			t.Fatal(err)
		}
		c := encoders[name].supplied
		s := &supplied{model: c.model, sum: c.sum, packSum: c.packSum, mergesOnly: c.mergesOnly, nfc: c.nfc, addedAsText: c.addedAsText, sentencePiece: c.sentencePiece}
		SetDir(d)
		got, err := s.get(name, encoders[name].split)
		SetDir(orig)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		const text = "a\n<start_of_turn> <|eot_id|><|im_end|>"
		if a, _ := got.Special(text); a != func() string { b, _ := want.Special(text); return b }() {
			t.Errorf("%s: Special from the pack %q differs from tokenizer.json's", name, a)
		}
		for i, r := range rows {
			if i%5 != 0 {
				continue
			}
			if a, b := got.Encode(r.Text), want.Encode(r.Text); !slices.Equal(a, b) {
				t.Fatalf("%s %q: from the pack %v, from tokenizer.json %v", name, abbrev(r.Text), abbrevIDs(a), abbrevIDs(b))
			}
		}
		t.Logf("%s: tokenizer.json %d bytes, pack %d", name, len(data), len(p))
	}
	if len(packs) < 2 {
		return
	}
	// Refusals, each saying why.
	d := t.TempDir()
	SetDir(d)
	os.MkdirAll(filepath.Join(d, Llama3), 0o755)
	for body, reason := range map[string]string{
		string(packs[Qwen3]):                         "is not this encoding's pack",
		string(packs[Llama3][:len(packs[Llama3])/2]): "unexpected EOF",
		"not a pack":                                 "is not a promptops tokenizers pack",
	} {
		if err := os.WriteFile(PackFile(d, Llama3), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		s := &supplied{model: "Llama 3", sum: llama3Sum, packSum: llama3PackSum}
		if _, err := s.get(Llama3, splitCL100K); err == nil || !strings.Contains(err.Error(), reason) {
			t.Errorf("pack %.20q: %v, want %q", body, err, reason)
		}
	}
	SetDir(orig)
	data, _ := os.ReadFile(File(Dir(), Qwen3))
	if _, err := Pack(Llama3, data); err == nil || !strings.Contains(err.Error(), "is not Llama 3") {
		t.Errorf("Pack of qwen3's file as llama3: %v", err)
	}
	if _, err := Pack(O200K, data); err == nil || !strings.Contains(err.Error(), "not a supplied encoding") {
		t.Errorf("Pack of a built-in encoding: %v", err)
	}
}
