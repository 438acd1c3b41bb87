package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/promptops/promptops/plan"
)

func init() {
	register("assemble", "finish a prompt from plan.json and runtime contents on stdin, cut to budget", runAssemble)
}

// DefaultAssembleTimeout bounds one `promptops assemble`: far above what
// megabytes of contents take, low enough that a stuck pipeline fails.
const DefaultAssembleTimeout = time.Minute

func runAssemble(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("assemble", stdout, stderr)
	tokenizersDirFlag(fs)
	planPath := fs.String("plan", "", "Path to plan.json (the rendered ConfigMap's key), a `FILE`.")
	intent := fs.String("intent", "", "Intent to assemble (`NAME`).")
	timeout := fs.Duration("timeout", DefaultAssembleTimeout, "Give up assembling after this long (exit 2); 0 for no limit.")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: promptops assemble --plan plan.json --intent NAME < runtime.json\n\nstdin holds the runtime sections' contents as a JSON object, {\"data_context\": \"...\"}.\nThe prompt goes to stdout, a one-line report to stderr. Exit 1 when even after\ncutting runtime sections the prompt is over budget; 2 for invalid input or\nwhen --timeout passes first.")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *planPath == "" || *intent == "" {
		fs.Usage()
		return ExitInvalid
	}
	// The deadline covers the whole command, reading included.
	ctx := context.Background()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	data, err := os.ReadFile(*planPath)
	if err != nil {
		fmt.Fprintln(stderr, "promptops assemble:", err)
		return ExitInvalid
	}
	p, err := plan.Load(data)
	if err != nil {
		fmt.Fprintf(stderr, "promptops assemble: %s: %v\n", *planPath, err)
		return ExitInvalid
	}
	runtime := map[string]string{}
	in, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintln(stderr, "promptops assemble: reading stdin:", err)
		return ExitInvalid
	}
	if strings.TrimSpace(string(in)) != "" {
		if err := json.Unmarshal(in, &runtime); err != nil {
			fmt.Fprintln(stderr, "promptops assemble: stdin must be a JSON object of strings:", err)
			return ExitInvalid
		}
	}
	a, err := p.Assemble(ctx, *intent, runtime)
	if err != nil {
		fmt.Fprintln(stderr, "promptops assemble:", err)
		return ExitInvalid
	}
	fmt.Fprint(stdout, a.Text)
	var cuts []string
	for _, s := range a.Sections {
		if s.TruncatedTokens > 0 {
			cuts = append(cuts, fmt.Sprintf("%s -%d", s.Name, s.TruncatedTokens))
		}
	}
	report := fmt.Sprintf("intent %s: %d tokens of %d", a.Intent, a.Tokens, a.MaxTokens)
	if len(cuts) > 0 {
		report += "; cut " + strings.Join(cuts, ", ")
	} else {
		report += "; nothing cut"
	}
	if !a.WithinBudget {
		report += "; OVER BUDGET: the sections that may not be cut do not fit"
	}
	fmt.Fprintln(stderr, report)
	if !a.WithinBudget {
		return ExitFailed
	}
	return ExitOK
}
