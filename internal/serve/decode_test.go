package serve

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// decodeFast, when it answers, answers as encoding/json does, and it
// answers the requests clients send.
func FuzzDecodeFast(f *testing.F) {
	for _, s := range []string{
		`{"namespace":"default","name":"ssa-pro","intent":"analyze","runtime":{"data_context":"a\nb","tool_outputs":null}}`,
		` { "runtime" : { } , "intent" : "chat" } `,
		`{}`,
		`{"name":"x","name":"y"}`,
		`{"Name":"x"}`,
		`{"runtime":{"a":"\u4e2d\ud83d\ude00\"\\\/\b\f\r\t"}}`,
		`{"runtime":{"a":"\ud800"}}`,
		`{"runtime":{"a":"\ud83dx"}}`,
		`{"runtime":{"a":"` + "\xff" + `"}}`,
		`{"runtime":{"a":"` + "\x01" + `"}}`,
		`{"runtime":{"a":"b","a":"c"}}`,
		`{"runtime":{"a\u0041":"b"}}`,
		`{"runtime":null}`,
		`{"namespace":null}`,
		`{"intent":"x"} {}`,
		`{"intent":"x",}`,
		`{"runtime":{"a":1}}`,
		`[]`,
		``,
		// Cut short inside a key, a string, an escape and after null.
		`{"nam`,
		`{"runtime":{"a":"b`,
		`{"runtime":{"a":"b\`,
		`{"runtime":{"a":null`,
		`{"runtime":{"a":"\nb`,
		`{"runtime":{"a":"\ud83d`,
		`{"runtime":{"a":"\ud83d\u`,
		`{"runtime":{"a":"\udc00\udc00"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := decodeFast(body)
		if !ok {
			return
		}
		var want AssembleRequest
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatalf("decodeFast took %q, encoding/json refuses it: %v", body, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decodeFast %+v, encoding/json %+v", body, got, want)
		}
		if f, unknown := unknownField(body); unknown {
			t.Fatalf("%q: decodeFast took unknown field %q", body, f)
		}
	})
}

func TestDecodeFastTakesOrdinaryRequests(t *testing.T) {
	for _, body := range []string{
		`{"namespace":"default","name":"ssa-pro","intent":"analyze","runtime":{"data_context":"数据概览：共 200 行。\n\t\"引号\" \u00e9 \ud83d\ude00","tool_outputs":null}}`,
		`{"namespace": "default", "name": "ssa-pro", "intent": "chat"}`,
		`{"namespace":"default","name":"ssa-pro","intent":"analyze","runtime":{"tool_outputs":"` + strings.Repeat("!", 1<<20) + `"}}`,
	} {
		if _, ok := decodeFast([]byte(body)); !ok {
			t.Errorf("decodeFast left %.80q to encoding/json", body)
		}
	}
}

// A \u escape's hex digits, upper and lower case, at each end of their
// ranges, decode as encoding/json decodes them.
func TestDecodeFastHexDigits(t *testing.T) {
	body := `{"runtime":{"a":"\u09AF\u0A9F\uFA90\u09af\u0a9f\ufa90\u00C9\u00e9"}}`
	got, ok := decodeFast([]byte(body))
	if !ok {
		t.Fatalf("decodeFast left %q to encoding/json", body)
	}
	var want AssembleRequest
	if err := json.Unmarshal([]byte(body), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeFast %q, encoding/json %q", got.Runtime["a"], want.Runtime["a"])
	}
	for _, bad := range []string{`\u00G9`, `\u00g9`, `\u00@9`, "\\u00`9", `\u00/9`, `\u00:9`} {
		if _, ok := decodeFast([]byte(`{"runtime":{"a":"` + bad + `"}}`)); ok {
			t.Errorf("decodeFast took the escape %s", bad)
		}
	}
}

// A body cut short inside an escape or after null is refused, read from a
// slice with no spare capacity (as a body can be), where a read past its
// end panics.
func TestDecodeFastCutShort(t *testing.T) {
	for _, s := range []string{
		`{"runtime":{"a":"\ud83d\u`,
		`{"runtime":{"a":"\ud83d\u12`,
		`{"runtime":{"a":"\u`,
		`{"runtime":{"a":"\u00`,
		`{"runtime":{"a":"\`,
		`{"runtime":{"a":nul`,
		`{"runtime":{"a":null`,
	} {
		b := []byte(s)
		if _, ok := decodeFast(b[:len(b):len(b)]); ok {
			t.Errorf("decodeFast took %q", s)
		}
	}
}
