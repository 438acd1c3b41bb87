package llm

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"
)

// parseNumbers reads what json.Unmarshal reads into []float32, and leaves
// anything but an array of numbers to it.
func TestParseNumbersMatchesJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n < 2000; n = n*3 + 1 {
		v := make([]float64, n)
		for i := range v {
			v[i] = rng.NormFloat64() * []float64{1, 1e-9, 1e6, 0}[i%4]
		}
		raw, _ := json.Marshal(v)
		spaced := []byte(" [ " + string(raw[1:len(raw)-1]) + " ]\n")
		for _, in := range [][]byte{raw, spaced} {
			var want []float32
			if err := json.Unmarshal(in, &want); err != nil {
				t.Fatal(err)
			}
			got, ok := parseNumbers(in)
			if !ok || !slices.Equal(got, want) {
				t.Fatalf("n=%d: %v %v", n, ok, len(got))
			}
		}
	}
	for _, in := range []string{`[]`, `[1,]`, `[1 2]`, `["a"]`, `[1]x`, `[NaN]`, `[+1]`, `[1e99]`, `{}`, `"AAAA"`, `[1,[2]]`, ``} {
		if _, ok := parseNumbers([]byte(in)); ok {
			t.Errorf("%s: parsed", in)
		}
	}
	if v, err := decodeEmbedding(json.RawMessage(`[0.5, -1e-3]`)); err != nil || !slices.Equal(v, []float32{0.5, -0.001}) {
		t.Errorf("decodeEmbedding: %v %v", v, err)
	}
}
