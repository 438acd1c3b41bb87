package cli

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/controllers"
	"github.com/promptops/promptops/internal/assembler"
)

func init() {
	register("render", "check PromptTemplate manifests against their budgets, offline (exit 1 when over or a ConfigMap is missing)", runRender)
}

// renderOutput is the stable JSON contract of `promptops render -o json`.
type renderOutput struct {
	Templates []renderTemplate `json:"templates"`
}

type renderTemplate struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	File      string `json:"file"`
	Encoding  string `json:"encoding"`
	MaxTokens int    `json:"maxTokens"`
	OnExceed  string `json:"onExceed"`
	Revision  string `json:"revision"`
	// Reason and Message are the operator's Ready reason and message for
	// a template it would not render for want of a ConfigMap or key
	// (ReferenceNotFound); its intents are then empty.
	Reason  string         `json:"reason,omitempty"`
	Message string         `json:"message,omitempty"`
	Notes   []string       `json:"notes,omitempty"`
	Intents []renderIntent `json:"intents"`
}

type renderIntent struct {
	Name           string `json:"name"`
	Tokens         int    `json:"tokens"`
	FixedTokens    int    `json:"fixedTokens"`
	ReservedTokens int    `json:"reservedTokens"`
	// CacheableTokens is the prefix the same in every request.
	CacheableTokens int             `json:"cacheableTokens"`
	WithinBudget    bool            `json:"withinBudget"`
	Truncated       []string        `json:"truncated,omitempty"`
	Sections        []renderSection `json:"sections"`
}

type renderSection struct {
	Name            string `json:"name"`
	Tokens          int    `json:"tokens"`
	TruncatedTokens int    `json:"truncatedTokens"`
}

// manifest is one PromptTemplate read from a file.
type manifest struct {
	file string
	pt   *promptopsv1.PromptTemplate
}

func runRender(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("render", stdout, stderr)
	tokenizersDirFlag(fs)
	var files stringList
	fs.Var(&files, "f", "Manifest `FILE` or directory (recursive); repeatable.")
	output := fs.String("o", "text", "Output `FORMAT`: text or json.")
	intent := fs.String("intent", "", "Only this intent (`NAME`).")
	outDir := fs.String("out-dir", "", "Also write what the operator would put in each ConfigMap to `DIR`: DIR/<namespace>/<name>/{plan.json,<intent>.txt}; nothing for a template it would not render (over budget under Reject, or still over under Truncate), named on stderr.")
	namespace := fs.String("n", "default", "`NAMESPACE` of manifests that name none, as kubectl apply -n would give them (the plan's revision includes it).")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: promptops render -f FILE|DIR [-o text|json] [--intent NAME]\n\nReads PromptTemplate manifests and the ConfigMaps they reference from the same input,\nand reports each intent's tokens against its budget. A referenced ConfigMap that is not\namong the inputs does not exist, as for the operator: ReferenceNotFound (a fallback text\nstands in only for a key missing from a ConfigMap that is). Exit 0: all within budget;\n1: some intent over budget, or ReferenceNotFound; 2: invalid input.")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if len(files) == 0 || (*output != "text" && *output != "json") {
		fs.Usage()
		return ExitInvalid
	}
	templates, sources, err := loadManifests(files, *namespace)
	if err != nil {
		fmt.Fprintln(stderr, "promptops render:", err)
		return ExitInvalid
	}
	if len(templates) == 0 {
		fmt.Fprintf(stderr, "promptops render: no PromptTemplate found in %s\n", strings.Join(files, ", "))
		return ExitInvalid
	}
	out := renderOutput{Templates: []renderTemplate{}}
	over, missing := false, false
	for _, m := range templates {
		err := assembler.ValidateName(m.pt.Name)
		var res *assembler.Result
		if err == nil {
			res, err = assembler.Render(assembler.Input{
				Namespace: m.pt.Namespace, Name: m.pt.Name, Spec: &m.pt.Spec,
				Sources: sources[m.pt.Namespace],
			})
		}
		if err == nil {
			// The API server refuses a ConfigMap over 1 MiB.
			_, err = assembler.ConfigMapData(res)
		}
		var notFound *assembler.MissingReferenceError
		if errors.As(err, &notFound) {
			// The operator's verdict, not invalid input: Ready=False,
			// ReferenceNotFound, until the ConfigMap or key is there.
			fmt.Fprintf(stderr, "promptops render: %s: PromptTemplate %s: %s: %v\n", m.file, objName(m.pt.Namespace, m.pt.Name), promptopsv1.ReasonReferenceNotFound, err)
			missing = true
			out.Templates = append(out.Templates, renderTemplate{
				Namespace: m.pt.Namespace, Name: m.pt.Name, File: m.file,
				Encoding:  string(cmp.Or(m.pt.Spec.Encoding, promptopsv1.DefaultEncoding)),
				MaxTokens: int(m.pt.Spec.Budget.MaxTokens), OnExceed: string(cmp.Or(m.pt.Spec.Budget.OnExceed, promptopsv1.DefaultOnExceed)),
				Reason: promptopsv1.ReasonReferenceNotFound, Message: controllers.RenderErrorMessage(err), Intents: []renderIntent{},
			})
			continue
		}
		if err != nil {
			fmt.Fprintf(stderr, "promptops render: %s: PromptTemplate %s: %v\n", m.file, objName(m.pt.Namespace, m.pt.Name), err)
			return ExitInvalid
		}
		if *outDir != "" && !res.Applies() {
			// As the operator: an overrun it would not render leaves no plan.
			fmt.Fprintf(stderr, "promptops render: %s: PromptTemplate %s not written to %s: %s\n", m.file, objName(m.pt.Namespace, m.pt.Name), *outDir, overrunReason(res))
		} else if *outDir != "" {
			if err := writeRendered(*outDir, m.pt.Namespace, m.pt.Name, res); err != nil {
				fmt.Fprintln(stderr, "promptops render:", err)
				return ExitFailed
			}
		}
		rt := renderTemplate{
			Namespace: m.pt.Namespace, Name: m.pt.Name, File: m.file,
			Encoding: res.Plan.Encoding, MaxTokens: res.Plan.MaxTokens, OnExceed: string(res.Plan.OnExceed),
			Revision: res.Plan.Revision, Notes: res.Notes, Intents: []renderIntent{},
		}
		for _, a := range res.Intents {
			if *intent != "" && a.Intent != *intent {
				continue
			}
			ri := renderIntent{Name: a.Intent, Tokens: a.Tokens, FixedTokens: a.FixedTokens, ReservedTokens: a.ReservedTokens, CacheableTokens: a.CacheableTokens, WithinBudget: a.WithinBudget, Truncated: a.Cut}
			for _, s := range a.Sections {
				ri.Sections = append(ri.Sections, renderSection{Name: s.Name, Tokens: s.Tokens, TruncatedTokens: s.TruncatedTokens})
			}
			over = over || !a.WithinBudget
			rt.Intents = append(rt.Intents, ri)
		}
		if *intent != "" && len(rt.Intents) == 0 {
			continue
		}
		out.Templates = append(out.Templates, rt)
	}
	if *intent != "" && len(out.Templates) == 0 {
		fmt.Fprintf(stderr, "promptops render: no template has an intent %q\n", *intent)
		return ExitInvalid
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return ExitFailed
		}
	} else {
		printRenderTable(stdout, out)
	}
	if over || missing {
		return ExitFailed
	}
	return ExitOK
}

// overrunReason says why the operator would not render res, as its status would.
func overrunReason(res *assembler.Result) string {
	var parts []string
	for _, a := range res.OverBudget() {
		parts = append(parts, fmt.Sprintf("intent %s needs %d tokens", a.Intent, a.Tokens))
	}
	return fmt.Sprintf("%s, budget is %d, onExceed is %s", strings.Join(parts, "; "), res.Plan.MaxTokens, res.Plan.OnExceed)
}

func printRenderTable(w io.Writer, out renderOutput) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TEMPLATE\tINTENT\tTOKENS\tFIXED\tRESERVED\tCACHEABLE\tBUDGET\tVERDICT")
	for _, t := range out.Templates {
		if t.Reason != "" {
			// Not rendered: the reason, the message is on stderr.
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t%d\t%s\n", objName(t.Namespace, t.Name), t.MaxTokens, t.Reason)
		}
		for _, i := range t.Intents {
			verdict := "ok"
			if !i.WithinBudget {
				verdict = fmt.Sprintf("OVER by %d", i.Tokens-t.MaxTokens)
			} else if len(i.Truncated) > 0 {
				verdict = "ok, cut " + strings.Join(i.Truncated, ",")
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", objName(t.Namespace, t.Name), i.Name, i.Tokens, i.FixedTokens, i.ReservedTokens, i.CacheableTokens, t.MaxTokens, verdict)
		}
	}
	_ = tw.Flush()
	for _, t := range out.Templates {
		for _, n := range t.Notes {
			fmt.Fprintf(w, "note: %s: %s\n", objName(t.Namespace, t.Name), n)
		}
	}
}

func objName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// loadManifests reads PromptTemplates and ConfigMaps from files and
// directories (recursively, *.yaml, *.yml, *.json), multi-document YAML
// included. ConfigMaps are returned per namespace, as render sources: the
// ConfigMaps that exist, for the offline render.
func loadManifests(paths []string, namespace string) ([]manifest, map[string]assembler.ConfigMaps, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, nil, err
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch strings.ToLower(filepath.Ext(path)) {
			case ".yaml", ".yml", ".json":
				if !d.IsDir() {
					files = append(files, path)
				}
			}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
	sort.Strings(files)
	var templates []manifest
	sources := map[string]assembler.ConfigMaps{}
	seen := map[string]string{}
	seenCM := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for doc := 1; ; doc++ {
			raw, err := dec.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, nil, fmt.Errorf("%s: document %d: %w", f, doc, err)
			}
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal(raw, &meta); err != nil {
				return nil, nil, fmt.Errorf("%s: document %d: %w", f, doc, err)
			}
			switch {
			case meta.Kind == "PromptTemplate" && meta.APIVersion == promptopsv1.GroupVersion.String():
				pt := &promptopsv1.PromptTemplate{}
				if err := decodeStrict(raw, pt); err != nil {
					return nil, nil, fmt.Errorf("%s: document %d: PromptTemplate %s: %w", f, doc, docName(raw, namespace), err)
				}
				if pt.Namespace == "" {
					pt.Namespace = namespace
				}
				id := objName(pt.Namespace, pt.Name)
				if pt.Name == "" {
					return nil, nil, fmt.Errorf("%s: document %d: PromptTemplate has no metadata.name", f, doc)
				}
				if prev, dup := seen[id]; dup {
					return nil, nil, fmt.Errorf("%s: PromptTemplate %s is also defined in %s", f, id, prev)
				}
				seen[id] = f
				templates = append(templates, manifest{file: f, pt: pt})
			case meta.Kind == "ConfigMap" && meta.APIVersion == "v1":
				cm := &corev1.ConfigMap{}
				if err := yaml.Unmarshal(raw, cm); err != nil {
					return nil, nil, fmt.Errorf("%s: document %d (ConfigMap): %w", f, doc, err)
				}
				if cm.Namespace == "" {
					cm.Namespace = namespace
				}
				if cm.Name == "" {
					return nil, nil, fmt.Errorf("%s: document %d: ConfigMap has no metadata.name", f, doc)
				}
				// One object per name, as in a cluster: two definitions
				// would give keys no cluster holds.
				id := objName(cm.Namespace, cm.Name)
				if prev, dup := seenCM[id]; dup {
					return nil, nil, fmt.Errorf("%s: ConfigMap %s is also defined in %s", f, id, prev)
				}
				seenCM[id] = f
				if sources[cm.Namespace] == nil {
					sources[cm.Namespace] = assembler.ConfigMaps{}
				}
				sources[cm.Namespace][cm.Name] = cm.Data // nil when it has no data: it exists all the same
			}
		}
	}
	return templates, sources, nil
}

// decodeStrict decodes a YAML or JSON document as the API server does with
// fieldValidation=Strict: an unknown or repeated field is an error naming its
// path (`unknown field "spec.sections[0].txt"`).
func decodeStrict(raw []byte, into any) error {
	data, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(data, into)
	if err != nil {
		return err
	}
	if len(strict) == 0 {
		return nil
	}
	msgs := make([]string, len(strict))
	for i, e := range strict {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

// docName is namespace/name of a document as far as its metadata says,
// for errors about the rest of it.
func docName(raw []byte, namespace string) string {
	var meta struct {
		Metadata struct{ Name, Namespace string } `json:"metadata"`
	}
	_ = yaml.Unmarshal(raw, &meta)
	if meta.Metadata.Namespace == "" {
		meta.Metadata.Namespace = namespace
	}
	if meta.Metadata.Name == "" {
		return "(no metadata.name)"
	}
	return objName(meta.Metadata.Namespace, meta.Metadata.Name)
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// writeRendered writes a template's ConfigMap content as files.
func writeRendered(dir, ns, name string, res *assembler.Result) error {
	d := filepath.Join(dir, ns, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	data, err := assembler.ConfigMapData(res)
	if err != nil {
		return err
	}
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(d, k), []byte(v), 0o644); err != nil {
			return err
		}
	}
	return nil
}
