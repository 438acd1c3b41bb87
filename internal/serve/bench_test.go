package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func benchBody(size int, salt string) []byte {
	rt := map[string]string{}
	for i, name := range []string{"data_context", "variable_dictionary", "tool_outputs"} {
		var b strings.Builder
		b.WriteString(salt)
		for n := 0; b.Len() < size/3; n++ {
			fmt.Fprintf(&b, "变量 %d：描述性统计，均值 45.2，标准差 12.8，四分位数 33/44/57，缺失 0。\n", i*1000+n)
		}
		rt[name] = b.String()
	}
	out, _ := json.Marshal(map[string]any{"namespace": "default", "name": "ssa-pro", "intent": "analyze", "runtime": rt})
	return out
}

// BenchmarkAssembleHandler: one request through the handler, new content
// each time (nothing from the count cache).
func BenchmarkAssembleHandler(b *testing.B) {
	s := New(Options{})
	s.Apply(map[string][]byte{"ssa": fixture(b, "ssa-pro")})
	h := s.Handler()
	for _, size := range []int{8 << 10, 64 << 10} {
		const marker = "00000000"
		tmpl := benchBody(size, marker+"\n")
		var at []int // every section starts with the marker
		for i := 0; ; {
			j := bytes.Index(tmpl[i:], []byte(marker))
			if j < 0 {
				break
			}
			at = append(at, i+j)
			i += j + len(marker)
		}
		b.Run(fmt.Sprintf("%dKB", size>>10), func(b *testing.B) {
			b.ReportAllocs()
			body := bytes.Clone(tmpl)
			for i := 0; i < b.N; i++ {
				for _, a := range at {
					copy(body[a:], fmt.Sprintf("%08d", i)) // new text: no count from the cache
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/assemble", bytes.NewReader(body)))
				if w.Code != 200 {
					b.Fatal(w.Code, w.Body.String())
				}
			}
		})
	}
}
