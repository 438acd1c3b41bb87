package consolidation

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
)

// bruteSearch is what LexIndex.Search must return: the best texts above
// Rank's floor, then the best entity matches not among them.
func bruteSearch(docs map[string]Observation, fact Fact, limit int) []string {
	grams := Trigrams(fact.Text)
	type hit struct {
		id string
		s  float64
	}
	var text, ent []hit
	for id, o := range docs {
		sim := Similarity(grams, Trigrams(o.Text))
		s := RelatedScore(fact, grams, o)
		if sim > 0.05 {
			text = append(text, hit{id, s})
		}
		if sharedEntities(fact.Entities, o.Entities) > 0 {
			ent = append(ent, hit{id, s})
		}
	}
	best := func(hs []hit) []string {
		sort.Slice(hs, func(i, j int) bool {
			if hs[i].s != hs[j].s {
				return hs[i].s > hs[j].s
			}
			return hs[i].id < hs[j].id
		})
		var out []string
		for i := 0; i < len(hs) && i < limit; i++ {
			out = append(out, hs[i].id)
		}
		return out
	}
	out := best(text)
	for _, id := range best(ent) {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// The index answers as a brute-force scan does: built in bulk (Add),
// growing (Put), frozen, and written again after it was frozen.
func TestLexIndexMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"alice", "moved", "to", "bergen", "bob", "works", "at", "acme", "labs", "likes", "jazz", "张伟", "在", "北京", "工作", "cats", "has", "three", "project", "P7"}
	people := []string{"Alice", "Bob", "张伟", "Carol"}
	text := func() (string, []string) {
		s := ""
		for k := 0; k < 3+rng.IntN(5); k++ {
			s += words[rng.IntN(len(words))] + " "
		}
		return s, []string{people[rng.IntN(len(people))]}
	}
	x := NewLexIndex()
	docs := map[string]Observation{}
	for round := 0; round < 3; round++ {
		for i := 0; i < 1500; i++ {
			id := fmt.Sprintf("o%04d", rng.IntN(3000))
			if rng.IntN(3) == 0 {
				x.Delete(id)
				delete(docs, id)
				continue
			}
			s, ents := text()
			if round == 0 {
				x.Add(id, s, ents) // in bulk, as a bank loads
			} else {
				x.Put(id, s, ents)
			}
			docs[id] = Observation{ID: id, Text: s, Entities: []string{normEntity(ents[0])}}
		}
		if x.Len() != len(docs) {
			t.Fatalf("Len %d, want %d", x.Len(), len(docs))
		}
		// The same answers growing and frozen; the next round writes
		// to the frozen index.
		queries := rng.Uint64()
		for _, frozen := range []bool{false, true} {
			if frozen {
				x.Freeze()
				if x.Len() != len(docs) {
					t.Fatalf("Len %d frozen, want %d", x.Len(), len(docs))
				}
			}
			rng := rand.New(rand.NewPCG(queries, 0))
			text := func() (string, []string) {
				s := ""
				for k := 0; k < 3+rng.IntN(5); k++ {
					s += words[rng.IntN(len(words))] + " "
				}
				return s, []string{people[rng.IntN(len(people))]}
			}
			for k := 0; k < 50; k++ {
				s, ents := text()
				f := Fact{Text: s, Entities: ents}
				want := bruteSearch(docs, f, 20)
				if got := x.Search(f, 20); !slices.Equal(got, want) {
					t.Fatalf("round %d (frozen %t), %q %v:\n got %v\nwant %v", round, frozen, s, ents, got, want)
				}
				// SearchRanked is the same hits as Rank orders them.
				cands := make([]Candidate, len(want))
				for i, id := range want {
					cands[i] = Candidate{Observation: docs[id]}
				}
				var ranked []string
				for _, c := range Rank(f, cands, len(cands)) {
					ranked = append(ranked, c.ID)
				}
				if got := x.SearchRanked(f, 20); !slices.Equal(got, ranked) || len(ranked) != len(want) {
					t.Fatalf("round %d, %q %v: ranked\n got %v\nwant %v (of %d hits)", round, s, ents, got, ranked, len(want))
				}
			}
		}
	}
}

func TestLexIndexChineseAndReplace(t *testing.T) {
	x := NewLexIndex()
	x.Put("a", "张伟在北京工作", nil)
	x.Put("b", "Alice moved to Bergen", []string{"Alice"})
	if got := x.Search(Fact{Text: "张伟在北京上班"}, 5); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Chinese: %v", got)
	}
	if got := x.Search(Fact{Text: "something else", Entities: []string{" alice "}}, 5); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("entity: %v", got)
	}
	x.Put("a", "Bob works at Acme", nil)
	if got := x.Search(Fact{Text: "张伟在北京上班"}, 5); len(got) != 0 {
		t.Fatalf("replaced text still found: %v", got)
	}
	x.Delete("b")
	if got := x.Search(Fact{Text: "Alice moved to Bergen", Entities: []string{"Alice"}}, 5); len(got) != 0 {
		t.Fatalf("deleted observation found: %v", got)
	}
}

func normEntity(e string) string { return strings.ToLower(strings.TrimSpace(e)) }

// TestSearchRankedMergesTheArms: an observation found only by a shared
// entity (0.25) outranks one whose text shares a few trigrams, as Rank
// orders them; Search lists the text hits first.
func TestSearchRankedMergesTheArms(t *testing.T) {
	x := NewLexIndex()
	x.Put("a", "Alice moved to Bergen in the spring", nil)
	x.Put("b", "plays the cello on sundays", []string{"Bob"})
	f := Fact{Text: "Alice left for Oslo", Entities: []string{"Bob"}}
	if got := x.Search(f, 5); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Search %v", got)
	}
	docs := []Candidate{{Observation: Observation{ID: "a", Text: "Alice moved to Bergen in the spring"}}, {Observation: Observation{ID: "b", Text: "plays the cello on sundays", Entities: []string{"bob"}}}}
	var want []string
	for _, c := range Rank(f, docs, 2) {
		want = append(want, c.ID)
	}
	if got := x.SearchRanked(f, 5); !slices.Equal(want, []string{"b", "a"}) || !slices.Equal(got, want) {
		t.Fatalf("SearchRanked %v, Rank %v", got, want)
	}
}
