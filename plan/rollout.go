package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"unicode/utf8"
)

// RolloutFile, CanaryPlanFile and RolloutKind: during a rollout the
// <name>-prompts ConfigMap holds, besides plan.json (always the stable
// revision), the canary's plan in canary.plan.json and the rollout's state
// in rollout.json, a RolloutState (docs/plan.md, "Rollout assignment").
const (
	CanaryPlanFile = "canary.plan.json"
	RolloutFile    = "rollout.json"
	RolloutKind    = "PromptRollout"
)

// RolloutState is rollout.json: which two revisions a rollout splits
// requests between, and the canary's share of assignment keys.
type RolloutState struct {
	// APIVersion is PlanAPIVersion.
	APIVersion string `json:"apiVersion"`
	// Kind is RolloutKind.
	Kind string `json:"kind"`
	// StableRevision is the revision of plan.json.
	StableRevision string `json:"stableRevision"`
	// CanaryRevision is the revision of canary.plan.json.
	CanaryRevision string `json:"canaryRevision"`
	// Weight is the canary's share of assignment keys in percent, 0 to
	// 100 (see OnCanary).
	Weight int `json:"weight"`
}

// ErrNotRollout is wrapped by the error of ParseRollout for data that is
// not a rollout state at all: not one JSON object of its fields, or
// another apiVersion or kind.
var ErrNotRollout = errors.New("not a promptops rollout state")

// InvalidRolloutError is a rollout state that cannot be served: a revision
// missing, a weight out of range.
type InvalidRolloutError struct {
	// Field is the JSON name of the field at fault.
	Field string
	// Reason says what is wrong.
	Reason string
}

// Error names the field and says what is wrong with it.
func (e *InvalidRolloutError) Error() string {
	return "invalid rollout state: " + e.Field + ": " + e.Reason
}

// ParseRollout parses and validates rollout.json. Data that is not one
// JSON object of RolloutState's fields (an unknown or repeated member,
// invalid UTF-8, trailing data, a weight that is no integer) or of another
// apiVersion or kind is an error wrapping ErrNotRollout; a missing
// revision or a weight outside 0..100 an *InvalidRolloutError.
func ParseRollout(data []byte) (*RolloutState, error) {
	r := &RolloutState{}
	if err := decodeStrict(data, r, "apiVersion", "kind", "stableRevision", "canaryRevision", "weight"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotRollout, err)
	}
	if r.APIVersion != PlanAPIVersion || r.Kind != RolloutKind {
		return nil, fmt.Errorf("%w: apiVersion %q kind %q, want %s %s", ErrNotRollout, r.APIVersion, r.Kind, PlanAPIVersion, RolloutKind)
	}
	switch {
	case r.StableRevision == "":
		return nil, &InvalidRolloutError{Field: "stableRevision", Reason: "must not be empty"}
	case r.CanaryRevision == "":
		return nil, &InvalidRolloutError{Field: "canaryRevision", Reason: "must not be empty"}
	case r.Weight < 0 || r.Weight > 100:
		return nil, &InvalidRolloutError{Field: "weight", Reason: fmt.Sprintf("%d is not between 0 and 100", r.Weight)}
	}
	return r, nil
}

// Revisions are the plans a template serves: Stable alone outside a
// rollout, and during one Canary too, on Weight percent of the assignment
// keys.
type Revisions struct {
	// Stable is plan.json's plan; never nil.
	Stable *Plan
	// Canary is canary.plan.json's plan during a rollout, else nil.
	Canary *Plan
	// Weight is the canary's share of assignment keys in percent.
	Weight int
}

// Choose is the plan a request with the assignment key gets, and whether
// it is the canary: the canary when Canary is set and OnCanary(Bucket(the
// template's namespace and name, key), Weight), else Stable. An empty key
// (a request with neither an assignment key nor a scope) draws a bucket at
// random, so such requests get the canary in the same proportion, but not
// the same revision twice.
func (r *Revisions) Choose(key string) (p *Plan, canary bool) {
	if r.Canary == nil {
		return r.Stable, false
	}
	var b int
	if key == "" {
		b = rand.IntN(Buckets)
	} else {
		b = Bucket(r.Stable.Namespace, r.Stable.Name, key)
	}
	if OnCanary(b, r.Weight) {
		return r.Canary, true
	}
	return r.Stable, false
}

// decodeStrict decodes data, one JSON object whose members are among
// names (matched exactly, each at most once), into v; invalid UTF-8 and
// anything after the object are refused. It stays within the standard
// library, as the package does.
func decodeStrict(data []byte, v any, names ...string) error {
	if !utf8.Valid(data) {
		return errors.New("invalid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := t.(string)
		switch {
		case !slices.Contains(names, name):
			return fmt.Errorf("unknown member %q", name)
		case seen[name]:
			return fmt.Errorf("member %q repeated", name)
		}
		seen[name] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON object")
	}
	return json.Unmarshal(data, v)
}
