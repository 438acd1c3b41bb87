// Package assembler turns a PromptTemplate spec into assembled prompts, token
// counts and budget verdicts, and finishes assembly at request time from a
// plan (package plan). It is pure: no Kubernetes client, the same input gives
// the same bytes.
package assembler

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"unicode/utf8"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/promptfit"
	"github.com/promptops/promptops/internal/tokens"
	"github.com/promptops/promptops/plan"
)

// SourceKey names one key of a ConfigMap in the template's namespace.
type SourceKey struct {
	ConfigMap string
	Key       string
}

// ConfigMaps is what a template's from references read: the data of each
// referenced ConfigMap that exists, by name. A ConfigMap absent from it
// does not exist: every reference to it is missing, fallback text or not
// (ReferenceNotFound, waited for). A key absent from a ConfigMap that
// exists is missing too, and there the section's text or the intent's
// instruction, when it has one, is the fallback.
type ConfigMaps map[string]map[string]string

// Input is what Render needs: the template and the ConfigMaps its from
// references read.
type Input struct {
	Namespace, Name string
	Spec            *promptopsv1.PromptTemplateSpec
	Sources         ConfigMaps
	// MemoryEndpoints holds the endpoint of each served MemoryBank the
	// memory sections name, by bank name; a bank absent or "" is not served
	// and its sections' endpoint in the plan is empty.
	MemoryEndpoints map[string]string
}

// Result is a rendered template.
type Result struct {
	Plan *Plan
	// Intents holds one static assembly per intent, in spec order.
	Intents []*Assembly
	// Notes are things a user should know that are not errors, such as a
	// fallback text in use.
	Notes []string
}

// OverBudget lists the intents that do not fit.
func (r *Result) OverBudget() []*Assembly {
	var out []*Assembly
	for _, a := range r.Intents {
		if !a.WithinBudget {
			out = append(out, a)
		}
	}
	return out
}

// Applies reports whether the operator puts this render into the ConfigMap:
// every intent fits, or the template asked for Warn. An overrun under Reject
// (or one Truncate could not cut away) keeps the previous ConfigMap, or none.
func (r *Result) Applies() bool {
	return len(r.OverBudget()) == 0 || r.Plan.OnExceed == plan.OnExceedWarn
}

// Truncated lists the intents whose static sections were cut.
func (r *Result) Truncated() []*Assembly {
	var out []*Assembly
	for _, a := range r.Intents {
		if len(a.Cut) > 0 {
			out = append(out, a)
		}
	}
	return out
}

// Largest is the token count of the largest intent.
func (r *Result) Largest() int {
	n := 0
	for _, a := range r.Intents {
		n = max(n, a.Tokens)
	}
	return n
}

var variableRE = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// MaxExpandedText bounds a section's text, heading or intent's instruction
// after variables are substituted, in characters: the CRD's own limit on
// the text as written, so that variables cannot multiply a text past what
// could be written out.
const MaxExpandedText = 65536

// substitute replaces {{ name }} with the variable's value; the result is
// bounded by MaxExpandedText.
func substitute(where, text string, vars map[string]string) (string, error) {
	out, err := expand(where, text, vars)
	if err != nil {
		return "", err
	}
	if n := utf8.RuneCountInString(out); n > MaxExpandedText {
		return "", &TooLargeError{Where: where + " with its variables substituted", Size: n, Limit: MaxExpandedText, Unit: "characters"}
	}
	return out, nil
}

func expand(where, text string, vars map[string]string) (string, error) {
	var missing string
	out := variableRE.ReplaceAllStringFunc(text, func(m string) string {
		name := variableRE.FindStringSubmatch(m)[1]
		v, ok := vars[name]
		if !ok {
			if missing == "" {
				missing = name
			}
			return m
		}
		return v
	})
	if missing != "" {
		return "", &UnknownVariableError{Where: where, Name: missing}
	}
	return out, nil
}

// resolve returns the text of a section or intent: the referenced key;
// else, when the ConfigMap exists and lacks the key, the fallback; else an
// error. The operator, its webhook and promptops render all decide here.
func resolve(where string, inline *string, from *promptopsv1.TextSource, sources ConfigMaps, notes *[]string) (string, error) {
	if from != nil {
		ref := from.ConfigMapKeyRef
		data, exists := sources[ref.Name]
		if v, ok := data[ref.Key]; ok {
			return v, nil
		}
		if !exists || inline == nil {
			return "", &MissingReferenceError{Where: where, ConfigMap: ref.Name, Key: ref.Key, NoConfigMap: !exists, HasFallback: inline != nil}
		}
		*notes = append(*notes, fmt.Sprintf("%s: key %q of ConfigMap %q is missing; using the fallback text", where, ref.Key, ref.Name))
	}
	if inline == nil {
		return "", nil
	}
	return *inline, nil
}

// Render validates and renders a template: a plan and one static assembly
// per intent. With onExceed: Truncate it cuts static sections to fit.
func Render(in Input) (*Result, error) {
	return RenderContext(context.Background(), in)
}

// RenderContext is Render that gives up, with an error wrapping ctx.Err(),
// when ctx is done before the counts and cuts are (Seal).
func RenderContext(ctx context.Context, in Input) (*Result, error) {
	spec := in.Spec
	if err := Validate(spec); err != nil {
		return nil, err
	}
	enc := string(spec.Encoding)
	if enc == "" {
		enc = string(promptopsv1.DefaultEncoding)
	}
	onExceed := spec.Budget.OnExceed
	if onExceed == "" {
		onExceed = promptopsv1.DefaultOnExceed
	}
	encoder, err := tokens.Get(enc)
	if err != nil {
		return nil, err
	}
	// Under specialTokens Reject (the default) no text the template holds
	// may carry a special-token string of the encoding.
	special := func(field, text string) error {
		if spec.SpecialTokens == promptopsv1.SpecialTokensAllow {
			return nil
		}
		if tok, ok := encoder.Special(text); ok {
			return &InvalidSpecError{Field: field, Message: fmt.Sprintf("holds the special token %s of encoding %s, which the model would read as a control token: remove it, or set spec.specialTokens: Allow to count it as one token", tok, enc)}
		}
		return nil
	}
	res := &Result{}
	pl := &Plan{
		APIVersion: PlanAPIVersion, Kind: PlanKind,
		Namespace: in.Namespace, Name: in.Name,
		Encoding: enc, MaxTokens: int(spec.Budget.MaxTokens), OnExceed: plan.OnExceed(onExceed),
		Separator: Separator,
		Runtime:   RuntimeSummary{Placeholder: promptfit.Placeholder("NAME")},
	}
	if encoder.HasSpecials() {
		pl.SpecialTokens = plan.SpecialTokens(cmp.Or(spec.SpecialTokens, promptopsv1.DefaultSpecialTokens))
	}
	for i := range spec.Sections {
		s := &spec.Sections[i]
		where := "section " + s.Name
		heading, err := substitute(where+" heading", s.Heading, spec.Variables)
		if err != nil {
			return nil, err
		}
		if err := special(fmt.Sprintf("spec.sections[%d].heading", i), heading); err != nil {
			return nil, err
		}
		never, prio, minT := truncationOf(s)
		// The intent's instruction is what the request is for: it is cut
		// only when its section has a truncation of its own (policy
		// Priority), never by default.
		if s.Intent && s.Truncation == nil {
			never = true
		}
		ps := PlanSection{Name: s.Name, Heading: heading, Policy: plan.Policy(promptopsv1.TruncationPriority), Priority: prio, MinTokens: minT}
		if never {
			ps.Policy = plan.Policy(promptopsv1.TruncationNever)
		}
		switch {
		case s.Intent:
			ps.Kind = KindIntent
		case s.Runtime != nil:
			ps.Kind = KindRuntime
			ps.ReserveTokens = int(s.Runtime.ReserveTokens)
			ps.Tokens = encoder.Count(heading)
		case s.Memory != nil:
			m := s.Memory
			ps.Kind = KindMemory
			ps.ReserveTokens = int(m.ReserveTokens)
			ps.Tokens = encoder.Count(heading)
			maxItems := int(m.MaxItems)
			if maxItems == 0 {
				maxItems = DefaultMemoryMaxItems
			}
			ps.Memory = &MemorySource{
				Bank:     BankRef{Namespace: in.Namespace, Name: m.BankRef.Name},
				Endpoint: in.MemoryEndpoints[m.BankRef.Name],
				Query:    MemoryQuery{FromRuntime: m.Query.FromRuntime, FromRequest: m.Query.FromRequest},
				MaxItems: maxItems,
				// Per mille in the spec, the plan and the recall API alike.
				MinScorePerMille: int(m.MinScore),
				TrustedOnly:      m.TrustedOnly,
			}
			if sc := m.Scope; sc != nil {
				ps.Memory.Scope = &MemoryScope{FromRuntime: sc.FromRuntime, FromRequest: sc.FromRequest, IncludeShared: sc.IncludeShared}
			}
			pl.Runtime.MemoryPlaceholder = promptfit.MemoryPlaceholder("NAME")
		default:
			ps.Kind = KindStatic
			text, err := resolve(where, s.Text, s.From, in.Sources, &res.Notes)
			if err != nil {
				return nil, err
			}
			if ps.Text, err = substitute(where, text, spec.Variables); err != nil {
				return nil, err
			}
			if err := special(fmt.Sprintf("spec.sections[%d].%s", i, textField("text", s.From != nil)), ps.Text); err != nil {
				return nil, err
			}
			ps.Tokens = encoder.Count(promptfit.Block(heading, ps.Text))
		}
		pl.Sections = append(pl.Sections, ps)
	}
	for i := range spec.Intents {
		it := &spec.Intents[i]
		where := "intent " + it.Name
		text, err := resolve(where, it.Instruction, it.From, in.Sources, &res.Notes)
		if err != nil {
			return nil, err
		}
		if text, err = substitute(where, text, spec.Variables); err != nil {
			return nil, err
		}
		if err := special(fmt.Sprintf("spec.intents[%d].%s", i, textField("instruction", it.From != nil)), text); err != nil {
			return nil, err
		}
		pl.Intents = append(pl.Intents, PlanIntent{Name: it.Name, Instruction: text})
	}
	if err := pl.Validate(); err != nil {
		return nil, err
	}
	intents, err := Seal(ctx, pl, onExceed == promptopsv1.OnExceedTruncate)
	if err != nil {
		return nil, err
	}
	res.Intents = intents
	res.Plan = pl
	return res, nil
}

// textField names where a text came from: the spec's own field, or the
// ConfigMap it names.
func textField(own string, fromConfigMap bool) string {
	if fromConfigMap {
		return "from"
	}
	return own
}
