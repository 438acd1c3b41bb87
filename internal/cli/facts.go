package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/memscope"
	"github.com/promptops/promptops/internal/redact"
)

func init() {
	register("facts", "import, list, retry and delete a bank's facts (import | list | retry | delete)", runFacts)
	register("observations", "list a bank's observations (list)", runObservations)
}

func runFacts(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || isHelp(args[0]) {
		return groupUsage(args, stdout, stderr, "Usage: promptops facts import|list|retry|delete --bank NS/NAME ...\n\n"+storeNote+"\nRun 'promptops facts <subcommand> -h' for its flags.")
	}
	switch args[0] {
	case "import":
		return runFactsImport(args[1:], stdin, stdout, stderr)
	case "list":
		return runFactsList(args[1:], stdout, stderr)
	case "retry":
		return runFactsRetry(args[1:], stdout, stderr)
	case "delete":
		return runFactsDelete(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "promptops facts: unknown subcommand %q (import, list, retry, delete)\n", args[0])
	return ExitInvalid
}

// MaxFactLine is the longest line, without its line ending, that facts
// import reads. It bounds the reader's buffer; a fact's text is far shorter.
const MaxFactLine = 4 << 20

// utf8BOM is the byte order mark some Windows editors write first.
var utf8BOM = []byte("\xef\xbb\xbf")

// parseFacts reads JSONL a line at a time; any bad line fails the whole
// file. It accepts a UTF-8 byte order mark and CRLF line endings and skips
// blank lines. A repeated id with the same text and source is dropped and
// counted in dups; with different text or another source it is an error.
func parseFacts(r io.Reader) (facts []consolidation.Fact, dups int, err error) {
	facts, _, dups, err = readFacts(r)
	return facts, dups, err
}

// readFacts is parseFacts that also returns each fact's line number.
func readFacts(r io.Reader) (facts []consolidation.Fact, lines []int, dups int, err error) {
	type seenID struct{ line, index int }
	seen := map[string]seenID{}
	err = eachJSONLine(r, MaxFactLine, func(n int, line []byte) error {
		f, err := parseFactLine(line)
		if err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		if f.ID != "" {
			if first, ok := seen[f.ID]; ok {
				if prev := facts[first.index]; prev.Text != f.Text || prev.Source != f.Source {
					return fmt.Errorf("line %d: id %q repeats line %d with different text or source", n, f.ID, first.line)
				}
				dups++
				return nil
			}
			seen[f.ID] = seenID{line: n, index: len(facts)}
		}
		facts = append(facts, f)
		lines = append(lines, n)
		return nil
	})
	if err != nil {
		return nil, nil, 0, err
	}
	return facts, lines, dups, nil
}

// eachJSONLine gives fn each non-blank line of r with its number, one line
// held at a time: a UTF-8 byte order mark, CRLF endings and surrounding
// white space dropped. A line longer than max bytes is an error naming
// it, as is a read error; fn's errors end the reading as they are.
func eachJSONLine(r io.Reader, max int, fn func(n int, line []byte) error) error {
	sc := bufio.NewScanner(r)
	// Room for a line of max bytes and its CRLF; longer lines are refused
	// below or by the scanner with bufio.ErrTooLong.
	sc.Buffer(make([]byte, 64<<10), max+2)
	n := 1
	for ; sc.Scan(); n++ {
		line := sc.Bytes()
		if n == 1 {
			line = bytes.TrimPrefix(line, utf8BOM)
		}
		// TrimSpace also drops the \r of a CRLF ending.
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if len(line) > max {
			return lineErrorf(n, "longer than %d MiB", max>>20)
		}
		if err := fn(n, line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return lineErrorf(n, "longer than %d MiB", max>>20)
		}
		return lineErrorf(n, "%v", err)
	}
	return nil
}

// parseFactLine decodes one non-blank line; errors name the field.
func parseFactLine(line []byte) (consolidation.Fact, error) { return consolidation.ParseFact(line) }

// derivedFactID is the id of a fact imported without one
// (consolidation.DerivedFactID), so importing the same file again adds
// nothing.
func derivedFactID(bank consolidation.BankID, f consolidation.Fact) string {
	return consolidation.DerivedFactID(bank, f)
}

func runFactsImport(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("facts import", stdout, stderr)
	var sf storeFlags
	sf.register(fs)
	var rf redactionFlags
	rf.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: promptops facts import --bank NS/NAME FILE.jsonl|-\n\nOne fact per line: {\"id\"?, \"scope\"?, \"text\", \"source\"?, \"entities\", \"occurredStart\", \"occurredEnd\", \"mentionedAt\", \"tags\"}.\nUTF-8, with or without a byte order mark; LF or CRLF line endings; blank lines are skipped.\nA line may hold at most %d MiB. A fact without an id gets one derived from the bank, its scope, text, three times and source\n(a UUID from their SHA-256), so importing a file again adds nothing. A repeated id with\nthe same text and source is skipped and counted as already present; with different text or\nanother source it is an error, as is occurredEnd before occurredStart.\nA bad line is reported with its number and nothing of the file is imported (exit code 2).\nSecrets (and the --redact-personal-data kinds) are replaced by [REDACTED:<kind>] before a fact is stored\nand counted by kind; with --redact-secrets=Reject a line holding a secret fails the import (exit code 2).\n", MaxFactLine>>20)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	r, red, closeInput, code, ok := importInput("facts import", fs, &sf, &rf, stdin, stderr)
	if !ok {
		return code
	}
	defer closeInput()
	name := fs.Arg(0)
	facts, lines, dups, err := readFacts(r)
	if err != nil {
		fmt.Fprintf(stderr, "promptops facts import: %s: %v; nothing imported\n", name, err)
		return ExitInvalid
	}
	redacted := redact.Counts{}
	for i := range facts {
		// Redacted before its id is derived: importing the file again
		// finds the same facts.
		if err := consolidation.RedactFact(red, &facts[i], redacted); err != nil {
			fmt.Fprintf(stderr, "promptops facts import: %s: line %d: %v and --redact-secrets is Reject; nothing imported\n", name, lines[i], err)
			return ExitInvalid
		}
		if facts[i].ID == "" {
			facts[i].ID = derivedFactID(sf.id(), facts[i])
		}
	}
	ctx := context.Background()
	store, err := sf.open(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "promptops facts import:", err)
		return ExitFailed
	}
	defer store.Close()
	n, err := store.ImportFacts(ctx, sf.id(), facts)
	if err != nil {
		fmt.Fprintf(stderr, "promptops facts import: %v; nothing imported\n", err)
		return ExitFailed
	}
	fmt.Fprintf(stdout, "imported %d facts into %s (%d already present)\n", n, sf.bank, len(facts)-n+dups)
	if len(redacted) > 0 {
		fmt.Fprintf(stdout, "redacted %s\n", formatRedacted(redacted))
	}
	return ExitOK
}

func runFactsList(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("facts list", stdout, stderr)
	var sf storeFlags
	sf.register(fs)
	status := fs.String("status", "", "Only facts in this `STATE`: pending, consolidated or failed.")
	output := fs.String("o", "text", "Output `FORMAT`: text or json.")
	limit := fs.Int("limit", 1000, "At most this many facts.")
	scope := scopeFlag(fs, "facts")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := sf.usageError("facts list", stderr); !ok {
		return code
	}
	if code, ok := outputUsageError("facts list", *output, stderr); !ok {
		return code
	}
	switch {
	case *status != "" && *status != consolidation.FactPending && *status != consolidation.FactConsolidated && *status != consolidation.FactFailed:
		fmt.Fprintf(stderr, "promptops facts list: --status is %q; want pending, consolidated or failed\n", *status)
		return ExitInvalid
	case *limit < 1:
		fmt.Fprintf(stderr, "promptops facts list: --limit is %d; want 1 or more\n", *limit)
		return ExitInvalid
	}
	ctx := context.Background()
	store, err := sf.openKnown(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "promptops facts list:", err)
		return ExitFailed
	}
	defer store.Close()
	var facts []consolidation.Fact
	if *scope != nil {
		facts, err = store.ListScopeFacts(ctx, sf.id().Scope(**scope), *status, *limit)
	} else {
		facts, err = store.ListFacts(ctx, sf.id(), *status, *limit)
	}
	if err != nil {
		fmt.Fprintln(stderr, "promptops facts list:", err)
		return ExitFailed
	}
	if *output == "json" {
		if facts == nil {
			facts = []consolidation.Fact{}
		}
		return writeJSON(stdout, facts)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSCOPE\tSTATUS\tTEXT\tREASON")
	for _, f := range facts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.ID, f.Scope, f.Status, cell(f.Text, 60), f.FailureReason)
	}
	_ = tw.Flush()
	return ExitOK
}

func runFactsRetry(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("facts retry", stdout, stderr)
	var sf storeFlags
	sf.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: promptops facts retry --bank NS/NAME [FACT-ID ...]\n\nSets failed facts (all of the bank's, or those named) back to pending.")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := sf.usageError("facts retry", stderr); !ok {
		return code
	}
	ctx := context.Background()
	store, err := sf.openKnown(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "promptops facts retry:", err)
		return ExitFailed
	}
	defer store.Close()
	n, err := store.RetryFacts(ctx, sf.id().Scope(""), fs.Args())
	if err != nil {
		fmt.Fprintln(stderr, "promptops facts retry:", err)
		return ExitFailed
	}
	fmt.Fprintf(stdout, "%d failed facts set back to pending\n", n)
	return ExitOK
}

func runFactsDelete(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("facts delete", stdout, stderr)
	var sf storeFlags
	sf.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: promptops facts delete --bank NS/NAME [--scope SCOPE] FACT-ID ...\n\nDeletes the facts (in every scope that holds one of the ids, unless --scope), and every observation that cites one of them; the other sources of those observations go back to pending. One transaction.")
		fs.PrintDefaults()
	}
	scope := scopeFlag(fs, "facts")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := sf.usageError("facts delete", stderr); !ok {
		return code
	}
	ids := map[string]bool{}
	for _, id := range fs.Args() {
		ids[id] = true
	}
	if len(ids) == 0 {
		fmt.Fprintln(stderr, "promptops facts delete: name at least one fact id")
		return ExitInvalid
	}
	ctx := context.Background()
	store, err := sf.openKnown(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "promptops facts delete:", err)
		return ExitFailed
	}
	defer store.Close()
	var e consolidation.Erasure
	if *scope != nil {
		e, err = store.DeleteScopeFacts(ctx, sf.id().Scope(**scope), fs.Args())
	} else {
		e, err = store.DeleteFacts(ctx, sf.id(), fs.Args())
	}
	if err != nil {
		fmt.Fprintln(stderr, "promptops facts delete:", err)
		return ExitFailed
	}
	fmt.Fprintf(stdout, "deleted %d facts and %d observations citing them; %d facts back to pending\n", e.Facts, e.Observations, e.Requeued)
	if missing := int64(len(ids)) - e.Facts; missing > 0 {
		fmt.Fprintf(stderr, "promptops facts delete: %d of the %d ids name no fact of %s\n", missing, len(ids), sf.bank)
		return ExitFailed
	}
	return ExitOK
}

func runObservations(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "list" {
		return groupUsage(args, stdout, stderr, "Usage: promptops observations list --bank NS/NAME [-o text|json]\n\n"+storeNote)
	}
	fs := newFlagSet("observations list", stdout, stderr)
	var sf storeFlags
	sf.register(fs)
	output := fs.String("o", "text", "Output `FORMAT`: text or json (with each observation's source fact ids).")
	scope := scopeFlag(fs, "observations")
	if code, ok := parseFlags(fs, args[1:]); !ok {
		return code
	}
	if code, ok := sf.usageError("observations list", stderr); !ok {
		return code
	}
	if code, ok := outputUsageError("observations list", *output, stderr); !ok {
		return code
	}
	ctx := context.Background()
	store, err := sf.openKnown(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "promptops observations list:", err)
		return ExitFailed
	}
	defer store.Close()
	var scopes []string
	if *scope != nil {
		scopes = []string{**scope}
	} else {
		counts, err := store.ListScopes(ctx, sf.id())
		if err != nil {
			fmt.Fprintln(stderr, "promptops observations list:", err)
			return ExitFailed
		}
		for _, c := range counts {
			if c.Observations > 0 {
				scopes = append(scopes, c.Scope)
			}
		}
	}
	var obs []consolidation.Observation
	for _, sc := range scopes {
		some, err := store.ListObservations(ctx, sf.id().Scope(sc))
		if err != nil {
			fmt.Fprintln(stderr, "promptops observations list:", err)
			return ExitFailed
		}
		obs = append(obs, some...)
	}
	if *output == "json" {
		if obs == nil {
			obs = []consolidation.Observation{}
		}
		return writeJSON(stdout, obs)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSCOPE\tPROOF\tOCCURRED\tTEXT")
	for _, o := range obs {
		when := ""
		if o.OccurredStart != nil {
			when = o.OccurredStart.Format("2006-01-02")
			if o.OccurredEnd != nil && !o.OccurredEnd.Equal(*o.OccurredStart) {
				when += ".." + o.OccurredEnd.Format("2006-01-02")
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", o.ID, o.Scope, o.ProofCount, when, cell(o.Text, 80))
	}
	_ = tw.Flush()
	return ExitOK
}

// scopeFlag defines --scope: nil until given, "" names the shared scope.
func scopeFlag(fs *flag.FlagSet, what string) **string {
	scope := new(*string)
	fs.Func("scope", "Only the "+what+" of this `SCOPE` (\"\" for the bank's shared scope); every scope's when not given.", func(v string) error {
		if msg := memscope.Problem(v); msg != "" {
			return fmt.Errorf("scope %s", msg)
		}
		*scope = &v
		return nil
	})
	return scope
}

func writeJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return ExitFailed
	}
	return ExitOK
}

// cell is s as one table cell: its whitespace runs as single spaces, and
// at most n characters, the last an ellipsis when it was cut.
func cell(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// importInput is what an import verb (facts import, messages import)
// reads after its flags: the store's flags checked, exactly one FILE
// argument ("-" for stdin), opened, and the redactor of the redaction
// flags. ok is false, with the exit code, after a usage error or an
// error it printed; closeInput closes the file.
func importInput(verb string, fs *flag.FlagSet, sf *storeFlags, rf *redactionFlags, stdin io.Reader, stderr io.Writer) (r io.Reader, red *redact.Redactor, closeInput func(), code int, ok bool) {
	closeInput = func() {}
	if code, ok := sf.usageError(verb, stderr); !ok {
		return nil, nil, closeInput, code, false
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return nil, nil, closeInput, ExitInvalid, false
	}
	r = stdin
	if name := fs.Arg(0); name != "-" {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintf(stderr, "promptops %s: %v\n", verb, err)
			return nil, nil, closeInput, ExitInvalid, false
		}
		r, closeInput = f, func() { _ = f.Close() }
	}
	red, err := rf.redactor()
	if err != nil {
		closeInput()
		fmt.Fprintf(stderr, "promptops %s: %v\n", verb, err)
		return nil, nil, func() {}, ExitInvalid, false
	}
	return r, red, closeInput, 0, true
}
