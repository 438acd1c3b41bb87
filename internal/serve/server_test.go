package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/promptops/promptops/plan"
)

// fixture reads a rendered sample plan (render --out-dir of config/samples).
func fixture(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name + ".plan.json")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// withBudget is a copy of a plan under another name and budget.
func withBudget(t testing.TB, data []byte, name string, maxTokens int) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	m["name"], m["maxTokens"] = name, maxTokens
	p := &plan.Plan{}
	out, _ := json.Marshal(m)
	if err := json.Unmarshal(out, p); err != nil {
		t.Fatal(err)
	}
	p.Revision = p.Digest()
	out, _ = json.Marshal(p)
	return out
}

func newTestServer(t testing.TB, maxBody int64) (*Server, *httptest.Server) {
	t.Helper()
	s := New(Options{MaxBodyBytes: maxBody, Log: logr.Discard()})
	ts := newServer(t, s.Handler())
	t.Cleanup(ts.Close)
	return s, ts
}

func loadSamples(t testing.TB, s *Server) {
	ssa := fixture(t, "ssa-pro")
	s.Apply(map[string][]byte{
		"ssa":     ssa,
		"support": fixture(t, "support-assistant"),
		"tiny":    withBudget(t, ssa, "tiny-budget", 300),
	})
}

func post(t testing.TB, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url+"/v1/assemble", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func errorCode(t testing.TB, body []byte) (Code, string) {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" {
		t.Fatalf("not a JSON error: %s", body)
	}
	return Code(e.Error.Code), e.Error.Message
}

func TestNotReadyUntilFirstLoad(t *testing.T) {
	s, ts := newTestServer(t, 0)
	code, body := post(t, ts.URL, `{"namespace":"default","name":"ssa-pro","intent":"chat"}`)
	if c, _ := errorCode(t, body); code != 503 || c != CodeNotReady {
		t.Fatalf("got %d %s", code, body)
	}
	for path, want := range map[string]int{"/readyz": 503, "/healthz": 200, "/v1/templates": 503} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	s.Apply(map[string][]byte{})
	if resp, _ := http.Get(ts.URL + "/readyz"); resp.StatusCode != 200 {
		t.Fatalf("an empty first load is a load: %d", resp.StatusCode)
	}
}

func TestAssembleStatusCodes(t *testing.T) {
	s, ts := newTestServer(t, 64<<10)
	loadSamples(t, s)
	big := strings.Repeat("描述性统计结果：均值、标准差。\n", 3000)
	bigJSON, _ := json.Marshal(big)
	cases := []struct {
		name, body string
		status     int
		code       Code // error code, or "" for an assembly
		mention    string
	}{
		{"ok", `{"namespace":"default","name":"ssa-pro","intent":"analyze","runtime":{"data_context":"数据概览：共 200 行。"}}`, 200, "", ""},
		{"ok without runtime", `{"namespace":"default","name":"support-assistant","intent":"chat"}`, 200, "", ""},
		{"null is missing", `{"namespace":"default","name":"ssa-pro","intent":"chat","runtime":{"tool_outputs":null}}`, 200, "", ""},
		{"cut to fit", `{"namespace":"default","name":"ssa-pro","intent":"analyze","runtime":{"tool_outputs":` + string(bigJSON[:60000]) + `"}}`, 200, "", ""},
		{"over budget", `{"namespace":"default","name":"tiny-budget","intent":"chat"}`, 422, "", ""},
		{"unknown template", `{"namespace":"default","name":"nope","intent":"chat"}`, 404, CodeTemplateNotFound, "default/nope"},
		{"unknown namespace", `{"namespace":"prod","name":"ssa-pro","intent":"chat"}`, 404, CodeTemplateNotFound, "prod/ssa-pro"},
		{"unknown intent", `{"namespace":"default","name":"ssa-pro","intent":"plot"}`, 404, CodeIntentNotFound, `"plot"`},
		{"malformed", `{"namespace":"default",`, 400, CodeMalformed, ""},
		{"not an object", `[1,2]`, 400, CodeMalformed, ""},
		{"trailing data", `{"namespace":"default","name":"ssa-pro","intent":"chat"} {}`, 400, CodeMalformed, ""},
		{"unknown field", `{"namespace":"default","name":"ssa-pro","intent":"chat","runtme":{}}`, 400, CodeMalformed, "runtme"},
		{"non-string value", `{"namespace":"default","name":"ssa-pro","intent":"chat","runtime":{"data_context":{"rows":200}}}`, 400, CodeInvalidRuntime, "data_context"},
		{"runtime not an object", `{"namespace":"default","name":"ssa-pro","intent":"chat","runtime":"x"}`, 400, CodeInvalidRuntime, ""},
		{"unknown section", `{"namespace":"default","name":"ssa-pro","intent":"chat","runtime":{"data_contxt":"x"}}`, 400, CodeUnknownSection, "data_contxt"},
		{"static section", `{"namespace":"default","name":"ssa-pro","intent":"chat","runtime":{"base_system":"x"}}`, 400, CodeUnknownSection, "base_system"},
		{"too large", `{"namespace":"default","name":"ssa-pro","intent":"analyze","runtime":{"tool_outputs":` + string(bigJSON) + `}}`, 413, CodeTooLarge, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := post(t, ts.URL, c.body)
			if status != c.status {
				t.Fatalf("status %d, want %d: %.300s", status, c.status, body)
			}
			if c.code != "" {
				code, msg := errorCode(t, body)
				if code != c.code || !strings.Contains(msg, c.mention) {
					t.Fatalf("error %s %q, want %s mentioning %q", code, msg, c.code, c.mention)
				}
				return
			}
			var a AssembleResponse
			if err := json.Unmarshal(body, &a); err != nil {
				t.Fatal(err)
			}
			if a.WithinBudget != (status == 200) || a.Revision == "" || a.Prompt == "" || len(a.Sections) == 0 || a.MaxTokens == 0 {
				t.Fatalf("answer %+v", a)
			}
		})
	}
	resp, err := http.Get(ts.URL + "/v1/assemble")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if c, _ := errorCode(t, body); resp.StatusCode != 405 || c != CodeMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET /v1/assemble: %d %s", resp.StatusCode, body)
	}
}

// The server's answer is the package's assembly, byte for byte.
func TestAssembleAnswersAsThePackage(t *testing.T) {
	s, ts := newTestServer(t, 0)
	loadSamples(t, s)
	p, err := plan.Load(fixture(t, "ssa-pro"))
	if err != nil {
		t.Fatal(err)
	}
	runtime := map[string]string{"data_context": "数据概览：共 200 行，12 个变量。", "tool_outputs": strings.Repeat("描述性统计结果：均值、标准差、四分位数。", 900)}
	want, err := p.Assemble(context.Background(), "analyze", runtime)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"namespace": "default", "name": "ssa-pro", "intent": "analyze", "runtime": runtime})
	status, out := post(t, ts.URL, string(body))
	var got AssembleResponse
	if err := json.Unmarshal(out, &got); err != nil || status != 200 {
		t.Fatalf("%d %s", status, out)
	}
	if got.Prompt != want.Text || got.Tokens != want.Tokens || got.Revision != p.Revision || len(want.Cut) == 0 {
		t.Fatalf("server and package differ: %d vs %d tokens", got.Tokens, want.Tokens)
	}
	for i, sec := range want.Sections {
		if got.Sections[i] != (SectionSummary{sec.Name, sec.Tokens, sec.TruncatedTokens}) {
			t.Fatalf("section %d: %+v vs %+v", i, got.Sections[i], sec)
		}
	}
}

func TestTemplatesAndMetrics(t *testing.T) {
	s, ts := newTestServer(t, 0)
	loadSamples(t, s)
	post(t, ts.URL, `{"namespace":"default","name":"ssa-pro","intent":"analyze","runtime":{"tool_outputs":`+jsonString(strings.Repeat("结果。", 20000))+`}}`)
	post(t, ts.URL, `{"namespace":"default","name":"nope","intent":"chat"}`)
	resp, err := http.Get(ts.URL + "/v1/templates")
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Templates []TemplateSummary }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(list.Templates) != 3 || list.Templates[0].Name != "ssa-pro" || list.Templates[0].Encoding != "o200k_base" || list.Templates[0].MaxTokens != 4000 ||
		strings.Join(list.Templates[0].Intents, ",") != "chat,explore,consult,analyze,discuss,feedback" || !strings.HasPrefix(list.Templates[0].Revision, "sha256:") {
		t.Fatalf("templates %+v", list.Templates)
	}
	// HEAD is GET without the body; other methods are refused.
	if resp, err := http.Head(ts.URL + "/v1/templates"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD /v1/templates: %v %v", resp, err)
	}
	if resp, err := http.Post(ts.URL+"/v1/templates", "application/json", strings.NewReader("{}")); err != nil || resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST /v1/templates: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	resp, err = http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`promptops_serve_requests_total{code="200",handler="assemble"} 1`,
		`promptops_serve_requests_total{code="404",handler="assemble"} 1`,
		`promptops_serve_request_duration_seconds_bucket{handler="assemble",le=`,
		`promptops_serve_prompt_tokens_total{intent="analyze",name="ssa-pro",namespace="default",revision_role="stable"}`,
		`promptops_serve_section_tokens_total{intent="analyze",name="ssa-pro",namespace="default",section="base_system"}`,
		`promptops_serve_truncated_tokens_total{intent="analyze",name="ssa-pro",namespace="default",section="tool_outputs"}`,
		`promptops_serve_template_revision{name="ssa-pro",namespace="default",revision="` + list.Templates[0].Revision + `"} 1`,
		`promptops_serve_plans 3`,
	} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// A section that was not cut has no truncated series (no series of 0
	// for every section of every intent).
	if bytes.Contains(metrics, []byte(`promptops_serve_truncated_tokens_total{intent="analyze",name="ssa-pro",namespace="default",section="base_system"}`)) {
		t.Error("a truncated series for base_system, which is never cut")
	}
	// Nor a section series for a section that was empty (data_context,
	// not sent).
	if bytes.Contains(metrics, []byte(`promptops_serve_section_tokens_total{intent="analyze",name="ssa-pro",namespace="default",section="data_context"}`)) {
		t.Error("a section series for data_context, which was empty")
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A plan that stops loading keeps its previous version, reported; a new
// source that never loaded is left out; a removed one goes.
func TestBadPlanKeepsPreviousVersion(t *testing.T) {
	s, _ := newTestServer(t, 0)
	ssa := fixture(t, "ssa-pro")
	s.Apply(map[string][]byte{"a": ssa})
	rev := s.Snapshot().Plan(Key{"default", "ssa-pro"}).Revision
	s.Apply(map[string][]byte{"a": ssa[:len(ssa)/2], "b": []byte(`{"kind":"PromptPlan"}`)})
	snap := s.Snapshot()
	if p := snap.Plan(Key{"default", "ssa-pro"}); p == nil || p.Revision != rev || snap.Len() != 1 {
		t.Fatalf("the previous version must stay, alone: %d plans", snap.Len())
	}
	if got := testutilValue(s.metrics.loadErrors); got != 2 {
		t.Fatalf("load errors %v, want 2", got)
	}
	s.Apply(map[string][]byte{})
	if s.Snapshot().Len() != 0 {
		t.Fatal("a removed source must go")
	}
}

// A body is decoded in one pass that refuses what encoding/json lets
// through (a repeated name keeping the last value, invalid UTF-8, a lone
// surrogate, another case of a name), and every message says where.
func TestDecodeAssemble(t *testing.T) {
	for _, c := range []struct {
		body    string
		code    Code
		mention string
	}{
		{`{"namespace":"a","name":"b","intent":"c","runtime":{"x":"}\"]"}}`, "", ""},
		{` {"namespace" : "a" , "runtime" : { "k" : null } } `, "", ""},
		{`{"\u006eame":"b"}`, "", ""},
		{`{}`, "", ""},
		{`{"runtime":{"a":"}"},"x\"y":1}`, CodeMalformed, `unknown field "x\"y"`},
		{`{"name":"b","runtme":{}}`, CodeMalformed, "unknown field runtme"},
		{`{"Namespace":"a"}`, CodeMalformed, "unknown field Namespace"},
		{`{"name":"a","name":"b"}`, CodeMalformed, "member name appears twice"},
		{`{"runtime":{"k":"a","k":"b"}}`, CodeMalformed, "member runtime.k appears twice"},
		{"{\"name\":\"\xff\"}", CodeMalformed, "invalid UTF-8 at byte"},
		{`{"name":"\ud800"}`, CodeMalformed, "invalid JSON at byte 9"},
		{`{"name":"a"} {}`, CodeMalformed, "more than one JSON value"},
		{`{"name":"a"`, CodeMalformed, "the JSON ends early"},
		{`null`, CodeMalformed, "not a JSON object"},
		{`{"name":true}`, CodeMalformed, "name: a JSON true where a string is wanted"},
		{`{"runtime":{"k":1}}`, CodeInvalidRuntime, `runtime section "k" must be a string`},
		{`{"runtime":[]}`, CodeInvalidRuntime, "runtime must be an object of strings"},
	} {
		_, err := decodeAssemble([]byte(c.body))
		code, msg := problemOf(err)
		if code != c.code || !strings.Contains(msg, c.mention) {
			t.Errorf("%s: %s %q, want %s mentioning %q", c.body, code, msg, c.code, c.mention)
		}
	}
}

// problemOf is the code and message of an answer from a handler's helper,
// "" for nil.
func problemOf(err error) (Code, string) {
	if err == nil {
		return "", ""
	}
	var ae *APIError
	if !errors.As(err, &ae) {
		return "", err.Error()
	}
	return ae.Code, ae.Message
}
