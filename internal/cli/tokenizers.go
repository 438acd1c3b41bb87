package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/promptops/promptops/internal/tokens"
)

func init() {
	register("tokenizers", "pack a supplied encoding's tokenizer.json small enough for a ConfigMap (pack)", runTokenizers)
}

const tokenizersUsage = "Usage: promptops tokenizers pack -e ENCODING [-f TOKENIZER_JSON] [-o FILE]"

func runTokenizers(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "pack" {
		return groupUsage(args, stdout, stderr, tokenizersUsage)
	}
	fs := newFlagSet("tokenizers pack", stdout, stderr)
	tokenizersDirFlag(fs)
	encoding := fs.String("e", "", "`ENCODING`: "+strings.Join(tokens.Names[2:], ", ")+".")
	from := fs.String("f", "", "The model's tokenizer.json, a `FILE` (default <tokenizers-dir>/<encoding>/tokenizer.json).")
	out := fs.String("o", "", "`FILE` to write the pack to (default <encoding>.pack; - for standard output).")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), tokenizersUsage+`

Writes the compact form of a supplied encoding's vocabulary: under 1 MiB, so
that it fits a ConfigMap's binaryData (but gemma3's, 1.7 MB), and taken as
<tokenizers-dir>/<encoding>/tokenizer.pack where tokenizer.json is not there.
The tokenizer.json must be the encoding's vocabulary (its checksum).
Exit 0: written; 2: invalid input or usage.`)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args[1:]); !ok {
		return code
	}
	if *encoding == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, tokenizersUsage)
		return ExitInvalid
	}
	src := *from
	if src == "" {
		if tokens.Dir() == "" {
			fmt.Fprintf(stderr, "promptops tokenizers pack: name the tokenizer.json with -f, or its directory with --tokenizers-dir or %s\n", tokens.EnvDir)
			return ExitInvalid
		}
		src = tokens.File(tokens.Dir(), *encoding)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		fmt.Fprintf(stderr, "promptops tokenizers pack: %v\n", err)
		return ExitInvalid
	}
	pack, err := tokens.Pack(*encoding, data)
	if err != nil {
		fmt.Fprintf(stderr, "promptops tokenizers pack: %s: %v\n", src, err)
		return ExitInvalid
	}
	dst := *out
	if dst == "" {
		dst = *encoding + ".pack"
	}
	if dst == "-" {
		_, err = stdout.Write(pack)
	} else {
		err = os.WriteFile(dst, pack, 0o644)
	}
	if err != nil {
		fmt.Fprintf(stderr, "promptops tokenizers pack: %v\n", err)
		return ExitInvalid
	}
	switch {
	case dst == "-":
	case len(pack) > tokens.MaxPackBytes:
		fmt.Fprintf(stderr, "wrote %s: %d bytes (tokenizer.json: %d), more than a ConfigMap holds (%d): supply it on a volume as %s/tokenizer.pack, or the tokenizer.json itself\n",
			dst, len(pack), len(data), tokens.MaxPackBytes, *encoding)
	default:
		fmt.Fprintf(stderr, "wrote %s: %d bytes (tokenizer.json: %d). As a ConfigMap: kubectl create configmap promptops-tokenizers --from-file=%s=%s, mounted with items [{key: %s, path: %s/tokenizer.pack}]\n",
			dst, len(pack), len(data), *encoding, dst, *encoding, *encoding)
	}
	return ExitOK
}
