package consolidation

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkLexIndexLoad is loading a bank's lexical index: 10,000
// observations of a person and six made-up words each, as a run or a
// served bank loads it before its first recall.
func BenchmarkLexIndexLoad(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	words := madeUpWords(rng, 3000)
	const n = 10000
	ids, texts, ents := make([]string, n), make([]string, n), make([][]string, n)
	for i := range texts {
		person := fmt.Sprintf("Person%d", i%2000)
		t := person
		for w := 0; w < 6; w++ {
			t += " " + words[rng.IntN(len(words))]
		}
		ids[i], texts[i], ents[i] = fmt.Sprintf("%08d-0000-4000-8000-000000000000", i), t, []string{person}
	}
	b.ReportAllocs()
	for b.Loop() {
		x := NewLexIndex()
		for i := range texts {
			x.Put(ids[i], texts[i], ents[i])
		}
	}
}

// BenchmarkLexIndexScope is loading one scope's lexical index in bulk
// (Add, then Freeze): ten observations of about 60 characters, what a
// served bank does at a scope's first recall.
func BenchmarkLexIndexScope(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	words := madeUpWords(rng, 300)
	const n = 10
	ids, texts := make([]string, n), make([]string, n)
	for i := range texts {
		t := "The user's"
		for len(t) < 60 {
			t += " " + words[rng.IntN(len(words))]
		}
		ids[i], texts[i] = fmt.Sprintf("o%d", i), t
	}
	b.ReportAllocs()
	for b.Loop() {
		x := NewLexIndex()
		for i := range texts {
			x.Add(ids[i], texts[i], nil)
		}
		x.Freeze()
	}
}
