// Package plan finishes prompts at request time from a rendered plan
// (plan.json of a PromptTemplate's <name>-prompts ConfigMap): load a plan,
// assemble an intent with the application's runtime contents, and get the
// prompt, its exact token count, each section's tokens and cuts, and the
// plan's revision. The schema and the algorithm are documented in
// docs/plan.md; testdata/conformance holds vectors for other languages.
//
// The package needs no Kubernetes client: the promptops operator, the
// `promptops assemble` and `promptops serve` verbs and Go applications use
// the same code, so all give the same bytes for the same plan and input.
package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/promptops/promptops/internal/tokens"
)

// Plan is the machine-readable description of a rendered template (the
// ConfigMap key plan.json). An application in any language finishes assembly
// from it: join the sections in order with Separator, put the chosen
// intent's instruction in the intent section, fill runtime sections, and cut
// runtime sections by priority while the prompt is over MaxTokens. The schema
// is documented in docs/plan.md; APIVersion changes when it does.
type Plan struct {
	// APIVersion is PlanAPIVersion.
	APIVersion string `json:"apiVersion"`
	// Kind is PlanKind.
	Kind string `json:"kind"`
	// Namespace is the PromptTemplate's.
	Namespace string `json:"namespace,omitempty"`
	// Name is the PromptTemplate's.
	Name string `json:"name,omitempty"`
	// Revision is "sha256:" and the hash of the plan with Revision empty.
	Revision string `json:"revision"`
	// Encoding is the encoding tokens are counted in.
	Encoding string `json:"encoding"`
	// SpecialTokens is Reject or Allow for an encoding with special
	// tokens (llama3), absent for the others: whether a runtime content or
	// memory item holding a special-token string is refused
	// (SpecialTokenError) or counted as the model's tokenizer counts it.
	// Absent with such an encoding means Reject.
	SpecialTokens SpecialTokens `json:"specialTokens,omitempty"`
	// MaxTokens is the budget of one assembled prompt.
	MaxTokens int `json:"maxTokens"`
	// OnExceed is what the operator did at render time when an intent was
	// over budget.
	OnExceed OnExceed `json:"onExceed"`
	// Separator joins the non-empty sections.
	Separator string `json:"separator"`
	// Sections in prompt order.
	Sections []Section `json:"sections"`
	// Intents and their budget verdicts.
	Intents []Intent `json:"intents"`
	// Runtime says how runtime sections appear in <intent>.txt.
	Runtime RuntimeSummary `json:"runtime"`
}

// The plan's apiVersion and kind, and the separator between sections.
const (
	PlanAPIVersion = "promptops.io/v1"
	PlanKind       = "PromptPlan"
	// Separator joins sections, as in the seed assembler.
	Separator = "\n\n"
)

// OnExceed is what the operator does at render time with an intent over
// its budget (the template's spec.budget.onExceed).
type OnExceed string

// The values of Plan.OnExceed.
const (
	// OnExceedReject keeps the previous rendering: an intent over budget
	// is not written.
	OnExceedReject OnExceed = "Reject"
	// OnExceedWarn writes the intent and reports it over budget.
	OnExceedWarn OnExceed = "Warn"
	// OnExceedTruncate cuts static sections by priority to fit
	// (Intent.StaticCuts).
	OnExceedTruncate OnExceed = "Truncate"
)

// SpecialTokens is whether runtime contents and memory items may hold the
// special-token strings of an encoding that has them (llama3).
type SpecialTokens string

// The values of Plan.SpecialTokens.
const (
	// SpecialTokensReject refuses a runtime content holding one
	// (*SpecialTokenError) and leaves a memory section holding one empty
	// (MemorySpecialToken).
	SpecialTokensReject SpecialTokens = "Reject"
	// SpecialTokensAllow counts them as the model's tokenizer does.
	SpecialTokensAllow SpecialTokens = "Allow"
)

// SectionKind is what fills a section.
type SectionKind string

// Section kinds in a plan.
const (
	// KindStatic: Section.Text, fixed at render time.
	KindStatic SectionKind = "static"
	// KindRuntime: filled by the application per request (the runtime
	// argument of Assemble).
	KindRuntime SectionKind = "runtime"
	// KindIntent: the chosen intent's instruction.
	KindIntent SectionKind = "intent"
	// KindMemory: filled at request time by recall from a MemoryBank
	// (Section.Memory, WithRecall).
	KindMemory SectionKind = "memory"
)

// Policy is how a section may be cut to fit the budget.
type Policy string

// Truncation policies of a section.
const (
	// PolicyNever: the section is never cut.
	PolicyNever Policy = "Never"
	// PolicyPriority: the section is cut by its priority, higher first.
	PolicyPriority Policy = "Priority"
)

// Section is one section, in prompt order.
type Section struct {
	// Name of the section, unique in the plan.
	Name string `json:"name"`
	// Kind is static (Text is the section's text), runtime (filled by the
	// application) or intent (the chosen intent's instruction).
	Kind SectionKind `json:"kind"`
	// Heading, when set, is put on its own line before the section's text.
	// A section whose text is empty is left out, heading included.
	Heading string `json:"heading,omitempty"`
	// Text of a static section, variables substituted.
	Text string `json:"text,omitempty"`
	// Tokens of the section as rendered (heading and text); for a runtime
	// section, of its heading.
	Tokens int `json:"tokens"`
	// ReserveTokens the budget leaves for a runtime or memory section's
	// content; a memory section never holds more.
	ReserveTokens int `json:"reserveTokens,omitempty"`
	// Policy is PolicyNever or PolicyPriority.
	Policy Policy `json:"policy"`
	// Priority: higher is cut first.
	Priority int `json:"priority"`
	// MinTokens a cut section keeps at least.
	MinTokens int `json:"minTokens"`
	// Memory says where a memory section's items come from; set on memory
	// sections only.
	Memory *MemorySource `json:"memory,omitempty"`
}

// Intent is one intent and its budget verdict.
type Intent struct {
	// Name of the intent, unique in the plan.
	Name string `json:"name"`
	// Instruction is the text of the intent section for this intent.
	Instruction string `json:"instruction"`
	// Tokens = FixedTokens + ReservedTokens.
	Tokens int `json:"tokens"`
	// FixedTokens counts every static text, the instruction, runtime
	// headings and separators.
	FixedTokens int `json:"fixedTokens"`
	// ReservedTokens is the sum of the runtime sections' reserves.
	ReservedTokens int `json:"reservedTokens"`
	// CacheableTokens counts the prompt's text before its first runtime or
	// memory section (the leading static and intent sections, cuts
	// applied, joined by the separator, counted alone): the prefix that is
	// the same in every request, which a provider's prompt cache can
	// reuse. All of it when the prompt has no runtime or memory section.
	CacheableTokens int `json:"cacheableTokens"`
	// WithinBudget is Tokens <= MaxTokens.
	WithinBudget bool `json:"withinBudget"`
	// StaticCuts replace static section texts for this intent when
	// onExceed: Truncate had to cut them.
	StaticCuts []StaticCut `json:"staticCuts,omitempty"`
}

// StaticCut is a static section's text after it was cut to fit the budget.
type StaticCut struct {
	// Section is the name of the section cut.
	Section string `json:"section"`
	// Text replaces the section's text (or the intent's instruction).
	Text string `json:"text"`
	// TruncatedTokens is how many tokens the cut removed.
	TruncatedTokens int `json:"truncatedTokens"`
}

// RuntimeSummary documents how runtime slots appear in <intent>.txt.
type RuntimeSummary struct {
	// Placeholder is the pattern of the line that stands for a runtime
	// section in <intent>.txt; NAME is the section's name.
	Placeholder string `json:"placeholder"`
	// MemoryPlaceholder is the same for memory sections; set when the plan
	// has any.
	MemoryPlaceholder string `json:"memoryPlaceholder,omitempty"`
}

// ErrNotPlan is wrapped by the error of Load and Validate for data that is
// not a promptops plan at all: not one JSON object, or another apiVersion
// or kind.
var ErrNotPlan = errors.New("not a promptops plan")

// InvalidPlanError is a promptops plan that cannot be assembled exactly:
// Load and Validate return it for an unknown encoding, section kind or
// policy, a duplicate name, a static cut of no section, and the like.
type InvalidPlanError struct {
	// Namespace and Name are the plan's.
	Namespace, Name string
	// Section names the section at fault, when one is.
	Section string
	// Reason says what is wrong.
	Reason string
	// Err is the error behind Reason, if any (an unknown encoding's).
	Err error
}

// Error says which plan and what is wrong with it.
func (e *InvalidPlanError) Error() string {
	return fmt.Sprintf("invalid plan %s/%s: %s", e.Namespace, e.Name, e.Reason)
}

// Unwrap returns Err.
func (e *InvalidPlanError) Unwrap() error { return e.Err }

// Load parses and validates plan.json. A plan it returns can be assembled;
// anything it cannot assemble exactly is an *InvalidPlanError, and data
// that is not a plan an error wrapping ErrNotPlan. The revision is taken
// as written.
func Load(data []byte) (*Plan, error) {
	p := &Plan{}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotPlan, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrNotPlan)
	}
	if err := refuseFractionMinScore(p, data); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// Validate reports the first thing that keeps the plan from being
// assembled, as Load does.
func (p *Plan) Validate() error {
	bad := func(format string, args ...any) error {
		return &InvalidPlanError{Namespace: p.Namespace, Name: p.Name, Reason: fmt.Sprintf(format, args...)}
	}
	badSection := func(s *Section, format string, args ...any) error {
		return &InvalidPlanError{Namespace: p.Namespace, Name: p.Name, Section: s.Name, Reason: fmt.Sprintf(format, args...)}
	}
	if p.Kind != PlanKind || p.APIVersion != PlanAPIVersion {
		return fmt.Errorf("%w: apiVersion %q kind %q, want %s %s", ErrNotPlan, p.APIVersion, p.Kind, PlanAPIVersion, PlanKind)
	}
	if _, err := tokens.Get(p.Encoding); err != nil {
		return &InvalidPlanError{Namespace: p.Namespace, Name: p.Name, Reason: err.Error(), Err: err}
	}
	switch p.SpecialTokens {
	case "", SpecialTokensReject, SpecialTokensAllow:
	default:
		return bad("specialTokens %q, want %s or %s", p.SpecialTokens, SpecialTokensReject, SpecialTokensAllow)
	}
	if p.Separator != Separator {
		return bad("separator %q, want %q", p.Separator, Separator)
	}
	if p.MaxTokens < 0 {
		return bad("maxTokens %d is negative", p.MaxTokens)
	}
	seen := map[string]bool{}
	intentSections := 0
	for _, s := range p.Sections {
		if s.Name == "" || seen[s.Name] {
			return badSection(&s, "section name %q is empty or repeated", s.Name)
		}
		seen[s.Name] = true
		switch s.Kind {
		case KindStatic, KindRuntime:
		case KindIntent:
			intentSections++
		case KindMemory:
			if err := p.validateMemory(&s); err != nil {
				return badSection(&s, "%v", err)
			}
		default:
			return badSection(&s, "section %s has kind %q, want static, runtime, intent or memory", s.Name, s.Kind)
		}
		if s.Kind != KindMemory && s.Memory != nil {
			return badSection(&s, "section %s has memory but kind %q", s.Name, s.Kind)
		}
		if s.ReserveTokens < 0 {
			return badSection(&s, "section %s has negative reserveTokens", s.Name)
		}
		if s.Policy != PolicyNever && s.Policy != PolicyPriority {
			return badSection(&s, "section %s has policy %q, want Never or Priority", s.Name, s.Policy)
		}
		if s.MinTokens < 0 {
			return badSection(&s, "section %s has negative minTokens", s.Name)
		}
	}
	if intentSections > 1 {
		return bad("%d intent sections, want at most one", intentSections)
	}
	if len(p.Intents) == 0 {
		return bad("no intents")
	}
	names := map[string]bool{}
	for _, it := range p.Intents {
		if it.Name == "" || names[it.Name] {
			return bad("intent name %q is empty or repeated", it.Name)
		}
		names[it.Name] = true
		for _, c := range it.StaticCuts {
			s := p.section(c.Section)
			if s == nil || s.Kind == KindRuntime || s.Kind == KindMemory {
				return bad("intent %s cuts %q, which is not a static or intent section", it.Name, c.Section)
			}
		}
	}
	return nil
}

func (p *Plan) section(name string) *Section {
	for i := range p.Sections {
		if p.Sections[i].Name == name {
			return &p.Sections[i]
		}
	}
	return nil
}

func (p *Plan) intent(name string) *Intent {
	for i := range p.Intents {
		if p.Intents[i].Name == name {
			return &p.Intents[i]
		}
	}
	return nil
}

// IntentNames lists the plan's intents in order.
func (p *Plan) IntentNames() []string {
	out := make([]string, len(p.Intents))
	for i := range p.Intents {
		out[i] = p.Intents[i].Name
	}
	return out
}

// RuntimeSections lists the names of the runtime sections in order.
func (p *Plan) RuntimeSections() []string {
	var out []string
	for _, s := range p.Sections {
		if s.Kind == KindRuntime {
			out = append(out, s.Name)
		}
	}
	return out
}

// Digest is the plan's revision as computed: "sha256:" and the hex SHA-256
// of its JSON with Revision empty.
func (p *Plan) Digest() string {
	c := *p
	c.Revision = ""
	data, _ := json.Marshal(&c)
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// UnknownIntentError is returned by Assemble for an intent the plan lacks.
type UnknownIntentError struct {
	// Plan is the plan's name, Intent the one asked for.
	Plan, Intent string
	// Intents are the plan's intents.
	Intents []string
}

// Error says which intent is missing and which the plan has.
func (e *UnknownIntentError) Error() string {
	return fmt.Sprintf("plan %s has no intent %q (intents: %s)", e.Plan, e.Intent, strings.Join(e.Intents, ", "))
}

// UnknownSectionError is returned by Assemble for runtime contents of a
// section that is not a runtime section of the plan.
type UnknownSectionError struct {
	// Plan is the plan's name, Section the one given contents.
	Plan, Section string
}

// Error names the section.
func (e *UnknownSectionError) Error() string {
	return fmt.Sprintf("plan %s has no runtime section %q", e.Plan, e.Section)
}

// SpecialTokenError is a runtime content or memory item that holds a
// special-token string of the plan's encoding under SpecialTokens Reject:
// the model's serving stack would read it as a control token.
type SpecialTokenError struct {
	// Plan is the plan's name, Section the section whose content holds
	// Token.
	Plan, Section, Token string
}

// Error names the section and the special token (a string of the
// encoding's vocabulary, never the content around it).
func (e *SpecialTokenError) Error() string {
	return fmt.Sprintf("section %s holds the special token %s, which the model would read as a control token (the template's specialTokens is Reject)", e.Section, e.Token)
}

// rejectsSpecials reports whether contents with special tokens are refused.
func (p *Plan) rejectsSpecials(e *tokens.Encoder) bool {
	return e.HasSpecials() && p.SpecialTokens != SpecialTokensAllow
}

// refuseFractionMinScore refuses a memory section that gives the minScore
// of before minScorePerMille (0 to 1, a fraction of a recall score),
// naming the field that replaced it, as the fact API refuses its
// snake_case names: read as the unit it is now it would mean another
// threshold, and ignored, none.
func refuseFractionMinScore(p *Plan, data []byte) error {
	if !bytes.Contains(data, []byte(`"minScore"`)) {
		return nil
	}
	var old struct {
		Sections []struct {
			Name   string `json:"name"`
			Memory *struct {
				MinScore *json.RawMessage `json:"minScore"`
			} `json:"memory"`
		} `json:"sections"`
	}
	if json.Unmarshal(data, &old) != nil {
		return nil
	}
	for _, s := range old.Sections {
		if s.Memory != nil && s.Memory.MinScore != nil {
			return &InvalidPlanError{Namespace: p.Namespace, Name: p.Name, Section: s.Name,
				Reason: fmt.Sprintf("memory section %s has minScore %.40s: a field renamed minScorePerMille, in thousandths of a score (0 to 1000; 250 for 0.25); render the template again", s.Name, *s.Memory.MinScore)}
		}
	}
	return nil
}
