// Package cli implements the verbs of the promptops binary: manager, render,
// assemble, serve, consolidate, facts, messages, observations, scopes, tokens
// and rollout.
package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/promptops/promptops/internal/tokens"
)

// Exit codes shared by the verbs. Help asked for (-h, --help) goes to
// stdout with ExitOK; a usage error (an unknown verb or flag, a flag's bad
// value, a required flag or argument missing) goes to stderr with
// ExitInvalid, in every verb.
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
		if len(args) == 0 {
			usage(stderr)
			return ExitInvalid
		}
		usage(stdout)
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

// newFlagSet returns a FlagSet that reports errors instead of exiting. A
// verb's usage writes to fs.Output(): parseFlags sends what Parse writes to
// stdout when -h asked for it and to stderr after a bad flag; after Parse
// it is stderr (a usage error the verb found).
func newFlagSet(name string, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("promptops "+name, flag.ContinueOnError)
	fs.SetOutput(&flagOutput{stdout: stdout, stderr: stderr})
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: promptops %s [flags]\n\nFlags:\n", name)
		fs.PrintDefaults()
	}
	return fs
}

// flagOutput is a FlagSet's output: stderr, except while parseFlags holds
// what Parse writes until it knows whether help was asked for.
type flagOutput struct {
	stdout, stderr io.Writer
	held           *bytes.Buffer
}

func (o *flagOutput) Write(p []byte) (int, error) {
	if o.held != nil {
		return o.held.Write(p)
	}
	return o.stderr.Write(p)
}

// parseFlags parses args and maps -h and bad flags to exit codes: help on
// stdout and ExitOK, a bad flag's message and the usage on stderr and
// ExitInvalid. ok is false when the caller should return code. A verb that
// counts tokens has --tokenizers-dir (tokenizersDirFlag), which takes
// effect here.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	out, _ := fs.Output().(*flagOutput)
	if out != nil {
		out.held = &bytes.Buffer{}
	}
	err := fs.Parse(args)
	if out != nil {
		held := out.held
		out.held = nil
		w := out.stderr
		if errors.Is(err, flag.ErrHelp) {
			w = out.stdout
		}
		_, _ = held.WriteTo(w)
	}
	if err != nil {
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
	fs.String(tokenizersDirName, "", "Directory (`DIR`) of the supplied encodings' vocabularies, DIR/<encoding>/tokenizer.json (default $"+tokens.EnvDir+").")
}

// bindLogFlags adds controller-runtime's --zap-* flags, their usages
// saying what each takes (controller-runtime's have no placeholder, so -h
// showed "value").
func bindLogFlags(fs *flag.FlagSet, o *zap.Options) {
	o.BindFlags(fs)
	for name, usage := range map[string]string{
		"zap-encoder":          "Log `ENCODING`: json or console.",
		"zap-log-level":        "Log `LEVEL`: debug, info, error, panic, or an integer above 0 for debug levels of increasing verbosity.",
		"zap-stacktrace-level": "`LEVEL` at and above which stack traces are logged: info, error or panic.",
		"zap-time-encoding":    "Time `ENCODING` of log lines: epoch (the default), millis, nano, iso8601, rfc3339 or rfc3339nano.",
	} {
		if f := fs.Lookup(name); f != nil {
			f.Usage = usage
		}
	}
}

// outputUsageError reports an -o that is neither text nor json as verb's
// usage error; ok when it is one of them.
func outputUsageError(verb, output string, stderr io.Writer) (code int, ok bool) {
	if output != "text" && output != "json" {
		fmt.Fprintf(stderr, "promptops %s: -o is %q; want text or json\n", verb, output)
		return ExitInvalid, false
	}
	return 0, true
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "-help" || arg == "help"
}

// groupUsage writes the usage of a verb with subcommands when args name
// none it knows: to stdout with ExitOK when they ask for help, else to
// stderr with ExitInvalid.
func groupUsage(args []string, stdout, stderr io.Writer, usage string) int {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stdout, usage)
		return ExitOK
	}
	fmt.Fprintln(stderr, usage)
	return ExitInvalid
}
