package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/memscope"
)

func init() {
	register("scopes", "list, export and erase a bank's scopes (list | export | delete)", runScopes)
}

// sharedScope is how text output names a bank's shared scope: a scope
// name never holds parentheses.
const sharedScope = "(shared)"

func runScopes(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || isHelp(args[0]) {
		return groupUsage(args, stdout, stderr, "Usage: promptops scopes list|export|delete --bank NS/NAME [SCOPE ...]\n\n"+storeNote+"\nRun 'promptops scopes <subcommand> -h' for its flags.")
	}
	switch args[0] {
	case "list":
		return runScopesList(args[1:], stdout, stderr)
	case "export":
		return runScopesExport(args[1:], stdout, stderr)
	case "delete":
		return runScopesDelete(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "promptops scopes: unknown subcommand %q (list, export, delete)\n", args[0])
	return ExitInvalid
}

// scopeArgs checks each named scope; allowShared lets "" name the shared
// scope.
func scopeArgs(fs *flag.FlagSet, allowShared bool) error {
	for i, s := range fs.Args() {
		if s == "" && !allowShared {
			return fmt.Errorf("scope %d is empty: the shared scope is erased fact by fact (promptops facts delete)", i+1)
		}
		if msg := memscope.Problem(s); msg != "" {
			return fmt.Errorf("scope %d: %s", i+1, msg)
		}
	}
	return nil
}

func runScopesList(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("scopes list", stdout, stderr)
	var sf storeFlags
	sf.register(fs)
	output := fs.String("o", "text", "Output `FORMAT`: text or json.")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := sf.usageError("scopes list", stderr); !ok {
		return code
	}
	if code, ok := outputUsageError("scopes list", *output, stderr); !ok {
		return code
	}
	ctx := context.Background()
	store, err := sf.openKnown(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "promptops scopes list:", err)
		return ExitFailed
	}
	defer store.Close()
	scopes, err := store.ListScopes(ctx, sf.id())
	if err != nil {
		fmt.Fprintln(stderr, "promptops scopes list:", err)
		return ExitFailed
	}
	if *output == "json" {
		return writeJSON(stdout, scopes)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tFACTS\tOBSERVATIONS\tMESSAGES")
	for _, s := range scopes {
		name := s.Scope
		if name == "" {
			name = sharedScope
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", name, s.Facts, s.Observations, s.Messages)
	}
	_ = tw.Flush()
	return ExitOK
}

func runScopesExport(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("scopes export", stdout, stderr)
	var sf storeFlags
	sf.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: promptops scopes export --bank NS/NAME SCOPE\n\nWrites the scope's facts, observations (with their source fact ids) and messages as JSON lines, each with \"kind\": \"fact\", \"observation\" or \"message\"; \"\" is the shared scope.")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := sf.usageError("scopes export", stderr); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "promptops scopes export: name one scope")
		return ExitInvalid
	}
	if err := scopeArgs(fs, true); err != nil {
		fmt.Fprintln(stderr, "promptops scopes export:", err)
		return ExitInvalid
	}
	ctx := context.Background()
	store, err := sf.openKnown(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "promptops scopes export:", err)
		return ExitFailed
	}
	defer store.Close()
	w := bufio.NewWriter(stdout)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	err = store.ExportScope(ctx, sf.id().Scope(fs.Arg(0)), func(e consolidation.Exported) error { return enc.Encode(e) })
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintln(stderr, "promptops scopes export:", err)
		return ExitFailed
	}
	return ExitOK
}

func runScopesDelete(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("scopes delete", stdout, stderr)
	var sf storeFlags
	sf.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: promptops scopes delete --bank NS/NAME SCOPE ...\n\nErases each scope: every fact, observation, vector, history row and message of it, one transaction a scope.")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := sf.usageError("scopes delete", stderr); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "promptops scopes delete: name at least one scope")
		return ExitInvalid
	}
	if err := scopeArgs(fs, false); err != nil {
		fmt.Fprintln(stderr, "promptops scopes delete:", err)
		return ExitInvalid
	}
	ctx := context.Background()
	store, err := sf.openKnown(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "promptops scopes delete:", err)
		return ExitFailed
	}
	defer store.Close()
	for _, scope := range fs.Args() {
		e, err := store.EraseScope(ctx, sf.id().Scope(scope))
		if err != nil {
			fmt.Fprintf(stderr, "promptops scopes delete: %s: %v\n", scope, err)
			return ExitFailed
		}
		fmt.Fprintf(stdout, "scope %s erased: %d facts, %d observations, %d messages\n", scope, e.Facts, e.Observations, e.Messages)
	}
	return ExitOK
}
