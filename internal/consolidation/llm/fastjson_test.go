package llm

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"
)

// fastAnswer reads what slowAnswer (encoding/json) reads, or leaves the
// answer to it: never a different vector, index or count, and never an
// answer encoding/json refuses.
func checkFastAnswer(t *testing.T, body []byte) bool {
	t.Helper()
	items, prompt, total, ok := fastAnswer(body)
	if !ok {
		return false
	}
	sItems, sPrompt, sTotal, err := slowAnswer(body)
	if err != nil {
		t.Fatalf("fastAnswer read what encoding/json refuses (%v): %q", err, body)
	}
	same := reflect.DeepEqual(items, sItems) || len(items) == 0 && len(sItems) == 0
	if !same || prompt != sPrompt || total != sTotal {
		t.Fatalf("fastAnswer %v %d %d, encoding/json %v %d %d: %q", items, prompt, total, sItems, sPrompt, sTotal, body)
	}
	return true
}

func embeddingAnswers() []string {
	rng := rand.New(rand.NewPCG(3, 4))
	vec := make([]float32, 64)
	for i := range vec {
		vec[i] = float32(rng.NormFloat64()) * []float32{1, 1e-9, 1e6, 0}[i%4]
	}
	v, _ := json.Marshal(vec)
	return []string{
		// The common forms: OpenAI's, spaced out, two vectors, keys in other orders.
		fmt.Sprintf(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":%s}],"model":"m","usage":{"prompt_tokens":5,"total_tokens":5}}`, v),
		fmt.Sprintf("{ \"data\" : [ { \"embedding\" : %s , \"index\" : 0 } ] }\n", v),
		fmt.Sprintf(`{"data":[{"index":1,"embedding":%s},{"index":0,"embedding":[1.5e-3,-2,0]}],"usage":{"total_tokens":9,"extra":{"a":[true,false,null,"x\"\\\u00e9"]}}}`, v),
		`{"data":[{"embedding":[1,2,3]}],"usage":{}}`,
		`{"data":[],"usage":{"prompt_tokens":0}}`,
		`{"model":"m","data":[{"embedding":[0.25],"index":0,"object":"embedding"}],"id":-1.5e+3}`,
		`{"data":[{"embedding":[1],"x":1,"x":2}],"x":0,"x":[]}`, // unknown keys, repeated: skipped, as there
		// Left to encoding/json (or refused by both).
		`{"data":[{"embedding":"AACAPw==","index":0}]}`,
		`{"Data":[{"embedding":[1],"index":0}]}`,
		`{"data":[{"Embedding":[1],"index":0}]}`,
		`{"data":[{"embedding":[1],"index":0}],"data":[]}`,
		`{"data":[{"embedding":[1],"embedding":[2]}]}`,
		`{"data":[{"embedding":[1],"index":0,"index":1}]}`,
		`{"data":[{"embedding":[1]}],"usage":{"prompt_tokens":1,"prompt_tokens":2}}`,
		`{"data":[{"embedding":[1]}],"usage":{"total_tokens":1},"usage":{"total_tokens":2}}`,
		`{"data":[{"embedding":[1],"index":1.0}]}`,
		`{"data":[{"embedding":[1],"index":-1}]}`,
		`{"data":[{"embedding":[]}]}`,
		`{"data":[{"embedding":[.5]}]}`,
		`{"data":[{"embedding":[1.]}]}`,
		`{"data":[{"embedding":[01]}]}`,
		`{"data":[{"embedding":[1e99]}]}`,
		`{"data":[{"embedding":[1,]}]}`,
		`{"data":[{"embedding":[1]}],"usage":{"prompt_tokens":"5"}}`,
		`{"data":[{"embedding":[1]}],"usage":null}`,
		`{"data":null}`,
		`{"data":[{"embedding":[1]}]}x`,
		`{"data":[{"embedding":[1]}],"x":"a` + "\n" + `"}`,
		`{"data":[{"embedding":[1]}],"x":"\q"}`,
		`{"data":[{"embedding":[1]}],"x":tru}`,
		`{"d\u0061ta":[{"embedding":[1]}]}`,
		`[{"embedding":[1]}]`,
		``,
	}
}

func TestFastAnswerReadsWhatEncodingJSONReads(t *testing.T) {
	fast := 0
	for _, body := range embeddingAnswers() {
		if checkFastAnswer(t, []byte(body)) {
			fast++
		}
	}
	if fast != 7 {
		t.Errorf("%d of the answers read in one pass, want the first 7", fast)
	}
	// Deep nesting is left to encoding/json, not recursed into without end.
	deep := `{"data":[],"x":` + string(repeat('[', 10000)) + string(repeat(']', 10000)) + `}`
	if _, _, _, ok := fastAnswer([]byte(deep)); ok {
		t.Error("10,000 levels of nesting read in one pass")
	}
}

// TestFastAnswerOfCommasAllocatesLittle: a body of 8 MB of commas where
// a vector should be fails without sizing a vector for them.
func TestFastAnswerOfCommasAllocatesLittle(t *testing.T) {
	body := append([]byte(`{"data":[{"embedding":[`), repeat(',', 8<<20)...)
	body = append(body, `]}]}`...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, _, ok := fastAnswer(body)
	runtime.ReadMemStats(&after)
	if ok {
		t.Fatal("read a vector of commas")
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("allocated %d bytes for a failed answer of %d", got, len(body))
	}
}

func repeat(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

func FuzzFastAnswer(f *testing.F) {
	for _, body := range embeddingAnswers() {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFastAnswer(t, body)
	})
}
