package serve

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzAssembleHandler: no body makes the handler panic or answer 5xx.
// Seeds are in testdata/fuzz/FuzzAssembleHandler.
func FuzzAssembleHandler(f *testing.F) {
	for _, seed := range []string{
		`{"namespace":"default","name":"ssa-pro","intent":"analyze","runtime":{"data_context":"数据","tool_outputs":"结果\n😀"}}`,
		`{"namespace":"default","name":"tiny-budget","intent":"chat"}`,
		`{"namespace":"default","name":"support-assistant","intent":"chat","runtime":{"knowledge":"\u0000\ud800 <|endoftext|>"}}`,
		`{"runtime":{"x":1}}`, `[]`, `null`, `{"runtime":null}`, ``, `{"name":"ssa-pro"`,
	} {
		f.Add(seed)
	}
	s := New(Options{MaxBodyBytes: 256 << 10})
	loadSamples(f, s)
	h := s.Handler()
	f.Fuzz(func(t *testing.T, body string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/assemble", strings.NewReader(body)))
		if w.Code >= 500 {
			t.Fatalf("%d for %q: %s", w.Code, body, w.Body)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("content type %q", ct)
		}
	})
}
