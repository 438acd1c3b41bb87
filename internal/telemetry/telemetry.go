// Package telemetry sets up OpenTelemetry traces from the standard OTEL_*
// variables and names what promptops puts in spans: OpenTelemetry's GenAI
// conventions (gen_ai.*) for LLM and embeddings calls and memory
// operations, and promptops.* for templates. Spans carry no prompt, fact,
// query, scope or id unless OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
// is true, and then only the LLM calls' messages.
package telemetry

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// CaptureContentEnv is the standard variable that opts in to message
// content in spans.
const CaptureContentEnv = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

// Enabled reports whether the environment asks for traces: an OTLP
// endpoint is set, the SDK is not disabled and the traces exporter is not
// "none".
func Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(os.Getenv("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// metricsEnabled is Enabled for metrics.
func metricsEnabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(os.Getenv("OTEL_METRICS_EXPORTER"), "none") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != ""
}

// Setup installs the W3C trace context propagator and, when Enabled, a
// tracer provider that exports over OTLP (http/protobuf, or grpc by
// OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL) as the OTEL_* variables say, with
// service as the service name unless OTEL_SERVICE_NAME says otherwise.
// The returned function flushes and stops it; without telemetry it does
// nothing.
func Setup(ctx context.Context, service string) (func(context.Context) error, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if !Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	var exp *otlptrace.Exporter
	var err error
	switch proto := firstEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"); proto {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	default:
		err = errors.New("OTLP protocol " + proto + " is not supported: use http/protobuf or grpc")
	}
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(service)), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	if !metricsEnabled() {
		return tp.Shutdown, nil
	}
	var mexp sdkmetric.Exporter
	switch firstEnv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL") {
	case "grpc":
		mexp, err = otlpmetricgrpc.New(ctx)
	default:
		mexp, err = otlpmetrichttp.New(ctx)
	}
	if err != nil {
		return nil, errors.Join(err, tp.Shutdown(ctx))
	}
	// OTEL_METRIC_EXPORT_INTERVAL sets the period, as the reader reads it.
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp)), sdkmetric.WithResource(res))
	otel.SetMeterProvider(mp)
	return func(ctx context.Context) error { return errors.Join(mp.Shutdown(ctx), tp.Shutdown(ctx)) }, nil
}

// genAIMetrics are the GenAI conventions' client metrics, made once from
// the meter provider of that moment (a no-op one until Setup).
type genAIMetrics struct {
	tokens   metric.Int64Histogram
	duration metric.Float64Histogram
}

var metrics = sync.OnceValue(func() genAIMetrics {
	m := otel.Meter("github.com/promptops/promptops")
	tokens, _ := m.Int64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens of an LLM or embeddings call, by gen_ai.token.type (input or output)."),
		metric.WithExplicitBucketBoundaries(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864))
	duration, _ := m.Float64Histogram("gen_ai.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of an LLM or embeddings call."),
		metric.WithExplicitBucketBoundaries(0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92))
	return genAIMetrics{tokens: tokens, duration: duration}
})

// RecordCall records an LLM or embeddings call in the GenAI client
// metrics: its duration and its input and output tokens (output < 0: none,
// as for embeddings), with the operation, provider and model; errType is
// error.type, "" for a call that succeeded.
func RecordCall(ctx context.Context, op, model string, seconds float64, input, output int64, errType string) {
	m := metrics()
	attrs := []attribute.KeyValue{OperationName.String(op), ProviderName.String("openai"), RequestModel.String(model)}
	if errType != "" {
		m.duration.Record(ctx, seconds, metric.WithAttributes(append(attrs, ErrorType.String(errType))...))
		return
	}
	m.duration.Record(ctx, seconds, metric.WithAttributes(attrs...))
	m.tokens.Record(ctx, input, metric.WithAttributes(append(attrs, TokenType.String("input"))...))
	if output >= 0 {
		m.tokens.Record(ctx, output, metric.WithAttributes(append(attrs, TokenType.String("output"))...))
	}
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return strings.ToLower(strings.TrimSpace(v))
		}
	}
	return ""
}

// ContextFromEnv continues the trace that the TRACEPARENT and TRACESTATE
// variables carry (OpenTelemetry's environment carrier), as a consolidation
// Job's are set by the manager; ctx as it is without them.
func ContextFromEnv(ctx context.Context) context.Context {
	tp := os.Getenv("TRACEPARENT")
	if tp == "" {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier{"traceparent": tp, "tracestate": os.Getenv("TRACESTATE")})
}

// EnvFromContext is the TRACEPARENT (and TRACESTATE) that continue ctx's
// trace in a process started now; none without a recording span.
func EnvFromContext(ctx context.Context) map[string]string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	out := map[string]string{}
	if v := c["traceparent"]; v != "" {
		out["TRACEPARENT"] = v
	}
	if v := c["tracestate"]; v != "" {
		out["TRACESTATE"] = v
	}
	return out
}

// Env is the process's OpenTelemetry configuration, the OTEL_* variables
// (OTEL_SDK_DISABLED and the content opt-in among them), sorted by name: what
// a process it starts needs to export where this one does.
func Env() map[string]string {
	out := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "OTEL_") {
			out[k] = v
		}
	}
	return out
}

// Tracer is promptops' tracer.
func Tracer() trace.Tracer { return otel.Tracer("github.com/promptops/promptops") }

// CaptureContent reports whether spans may carry message content.
func CaptureContent() bool { return strings.EqualFold(os.Getenv(CaptureContentEnv), "true") }

// The attributes of the GenAI conventions promptops sets.
const (
	OperationName     = attribute.Key("gen_ai.operation.name")
	ProviderName      = attribute.Key("gen_ai.provider.name")
	RequestModel      = attribute.Key("gen_ai.request.model")
	ResponseModel     = attribute.Key("gen_ai.response.model")
	InputTokens       = attribute.Key("gen_ai.usage.input_tokens")
	OutputTokens      = attribute.Key("gen_ai.usage.output_tokens")
	FinishReasons     = attribute.Key("gen_ai.response.finish_reasons")
	InputMessages     = attribute.Key("gen_ai.input.messages")
	OutputMessages    = attribute.Key("gen_ai.output.messages")
	MemoryStoreID     = attribute.Key("gen_ai.memory.store.id")
	PromptName        = attribute.Key("gen_ai.prompt.name")
	PromptVersion     = attribute.Key("gen_ai.prompt.version")
	ErrorType         = attribute.Key("error.type")
	TokenType         = attribute.Key("gen_ai.token.type")
	TemplateNamespace = attribute.Key("promptops.template.namespace")
	Intent            = attribute.Key("promptops.intent")
	PromptTokens      = attribute.Key("promptops.prompt.tokens")
	CacheableTokens   = attribute.Key("promptops.prompt.cacheable_tokens")
	MemoryItems       = attribute.Key("promptops.memory.items")
	FactsConsolidated = attribute.Key("promptops.facts.consolidated")
	BatchFacts        = attribute.Key("promptops.batch.facts")
	BatchMessages     = attribute.Key("promptops.batch.messages")
)

// The operation names of the GenAI conventions.
const (
	OpChat         = "chat"
	OpEmbeddings   = "embeddings"
	OpSearchMemory = "search_memory"
	OpUpdateMemory = "update_memory"
	OpDeleteMemory = "delete_memory"
)
