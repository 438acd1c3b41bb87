package assembler

import (
	"encoding/json"
	"strings"

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

// The keys of a rollout in the rendered ConfigMap (docs/plan.md): while a
// rollout runs, the canary's plan.json and <intent>.txt under CanaryPrefix,
// and RolloutKey naming both revisions and the canary's weight. plan.json
// and <intent>.txt stay the stable revision. No intent key can take their
// names: an intent's name has no '.'.
const (
	CanaryPrefix = "canary."
	RolloutKey   = plan.RolloutFile
)

// RolloutState is the content of rollout.json, as the plan package reads
// it (plan.ParseRollout): one definition of the format.
type RolloutState = plan.RolloutState

// StableData is the stable revision's keys of a rendered ConfigMap's data:
// all but the canary's and rollout.json.
func StableData(data map[string]string) map[string]string {
	out := make(map[string]string, len(data))
	for k, v := range data {
		if k != RolloutKey && !strings.HasPrefix(k, CanaryPrefix) {
			out[k] = v
		}
	}
	return out
}

// CanaryConfigMapData is what a rendered ConfigMap holds during a rollout:
// the stable revision's keys as they are, the canary's under
// CanaryPrefix, and rollout.json. Both revisions together must fit the
// ConfigMap.
func CanaryConfigMapData(stable, canary map[string]string, st RolloutState) (map[string]string, error) {
	st.APIVersion, st.Kind = plan.PlanAPIVersion, plan.RolloutKind
	state, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, err
	}
	data := make(map[string]string, len(stable)+len(canary)+1)
	size := 0
	for k, v := range stable {
		data[k] = v
		size += len(k) + len(v)
	}
	for k, v := range canary {
		data[CanaryPrefix+k] = v
		size += len(CanaryPrefix) + len(k) + len(v)
	}
	data[RolloutKey] = string(state) + "\n"
	size += len(RolloutKey) + len(data[RolloutKey])
	if size > MaxConfigMapBytes {
		return nil, &TooLargeError{Where: "the rendered ConfigMap with the stable and the canary revision", Size: size, Limit: MaxConfigMapBytes, Unit: "bytes"}
	}
	return data, nil
}
