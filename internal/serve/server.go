package serve

import (
	"context"
	_ "embed"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/felixge/httpsnoop"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/promptops/promptops/internal/telemetry"
)

// DefaultMaxBodyBytes bounds a request body.
const DefaultMaxBodyBytes = 4 << 20

// DefaultMaxInflightBytes bounds the request bodies held at once. Each byte
// held costs a few more while it is decoded and assembled; 16 MiB keeps the
// server within the sidecar sample's 128Mi limit.
const DefaultMaxInflightBytes = 16 << 20

// DefaultRequestTimeout bounds a request, from its headers to its answer.
const DefaultRequestTimeout = 10 * time.Second

// retryAfter is the Retry-After, in seconds, of a 503 Busy.
const retryAfter = 1

// Server answers /v1/assemble, /v1/templates, /healthz, /readyz and /metrics
// from the plans of its PlanSet.
type Server struct {
	store        *PlanSet
	loader       *loader
	metrics      *metrics
	log          logr.Logger
	maxBodyBytes int64
	auth         *Auth
	inflight     *byteBudget
	timeout      time.Duration
	recaller     MemoryRecaller
	memTimeout   time.Duration
	bank         *bankAPI
	// held are the plan.json bytes a Watch holds until they are loaded.
	held *heldPlans
}

// Options configure a Server.
type Options struct {
	// MaxBodyBytes bounds a request body; DefaultMaxBodyBytes when 0.
	MaxBodyBytes int64
	// MaxInflightBytes bounds the bytes of request bodies buffered by all
	// requests in flight, each held until its answer is written;
	// DefaultMaxInflightBytes when 0. A request that would go over it is
	// answered 503 Busy with Retry-After.
	MaxInflightBytes int64
	// RequestTimeout bounds each request, body reading included;
	// DefaultRequestTimeout when 0.
	RequestTimeout time.Duration
	// Log receives load and server errors, never request content.
	Log logr.Logger
	// Auth, when set, requires a Kubernetes bearer token of a caller that
	// may get the template (/v1/*) or /metrics; nil serves everyone.
	Auth *Auth
	// MemoryRecaller fills memory sections; nil leaves them empty (NoRecall).
	// Those of Banks are filled in-process, without it.
	MemoryRecaller MemoryRecaller
	// MemoryTimeout bounds each recall; plan.DefaultMemoryTimeout when 0.
	MemoryTimeout time.Duration
	// Banks are answered at /v1/banks/{namespace}/{name}/facts and
	// .../recall (bank.go), within BankLimits.
	Banks      []*Bank
	BankLimits BankLimits
}

// New returns a server with no plans: it answers 503 until the first load.
func New(o Options) *Server {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxInflightBytes <= 0 {
		o.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	s := &Server{store: &PlanSet{}, metrics: newMetrics(), log: o.Log, maxBodyBytes: o.MaxBodyBytes,
		inflight: &byteBudget{max: o.MaxInflightBytes}, timeout: o.RequestTimeout, auth: o.Auth,
		recaller: o.MemoryRecaller, memTimeout: o.MemoryTimeout}
	s.metrics.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "promptops_serve_inflight_body_bytes", Help: "Bytes of request bodies held by requests in flight (at most --max-inflight-bytes).",
	}, func() float64 { return float64(s.inflight.used.Load()) }))
	s.loader = newLoader(s.store, s.metrics, o.Log)
	s.initBanks(o.Banks, o.BankLimits)
	if len(o.Banks) > 0 {
		s.recaller = &localRecaller{banks: s.bank.banks, next: o.MemoryRecaller}
	}
	return s
}

// Apply publishes the plans of a complete set of sources (an id, such as a
// path, and the bytes of its plan.json); it is the seam both the directory
// poller and the API watch feed.
func (s *Server) Apply(sources map[string][]byte) { s.loader.apply(sources) }

// Snapshot is the current set of plans, nil before the first load.
func (s *Server) Snapshot() *Snapshot { return s.store.Load() }

// openAPI is the OpenAPI 3.1 document of the server's HTTP API, served at
// GET /openapi.json; the tests check every request and answer against it.
//
//go:embed openapi.json
var openAPI []byte

// Handler routes the server's endpoints: each is a pattern of
// net/http's ServeMux, instrumented (requests and their duration by
// endpoint, with promhttp; a span of the API's requests), bounded by the
// request timeout, and behind authentication and authorization where it
// serves a prompt, a bank or the metrics. Another method on a known path
// is a JSON 405 with Allow, an unknown path a JSON 404.
func (s *Server) Handler() http.Handler {
	rt := &router{s: s, mux: http.NewServeMux(), allow: map[string][]string{}, names: map[string]string{}}
	rt.handle("POST /v1/assemble", "assemble", s.authenticated(s.handle(s.assemble)))
	rt.handle("GET /v1/templates", "templates", s.authenticated(s.handle(s.templates)))
	for _, b := range bankRoutes {
		rt.handle(b.pattern, "banks", s.authenticated(s.bankRoute(b)))
	}
	rt.handle("GET /healthz", "healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeText(w, http.StatusOK, "ok")
	}))
	rt.handle("GET /readyz", "readyz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.store.Load() == nil {
			writeText(w, http.StatusServiceUnavailable, "no plans loaded yet")
			return
		}
		writeText(w, http.StatusOK, "ok")
	}))
	rt.handle("GET /openapi.json", "openapi", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(openAPI)
	}))
	// /metrics counts no request of its own, as before.
	rt.mux.Handle("GET /metrics", s.authenticated(s.authorized(metricsAttributes, promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))))
	rt.allow["/metrics"] = []string{http.MethodGet}
	return rt.done()
}

// router registers the endpoints and then, from one place, the JSON 405
// of each path and the JSON 404 of every other.
type router struct {
	s     *Server
	mux   *http.ServeMux
	allow map[string][]string // methods by path pattern
	names map[string]string   // endpoint names by path pattern
}

// handle registers h for pattern ("METHOD /path"), instrumented as the
// endpoint name.
func (rt *router) handle(pattern, name string, h http.Handler) {
	method, path, _ := strings.Cut(pattern, " ")
	rt.mux.Handle(pattern, rt.s.instrument(name, h))
	rt.allow[path] = append(rt.allow[path], method)
	rt.names[path] = name
}

// done registers, for each path, a JSON 405 with Allow for the methods it
// has not (HEAD goes with GET), and the JSON 404 of every other path.
func (rt *router) done() http.Handler {
	for path, methods := range rt.allow {
		if methods[0] == http.MethodGet {
			methods = append(methods, http.MethodHead)
		}
		allow := strings.Join(methods, ", ")
		h := rt.s.handle(func(w http.ResponseWriter, r *http.Request) error {
			w.Header().Set("Allow", allow)
			return problem(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "use "+allow)
		})
		if name := rt.names[path]; name != "" {
			rt.mux.Handle(path, rt.s.instrument(name, h))
		} else {
			rt.mux.Handle(path, h)
		}
	}
	rt.mux.Handle("/", rt.s.instrument("other", rt.s.handle(func(w http.ResponseWriter, r *http.Request) error {
		return problem(http.StatusNotFound, CodeNotFound, "no such endpoint: see GET /openapi.json")
	})))
	return rt.mux
}

// tracedEndpoints are the endpoints whose requests are spans.
var tracedEndpoints = map[string]bool{"assemble": true, "templates": true, "banks": true}

// instrument counts the endpoint's requests by status code and times them
// (promhttp), bounds each by the request timeout (its context and the
// reading of its body) and, for the API's endpoints, makes it a span in
// the caller's trace (traceparent) whose status is the answer's. The span
// names no path: a bank's scopes and fact ids are people's data.
func (s *Server) instrument(name string, h http.Handler) http.Handler {
	labels := prometheus.Labels{"handler": name}
	traced := tracedEndpoints[name]
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
		defer cancel()
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.timeout))
		if !traced {
			h.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		ctx = otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(r.Header))
		ctx, span := telemetry.Tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(semconv.HTTPRequestMethodKey.String(r.Method)))
		defer span.End()
		m := httpsnoop.CaptureMetrics(h, w, r.WithContext(ctx))
		span.SetAttributes(semconv.HTTPResponseStatusCode(m.Code))
		if m.Code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(m.Code))
		}
	})
	return promhttp.InstrumentHandlerDuration(s.metrics.latency.MustCurryWith(labels),
		promhttp.InstrumentHandlerCounter(s.metrics.requests.MustCurryWith(labels), inner))
}

// templates answers GET /v1/templates: the templates loaded that the
// caller may get.
func (s *Server) templates(w http.ResponseWriter, r *http.Request) error {
	snap := s.store.Load()
	if snap == nil {
		return problem(http.StatusServiceUnavailable, CodeNotReady, "no plans loaded yet")
	}
	out := struct {
		Templates []TemplateSummary `json:"templates"`
	}{Templates: make([]TemplateSummary, 0, snap.Len())}
	for _, k := range s.visibleTemplates(r.Context(), snap.keys) {
		p := snap.plans[k].Stable
		out.Templates = append(out.Templates, TemplateSummary{Namespace: p.Namespace, Name: p.Name, Revision: p.Revision, Encoding: p.Encoding, MaxTokens: p.MaxTokens, Intents: p.IntentNames()})
	}
	writeJSON(w, http.StatusOK, &out)
	return nil
}

func writeText(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	io.WriteString(w, text+"\n")
}
