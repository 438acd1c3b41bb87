// Package assembler turns a PromptTemplate spec into assembled prompts, token
// counts and budget verdicts, and finishes assembly at request time from a
// plan. It is pure: no Kubernetes client, the same input gives the same bytes.
package assembler

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/tokens"
)

// SourceKey names one key of a ConfigMap in the template's namespace.
type SourceKey struct {
	ConfigMap string
	Key       string
}

// Input is what Render needs: the template and the texts its from
// references resolve to. A key absent from Sources is missing.
type Input struct {
	Namespace, Name string
	Spec            *promptopsv1.PromptTemplateSpec
	Sources         map[SourceKey]string
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

// Assembly is one assembled prompt.
type Assembly struct {
	Intent string
	// Text is the prompt. In a static assembly runtime sections appear as
	// their heading and a Placeholder line.
	Text string
	// Tokens = FixedTokens + ReservedTokens in a static assembly; the exact
	// count of Text in a runtime assembly.
	Tokens, FixedTokens, ReservedTokens int
	MaxTokens                           int
	WithinBudget                        bool
	Sections                            []SectionResult
	// Cut names the sections that were cut, in the order they were cut.
	Cut []string
}

// SectionResult is one section's share of an assembly.
type SectionResult struct {
	Name            string
	Kind            string
	Tokens          int
	TruncatedTokens int
}

// Message describes the verdict for a user: "intent analyze needs 4312
// tokens (3812 fixed + 500 reserved), budget 4000".
func (a *Assembly) Message() string {
	if a.WithinBudget {
		return fmt.Sprintf("intent %s takes %d tokens (%d fixed + %d reserved) of budget %d", a.Intent, a.Tokens, a.FixedTokens, a.ReservedTokens, a.MaxTokens)
	}
	return fmt.Sprintf("intent %s needs %d tokens (%d fixed + %d reserved), budget %d", a.Intent, a.Tokens, a.FixedTokens, a.ReservedTokens, a.MaxTokens)
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

// resolve returns the text of a section or intent: the referenced key, else
// the fallback, else an error.
func resolve(where string, inline *string, from *promptopsv1.TextSource, sources map[SourceKey]string, notes *[]string) (string, error) {
	if from != nil {
		k := SourceKey{ConfigMap: from.ConfigMapKeyRef.Name, Key: from.ConfigMapKeyRef.Key}
		if v, ok := sources[k]; ok {
			return v, nil
		}
		if inline == nil {
			return "", &MissingReferenceError{Where: where, ConfigMap: k.ConfigMap, Key: k.Key}
		}
		*notes = append(*notes, fmt.Sprintf("%s: key %q of ConfigMap %q is missing; using the fallback text", where, k.Key, k.ConfigMap))
	}
	if inline == nil {
		return "", nil
	}
	return *inline, nil
}

// Render validates and renders a template: a plan and one static assembly
// per intent. With onExceed: Truncate it cuts static sections to fit.
func Render(in Input) (*Result, error) {
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
	res := &Result{}
	plan := &Plan{
		APIVersion: PlanAPIVersion, Kind: PlanKind,
		Namespace: in.Namespace, Name: in.Name,
		Encoding: enc, MaxTokens: int(spec.Budget.MaxTokens), OnExceed: string(onExceed),
		Separator: Separator,
		Runtime:   RuntimeSummary{Placeholder: Placeholder("NAME")},
	}
	for i := range spec.Sections {
		s := &spec.Sections[i]
		where := "section " + s.Name
		heading, err := substitute(where+" heading", s.Heading, spec.Variables)
		if err != nil {
			return nil, err
		}
		never, prio, minT := truncationOf(s)
		// The intent's instruction is what the request is for: it is cut
		// only when its section has a truncation of its own (policy
		// Priority), never by default.
		if s.Intent && s.Truncation == nil {
			never = true
		}
		ps := PlanSection{Name: s.Name, Heading: heading, Policy: string(promptopsv1.TruncationPriority), Priority: prio, MinTokens: minT}
		if never {
			ps.Policy = string(promptopsv1.TruncationNever)
		}
		switch {
		case s.Intent:
			ps.Kind = KindIntent
		case s.Runtime != nil:
			ps.Kind = KindRuntime
			ps.ReserveTokens = int(s.Runtime.ReserveTokens)
			ps.Tokens = encoder.Count(heading)
		default:
			ps.Kind = KindStatic
			text, err := resolve(where, s.Text, s.From, in.Sources, &res.Notes)
			if err != nil {
				return nil, err
			}
			if ps.Text, err = substitute(where, text, spec.Variables); err != nil {
				return nil, err
			}
			ps.Tokens = encoder.Count(block(heading, ps.Text))
		}
		plan.Sections = append(plan.Sections, ps)
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
		plan.Intents = append(plan.Intents, PlanIntent{Name: it.Name, Instruction: text})
	}
	for i := range plan.Intents {
		pi := &plan.Intents[i]
		a := plan.assembleStatic(encoder, pi, onExceed == promptopsv1.OnExceedTruncate)
		pi.Tokens, pi.FixedTokens, pi.ReservedTokens, pi.WithinBudget = a.Tokens, a.FixedTokens, a.ReservedTokens, a.WithinBudget
		res.Intents = append(res.Intents, a)
	}
	plan.Revision = revision(plan)
	res.Plan = plan
	return res, nil
}

// revision hashes the plan with its revision field empty.
func revision(p *Plan) string {
	c := *p
	c.Revision = ""
	data, _ := json.Marshal(&c)
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// block is a section as rendered: heading line, then text. An empty text
// leaves the section out.
func block(heading, text string) string {
	if text == "" {
		return ""
	}
	if heading == "" {
		return text
	}
	return heading + "\n" + text
}

// part is one section while an assembly is being cut.
type part struct {
	name, kind, heading, body string
	cuttable                  bool
	priority, minTokens       int
	tokens, original          int // of body
}

func join(parts []part, render func(p *part) string) string {
	var b strings.Builder
	first := true
	for i := range parts {
		s := render(&parts[i])
		if s == "" {
			continue
		}
		if !first {
			b.WriteString(Separator)
		}
		first = false
		b.WriteString(s)
	}
	return b.String()
}

// cut shrinks cuttable parts, highest priority first (later sections first on
// a tie), each down to its minimum, until total() fits limit. It returns the
// names of the parts cut, in order.
func cut(e *tokens.Encoder, parts []part, limit int, total func() int) []string {
	order := make([]int, 0, len(parts))
	for i := range parts {
		if parts[i].cuttable {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		pa, pb := parts[order[a]], parts[order[b]]
		if pa.priority != pb.priority {
			return pa.priority > pb.priority
		}
		return order[a] > order[b]
	})
	var cutNames []string
	t := total()
	for _, i := range order {
		p := &parts[i]
		for t > limit && p.tokens > p.minTokens {
			target := max(p.minTokens, p.tokens-(t-limit))
			if target >= p.tokens {
				target = p.tokens - 1
			}
			p.body, p.tokens = e.Truncate(p.body, target)
			if len(cutNames) == 0 || cutNames[len(cutNames)-1] != p.name {
				cutNames = append(cutNames, p.name)
			}
			t = total()
		}
		if t <= limit {
			break
		}
	}
	return cutNames
}

// parts turns the plan's sections into parts; body gives a section's text
// and whether this assembly may cut it (Never sections never are).
func (p *Plan) parts(e *tokens.Encoder, body func(s *PlanSection) (text string, cuttable bool)) []part {
	parts := make([]part, len(p.Sections))
	for i := range p.Sections {
		s := &p.Sections[i]
		text, cuttable := body(s)
		n := e.Count(text)
		parts[i] = part{
			name: s.Name, kind: s.Kind, heading: s.Heading, body: text,
			cuttable: cuttable && s.Policy != string(promptopsv1.TruncationNever),
			priority: s.Priority, minTokens: s.MinTokens, tokens: n, original: n,
		}
	}
	return parts
}

// assembleStatic assembles one intent at reconcile time: runtime sections
// are their heading plus their reserve.
func (p *Plan) assembleStatic(e *tokens.Encoder, pi *PlanIntent, truncate bool) *Assembly {
	reserved := 0
	parts := p.parts(e, func(s *PlanSection) (string, bool) {
		switch s.Kind {
		case KindStatic:
			return s.Text, true
		case KindIntent:
			return pi.Instruction, true
		}
		reserved += s.ReserveTokens
		return "", false
	})
	// Fixed text: runtime sections stand as their heading alone.
	fixed := func(p *part) string {
		if p.kind == KindRuntime {
			return p.heading
		}
		return block(p.heading, p.body)
	}
	total := func() int { return e.Count(join(parts, fixed)) + reserved }
	a := &Assembly{Intent: pi.Name, MaxTokens: p.MaxTokens, ReservedTokens: reserved}
	if truncate && total() > p.MaxTokens {
		a.Cut = cut(e, parts, p.MaxTokens, total)
		pi.StaticCuts = nil
		for _, pt := range parts {
			if pt.tokens < pt.original && (pt.kind == KindStatic || pt.kind == KindIntent) {
				pi.StaticCuts = append(pi.StaticCuts, StaticCut{Section: pt.name, Text: pt.body, TruncatedTokens: pt.original - pt.tokens})
			}
		}
	}
	a.FixedTokens = e.Count(join(parts, fixed))
	a.Tokens = a.FixedTokens + reserved
	a.WithinBudget = a.Tokens <= p.MaxTokens
	a.Text = join(parts, func(p *part) string {
		if p.kind == KindRuntime {
			return block(p.heading, Placeholder(p.name))
		}
		return block(p.heading, p.body)
	})
	for i, pt := range parts {
		sr := SectionResult{Name: pt.name, Kind: pt.kind, TruncatedTokens: pt.original - pt.tokens}
		if pt.kind == KindRuntime {
			sr.Tokens = p.Sections[i].Tokens + p.Sections[i].ReserveTokens
		} else {
			sr.Tokens = e.Count(block(pt.heading, pt.body))
		}
		a.Sections = append(a.Sections, sr)
	}
	return a
}

// Assemble finishes one intent at request time: runtime sections get their
// contents (a missing or empty one is left out), and while the prompt is
// over budget runtime sections are cut by priority down to their minimum.
// Never sections and static text are not cut here. Contents for unknown
// sections are an error, so a typo does not silently drop data.
func (p *Plan) Assemble(intent string, runtime map[string]string) (*Assembly, error) {
	pi := p.intent(intent)
	if pi == nil {
		return nil, fmt.Errorf("plan %s has no intent %q (intents: %s)", p.Name, intent, strings.Join(p.IntentNames(), ", "))
	}
	for name := range runtime {
		s := p.section(name)
		if s == nil || s.Kind != KindRuntime {
			return nil, fmt.Errorf("plan %s has no runtime section %q", p.Name, name)
		}
	}
	e, err := tokens.Get(p.Encoding)
	if err != nil {
		return nil, err
	}
	cuts := map[string]string{}
	for _, c := range pi.StaticCuts {
		cuts[c.Section] = c.Text
	}
	parts := p.parts(e, func(s *PlanSection) (string, bool) {
		switch s.Kind {
		case KindStatic:
			if c, ok := cuts[s.Name]; ok {
				return c, false
			}
			return s.Text, false
		case KindIntent:
			if c, ok := cuts[s.Name]; ok {
				return c, false
			}
			return pi.Instruction, false
		}
		return runtime[s.Name], true
	})
	render := func(p *part) string { return block(p.heading, p.body) }
	total := func() int { return e.Count(join(parts, render)) }
	a := &Assembly{Intent: intent, MaxTokens: p.MaxTokens}
	if total() > p.MaxTokens {
		a.Cut = cut(e, parts, p.MaxTokens, total)
	}
	a.Text = join(parts, render)
	a.Tokens = e.Count(a.Text)
	a.WithinBudget = a.Tokens <= p.MaxTokens
	for _, pt := range parts {
		n := e.Count(block(pt.heading, pt.body))
		if pt.kind == KindRuntime {
			a.ReservedTokens += n
		}
		a.Sections = append(a.Sections, SectionResult{Name: pt.name, Kind: pt.kind, Tokens: n, TruncatedTokens: pt.original - pt.tokens})
	}
	a.FixedTokens = a.Tokens - a.ReservedTokens
	return a, nil
}
