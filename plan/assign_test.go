package plan

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// assignmentVectors is testdata/conformance/assignment.json (written by
// hack/conformance; the format is in docs/plan.md).
type assignmentVectors struct {
	Buckets int `json:"buckets"`
	Cases   []struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		Key       string `json:"key"`
		Bucket    int    `json:"bucket"`
		// FirstWeight is the least weight at which the key is on the
		// canary.
		FirstWeight int `json:"firstWeight"`
	} `json:"cases"`
}

func TestAssignmentVectors(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "testdata", "conformance", "assignment.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v assignmentVectors
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if v.Buckets != Buckets || len(v.Cases) < 20 {
		t.Fatalf("buckets %d, %d cases", v.Buckets, len(v.Cases))
	}
	for _, c := range v.Cases {
		if got := Bucket(c.Namespace, c.Name, c.Key); got != c.Bucket {
			t.Errorf("Bucket(%q, %q, %q) = %d, want %d", c.Namespace, c.Name, c.Key, got, c.Bucket)
		}
		for w := 0; w <= 100; w++ {
			if got := OnCanary(c.Bucket, w); got != (w >= c.FirstWeight) {
				t.Errorf("bucket %d at weight %d: on the canary %v, want from weight %d", c.Bucket, w, got, c.FirstWeight)
			}
		}
	}
}

// Keys spread evenly: of 100,000 distinct keys, the share on the canary at
// each weight is within half a point of it; the same key always gets the
// same bucket; a key on the canary stays on it as the weight grows; and
// another template puts other keys on its canary.
func TestAssignmentSpread(t *testing.T) {
	const n = 100000
	on := make([]int, 101)
	same := 0
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("user-%d", i)
		b := Bucket("shop", "support", key)
		if b < 0 || b >= Buckets || b != Bucket("shop", "support", key) {
			t.Fatalf("bucket %d of %q", b, key)
		}
		for w := 0; w <= 100; w++ {
			if OnCanary(b, w) {
				on[w]++
			} else if w > 0 && OnCanary(b, w-1) {
				t.Fatalf("%q leaves the canary at weight %d", key, w)
			}
		}
		if OnCanary(b, 10) && OnCanary(Bucket("shop", "billing", key), 10) {
			same++
		}
	}
	for w, k := range on {
		if share := float64(k) * 100 / n; share < float64(w)-0.5 || share > float64(w)+0.5 {
			t.Errorf("weight %d: %.2f%% of keys on the canary", w, share)
		}
	}
	// Independent templates: about 10% of 10% of the keys are on both.
	if share := float64(same) * 100 / n; share < 0.7 || share > 1.3 {
		t.Errorf("%.2f%% of keys are on the canary of both templates, want about 1%%", share)
	}
	if OnCanary(0, 0) || !OnCanary(Buckets-1, 100) || OnCanary(0, -5) || !OnCanary(Buckets-1, 250) || OnCanary(99, 1) == OnCanary(100, 1) {
		t.Error("the weight's bounds")
	}
}
