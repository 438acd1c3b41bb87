package serve

// How POST /v1/assemble judges a body that is JSON but not a request
// (a mutant of issue 21 lived without it: docs/mutation.md).

import "testing"

// A body that is valid JSON but not an object is malformed (400), never a
// lookup of the empty template (404): json.Unmarshal accepts null into a
// struct without a word.
func TestAssembleRejectsJSONThatIsNotAnObject(t *testing.T) {
	s, ts := newTestServer(t, 64<<10)
	loadSamples(t, s)
	for _, body := range []string{`null`, " \n\tnull ", `"default/ssa-pro"`, `12`, `true`, `[]`, ``, "  \n"} {
		code, out := post(t, ts.URL, body)
		if c, _ := errorCode(t, out); code != 400 || c != CodeMalformed {
			t.Errorf("%q: %d %s, want 400 %s", body, code, out, CodeMalformed)
		}
	}
	// An empty object is an object: it names no template.
	code, out := post(t, ts.URL, `{}`)
	if c, _ := errorCode(t, out); code != 404 || c != CodeTemplateNotFound {
		t.Errorf("{}: %d %s, want 404 %s", code, out, CodeTemplateNotFound)
	}
}
