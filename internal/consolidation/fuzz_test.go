package consolidation

import (
	"testing"
)

// FuzzParseAnswer: no input panics, and whatever validates only names this
// batch's facts and pooled observations, within capacity.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{
		`{"creates":[],"updates":[],"deletes":[]}`,
		"```json\n{\"creates\":[{\"text\":\"x\",\"source_fact_ids\":[\"f1\"]}]}\n```",
		`{"updates":[{"observation_id":"o1","text":"y","source_fact_ids":["f1"]}],"deletes":[{"observation_id":"o3"}]}`,
		`{"creates":[{"text":"x","source_fact_ids":[1]}]}`,
		`{"creates":[{"text":"x"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAnswer(s)
		if err != nil {
			return
		}
		b := batchFixture()
		b.Remaining = 2
		ops, _, err := Validate(a, b, nil)
		if err != nil {
			return
		}
		facts := map[string]bool{"f1": true, "f2": true}
		pool := map[string]bool{"o1": true, "o2": true, "o3": true}
		if len(ops.Creates) > 2 {
			t.Fatalf("capacity exceeded: %d", len(ops.Creates))
		}
		for _, c := range ops.Creates {
			if c.Text == "" || len(c.SourceFactIDs) == 0 {
				t.Fatal("create without text or sources")
			}
			for _, id := range c.SourceFactIDs {
				if !facts[id] {
					t.Fatalf("create names foreign fact %q", id)
				}
			}
		}
		for _, u := range ops.Updates {
			if !pool[u.ObservationID] || u.Text == "" {
				t.Fatalf("bad update %+v", u)
			}
		}
		if len(ops.Deletes) > 1 {
			t.Fatalf("%d deletes for a pool of 3 and 2 facts", len(ops.Deletes))
		}
	})
}
