package assembler

import "encoding/json"

// Plan is the machine-readable description of a rendered template (the
// ConfigMap key plan.json). An application in any language finishes assembly
// from it: join the sections in order with Separator, put the chosen
// intent's instruction in the intent section, fill runtime sections, and cut
// runtime sections by priority while the prompt is over MaxTokens. The schema
// is documented in docs/plan.md; PlanVersion changes when it does.
type Plan struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name,omitempty"`
	// Revision is "sha256:" and the hash of the plan with Revision empty.
	Revision  string         `json:"revision"`
	Encoding  string         `json:"encoding"`
	MaxTokens int            `json:"maxTokens"`
	OnExceed  string         `json:"onExceed"`
	Separator string         `json:"separator"`
	Sections  []PlanSection  `json:"sections"`
	Intents   []PlanIntent   `json:"intents"`
	Runtime   RuntimeSummary `json:"runtime"`
}

// PlanVersion is the plan's apiVersion.
const (
	PlanAPIVersion = "promptops.io/v1"
	PlanKind       = "PromptPlan"
	// Separator joins sections, as in the seed assembler.
	Separator = "\n\n"
)

// Section kinds in a plan.
const (
	KindStatic  = "static"
	KindRuntime = "runtime"
	KindIntent  = "intent"
)

// PlanSection is one section, in prompt order.
type PlanSection struct {
	Name string `json:"name"`
	// Kind is static (Text is the section's text), runtime (filled by the
	// application) or intent (the chosen intent's instruction).
	Kind string `json:"kind"`
	// Heading, when set, is put on its own line before the section's text.
	// A section whose text is empty is left out, heading included.
	Heading string `json:"heading,omitempty"`
	// Text of a static section, variables substituted.
	Text string `json:"text,omitempty"`
	// Tokens of the section as rendered (heading and text); for a runtime
	// section, of its heading.
	Tokens int `json:"tokens"`
	// ReserveTokens the budget leaves for a runtime section's content.
	ReserveTokens int `json:"reserveTokens,omitempty"`
	// Policy is Never or Priority.
	Policy string `json:"policy"`
	// Priority: higher is cut first.
	Priority int `json:"priority"`
	// MinTokens a cut section keeps at least.
	MinTokens int `json:"minTokens"`
}

// PlanIntent is one intent and its budget verdict.
type PlanIntent struct {
	Name        string `json:"name"`
	Instruction string `json:"instruction"`
	// Tokens = FixedTokens + ReservedTokens.
	Tokens         int  `json:"tokens"`
	FixedTokens    int  `json:"fixedTokens"`
	ReservedTokens int  `json:"reservedTokens"`
	WithinBudget   bool `json:"withinBudget"`
	// StaticCuts replace static section texts for this intent when
	// onExceed: Truncate had to cut them.
	StaticCuts []StaticCut `json:"staticCuts,omitempty"`
}

// StaticCut is a static section's text after it was cut to fit the budget.
type StaticCut struct {
	Section         string `json:"section"`
	Text            string `json:"text"`
	TruncatedTokens int    `json:"truncatedTokens"`
}

// RuntimeSummary documents how runtime slots appear in <intent>.txt.
type RuntimeSummary struct {
	// Placeholder is the pattern of the line that stands for a runtime
	// section in <intent>.txt; NAME is the section's name.
	Placeholder string `json:"placeholder"`
}

// Placeholder is the line that stands for a runtime section in <intent>.txt.
func Placeholder(section string) string { return "{{runtime." + section + "}}" }

func (p *Plan) section(name string) *PlanSection {
	for i := range p.Sections {
		if p.Sections[i].Name == name {
			return &p.Sections[i]
		}
	}
	return nil
}

func (p *Plan) intent(name string) *PlanIntent {
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

// PlanKey is the ConfigMap key of the plan.
const PlanKey = "plan.json"

// IntentKey is the ConfigMap key of an intent's static prompt.
func IntentKey(intent string) string { return intent + ".txt" }

// ConfigMapData is what a rendered ConfigMap holds: plan.json and one
// <intent>.txt per intent.
func ConfigMapData(r *Result) (map[string]string, error) {
	plan, err := json.MarshalIndent(r.Plan, "", "  ")
	if err != nil {
		return nil, err
	}
	data := map[string]string{PlanKey: string(plan) + "\n"}
	for _, a := range r.Intents {
		data[IntentKey(a.Intent)] = a.Text
	}
	size := 0
	for k, v := range data {
		size += len(k) + len(v)
	}
	if size > MaxConfigMapBytes {
		return nil, &TooLargeError{Where: "the rendered ConfigMap (plan.json and one file per intent)", Size: size, Limit: MaxConfigMapBytes, Unit: "bytes"}
	}
	return data, nil
}

// MaxConfigMapBytes is the API server's limit on a ConfigMap's data, keys
// included.
const MaxConfigMapBytes = 1 << 20
