package consolidation

import (
	"context"
	"testing"
)

// A recall by words scores an observation by its trigram similarity to
// the query plus 0.25 for each entity it shares with the query's words,
// at most 1, and ranks by that score.
func TestRecallScoresSharedEntities(t *testing.T) {
	st := &benchStore{obs: []Observation{
		{ID: "a", Text: "likes green tea in the morning", Entities: []string{"Alice", "Tea"}},
		{ID: "b", Text: "likes green tea in the evening", Entities: []string{"Bruno"}},
	}}
	r := &Recaller{Store: st, Scope: "b"}
	const query = "What does alice drink, tea?"
	items, semantic, err := r.Recall(context.Background(), Query{Text: query, Limit: 5})
	if err != nil || semantic {
		t.Fatal(err, semantic)
	}
	if len(items) != 2 || items[0].ID != "a" {
		t.Fatalf("items %+v, want a first", items)
	}
	grams := Trigrams(query)
	for _, it := range items {
		shared := map[string]float64{"a": 2, "b": 0}[it.ID]
		want := min(1, Similarity(grams, Trigrams(it.Text))+0.25*shared)
		if it.Score != want {
			t.Errorf("%s: score %v, want %v (trigrams plus 0.25 for each of %v shared entities)", it.ID, it.Score, want, shared)
		}
	}
}
