package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/testenv"
)

// otelSpan is a span as the collector's file exporter writes it (OTLP/JSON).
type otelSpan struct {
	TraceID      string `json:"traceId"`
	SpanID       string `json:"spanId"`
	ParentSpanID string `json:"parentSpanId"`
	Name         string `json:"name"`
	Kind         int    `json:"kind"`
	Attributes   []struct {
		Key   string `json:"key"`
		Value struct {
			StringValue *string `json:"stringValue"`
			IntValue    *string `json:"intValue"`
		} `json:"value"`
	} `json:"attributes"`
	service string
}

func (s otelSpan) attr(key string) (string, bool) {
	for _, a := range s.Attributes {
		if a.Key == key {
			switch {
			case a.Value.StringValue != nil:
				return *a.Value.StringValue, true
			case a.Value.IntValue != nil:
				return *a.Value.IntValue, true
			}
			return "", true
		}
	}
	return "", false
}

// collector runs bin/otelcol (make otelcol), the OpenTelemetry Collector
// built from its own modules, exporting what it receives over OTLP/HTTP to
// a file; it returns the endpoint and a function that stops it and returns
// the spans the file holds, and the file's bytes.
func collector(t *testing.T) (string, func() ([]otelSpan, []byte)) {
	t.Helper()
	bin := os.Getenv("PROMPTOPS_OTELCOL")
	if bin == "" {
		bin = filepath.Join(testenv.Root(), "bin", "otelcol")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no OpenTelemetry Collector at %s: run 'make otelcol' (builds it from the Go module proxy) or set PROMPTOPS_OTELCOL", bin)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	out := filepath.Join(dir, "traces.json")
	config := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http: {endpoint: %q}
exporters:
  file: {path: %q, format: json, flush_interval: 100ms}
service:
  telemetry: {metrics: {level: none}}
  pipelines:
    traces: {receivers: [otlp], exporters: [file]}
    metrics: {receivers: [otlp], exporters: [file]}
`, addr, out)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--config="+cfg)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if i > 300 {
			t.Fatalf("the collector did not listen on %s:\n%s", addr, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://" + addr, func() ([]otelSpan, []byte) {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatalf("the collector wrote no file: %v\n%s", err, logs.String())
		}
		var spans []otelSpan
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var line struct {
				ResourceSpans []struct {
					Resource struct {
						Attributes []struct {
							Key   string `json:"key"`
							Value struct {
								StringValue string `json:"stringValue"`
							} `json:"value"`
						} `json:"attributes"`
					} `json:"resource"`
					ScopeSpans []struct {
						Spans []otelSpan `json:"spans"`
					} `json:"scopeSpans"`
				} `json:"resourceSpans"`
			}
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Fatal(err)
			}
			for _, rs := range line.ResourceSpans {
				service := ""
				for _, a := range rs.Resource.Attributes {
					if a.Key == "service.name" {
						service = a.Value.StringValue
					}
				}
				for _, ss := range rs.ScopeSpans {
					for _, s := range ss.Spans {
						s.service = service
						spans = append(spans, s)
					}
				}
			}
		}
		return spans, data
	}
}

// TestTraces sends a request with a traceparent to a serve whose template
// has a memory section filled over HTTP by a second serve, the bank's, and
// finds in a real OpenTelemetry Collector's file one trace holding the
// assemble span, the recall's client span and the bank's search_memory
// span, with the GenAI attributes and no content; and a consolidation
// run's trace holding its batch and its LLM calls with their token usage.
func TestTraces(t *testing.T) {
	endpoint, stop := collector(t)
	// The standard variables, which OpenTelemetry reads from the process.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "100")
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "")
	withEnv(t, map[string]string{"OPENAI_API_KEY": ""})
	dir := t.TempDir()
	store := "sqlite://" + filepath.Join(dir, "bank.db")
	const secretFact = "Ana keeps her passport in the blue drawer"
	facts := filepath.Join(dir, "facts.jsonl")
	_ = os.WriteFile(facts, []byte(`{"text": "`+secretFact+`", "scope": "user:ana", "entities": ["Ana"]}`+"\n"), 0o644)
	if code, out, e := run(t, "", "facts", "import", "--bank", "shop/customers", "--store", store, facts); code != ExitOK {
		t.Fatalf("import: %d %s %s", code, out, e)
	}
	model := llmtest.New(llmtest.OnePerFact)
	defer model.Close()
	if code, _, e := run(t, "", "consolidate", "--bank", "shop/customers", "--store", store, "--llm-base-url", model.BaseURL(), "--model", "stand-in"); code != ExitOK {
		t.Fatalf("consolidate: %d %s", code, e)
	}
	if tp := model.Requests()[0].Traceparent; tp == "" {
		t.Error("the LLM call carried no traceparent")
	}

	// Two serves: the bank's, and the plans' whose memory section asks it.
	serves := newServes(t)
	bank := serves.start("--bank", "shop/customers", "--store", store)
	plans, p := renderPlans(t, dir, `apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: support, namespace: shop}
spec:
  budget: {maxTokens: 400}
  sections:
  - {name: role, text: "You are the support assistant."}
  - name: memory
    heading: "## What we know"
    memory: {bankRef: {name: customers}, query: {fromRequest: true}, scope: {fromRequest: true}, reserveTokens: 100}
  - {name: task, heading: "## Task", intent: true}
  intents: [{name: chat, instruction: "Answer briefly."}]
`, bank)
	front := serves.start("--plans-dir", plans, "--memory-token-file", "")
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest(http.MethodPost, "http://"+front+"/v1/assemble",
		strings.NewReader(`{"namespace": "shop", "name": "support", "intent": "chat", "query": "Where is the passport?", "scope": "user:ana"}`))
	req.Header.Set("Traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), secretFact) {
		t.Fatalf("assemble: %d %s", resp.StatusCode, body)
	}
	serves.stop()
	spans, raw := stop()

	// No content: neither the fact, nor the query, nor the scope.
	for _, secret := range []string{secretFact, "passport", "user:ana"} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("the traces hold %q", secret)
		}
	}
	byName := map[string][]otelSpan{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
	}
	one := func(name string) otelSpan {
		t.Helper()
		if len(byName[name]) != 1 {
			names := make([]string, 0, len(byName))
			for n := range byName {
				names = append(names, n)
			}
			t.Fatalf("%d spans %q; the spans are %q", len(byName[name]), name, names)
		}
		return byName[name][0]
	}
	want := func(s otelSpan, key, value string) {
		t.Helper()
		if got, ok := s.attr(key); !ok || (value != "" && got != value) {
			t.Errorf("span %q: %s = %q (%v), want %q", s.Name, key, got, ok, value)
		}
	}
	assemble := one("assemble support")
	want(assemble, "gen_ai.prompt.name", "support")
	want(assemble, "gen_ai.prompt.version", p.Revision)
	want(assemble, "promptops.prompt.tokens", "")
	if assemble.TraceID != traceID || assemble.ParentSpanID != "00f067aa0ba902b7" || assemble.service != "promptops-serve" {
		t.Errorf("assemble is not in the caller's trace: %+v", assemble)
	}
	var client, server otelSpan
	for _, s := range byName["search_memory shop/customers"] {
		want(s, "gen_ai.operation.name", "search_memory")
		want(s, "gen_ai.memory.store.id", "shop/customers")
		switch s.Kind {
		case 3: // client
			client = s
		case 2: // server
			server = s
		}
	}
	if client.TraceID != traceID || client.ParentSpanID != assemble.SpanID {
		t.Errorf("the recall is not the assemble's child: %+v", client)
	}
	if server.TraceID != traceID || server.ParentSpanID != client.SpanID {
		t.Errorf("the bank's span is not the recall's child (the traceparent did not reach the bank): %+v", server)
	}

	run := one("consolidate shop/customers")
	batch := one("consolidate batch")
	chat := one("chat stand-in")
	if batch.TraceID != run.TraceID || batch.ParentSpanID != run.SpanID || chat.TraceID != run.TraceID || chat.ParentSpanID == "" {
		t.Errorf("the run's trace does not hold its batch and LLM call: run %s, batch %+v, chat %+v", run.SpanID, batch, chat)
	}
	want(chat, "gen_ai.operation.name", "chat")
	want(chat, "gen_ai.request.model", "stand-in")
	if n, _ := chat.attr("gen_ai.usage.input_tokens"); n == "" || n == "0" {
		t.Errorf("chat: gen_ai.usage.input_tokens %q", n)
	}
	want(chat, "gen_ai.usage.output_tokens", "50")
	if _, ok := chat.attr("gen_ai.input.messages"); ok {
		t.Error("messages in a span without the opt-in")
	}

	// The GenAI client metrics of the run's LLM call.
	var usage, duration bool
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if !bytes.Contains(line, []byte(`"resourceMetrics"`)) {
			continue
		}
		var m struct {
			ResourceMetrics []struct {
				ScopeMetrics []struct {
					Metrics []struct {
						Name      string `json:"name"`
						Histogram struct {
							DataPoints []struct {
								Attributes []struct {
									Key   string `json:"key"`
									Value struct {
										StringValue string `json:"stringValue"`
									} `json:"value"`
								} `json:"attributes"`
								Sum float64 `json:"sum"`
							} `json:"dataPoints"`
						} `json:"histogram"`
					} `json:"metrics"`
				} `json:"scopeMetrics"`
			} `json:"resourceMetrics"`
		}
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		for _, rm := range m.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, met := range sm.Metrics {
					for _, dp := range met.Histogram.DataPoints {
						attrs := map[string]string{}
						for _, a := range dp.Attributes {
							attrs[a.Key] = a.Value.StringValue
						}
						if attrs["gen_ai.request.model"] != "stand-in" || attrs["gen_ai.operation.name"] != "chat" {
							continue
						}
						switch {
						case met.Name == "gen_ai.client.token.usage" && attrs["gen_ai.token.type"] == "output" && dp.Sum == 50:
							usage = true
						case met.Name == "gen_ai.client.operation.duration" && dp.Sum > 0:
							duration = true
						}
					}
				}
			}
		}
	}
	if !usage || !duration {
		t.Errorf("the collector has no GenAI client metrics of the LLM call: token usage %v, duration %v", usage, duration)
	}
}

// The manager passes its OpenTelemetry variables on to consolidation Jobs,
// but not the headers, which may hold a collector's credentials; a Job
// names itself promptops-consolidate.
func TestJobTelemetryEnv(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer secret")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-key=secret")
	t.Setenv("OTEL_SERVICE_NAME", "promptops-manager")
	got := map[string]string{}
	for _, e := range jobTelemetryEnv() {
		got[e.Name] = e.Value
	}
	if got["OTEL_EXPORTER_OTLP_ENDPOINT"] != "http://collector:4318" || got["OTEL_SERVICE_NAME"] != "promptops-consolidate" {
		t.Errorf("Job env %v", got)
	}
	for k, v := range got {
		if strings.Contains(v, "secret") {
			t.Errorf("%s passed on to Jobs", k)
		}
	}
}
