package llm

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// BenchmarkDecodeAnswer decodes the embeddings answer a served recall
// reads per query (one vector of 1,536 dimensions, as OpenAI writes it)
// and two hostile 4 MiB answers: one vector of 4 MiB of numbers, and a
// 4 MiB string where a field the decoder skips goes.
func BenchmarkDecodeAnswer(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	vec := make([]float32, 1536)
	for i := range vec {
		vec[i] = float32(rng.NormFloat64() / 40)
	}
	v, _ := json.Marshal(vec)
	common := fmt.Appendf(nil, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":%s}],"model":"m","usage":{"prompt_tokens":5,"total_tokens":5}}`, v)
	var big bytes.Buffer
	big.WriteString(`{"data":[{"index":0,"embedding":[0`)
	for big.Len() < 4<<20 {
		big.WriteString(",0.5")
	}
	big.WriteString(`]}]}`)
	raw := make([]byte, 4*len(vec))
	for i, f := range vec {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(f))
	}
	b64 := fmt.Appendf(nil, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":"%s"}],"model":"m","usage":{"prompt_tokens":5,"total_tokens":5}}`, base64.StdEncoding.EncodeToString(raw))
	skipped := []byte(`{"data":[{"index":0,"embedding":[1]}],"model":"` + strings.Repeat("a", 4<<20) + `"}`)
	for _, c := range []struct {
		name string
		body []byte
	}{{"common1536", common}, {"base64_1536", b64}, {"numbers4MiB", big.Bytes()}, {"skipped4MiB", skipped}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				items, _, _, err := decodeAnswer(c.body)
				if err != nil || len(items) != 1 {
					b.Fatal(err, len(items))
				}
			}
		})
	}
}

// TestDecodeAnswer: the forms servers write are read; what is not an
// answer of embeddings is refused, saying where.
func TestDecodeAnswer(t *testing.T) {
	for _, c := range []struct {
		body   string
		vecs   [][]float32
		index  []int
		tokens int64
		err    string
	}{
		{body: `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,-2,1e-3]}],"model":"m","usage":{"prompt_tokens":5,"total_tokens":6}}`,
			vecs: [][]float32{{0.5, -2, 1e-3}}, index: []int{0}, tokens: 5},
		{body: "{ \"data\" : [ { \"embedding\" : [ 1 , 2 ] } , {\"index\":0,\"embedding\":\"AACAPw==\"} ] }\n",
			vecs: [][]float32{{1, 2}, {1}}, index: []int{-1, 0}},
		{body: `{"data":[{"embedding":[1],"x":{"y":[null,true]}}],"usage":{"total_tokens":3},"id":-1.5e+3}`, vecs: [][]float32{{1}}, index: []int{-1}},
		{body: `{"data":[]}`, vecs: [][]float32{}},
		{body: `{"data":[{"embedding":[1],"embedding":[2]}]}`, err: "data[0].embedding: appears twice"},
		{body: `{"data":[{"embedding":[1]}],"data":[]}`, err: "data: appears twice"},
		{body: `{"data":[{"embedding":[]}]}`, err: "vector 0: empty vector"},
		{body: `{"data":[{"embedding":"AAA"}]}`, err: "bad base64 vector"},
		{body: `{"data":[{"embedding":[1,"2"]}]}`, err: "data[0].embedding[1]: a JSON string where a number is wanted"},
		{body: `{"data":[{"embedding":[1],"index":1.5}]}`, err: "data[0].index: a JSON number where an integer is wanted"},
		{body: `{"data":[{"embedding":[1]}]} x`, err: "more than one JSON value"},
		{body: "{\"data\":[{\"embedding\":[1]}],\"model\":\"\xff\"}", err: "invalid UTF-8"},
	} {
		items, prompt, _, err := decodeAnswer([]byte(c.body))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want an error saying %q", c.body, err, c.err)
			}
			continue
		}
		if err != nil || len(items) != len(c.vecs) || prompt != c.tokens {
			t.Errorf("%s: %v %d %v", c.body, items, prompt, err)
			continue
		}
		for i, it := range items {
			if !slices.Equal(it.vec, c.vecs[i]) || it.index != c.index[i] {
				t.Errorf("%s: item %d is %v, want %v at %d", c.body, i, it, c.vecs[i], c.index[i])
			}
		}
	}
}
