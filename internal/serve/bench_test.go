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

// BenchmarkAssembleHandlerHostile: 4 MiB of one repeated character in one
// runtime value, through the handler (reading, decoding, assembly,
// answer), beside 4 MiB of ordinary text; a new first character each time.
func BenchmarkAssembleHandlerHostile(b *testing.B) {
	s := New(Options{MaxBodyBytes: 5 << 20, MaxInflightBytes: 64 << 20})
	s.Apply(map[string][]byte{"ssa": fixture(b, "ssa-pro")})
	h := s.Handler()
	for _, c := range []struct{ name, char string }{
		{"text", ""}, {"punct", "!"}, {"spaces", " "}, {"letters", "a"}, {"digits", "7"}, {"cjk", "中"}, {"emoji", "😀"},
	} {
		var value string
		if c.char == "" {
			value = "A" + strings.Repeat("变量 1：描述性统计，均值 45.2，标准差 12.8。\n", (4<<20)/60)
		} else {
			value = "A" + strings.Repeat(c.char, (4<<20)/len(c.char)) // A: changed per request
		}
		body, _ := json.Marshal(map[string]any{"namespace": "default", "name": "ssa-pro", "intent": "analyze", "runtime": map[string]string{"tool_outputs": value}})
		at := bytes.Index(body, []byte(`"tool_outputs":"`)) + len(`"tool_outputs":"`)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for i := 0; i < b.N; i++ {
				body[at] = byte('A' + i%26) // new text: no count from the cache
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/assemble", bytes.NewReader(body)))
				if w.Code != 200 {
					b.Fatal(w.Code, w.Body.String())
				}
			}
		})
	}
}

// BenchmarkDecodeAssemble: decoding an ordinary request body alone
// (strictjson over json/v2), 8 KB and 64 KB of runtime content.
func BenchmarkDecodeAssemble(b *testing.B) {
	for _, size := range []int{8 << 10, 64 << 10} {
		body := benchBody(size, "x")
		b.Run(fmt.Sprintf("%dKB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := decodeAssemble(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
