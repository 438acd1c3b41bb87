package llm

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/llmtest"
)

// TestEmbeddingsFormats: float and base64 answers decode alike; an input the
// server refuses fails alone with the server's reason; dimensions are sent
// only when set.
func TestEmbeddingsFormats(t *testing.T) {
	var dimsSeen []int
	srv := llmtest.NewEmbeddings(func(text string, dims int) ([]float32, error) {
		dimsSeen = append(dimsSeen, dims)
		if strings.HasPrefix(text, "too long") {
			return nil, llmtest.ErrTooLong(9000)
		}
		return llmtest.TopicVector(8, []string{text}, []float64{1}), nil
	})
	defer srv.Close()
	for _, b64 := range []bool{false, true} {
		srv.Base64 = b64
		c := NewEmbeddings(EmbeddingsConfig{BaseURL: srv.BaseURL(), Model: "m", Timeout: 2 * time.Second, BatchSize: 2})
		got, err := c.Embed(context.Background(), []string{"a", "too long b", "c"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Vectors[0]) != 8 || got.Vectors[1] != nil || len(got.Vectors[2]) != 8 || got.Tokens == 0 {
			t.Fatalf("base64=%v: %+v", b64, got)
		}
		if got.Errs[1] == nil || !strings.Contains(got.Errs[1].Error(), "embeddings answered 400: input is too long") || got.Errs[0] != nil {
			t.Fatalf("%v", got.Errs)
		}
		want := llmtest.TopicVector(8, []string{"c"}, []float64{1})
		for i := range want {
			if got.Vectors[2][i] != want[i] {
				t.Fatalf("base64=%v: vector differs", b64)
			}
		}
	}
	for _, d := range dimsSeen {
		if d != 0 {
			t.Fatalf("dimensions sent though unset: %v", dimsSeen)
		}
	}
}

// TestEmbeddingsRequest: the request asks for floats, names dimensions when
// set and sends the key as a bearer token.
func TestEmbeddingsRequest(t *testing.T) {
	var body map[string]any
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		auth = r.Header.Get("Authorization")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,0.25,0.125]}],"model":"m"}`)
	}))
	defer srv.Close()
	c := NewEmbeddings(EmbeddingsConfig{BaseURL: srv.URL + "/v1", Model: "m", Dimensions: 3, APIKey: "k"})
	got, err := c.Embed(context.Background(), []string{"x"})
	if err != nil || len(got.Vectors[0]) != 3 || got.Tokens != 0 {
		t.Fatalf("%v %+v", err, got)
	}
	if body["encoding_format"] != "base64" || body["dimensions"] != float64(3) || body["model"] != "m" || auth != "Bearer k" {
		t.Fatalf("%v %q", body, auth)
	}
}

// TestEmbeddingsFallBackToFloats: a server that refuses base64 is asked
// again for floats, and for floats only afterwards; a refusal of an input
// still fails that input alone; the vectors are the same either way.
func TestEmbeddingsFallBackToFloats(t *testing.T) {
	vec := func(text string, _ int) ([]float32, error) {
		if strings.HasPrefix(text, "too long") {
			return nil, llmtest.ErrTooLong(9000)
		}
		return llmtest.TopicVector(8, []string{text}, []float64{1}), nil
	}
	floatsOnly, both := llmtest.NewEmbeddings(vec), llmtest.NewEmbeddings(vec)
	defer floatsOnly.Close()
	defer both.Close()
	floatsOnly.NoBase64 = true
	var got [2]consolidation.Embeddings
	for i, srv := range []*llmtest.EmbedServer{floatsOnly, both} {
		c := NewEmbeddings(EmbeddingsConfig{BaseURL: srv.BaseURL(), Model: "m", Timeout: 2 * time.Second})
		for range 2 {
			var err error
			if got[i], err = c.Embed(context.Background(), []string{"a", "b"}); err != nil {
				t.Fatal(err)
			}
		}
		if calls, _ := srv.Calls(); calls != 2 {
			t.Errorf("server %d: %d calls for two embeds, want 2 (the refusals are not answers)", i, calls)
		}
		before := srv.Refused()
		one, err := c.Embed(context.Background(), []string{"too long x", "c"})
		if err != nil || one.Errs[0] == nil || one.Vectors[1] == nil {
			t.Errorf("server %d: a refused input: %v %+v", i, err, one)
		}
		// The batch and then its too-long input are refused once each:
		// once a format was taken, a refusal is not asked again in the
		// other.
		if got := srv.Refused() - before; got != 2 {
			t.Errorf("server %d: %d refusals for a batch with one too-long input, want 2", i, got)
		}
	}
	for k := range got[0].Vectors {
		if !slices.Equal(got[0].Vectors[k], got[1].Vectors[k]) || len(got[0].Vectors[k]) != 8 {
			t.Fatalf("vector %d: %v from floats, %v from base64", k, got[0].Vectors[k], got[1].Vectors[k])
		}
	}
}
