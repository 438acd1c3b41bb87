package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// A trace goes to a process started now and comes back out of its
// environment whole: the manager's TRACEPARENT is the Job's parent.
func TestEnvCarrier(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	env := EnvFromContext(ctx)
	if env["TRACEPARENT"] != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("env %v", env)
	}
	t.Setenv("TRACEPARENT", env["TRACEPARENT"])
	if _, err := Setup(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	got := trace.SpanContextFromContext(ContextFromEnv(context.Background()))
	if got.TraceID() != tid || got.SpanID() != sid || !got.IsRemote() {
		t.Fatalf("from the environment: %v", got)
	}
	if len(EnvFromContext(context.Background())) != 0 {
		t.Error("no trace, no TRACEPARENT")
	}
}

// Nothing is exported, and Setup's stop does nothing, when no variable
// names an endpoint or traces are turned off.
func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
	} {
		for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"} {
			t.Setenv(k, tc.env[k])
		}
		if got := Enabled(); got != tc.want {
			t.Errorf("%v: Enabled %v", tc.env, got)
		}
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift")
	if _, err := Setup(context.Background(), "test"); err == nil {
		t.Error("an unknown OTLP protocol was taken")
	}
}
