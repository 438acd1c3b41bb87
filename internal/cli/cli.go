// Package cli implements the verbs of the promptops binary: manager, render,
// assemble, serve, consolidate, facts, messages, observations, scopes, tokens
// and rollout.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"github.com/promptops/promptops/internal/tokens"
	"io"
	"os"
	"sort"
	"strings"
)

// Exit codes shared by the verbs.
const (
	ExitOK      = 0
	ExitFailed  = 1 // the check failed (over budget) or the run failed
	ExitInvalid = 2 // invalid input or usage
)

// command is one verb of the binary.
type command struct {
	summary string
	run     func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

// register adds a verb; each verb's file registers itself in init.
func register(name, summary string, run func(args []string, stdin io.Reader, stdout, stderr io.Writer) int) {
	commands[name] = command{summary: summary, run: run}
}

// Main runs the verb named by args[0] and returns the process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || isHelp(args[0]) {
		usage(stderr)
		if len(args) == 0 {
			return ExitInvalid
		}
		return ExitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "promptops: unknown command %q\n\n", args[0])
		usage(stderr)
		return ExitInvalid
	}
	return cmd.run(args[1:], stdin, stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: promptops <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'promptops <command> -h' for a command's flags.")
}

// newFlagSet returns a FlagSet that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("promptops "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: promptops %s [flags]\n\nFlags:\n", name)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and maps -h and bad flags to exit codes. ok is false
// when the caller should return code. A verb that counts tokens has
// --tokenizers-dir (tokenizersDirFlag), which takes effect here.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK, false
		}
		return ExitInvalid, false
	}
	if f := fs.Lookup(tokenizersDirName); f != nil && f.Value.String() != "" {
		tokens.SetDir(f.Value.String())
	}
	return 0, true
}

const tokenizersDirName = "tokenizers-dir"

// tokenizersDirFlag adds --tokenizers-dir to a verb that counts tokens.
func tokenizersDirFlag(fs *flag.FlagSet) {
	fs.String(tokenizersDirName, "", "Directory of the supplied encodings' vocabularies, <dir>/<encoding>/tokenizer.json (default $"+tokens.EnvDir+").")
}

// envDefault returns the environment variable's value when set, else def. It
// lets every flag of a Job-run verb be set from the environment.
func envDefault(lookup func(string) (string, bool), key, def string) string {
	if v, ok := lookup(key); ok && strings.TrimSpace(v) != "" {
		return v
	}
	return def
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "-help" || arg == "help"
}

// helpCode is the exit code after a verb printed its usage because args
// named no subcommand it knows: 0 when they asked for help, 2 otherwise.
func helpCode(args []string) int {
	if len(args) > 0 && isHelp(args[0]) {
		return ExitOK
	}
	return ExitInvalid
}

// lookupEnv is os.LookupEnv, replaceable in tests.
var lookupEnv = os.LookupEnv
