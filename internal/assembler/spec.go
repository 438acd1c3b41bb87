package assembler

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/textclip"
)

var (
	sectionNameRE  = regexp.MustCompile(`^[a-z0-9]([-_a-z0-9]*[a-z0-9])?$`)
	intentNameRE   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	variableNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
)

// Validate checks the rules the CRD enforces with OpenAPI and CEL, so that a
// manifest checked offline (promptops render) gets the same verdict as one
// sent to an apiserver.
func Validate(spec *promptopsv1.PromptTemplateSpec) error {
	bad := func(field, format string, a ...any) error {
		return &InvalidSpecError{Field: field, Message: fmt.Sprintf(format, a...)}
	}
	max := spec.Budget.MaxTokens
	if max < 1 || max > 2000000 {
		return bad("spec.budget.maxTokens", "must be between 1 and 2000000, is %d", max)
	}
	switch spec.Encoding {
	case "", promptopsv1.EncodingCL100K, promptopsv1.EncodingO200K, promptopsv1.EncodingLlama3, promptopsv1.EncodingQwen3, promptopsv1.EncodingDeepSeekV3, promptopsv1.EncodingTekken, promptopsv1.EncodingGemma3:
	default:
		return bad("spec.encoding", "unsupported value %q: use o200k_base, cl100k_base, llama3, qwen3, deepseek_v3, tekken or gemma3", spec.Encoding)
	}
	switch spec.Budget.OnExceed {
	case "", promptopsv1.OnExceedReject, promptopsv1.OnExceedWarn, promptopsv1.OnExceedTruncate:
	default:
		return bad("spec.budget.onExceed", "unsupported value %q: use Reject, Warn or Truncate", spec.Budget.OnExceed)
	}
	if n := len(spec.Variables); n > 64 {
		return bad("spec.variables", "has %d variables, at most 64", n)
	}
	for k, v := range spec.Variables {
		if !variableNameRE.MatchString(k) {
			return bad("spec.variables", "variable name %q: names are letters, digits and '_', not starting with a digit, at most 63 characters", textclip.Head(k, 80, "..."))
		}
		if n := utf8.RuneCountInString(v); n > MaxExpandedText {
			return bad("spec.variables["+k+"]", "is %d characters, at most %d", n, MaxExpandedText)
		}
	}
	tooLong := func(field, text string, limit int) error {
		if n := utf8.RuneCountInString(text); n > limit {
			return bad(field, "is %d characters, at most %d", n, limit)
		}
		return nil
	}
	if n := len(spec.Sections); n < 1 || n > 32 {
		return bad("spec.sections", "needs 1 to 32 sections, has %d", n)
	}
	if n := len(spec.Intents); n < 1 || n > 64 {
		return bad("spec.intents", "needs 1 to 64 intents, has %d", n)
	}
	seen := map[string]bool{}
	intentSections := 0
	for i, s := range spec.Sections {
		f := fmt.Sprintf("spec.sections[%d]", i)
		if !sectionNameRE.MatchString(s.Name) || len(s.Name) > 63 {
			return bad(f+".name", "%q is not a valid section name (lower case letters, digits, '-' and '_')", s.Name)
		}
		if seen[s.Name] {
			return bad(f+".name", "duplicate section name %q", s.Name)
		}
		seen[s.Name] = true
		if err := tooLong(f+".heading", s.Heading, 1024); err != nil {
			return err
		}
		if s.Text != nil {
			if err := tooLong(f+".text", *s.Text, MaxExpandedText); err != nil {
				return err
			}
		}
		kinds := 0
		if s.Text != nil || s.From != nil {
			kinds++
		}
		if s.Runtime != nil {
			kinds++
			if s.Runtime.ReserveTokens < 0 || s.Runtime.ReserveTokens >= max {
				return bad(f+".runtime.reserveTokens", "must be at least 0 and less than budget.maxTokens (%d)", max)
			}
		}
		if s.Memory != nil {
			kinds++
			if err := validateMemory(f+".memory", &spec.Sections[i], spec, max); err != nil {
				return err
			}
		}
		if s.Intent {
			kinds++
			intentSections++
		}
		if kinds != 1 {
			return bad(f, "a section has exactly one of text (or from), runtime, memory, or intent: true")
		}
		if t := s.Truncation; t != nil {
			if t.Policy != "" && t.Policy != promptopsv1.TruncationNever && t.Policy != promptopsv1.TruncationPriority {
				return bad(f+".truncation.policy", "unsupported value %q: use Never or Priority", t.Policy)
			}
			if t.Policy == promptopsv1.TruncationNever && (t.Priority != nil || t.MinTokens != nil) {
				return bad(f+".truncation", "priority and minTokens apply only to policy Priority")
			}
			if t.Priority != nil && (*t.Priority < 0 || *t.Priority > 100) {
				return bad(f+".truncation.priority", "must be between 0 and 100")
			}
			if t.MinTokens != nil && (*t.MinTokens < 0 || *t.MinTokens >= max) {
				return bad(f+".truncation.minTokens", "must be at least 0 and less than budget.maxTokens (%d)", max)
			}
		}
		if s.From != nil && (s.From.ConfigMapKeyRef.Name == "" || s.From.ConfigMapKeyRef.Key == "") {
			return bad(f+".from.configMapKeyRef", "needs name and key")
		}
	}
	if intentSections != 1 {
		return bad("spec.sections", "exactly one section must have intent: true")
	}
	seen = map[string]bool{}
	for i, in := range spec.Intents {
		f := fmt.Sprintf("spec.intents[%d]", i)
		if !intentNameRE.MatchString(in.Name) || len(in.Name) > 63 {
			return bad(f+".name", "%q is not a valid intent name (lower case letters, digits and '-')", in.Name)
		}
		if seen[in.Name] {
			return bad(f+".name", "duplicate intent name %q", in.Name)
		}
		seen[in.Name] = true
		if in.Instruction != nil {
			if err := tooLong(f+".instruction", *in.Instruction, MaxExpandedText); err != nil {
				return err
			}
		}
		if in.Instruction == nil && in.From == nil {
			return bad(f, "an intent needs instruction or from")
		}
		if in.From != nil && (in.From.ConfigMapKeyRef.Name == "" || in.From.ConfigMapKeyRef.Key == "") {
			return bad(f+".from.configMapKeyRef", "needs name and key")
		}
	}
	return nil
}

// validateMemory checks a memory section as the CRD does.
func validateMemory(f string, s *promptopsv1.Section, spec *promptopsv1.PromptTemplateSpec, max int32) error {
	bad := func(field, format string, a ...any) error {
		return &InvalidSpecError{Field: f + field, Message: fmt.Sprintf(format, a...)}
	}
	m := s.Memory
	if n := m.BankRef.Name; n == "" || len(n) > 63 || !intentNameRE.MatchString(n) {
		return bad(".bankRef.name", "%q is not a valid MemoryBank name", textclip.Head(n, 80, "..."))
	}
	if (m.Query.FromRuntime != "") == m.Query.FromRequest {
		return bad(".query", "needs exactly one of fromRuntime and fromRequest: true")
	}
	if q := m.Query.FromRuntime; q != "" && !hasRuntime(spec, q) {
		return bad(".query.fromRuntime", "%q must name a runtime section of this template", textclip.Head(q, 80, "..."))
	}
	if sc := m.Scope; sc != nil {
		if (sc.FromRuntime != "") == sc.FromRequest {
			return bad(".scope", "needs exactly one of fromRuntime and fromRequest: true")
		}
		if r := sc.FromRuntime; r != "" && !hasRuntime(spec, r) {
			return bad(".scope.fromRuntime", "%q must name a runtime section of this template", textclip.Head(r, 80, "..."))
		}
	}
	if m.ReserveTokens < 1 || m.ReserveTokens >= max {
		return bad(".reserveTokens", "must be at least 1 and less than budget.maxTokens (%d)", max)
	}
	if m.MaxItems < 0 || m.MaxItems > 1000 {
		return bad(".maxItems", "must be between 1 and 1000")
	}
	if m.MinScore < 0 || m.MinScore > 1000 {
		return bad(".minScore", "is per mille: must be between 0 and 1000")
	}
	if t := s.Truncation; t != nil && t.Policy == promptopsv1.TruncationNever {
		return &InvalidSpecError{Field: strings.TrimSuffix(f, ".memory") + ".truncation.policy", Message: "a memory section is always cut by priority: Never does not apply to it"}
	}
	return nil
}

// DefaultMemoryMaxItems is a memory section's maxItems when the spec leaves
// it 0 (the CRD's default).
const DefaultMemoryMaxItems = 20

// MemoryBanks lists the MemoryBanks a spec's memory sections name, in the
// template's namespace, for the controller's index.
func MemoryBanks(spec *promptopsv1.PromptTemplateSpec) []string {
	var out []string
	seen := map[string]bool{}
	for i := range spec.Sections {
		if m := spec.Sections[i].Memory; m != nil && !seen[m.BankRef.Name] {
			seen[m.BankRef.Name] = true
			out = append(out, m.BankRef.Name)
		}
	}
	return out
}

// truncationOf returns a section's effective policy, priority and minimum,
// applying the CRD's defaults (Priority, 0, 0).
func truncationOf(s *promptopsv1.Section) (never bool, priority, minTokens int) {
	if s.Truncation == nil {
		return false, 0, 0
	}
	never = s.Truncation.Policy == promptopsv1.TruncationNever
	if s.Truncation.Priority != nil {
		priority = int(*s.Truncation.Priority)
	}
	if s.Truncation.MinTokens != nil {
		minTokens = int(*s.Truncation.MinTokens)
	}
	return never, priority, minTokens
}

// References lists the ConfigMap keys a spec reads, for the controller's
// index and for render's offline resolution.
func References(spec *promptopsv1.PromptTemplateSpec) []SourceKey {
	var out []SourceKey
	seen := map[SourceKey]bool{}
	add := func(f *promptopsv1.TextSource) {
		if f == nil {
			return
		}
		k := SourceKey{ConfigMap: f.ConfigMapKeyRef.Name, Key: f.ConfigMapKeyRef.Key}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	for i := range spec.Sections {
		add(spec.Sections[i].From)
	}
	for i := range spec.Intents {
		add(spec.Intents[i].From)
	}
	return out
}

// ValidateName checks a template's metadata.name as the CRD does: it names
// and labels the rendered ConfigMaps.
func ValidateName(name string) error {
	if name == "" || len(name) > 63 {
		return &InvalidSpecError{Field: "metadata.name", Message: fmt.Sprintf("must be 1 to 63 characters, is %d: it names and labels the rendered ConfigMaps", len(name))}
	}
	return nil
}

// hasRuntime reports whether the spec has a runtime section of that name.
func hasRuntime(spec *promptopsv1.PromptTemplateSpec, name string) bool {
	for i := range spec.Sections {
		if spec.Sections[i].Name == name && spec.Sections[i].Runtime != nil {
			return true
		}
	}
	return false
}
