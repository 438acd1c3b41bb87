package controllers

import (
	"fmt"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/assembler"
)

// verdict is what onExceed makes of a render.
type verdict struct {
	onExceed  promptopsv1.OnExceed
	over      []*assembler.Assembly
	truncated []*assembler.Assembly
	// apply is true when the ConfigMap gets this render.
	apply bool
}

func judge(res *assembler.Result) verdict {
	v := verdict{onExceed: promptopsv1.OnExceed(res.Plan.OnExceed), over: res.OverBudget(), truncated: res.Truncated()}
	v.apply = res.Applies()
	return v
}

// setTemplateStatus fills the status from a render and its verdict.
func setTemplateStatus(pt *promptopsv1.PromptTemplate, res *assembler.Result, v verdict) {
	gen := pt.Generation
	st := &pt.Status
	st.Encoding = promptopsv1.Encoding(res.Plan.Encoding)
	st.LargestTokens = int32(res.Largest())
	st.Intents = st.Intents[:0]
	for _, a := range res.Intents {
		st.Intents = append(st.Intents, promptopsv1.IntentStatus{
			Name: a.Intent, Tokens: int32(a.Tokens), FixedTokens: int32(a.FixedTokens), ReservedTokens: int32(a.ReservedTokens), CacheableTokens: int32(a.CacheableTokens),
			MaxTokens: int32(a.MaxTokens), WithinBudget: a.WithinBudget, TruncatedSections: a.Cut,
		})
	}

	overMsg := overBudgetMessage(v.over)
	if len(v.over) > 0 {
		setCondition(&st.Conditions, gen, promptopsv1.ConditionBudgetExceeded, metav1.ConditionTrue, promptopsv1.ReasonBudgetExceeded, overMsg)
	} else {
		setCondition(&st.Conditions, gen, promptopsv1.ConditionBudgetExceeded, metav1.ConditionFalse, promptopsv1.ReasonWithinBudget,
			fmt.Sprintf("Every intent fits the budget of %d tokens.", res.Plan.MaxTokens))
	}
	if len(v.truncated) > 0 {
		setCondition(&st.Conditions, gen, promptopsv1.ConditionTruncated, metav1.ConditionTrue, promptopsv1.ReasonTruncated, truncatedMessage(v.truncated))
	} else {
		setCondition(&st.Conditions, gen, promptopsv1.ConditionTruncated, metav1.ConditionFalse, promptopsv1.ReasonNotTruncated, "Nothing had to be cut.")
	}

	notes := ""
	if len(res.Notes) > 0 {
		notes = " Note: " + capitalize(strings.Join(res.Notes, "; ")) + "."
	}
	switch {
	case len(v.over) > 0 && !v.apply:
		keep := "No ConfigMap is rendered until every intent fits."
		if st.Revision != "" {
			keep = fmt.Sprintf("ConfigMap %s keeps the last revision that fit.", st.ConfigMapName)
		}
		// Nothing changes until the spec or a referenced ConfigMap does:
		// Stalled, which GitOps waits read as Failed with this message.
		markStalled(&st.Conditions, gen, promptopsv1.ReasonBudgetExceeded, overMsg+" "+keep+notes)
	case len(v.over) > 0:
		markReady(&st.Conditions, gen, promptopsv1.ReasonBudgetExceeded, "Rendered despite the budget (onExceed: Warn): "+lowerFirst(overMsg)+notes)
	default:
		largest := res.Intents[0]
		for _, a := range res.Intents {
			if a.Tokens > largest.Tokens {
				largest = a
			}
		}
		reason, what := promptopsv1.ReasonSucceeded, "within budget"
		if len(v.truncated) > 0 {
			reason, what = promptopsv1.ReasonTruncated, "within budget after cuts"
		}
		markReady(&st.Conditions, gen, reason,
			fmt.Sprintf("%d intent(s) %s; largest is %s with %d of %d tokens.%s", len(res.Intents), what, largest.Intent, largest.Tokens, largest.MaxTokens, notes))
	}
}

// setMemoryCondition reports whether every bank the memory sections recall
// from is served; a template without memory sections has no such condition.
// An unserved bank does not fail the render: its sections are empty at
// request time.
func setMemoryCondition(pt *promptopsv1.PromptTemplate, banks []bankState) {
	st := &pt.Status
	if len(banks) == 0 {
		meta.RemoveStatusCondition(&st.Conditions, promptopsv1.ConditionMemoryUnavailable)
		return
	}
	var missing, unserved []string
	for _, b := range banks {
		switch {
		case !b.found:
			missing = append(missing, b.name)
		case b.endpoint == "":
			unserved = append(unserved, b.name)
		}
	}
	var msgs []string
	if len(missing) > 0 {
		msgs = append(msgs, fmt.Sprintf("MemoryBank %s does not exist in namespace %s", strings.Join(missing, ", "), pt.Namespace))
	}
	if len(unserved) > 0 {
		msgs = append(msgs, fmt.Sprintf("MemoryBank %s has no status.serving.endpoint (set its spec.serving)", strings.Join(unserved, ", ")))
	}
	switch {
	case len(missing) > 0:
		setCondition(&st.Conditions, pt.Generation, promptopsv1.ConditionMemoryUnavailable, metav1.ConditionTrue, promptopsv1.ReasonMemoryBankNotFound,
			strings.Join(msgs, "; ")+": its memory sections stay empty at request time.")
	case len(unserved) > 0:
		setCondition(&st.Conditions, pt.Generation, promptopsv1.ConditionMemoryUnavailable, metav1.ConditionTrue, promptopsv1.ReasonMemoryBankNotServed,
			strings.Join(msgs, "; ")+": its memory sections stay empty at request time.")
	default:
		setCondition(&st.Conditions, pt.Generation, promptopsv1.ConditionMemoryUnavailable, metav1.ConditionFalse, promptopsv1.ReasonMemoryServed,
			"Every MemoryBank the memory sections recall from is served.")
	}
}

func overBudgetMessage(over []*assembler.Assembly) string {
	if len(over) == 0 {
		return ""
	}
	parts := make([]string, 0, len(over))
	for _, a := range over {
		parts = append(parts, a.Message())
	}
	return capitalize(strings.Join(parts, "; ")) + "."
}

func truncatedMessage(truncated []*assembler.Assembly) string {
	parts := make([]string, 0, len(truncated))
	for _, a := range truncated {
		parts = append(parts, fmt.Sprintf("intent %s: cut %s", a.Intent, strings.Join(a.Cut, ", ")))
	}
	return "Static sections were cut to fit the budget: " + strings.Join(parts, "; ") + "."
}

// RenderErrorMessage is the sentence a template's Ready condition shows
// for a render error, and the webhook's answer at apply time.
func RenderErrorMessage(err error) string { return capitalize(err.Error()) + "." }

// capitalize makes a message start with a capital letter.
func capitalize(s string) string {
	for i, r := range s {
		return string(unicode.ToUpper(r)) + s[i+len(string(r)):]
	}
	return s
}

func lowerFirst(s string) string {
	for i, r := range s {
		return string(unicode.ToLower(r)) + s[i+len(string(r)):]
	}
	return s
}
