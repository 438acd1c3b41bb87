package llmtest

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// VectorFunc embeds one text at dims dimensions (0 when the request named
// none); an error refuses the whole request with 400, as a server does for
// an input too long.
type VectorFunc func(text string, dims int) ([]float32, error)

// EmbedServer is an OpenAI-compatible /v1/embeddings server: it reads
// input as a string or a list, honours encoding_format float or base64
// (Base64 forces base64 whatever was asked, as some servers do), and
// reports usage.
type EmbedServer struct {
	*httptest.Server
	vector VectorFunc
	mu     sync.Mutex
	calls  int
	inputs int
	// refused counts the requests answered 400.
	refused int
	down    bool
	// Base64 answers base64 even when float was asked.
	Base64 bool
	// NoBase64 refuses (400) a request that asks for base64, as a server
	// that knows only floats may.
	NoBase64 bool
	// NoUsage leaves usage out of the answer.
	NoUsage bool
	// Remember answers a request seen before with the bytes it answered
	// then (up to maxRemembered requests), as a benchmark's server on a
	// machine of its own would cost the machine under test nothing to
	// compute or encode. Set it, and Base64, before the first request:
	// a remembered answer is sent as it was.
	Remember   bool
	remembered map[string][]byte
}

// maxRemembered bounds the answers Remember keeps.
const maxRemembered = 1 << 16

// NewEmbeddings starts an embeddings server.
func NewEmbeddings(vector VectorFunc) *EmbedServer {
	s := &EmbedServer{vector: vector}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	return s
}

// BaseURL is what clients use as the API base.
func (s *EmbedServer) BaseURL() string { return s.URL + "/v1" }

// Calls and Inputs count the requests answered and the texts in them.
func (s *EmbedServer) Calls() (calls, inputs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.inputs
}

// Refused counts the requests answered 400 (an input refused, or base64
// under NoBase64).
func (s *EmbedServer) Refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// SetDown makes the server answer 503 to everything.
func (s *EmbedServer) SetDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

func (s *EmbedServer) handle(w http.ResponseWriter, r *http.Request) {
	refuse := func(w http.ResponseWriter, msg string) {
		s.mu.Lock()
		s.refused++
		s.mu.Unlock()
		refuse(w, msg)
	}
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/embeddings") {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	s.mu.Lock()
	down, b64 := s.down, s.Base64
	s.mu.Unlock()
	if down {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"message":"the embeddings server is down","type":"server_error"}}`)
		return
	}
	var in struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		EncodingFormat string          `json:"encoding_format"`
		Dimensions     int             `json:"dimensions"`
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if s.Remember {
		s.mu.Lock()
		answer, ok := s.remembered[string(body)]
		if ok {
			s.calls++
			s.inputs++ // remembered answers are of one input
		}
		s.mu.Unlock()
		if ok {
			_, _ = w.Write(answer)
			return
		}
	}
	if err := json.Unmarshal(body, &in); err != nil {
		refuse(w, "bad json")
		return
	}
	if s.NoBase64 && in.EncodingFormat == "base64" {
		refuse(w, "encoding_format: only float is supported")
		return
	}
	var texts []string
	if err := json.Unmarshal(in.Input, &texts); err != nil {
		var one string
		if err := json.Unmarshal(in.Input, &one); err != nil {
			refuse(w, "input must be a string or a list of strings")
			return
		}
		texts = []string{one}
	}
	type item struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"`
	}
	data := make([]item, len(texts))
	tokens := 0
	for i, t := range texts {
		v, err := s.vector(t, in.Dimensions)
		if err != nil {
			refuse(w, err.Error())
			return
		}
		tokens += len(strings.Fields(t)) + len([]rune(t))/4 + 1
		var emb any = v
		if b64 || in.EncodingFormat == "base64" {
			b := make([]byte, 4*len(v))
			for k, x := range v {
				binary.LittleEndian.PutUint32(b[4*k:], math.Float32bits(x))
			}
			emb = base64.StdEncoding.EncodeToString(b)
		}
		data[i] = item{Object: "embedding", Index: i, Embedding: emb}
	}
	s.mu.Lock()
	s.calls++
	s.inputs += len(texts)
	noUsage := s.NoUsage
	s.mu.Unlock()
	out := map[string]any{"object": "list", "data": data, "model": in.Model}
	if !noUsage {
		out["usage"] = map[string]int{"prompt_tokens": tokens, "total_tokens": tokens}
	}
	answer, _ := json.Marshal(out)
	if s.Remember && len(texts) == 1 {
		s.mu.Lock()
		if s.remembered == nil {
			s.remembered = map[string][]byte{}
		}
		if len(s.remembered) < maxRemembered {
			s.remembered[string(body)] = answer
		}
		s.mu.Unlock()
	}
	_, _ = w.Write(answer)
}

func refuse(w http.ResponseWriter, msg string) {
	w.WriteHeader(http.StatusBadRequest)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error"}})
	_, _ = w.Write(b)
}

// TopicVector is a deterministic unit vector: the sum of one Gaussian
// direction per key, each weighted. Texts sharing a heavy key (a topic)
// come out near each other, texts sharing none nearly orthogonal; e.g.
// keys topic, wording, text with weights 1, 0.4, 0.05 put paraphrases of a
// topic at a cosine of about 0.86 and a near-copy of a wording above 0.99.
func TopicVector(dims int, keys []string, weights []float64) []float32 {
	v := make([]float64, dims)
	for i, k := range keys {
		h := fnv.New64a()
		_, _ = h.Write([]byte(k))
		rng := rand.New(rand.NewPCG(h.Sum64(), 0x9e3779b97f4a7c15))
		for d := range v {
			v[d] += weights[i] * rng.NormFloat64()
		}
	}
	var n float64
	for _, x := range v {
		n += x * x
	}
	n = math.Sqrt(n)
	out := make([]float32, dims)
	for d, x := range v {
		out[d] = float32(x / n)
	}
	return out
}

// ErrTooLong is what a VectorFunc may return for an input it refuses.
func ErrTooLong(n int) error {
	return fmt.Errorf("input is too long: %d tokens, the maximum is 8192", n)
}
