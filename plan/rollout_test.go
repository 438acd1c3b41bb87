package plan

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParseRollout(t *testing.T) {
	good := `{"apiVersion":"promptops.io/v1","kind":"PromptRollout","stableRevision":"sha256:aa","canaryRevision":"sha256:bb","weight":10}`
	r, err := ParseRollout([]byte(good))
	if err != nil || *r != (RolloutState{APIVersion: PlanAPIVersion, Kind: RolloutKind, StableRevision: "sha256:aa", CanaryRevision: "sha256:bb", Weight: 10}) {
		t.Fatalf("ParseRollout(good) = %+v, %v", r, err)
	}
	for _, w := range []int{0, 100} {
		if _, err := ParseRollout([]byte(strings.Replace(good, `"weight":10`, fmt.Sprintf(`"weight":%d`, w), 1))); err != nil {
			t.Errorf("weight %d: %v", w, err)
		}
	}
	for _, tc := range []struct {
		name, data string
		notRollout bool
		field      string
	}{
		{name: "empty", data: ``, notRollout: true},
		{name: "null", data: `null`, notRollout: true},
		{name: "an array", data: `[]`, notRollout: true},
		{name: "another kind", data: strings.Replace(good, "PromptRollout", "PromptPlan", 1), notRollout: true},
		{name: "another apiVersion", data: strings.Replace(good, "promptops.io/v1", "promptops.io/v2", 1), notRollout: true},
		{name: "no kind", data: `{"apiVersion":"promptops.io/v1","stableRevision":"a","canaryRevision":"b","weight":1}`, notRollout: true},
		{name: "an unknown member", data: strings.Replace(good, `"weight"`, `"extra":1,"weight"`, 1), notRollout: true},
		{name: "a repeated member", data: strings.Replace(good, `"weight":10`, `"weight":10,"weight":90`, 1), notRollout: true},
		{name: "a fractional weight", data: strings.Replace(good, `"weight":10`, `"weight":10.5`, 1), notRollout: true},
		{name: "a string weight", data: strings.Replace(good, `"weight":10`, `"weight":"10"`, 1), notRollout: true},
		{name: "trailing data", data: good + `{}`, notRollout: true},
		{name: "invalid UTF-8", data: strings.Replace(good, "sha256:aa", "sha256:\xff", 1), notRollout: true},
		{name: "no stable revision", data: strings.Replace(good, `"sha256:aa"`, `""`, 1), field: "stableRevision"},
		{name: "no canary revision", data: strings.Replace(good, `"canaryRevision":"sha256:bb",`, ``, 1), field: "canaryRevision"},
		{name: "a negative weight", data: strings.Replace(good, `"weight":10`, `"weight":-1`, 1), field: "weight"},
		{name: "a weight over 100", data: strings.Replace(good, `"weight":10`, `"weight":101`, 1), field: "weight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRollout([]byte(tc.data))
			if r != nil || err == nil {
				t.Fatalf("ParseRollout = %+v, %v; want an error", r, err)
			}
			var ir *InvalidRolloutError
			switch {
			case tc.notRollout && !errors.Is(err, ErrNotRollout):
				t.Errorf("error %v does not wrap ErrNotRollout", err)
			case !tc.notRollout && (!errors.As(err, &ir) || ir.Field != tc.field):
				t.Errorf("error %v is not an *InvalidRolloutError of %s", err, tc.field)
			case !tc.notRollout && !strings.Contains(err.Error(), tc.field):
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
}

// rolloutPlans are two revisions of one template, for Choose.
func rolloutPlans(weight int) *Revisions {
	return &Revisions{
		Stable: &Plan{Namespace: "team-a", Name: "support", Revision: "sha256:stable"},
		Canary: &Plan{Namespace: "team-a", Name: "support", Revision: "sha256:canary"},
		Weight: weight,
	}
}

// Choose follows Bucket and OnCanary for every key, and its share of 4,000
// keys at weight 10 is 10% +- 1.5 points.
func TestChooseFollowsAssignment(t *testing.T) {
	for _, weight := range []int{0, 1, 10, 50, 99, 100} {
		r := rolloutPlans(weight)
		onCanary := 0
		for i := range 4000 {
			key := fmt.Sprintf("user-%d", i)
			p, canary := r.Choose(key)
			want := OnCanary(Bucket("team-a", "support", key), weight)
			if canary != want || (p == r.Canary) != want || (p == r.Stable) == want {
				t.Fatalf("weight %d: Choose(%q) = %s, %v; Bucket/OnCanary say canary %v", weight, key, p.Revision, canary, want)
			}
			// The same key, again: the same revision.
			if again, _ := r.Choose(key); again != p {
				t.Fatalf("weight %d: key %q moved from %s to %s", weight, key, p.Revision, again.Revision)
			}
			if canary {
				onCanary++
			}
		}
		share := float64(onCanary) * 100 / 4000
		switch weight {
		case 0, 100:
			if share != float64(weight) {
				t.Errorf("weight %d: %.2f%% of keys on the canary", weight, share)
			}
		case 10:
			if share < 8.5 || share > 11.5 {
				t.Errorf("weight 10: %.2f%% of 4,000 keys on the canary, want 10 +- 1.5", share)
			}
		}
	}
}

// A key on the canary stays there as the weight grows.
func TestChooseKeepsCanaryKeysAsWeightGrows(t *testing.T) {
	for i := range 2000 {
		key := fmt.Sprintf("session-%d", i)
		was := false
		for weight := 0; weight <= 100; weight += 5 {
			_, canary := rolloutPlans(weight).Choose(key)
			if was && !canary {
				t.Fatalf("key %q left the canary at weight %d", key, weight)
			}
			was = canary
		}
	}
}

// Requests without a key are drawn at random in the same proportion:
// 100,000 draws at weight 10 fall within 1 point of 10% (over 10 standard
// deviations: it never flakes).
func TestChooseRandomInProportion(t *testing.T) {
	for _, weight := range []int{10, 50} {
		r := rolloutPlans(weight)
		n := 0
		for range 100000 {
			if _, canary := r.Choose(""); canary {
				n++
			}
		}
		if share := float64(n) / 1000; share < float64(weight)-1 || share > float64(weight)+1 {
			t.Errorf("weight %d: %.2f%% of 100,000 random draws on the canary", weight, share)
		}
	}
	for _, weight := range []int{0, 100} {
		r := rolloutPlans(weight)
		for range 1000 {
			if _, canary := r.Choose(""); canary != (weight == 100) {
				t.Fatalf("weight %d: a random draw gave canary %v", weight, canary)
			}
		}
	}
}

// Outside a rollout (no canary) every key gets the stable plan, whatever
// the weight says.
func TestChooseWithoutCanary(t *testing.T) {
	r := rolloutPlans(100)
	r.Canary = nil
	for _, key := range []string{"", "user-1", "user-2", "scope:x"} {
		if p, canary := r.Choose(key); p != r.Stable || canary {
			t.Errorf("Choose(%q) = %v, %v without a canary", key, p, canary)
		}
	}
}
