package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/textclip"
)

func init() {
	register("rollout", "show, promote or abort a PromptTemplate's rollout (status | promote | abort)", runRollout)
}

// rolloutTimeout bounds one verb's calls to the API server.
const rolloutTimeout = 30 * time.Second

func runRollout(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || isHelp(args[0]) {
		return groupUsage(args, stdout, stderr, "Usage: promptops rollout status|promote|abort NAME [-n NAMESPACE] [--kubeconfig FILE] [--context NAME]\n\nRun 'promptops rollout <subcommand> -h' for its flags.")
	}
	switch args[0] {
	case "status":
		return runRolloutStatus(args[1:], stdout, stderr)
	case "promote":
		return runRolloutRequest(args[1:], promptopsv1.AnnotationRolloutPromote, "promote", stdout, stderr)
	case "abort":
		return runRolloutRequest(args[1:], promptopsv1.AnnotationRolloutAbort, "abort", stdout, stderr)
	}
	fmt.Fprintf(stderr, "promptops rollout: unknown subcommand %q (status, promote, abort)\n", args[0])
	return ExitInvalid
}

// kubeFlags are the flags that choose a cluster and a namespace, loaded as
// kubectl loads them: --kubeconfig, else $KUBECONFIG, else ~/.kube/config;
// --context, else the current context; -n, else the context's namespace.
type kubeFlags struct {
	kubeconfig, context, namespace string
}

func (k *kubeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "Path to a kubeconfig `FILE`; by default $KUBECONFIG, then ~/.kube/config (as kubectl).")
	fs.StringVar(&k.context, "context", "", "The kubeconfig context to use (`NAME`); by default its current context.")
	fs.StringVar(&k.namespace, "namespace", "", "The template's `NAMESPACE`; by default the context's namespace.")
	fs.StringVar(&k.namespace, "n", "", "Short for --namespace (`NAMESPACE`).")
}

// client returns a client for PromptTemplates and the namespace to use.
func (k *kubeFlags) client() (client.Client, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: k.context}
	if k.namespace != "" {
		overrides.Context.Namespace = k.namespace
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("no cluster configuration: %w", err)
	}
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("no namespace: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, "", err
	}
	if err := promptopsv1.AddToScheme(scheme); err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", err
	}
	return c, ns, nil
}

// parseInterspersed parses flags before and after the positional
// arguments (`rollout status NAME -n team`, as kubectl takes them) and
// returns the positionals. A "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) (positional []string, code int, ok bool) {
	for {
		if code, ok := parseFlags(fs, args); !ok {
			return nil, code, false
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, 0, true
		}
		if args[0] == "--" {
			return append(positional, args[1:]...), 0, true
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// rolloutTarget parses a subcommand's flags and its one NAME, and returns
// a client and the template's key.
func rolloutTarget(name string, args []string, fs *flag.FlagSet, kf *kubeFlags, stderr io.Writer) (client.Client, types.NamespacedName, int, bool) {
	pos, code, ok := parseInterspersed(fs, args)
	if !ok {
		return nil, types.NamespacedName{}, code, false
	}
	if len(pos) != 1 || pos[0] == "" {
		fmt.Fprintf(stderr, "promptops rollout %s: name one PromptTemplate (promptops rollout %s NAME -n NAMESPACE)\n", name, name)
		return nil, types.NamespacedName{}, ExitInvalid, false
	}
	if msgs := validation.IsDNS1123Subdomain(pos[0]); len(msgs) > 0 {
		fmt.Fprintf(stderr, "promptops rollout %s: %q is no PromptTemplate name: %s\n", name, textclip.Head(pos[0], 80, "…"), strings.Join(msgs, "; "))
		return nil, types.NamespacedName{}, ExitInvalid, false
	}
	c, ns, err := kf.client()
	if err != nil {
		fmt.Fprintf(stderr, "promptops rollout %s: %v\n", name, err)
		return nil, types.NamespacedName{}, ExitInvalid, false
	}
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		fmt.Fprintf(stderr, "promptops rollout %s: namespace %q: %s\n", name, textclip.Head(ns, 80, "…"), strings.Join(msgs, "; "))
		return nil, types.NamespacedName{}, ExitInvalid, false
	}
	return c, types.NamespacedName{Namespace: ns, Name: pos[0]}, 0, true
}

// getTemplate reads the template; a missing one is an error that names it.
func getTemplate(ctx context.Context, c client.Client, key types.NamespacedName) (*promptopsv1.PromptTemplate, error) {
	pt := &promptopsv1.PromptTemplate{}
	if err := c.Get(ctx, key, pt); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("PromptTemplate %s not found", key)
		}
		return nil, fmt.Errorf("reading PromptTemplate %s: %w", key, err)
	}
	return pt, nil
}

func runRolloutStatus(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("rollout status", stdout, stderr)
	var kf kubeFlags
	kf.register(fs)
	output := fs.String("o", "text", "Output `FORMAT`: text, or json (status.rollout as the API server has it; null without a rollout).")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: promptops rollout status NAME [-n NAMESPACE] [-o json]\n\nShows the template's rollout: its phase, step, weight, stable and canary revisions, analysis failures and message.\n\nFlags:")
		fs.PrintDefaults()
	}
	c, key, code, ok := rolloutTarget("status", args, fs, &kf, stderr)
	if !ok {
		return code
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "promptops rollout status: -o is %q; want text or json\n", *output)
		return ExitInvalid
	}
	ctx, cancel := context.WithTimeout(context.Background(), rolloutTimeout)
	defer cancel()
	pt, err := getTemplate(ctx, c, key)
	if err != nil {
		fmt.Fprintln(stderr, "promptops rollout status:", err)
		return ExitFailed
	}
	if *output == "json" {
		return writeJSON(stdout, pt.Status.Rollout)
	}
	writeRolloutStatus(stdout, pt)
	return ExitOK
}

// writeRolloutStatus writes the rollout as a table of fields.
func writeRolloutStatus(w io.Writer, pt *promptopsv1.PromptTemplate) {
	r := pt.Status.Rollout
	if r == nil || r.Phase == "" {
		fmt.Fprintf(w, "PromptTemplate %s/%s has no rollout; it serves revision %s.\n", pt.Namespace, pt.Name, orNone(pt.Status.Revision))
		if pt.Spec.Rollout == nil {
			fmt.Fprintln(w, "Its spec has no rollout: a change goes live at once.")
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "PromptTemplate:\t%s/%s\n", pt.Namespace, pt.Name)
	fmt.Fprintf(tw, "Phase:\t%s\n", r.Phase)
	steps := 0
	if pt.Spec.Rollout != nil {
		steps = len(pt.Spec.Rollout.Steps)
	}
	switch {
	case r.Step == 0:
		fmt.Fprintf(tw, "Step:\t-\n")
	case steps == 0:
		fmt.Fprintf(tw, "Step:\t%d\n", r.Step)
	default:
		fmt.Fprintf(tw, "Step:\t%d of %d\n", r.Step, steps)
	}
	fmt.Fprintf(tw, "Weight:\t%d%%\n", r.Weight)
	fmt.Fprintf(tw, "Stable revision:\t%s\n", orNone(r.StableRevision))
	fmt.Fprintf(tw, "Canary revision:\t%s\n", orNone(r.CanaryRevision))
	if pt.Spec.Rollout != nil && pt.Spec.Rollout.Analysis != nil {
		limit := pt.Spec.Rollout.Analysis.FailureLimit
		if limit == 0 {
			limit = promptopsv1.DefaultAnalysisFailureLimit
		}
		fmt.Fprintf(tw, "Analysis failures:\t%d of %d\n", r.AnalysisFailures, limit)
	} else {
		fmt.Fprintf(tw, "Analysis failures:\t%d\n", r.AnalysisFailures)
	}
	if r.StepStartedAt != nil {
		fmt.Fprintf(tw, "Step started:\t%s\n", r.StepStartedAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(tw, "Message:\t%s\n", oneLine(r.Message))
	_ = tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// oneLine keeps a message from breaking the table.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// runRolloutRequest sets annotation to the running rollout's canary
// revision, which the manager acts on at its next reconcile; a stale
// annotation (another revision) it ignores.
func runRolloutRequest(args []string, annotation, verb string, stdout, stderr io.Writer) int {
	fs := newFlagSet("rollout "+verb, stdout, stderr)
	var kf kubeFlags
	kf.register(fs)
	what := map[string]string{
		"promote": "Makes the canary revision of the running rollout the stable revision: every request gets it.",
		"abort":   "Sends every request of the running rollout back to the stable revision; the aborted revision stays visible in status.rollout until the spec changes.",
	}[verb]
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: promptops rollout %s NAME [-n NAMESPACE]\n\n%s It sets the annotation %s to status.rollout.canaryRevision; the manager acts at its next reconcile. Exit 1 when no rollout is Progressing or Paused.\n\nFlags:\n", verb, what, annotation)
		fs.PrintDefaults()
	}
	c, key, code, ok := rolloutTarget(verb, args, fs, &kf, stderr)
	if !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), rolloutTimeout)
	defer cancel()
	var canary string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pt, err := getTemplate(ctx, c, key)
		if err != nil {
			return err
		}
		r := pt.Status.Rollout
		if r == nil || (r.Phase != promptopsv1.RolloutProgressing && r.Phase != promptopsv1.RolloutPaused) || r.CanaryRevision == "" {
			state := "it has no rollout"
			if r != nil && r.Phase != "" {
				state = fmt.Sprintf("its last rollout is %s (canary revision %s)", r.Phase, orNone(r.CanaryRevision))
			}
			return fmt.Errorf("PromptTemplate %s has no rollout to %s: %s; only a rollout that is Progressing or Paused can be; nothing was changed", key, verb, state)
		}
		canary = r.CanaryRevision
		// The resourceVersion makes the patch conditional: if the
		// template changed since it was read, the canary is read again.
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": pt.ResourceVersion,
			"annotations":     map[string]string{annotation: canary},
		}})
		if err != nil {
			return err
		}
		return c.Patch(ctx, pt, client.RawPatch(types.MergePatchType, patch))
	})
	if err != nil {
		fmt.Fprintf(stderr, "promptops rollout %s: %v\n", verb, err)
		return ExitFailed
	}
	fmt.Fprintf(stdout, "PromptTemplate %s: %s requested for canary revision %s (annotation %s); the manager acts at its next reconcile.\n", key, verb, canary, annotation)
	return ExitOK
}
