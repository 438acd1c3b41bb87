package assembler

import (
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/promptops/promptops/plan"
)

func TestCanaryConfigMapData(t *testing.T) {
	stable := map[string]string{PlanKey: "{stable}", IntentKey("chat"): "old"}
	canary := map[string]string{PlanKey: "{canary}", IntentKey("chat"): "new"}
	data, err := CanaryConfigMapData(stable, canary, RolloutState{StableRevision: "sha256:a", CanaryRevision: "sha256:b", Weight: 10})
	if err != nil {
		t.Fatal(err)
	}
	if data["plan.json"] != "{stable}" || data["chat.txt"] != "old" || data["canary.plan.json"] != "{canary}" || data["canary.chat.txt"] != "new" || len(data) != 5 {
		t.Fatalf("data: %v", data)
	}
	var st RolloutState
	dec := json.NewDecoder(strings.NewReader(data[RolloutKey]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		t.Fatal(err)
	}
	// What serve and the plan package read: the same state, the canary's
	// plan under the name they look for.
	if parsed, err := plan.ParseRollout([]byte(data[RolloutKey])); err != nil || *parsed != st {
		t.Errorf("plan.ParseRollout of rollout.json: %+v, %v", parsed, err)
	}
	if _, ok := data[plan.CanaryPlanFile]; !ok {
		t.Errorf("no %s in %v", plan.CanaryPlanFile, data)
	}
	if st != (RolloutState{APIVersion: "promptops.io/v1", Kind: "PromptRollout", StableRevision: "sha256:a", CanaryRevision: "sha256:b", Weight: 10}) {
		t.Fatalf("rollout.json: %+v", st)
	}
	if got := StableData(data); !maps.Equal(got, stable) {
		t.Fatalf("StableData: %v", got)
	}

	big := map[string]string{PlanKey: strings.Repeat("x", MaxConfigMapBytes/2)}
	var tooLarge *TooLargeError
	if _, err := CanaryConfigMapData(big, big, RolloutState{}); !errors.As(err, &tooLarge) {
		t.Fatalf("two halves of the limit: %v", err)
	}
}

// Both revisions fit when their keys, values and rollout.json come to
// MaxConfigMapBytes exactly; one byte more in either revision does not.
func TestCanaryConfigMapDataAtItsBound(t *testing.T) {
	st := RolloutState{StableRevision: "sha256:a", CanaryRevision: "sha256:b", Weight: 10}
	small, err := CanaryConfigMapData(map[string]string{PlanKey: "s"}, map[string]string{PlanKey: "c"}, st)
	if err != nil {
		t.Fatal(err)
	}
	fixed := len(PlanKey) + len(CanaryPrefix) + len(PlanKey) + len(RolloutKey) + len(small[RolloutKey])
	half := (MaxConfigMapBytes - fixed) / 2
	sv, cv := strings.Repeat("s", half), strings.Repeat("c", MaxConfigMapBytes-fixed-half)
	if _, err := CanaryConfigMapData(map[string]string{PlanKey: sv}, map[string]string{PlanKey: cv}, st); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	var tooLarge *TooLargeError
	if _, err := CanaryConfigMapData(map[string]string{PlanKey: sv + "s"}, map[string]string{PlanKey: cv}, st); !errors.As(err, &tooLarge) || tooLarge.Size != MaxConfigMapBytes+1 {
		t.Errorf("one byte more in the stable revision: %v", err)
	}
	if _, err := CanaryConfigMapData(map[string]string{PlanKey: sv}, map[string]string{PlanKey: cv + "c"}, st); !errors.As(err, &tooLarge) || tooLarge.Size != MaxConfigMapBytes+1 {
		t.Errorf("one byte more in the canary: %v", err)
	}
	if _, err := CanaryConfigMapData(map[string]string{PlanKey: sv, "x.txt": ""}, map[string]string{PlanKey: cv}, st); !errors.As(err, &tooLarge) {
		t.Errorf("a key more in the stable revision: %v", err)
	}
	if _, err := CanaryConfigMapData(map[string]string{PlanKey: sv}, map[string]string{PlanKey: cv, "x.txt": ""}, st); !errors.As(err, &tooLarge) {
		t.Errorf("a key more in the canary: %v", err)
	}
}
