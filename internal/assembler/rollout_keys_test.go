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
