package serve

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/promptops/promptops/plan"
)

// recordSpans installs a tracer provider that keeps every span, for the
// test's duration.
func recordSpans(t *testing.T) *tracetest.SpanRecorder {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	oldTP, oldProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(oldTP)
		otel.SetTextMapPropagator(oldProp)
		_ = tp.Shutdown(context.Background())
	})
	return rec
}

func spanAttr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// An API request is a server span in the caller's trace, named for what it
// does and with no path (a bank's scopes and fact ids are people's data);
// a probe is none; a memory section's failed recall is a client span with
// its error code.
func TestSpans(t *testing.T) {
	rec := recordSpans(t)
	s, ts := newTestServer(t, DefaultMaxBodyBytes)
	loadSamples(t, s)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/assemble", strings.NewReader(`{"namespace": "default", "name": "ssa-pro", "intent": "analyze"}`))
	req.Header.Set("Traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, path := range []string{"/healthz", "/readyz", "/openapi.json"} {
		if resp, err := http.Get(ts.URL + path); err == nil {
			resp.Body.Close()
		}
	}
	if code, _ := post(t, ts.URL, `{"namespace": "default", "name": "nope", "intent": "x"}`); code != http.StatusNotFound {
		t.Fatalf("an unknown template: %d", code)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		names := []string{}
		for _, sp := range spans {
			names = append(names, sp.Name())
		}
		t.Fatalf("spans %q, want the two assembles' (the probes' and the document's are none)", names)
	}
	a := spans[0]
	if a.Name() != "assemble ssa-pro" || a.SpanKind() != trace.SpanKindServer || a.SpanContext().TraceID().String() != traceID || a.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("assemble span %q kind %v trace %s parent %s", a.Name(), a.SpanKind(), a.SpanContext().TraceID(), a.Parent().SpanID())
	}
	p := mustLoad(t, fixture(t, "ssa-pro"))
	for key, want := range map[string]string{"gen_ai.prompt.name": "ssa-pro", "gen_ai.prompt.version": p.Revision, "promptops.intent": "analyze"} {
		if v, ok := spanAttr(a, key); !ok || v.AsString() != want {
			t.Errorf("assemble %s = %v, want %q", key, v.Emit(), want)
		}
	}
	if v, ok := spanAttr(a, "promptops.prompt.tokens"); !ok || v.AsInt64() == 0 {
		t.Errorf("assemble tokens %v", v.Emit())
	}
	if v, _ := spanAttr(a, "http.response.status_code"); v.AsInt64() != http.StatusOK {
		t.Errorf("assemble status %v", v.Emit())
	}
	if nf := spans[1]; nf.Name() != "assemble" || nf.SpanContext().TraceID().String() == traceID {
		t.Errorf("the unknown template's span %q in trace %s", nf.Name(), nf.SpanContext().TraceID())
	}
}

// The bank API's requests are memory operations on the bank, and a
// memory section's recall that fails is a client span with its code.
func TestBankSpans(t *testing.T) {
	rec := recordSpans(t)
	b := newBankServer(t, "sqlite://"+filepath.Join(t.TempDir(), "bank.db"), nil, BankLimits{}, nil)
	if code, body := b.post(t, "facts", "", []byte(`{"facts": [{"text": "Ana prefers email", "scope": "user:ana"}]}`)); code != http.StatusOK {
		t.Fatalf("retain: %d %s", code, body)
	}
	b.recall(t, `{"query": "email", "maxTokens": 100, "scope": "user:ana", "includePending": true}`)
	if code, body := b.do(t, http.MethodDelete, "scopes/user:ana", "", nil); code != http.StatusOK {
		t.Fatalf("erase: %d %s", code, body)
	}
	var names []string
	for _, sp := range rec.Ended() {
		names = append(names, sp.Name())
		op, _ := spanAttr(sp, "gen_ai.operation.name")
		store, _ := spanAttr(sp, "gen_ai.memory.store.id")
		if !strings.HasPrefix(sp.Name(), op.AsString()+" ") || store.AsString() != "team-a/support" {
			t.Errorf("span %q: operation %q, store %q", sp.Name(), op.AsString(), store.AsString())
		}
		for _, a := range sp.Attributes() {
			if strings.Contains(a.Value.Emit(), "user:ana") || strings.Contains(a.Value.Emit(), "email") {
				t.Errorf("span %q holds %s = %q", sp.Name(), a.Key, a.Value.Emit())
			}
		}
	}
	if strings.Join(names, ",") != "update_memory team-a/support,search_memory team-a/support,delete_memory team-a/support" {
		t.Errorf("spans %q", names)
	}

	// A memory section whose bank does not answer: a client span with the
	// recall's error code.
	rec2 := recordSpans(t)
	s := New(Options{Log: b.srv.log, MemoryRecaller: &HTTPRecaller{Client: http.DefaultClient}})
	fill := s.recallFunc()
	if _, err := fill(context.Background(), plan.MemoryRequest{Bank: plan.BankRef{Namespace: "team-a", Name: "gone"}, Query: "q", MaxTokens: 10}); err == nil {
		t.Fatal("a bank without an endpoint answered")
	}
	ended := rec2.Ended()
	if len(ended) != 1 || ended[0].Name() != "search_memory team-a/gone" || ended[0].SpanKind() != trace.SpanKindClient {
		t.Fatalf("recall spans %v", ended)
	}
	if v, _ := spanAttr(ended[0], "error.type"); v.AsString() != string(CodeNotServed) {
		t.Errorf("error.type %q", v.AsString())
	}
}
