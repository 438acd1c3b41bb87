package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/tokens"
)

func init() {
	register("tokens", "count the tokens of a file or of JSONL texts, offline (count)", runTokens)
}

func runTokens(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "count" {
		return groupUsage(args, stdout, stderr, "Usage: promptops tokens count [-e ENCODING] [--jsonl] [FILE]")
	}
	fs := newFlagSet("tokens count", stdout, stderr)
	tokenizersDirFlag(fs)
	encoding := fs.String("e", string(promptopsv1.EncodingO200K), "`ENCODING`: o200k_base, cl100k_base, or llama3, qwen3, deepseek_v3, tekken, gemma3 (supplied: --tokenizers-dir).")
	jsonl := fs.Bool("jsonl", false, `Read one {"text": ...} object per line and print one {"tokens": N} line for each, in order.`)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: promptops tokens count [-e ENCODING] [--jsonl] [FILE]\n\nPrints the number of tokens of FILE, or of standard input without FILE, counted\nexactly as the operator counts them. Exit 0: counted; 2: invalid input or usage.")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args[1:]); !ok {
		return code
	}
	if fs.NArg() > 1 {
		fmt.Fprintf(stderr, "promptops tokens count: want at most one FILE, got %d\n", fs.NArg())
		return ExitInvalid
	}
	// Building the tables makes only garbage the collector need not chase
	// (a tenth of a second for o200k_base, a third of it collecting).
	gc := debug.SetGCPercent(-1)
	enc, err := tokens.Get(*encoding)
	debug.SetGCPercent(gc)
	if err != nil {
		fmt.Fprintf(stderr, "promptops tokens count: %v\n", err)
		return ExitInvalid
	}
	in, name := stdin, "standard input"
	if fs.NArg() == 1 {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			fmt.Fprintf(stderr, "promptops tokens count: %v\n", err)
			return ExitInvalid
		}
		defer f.Close()
		in, name = f, fs.Arg(0)
	}
	if *jsonl {
		return countJSONL(enc, in, name, stdout, stderr)
	}
	data, err := io.ReadAll(in)
	if err != nil {
		fmt.Fprintf(stderr, "promptops tokens count: reading %s: %v\n", name, err)
		return ExitInvalid
	}
	// A one-off count: the cache would only hold it; a large file is
	// counted on every processor.
	fmt.Fprintln(stdout, enc.CountParallel(string(data), runtime.GOMAXPROCS(0)))
	return ExitOK
}

// countJSONL streams: each line is counted and printed before the next is
// read, so a large file needs memory for one line only.
func countJSONL(enc *tokens.Encoder, in io.Reader, name string, stdout, stderr io.Writer) int {
	r := bufio.NewReader(in)
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	for line := 1; ; line++ {
		b, err := r.ReadBytes('\n')
		if len(b) == 0 && err == io.EOF {
			return ExitOK
		}
		if err != nil && err != io.EOF {
			fmt.Fprintf(stderr, "promptops tokens count: reading %s: %v\n", name, err)
			return ExitInvalid
		}
		var obj struct {
			Text *string `json:"text"`
		}
		if jerr := json.Unmarshal(bytes.TrimRight(b, "\r\n"), &obj); jerr != nil || obj.Text == nil {
			w.Flush()
			if jerr == nil {
				jerr = fmt.Errorf(`no "text" field`)
			}
			fmt.Fprintf(stderr, "promptops tokens count: %s line %d: want a JSON object with a \"text\" string: %v\n", name, line, jerr)
			return ExitInvalid
		}
		fmt.Fprintf(w, "{\"tokens\":%d}\n", enc.Count(*obj.Text))
		if err == io.EOF {
			return ExitOK
		}
	}
}
