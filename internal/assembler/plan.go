package assembler

import (
	"encoding/json"

	"github.com/promptops/promptops/plan"
)

// The plan types live in the public package plan, which applications
// import; these names keep the operator's code reading as before.
type (
	// Plan is plan.Plan: the content of plan.json.
	Plan = plan.Plan
	// PlanSection is plan.Section.
	PlanSection = plan.Section
	// PlanIntent is plan.Intent.
	PlanIntent = plan.Intent
	// StaticCut is plan.StaticCut.
	StaticCut = plan.StaticCut
	// RuntimeSummary is plan.RuntimeSummary.
	RuntimeSummary = plan.RuntimeSummary
	// Assembly is plan.Assembly; Render's and Seal's are static
	// assemblies: runtime and memory sections stand as their heading and
	// a placeholder line in Text and as their reserve in ReservedTokens,
	// and Tokens is FixedTokens + ReservedTokens.
	Assembly = plan.Assembly
	// SectionResult is plan.SectionResult.
	SectionResult = plan.SectionResult
	// MemorySource is plan.MemorySource.
	MemorySource = plan.MemorySource
	// BankRef is plan.BankRef.
	BankRef = plan.BankRef
	// MemoryQuery is plan.MemoryQuery.
	MemoryQuery = plan.MemoryQuery
	// MemoryScope is plan.MemoryScope.
	MemoryScope = plan.MemoryScope
)

// The plan's apiVersion, kind, separator and section kinds.
const (
	PlanAPIVersion = plan.PlanAPIVersion
	PlanKind       = plan.PlanKind
	Separator      = plan.Separator
	KindStatic     = plan.KindStatic
	KindRuntime    = plan.KindRuntime
	KindIntent     = plan.KindIntent
	KindMemory     = plan.KindMemory
)

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
