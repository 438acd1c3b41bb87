package serve

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/promptops/promptops/internal/telemetry"
	"github.com/promptops/promptops/plan"
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

// Error codes of the JSON error body {"error": {"code", "message"}}.
const (
	CodeNotReady       = "NotReady"
	CodeMalformed      = "MalformedRequest"
	CodeInvalidRuntime = "InvalidRuntimeValue"
	CodeUnknownSection = "UnknownSection"
	// CodeSpecialToken: a runtime value holds a special-token string of
	// the template's encoding, and its specialTokens is Reject (422).
	CodeSpecialToken     = "SpecialToken"
	CodeTemplateNotFound = "TemplateNotFound"
	CodeIntentNotFound   = "IntentNotFound"
	CodeTooLarge         = "RequestTooLarge"
	CodeBusy             = "Busy"
	CodeTimeout          = "RequestTimeout"
	CodeMethodNotAllowed = "MethodNotAllowed"
	CodeNotFound         = "NotFound"
)

// Server answers /v1/assemble, /v1/templates, /healthz, /readyz and /metrics
// from the plans of its Store.
type Server struct {
	store        *Store
	loader       *loader
	metrics      *metrics
	log          logr.Logger
	maxBodyBytes int64
	auth         *Auth
	inflight     *byteBudget
	timeout      time.Duration
	recaller     Recaller
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
	// Recaller fills memory sections; nil leaves them empty (NoRecall).
	// Those of Banks are filled in-process, without it.
	Recaller Recaller
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
	s := &Server{store: &Store{}, metrics: newMetrics(), log: o.Log, maxBodyBytes: o.MaxBodyBytes,
		inflight: &byteBudget{max: o.MaxInflightBytes}, timeout: o.RequestTimeout, auth: o.Auth,
		recaller: o.Recaller, memTimeout: o.MemoryTimeout}
	s.metrics.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "promptops_serve_inflight_body_bytes", Help: "Bytes of request bodies held by requests in flight (at most --max-inflight-bytes).",
	}, func() float64 { return float64(s.inflight.used.Load()) }))
	s.loader = newLoader(s.store, s.metrics, o.Log)
	s.initBanks(o.Banks, o.BankLimits)
	if len(o.Banks) > 0 {
		s.recaller = &localRecaller{banks: s.bank.banks, next: o.Recaller}
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

// Handler routes the server's endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/assemble", s.instrument("assemble", s.authenticated(s.assemble)))
	mux.Handle("/v1/templates", s.instrument("templates", s.authenticated(s.templates)))
	mux.Handle("/v1/banks/", s.instrument("banks", s.authenticated(s.bankEndpoint)))
	mux.Handle("DELETE /v1/banks/{namespace}/{name}/scopes/{scope}", s.instrument("banks", s.authenticated(s.scopeEndpoint("delete", "scopes", s.eraseScope))))
	mux.Handle("GET /v1/banks/{namespace}/{name}/scopes/{scope}/export", s.instrument("banks", s.authenticated(s.scopeEndpoint("get", "scopes", s.exportScope))))
	mux.Handle("DELETE /v1/banks/{namespace}/{name}/facts/{id}", s.instrument("banks", s.authenticated(s.scopeEndpoint("delete", "facts", s.deleteFact))))
	mux.Handle("/healthz", s.instrument("healthz", func(w http.ResponseWriter, r *http.Request) int {
		return writeText(w, http.StatusOK, "ok")
	}))
	mux.Handle("/readyz", s.instrument("readyz", func(w http.ResponseWriter, r *http.Request) int {
		if s.store.Load() == nil {
			return writeText(w, http.StatusServiceUnavailable, "no plans loaded yet")
		}
		return writeText(w, http.StatusOK, "ok")
	}))
	mux.Handle("GET /openapi.json", s.instrument("openapi", func(w http.ResponseWriter, r *http.Request) int {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write(openAPI)
		return http.StatusOK
	}))
	mux.Handle("/metrics", s.metricsAuthorized(promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{})))
	mux.Handle("/", s.instrument("other", func(w http.ResponseWriter, r *http.Request) int {
		return writeError(w, http.StatusNotFound, CodeNotFound, "no such endpoint: use POST /v1/assemble or GET /v1/templates")
	}))
	return mux
}

// tracedEndpoints are the endpoints whose requests are spans.
var tracedEndpoints = map[string]bool{"assemble": true, "templates": true, "banks": true}

func (s *Server) instrument(name string, h func(http.ResponseWriter, *http.Request) int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// The deadline stops the work (the context) and the reading of the
		// body (the connection's read deadline); the client going away
		// cancels the context too.
		ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
		defer cancel()
		// A span per API request (not the probes'), in the caller's trace
		// (traceparent); no path, whose bank scopes and fact ids are
		// people's data.
		span := trace.SpanFromContext(ctx)
		if tracedEndpoints[name] {
			ctx = otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(r.Header))
			ctx, span = telemetry.Tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(semconv.HTTPRequestMethodKey.String(r.Method)))
			defer span.End()
		}
		_ = http.NewResponseController(w).SetReadDeadline(start.Add(s.timeout))
		code := h(w, r.WithContext(ctx))
		span.SetAttributes(semconv.HTTPResponseStatusCode(code))
		if code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(code))
		}
		s.metrics.request(name, code, time.Since(start).Seconds())
	})
}

// AssembleRequest is the body of POST /v1/assemble.
type AssembleRequest struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Intent    string `json:"intent"`
	// Runtime holds each runtime section's content; a value must be a JSON
	// string (null is the same as leaving the section out).
	Runtime map[string]string `json:"runtime"`
	// Query is the recall query of memory sections that take it from the
	// request.
	Query string `json:"query"`
	// Scope is the bank scope of memory sections that take it from the
	// request (one user's memory, say); see plan.ScopeProblem.
	Scope string `json:"scope"`
}

// AssembleResponse is the body of a 200 or 422 answer.
type AssembleResponse struct {
	Prompt       string `json:"prompt"`
	Tokens       int    `json:"tokens"`
	MaxTokens    int    `json:"maxTokens"`
	WithinBudget bool   `json:"withinBudget"`
	// CacheableTokens is the prompt's prefix that is the same in every
	// request (before its first runtime or memory section).
	CacheableTokens int              `json:"cacheableTokens"`
	Revision        string           `json:"revision"`
	Sections        []SectionSummary `json:"sections"`
	// Memory has one entry per memory section of the template.
	Memory []MemorySummary `json:"memory,omitempty"`
}

// SectionSummary is one section's share of the prompt.
type SectionSummary struct {
	Name            string `json:"name"`
	Tokens          int    `json:"tokens"`
	TruncatedTokens int    `json:"truncatedTokens"`
}

// TemplateSummary is one entry of GET /v1/templates.
type TemplateSummary struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Revision  string   `json:"revision"`
	Encoding  string   `json:"encoding"`
	MaxTokens int      `json:"maxTokens"`
	Intents   []string `json:"intents"`
}

func (s *Server) assemble(w http.ResponseWriter, r *http.Request) int {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "use POST")
	}
	snap := s.store.Load()
	if snap == nil {
		return writeError(w, http.StatusServiceUnavailable, CodeNotReady, "no plans loaded yet")
	}
	held := &reservation{budget: s.inflight}
	defer held.release()
	body, err := readBody(w, r, s.maxBodyBytes, held)
	if err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			return writeError(w, http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("the request body is over %d bytes", s.maxBodyBytes))
		case errors.Is(err, errBusy):
			w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
			w.Header().Set("Connection", "close") // the rest of the body is not read
			return writeError(w, http.StatusServiceUnavailable, CodeBusy, "too many request bytes in flight; retry later")
		case errors.Is(err, os.ErrDeadlineExceeded), r.Context().Err() != nil:
			return writeError(w, http.StatusRequestTimeout, CodeTimeout, "the request body did not arrive in time")
		}
		return writeError(w, http.StatusBadRequest, CodeMalformed, "reading the request body failed")
	}
	req, status, code, msg := decodeRequest(body)
	body = nil // the decoded request holds its own copy
	if status != 0 {
		return writeError(w, status, code, msg)
	}
	if msg := plan.ScopeProblem(req.Scope); msg != "" {
		return writeError(w, http.StatusBadRequest, CodeInvalidScope, "scope: "+msg)
	}
	k := Key{req.Namespace, req.Name}
	if code := s.authorize(w, r, k); code != 0 {
		return code
	}
	p := snap.Plan(k)
	if p == nil {
		return writeError(w, http.StatusNotFound, CodeTemplateNotFound, fmt.Sprintf("no template %s is loaded", k))
	}
	span := trace.SpanFromContext(r.Context())
	span.SetName("assemble " + p.Name)
	span.SetAttributes(telemetry.PromptName.String(p.Name), telemetry.TemplateNamespace.String(p.Namespace),
		telemetry.PromptVersion.String(p.Revision), telemetry.Intent.String(req.Intent))
	a, err := p.Assemble(r.Context(), req.Intent, req.Runtime, plan.WithRecall(s.recallFunc()), plan.WithQuery(req.Query), plan.WithScope(req.Scope), plan.WithMemoryTimeout(s.memTimeout))
	if err != nil {
		var ui *plan.UnknownIntentError
		var us *plan.UnknownSectionError
		var st *plan.SpecialTokenError
		switch {
		case r.Context().Err() != nil:
			// The deadline passed or the client went away: nobody may read this.
			return writeError(w, http.StatusServiceUnavailable, CodeTimeout, "the request took longer than the server's request timeout")
		case errors.As(err, &ui):
			return writeError(w, http.StatusNotFound, CodeIntentNotFound, fmt.Sprintf("template %s has no intent %q (intents: %s)", k, ui.Intent, strings.Join(ui.Intents, ", ")))
		case errors.As(err, &us):
			return writeError(w, http.StatusBadRequest, CodeUnknownSection, fmt.Sprintf("template %s has no runtime section %q (runtime sections: %s)", k, us.Section, strings.Join(p.RuntimeSections(), ", ")))
		case errors.As(err, &st):
			return writeError(w, http.StatusUnprocessableEntity, CodeSpecialToken, fmt.Sprintf("runtime.%s: %v", st.Section, st))
		}
		s.log.Error(err, "Assembly failed", "template", k, "intent", req.Intent)
		return writeError(w, http.StatusInternalServerError, "Internal", "assembly failed")
	}
	span.SetAttributes(telemetry.PromptTokens.Int(a.Tokens), telemetry.CacheableTokens.Int(a.CacheableTokens))
	resp := AssembleResponse{Prompt: a.Text, Tokens: a.Tokens, MaxTokens: a.MaxTokens, WithinBudget: a.WithinBudget, CacheableTokens: a.CacheableTokens, Revision: p.Revision, Sections: make([]SectionSummary, len(a.Sections)),
		Memory: s.memorySummaries(a)}
	s.metrics.tokens.WithLabelValues(p.Namespace, p.Name, a.Intent).Add(float64(a.Tokens))
	for i, sec := range a.Sections {
		resp.Sections[i] = SectionSummary{Name: sec.Name, Tokens: sec.Tokens, TruncatedTokens: sec.TruncatedTokens}
		if sec.Tokens > 0 {
			s.metrics.sections.WithLabelValues(p.Namespace, p.Name, a.Intent, sec.Name).Add(float64(sec.Tokens))
		}
		if sec.TruncatedTokens > 0 {
			s.metrics.truncated.WithLabelValues(p.Namespace, p.Name, a.Intent, sec.Name).Add(float64(sec.TruncatedTokens))
		}
	}
	status = http.StatusOK
	if !a.WithinBudget {
		status = http.StatusUnprocessableEntity
	}
	return writeJSON(w, status, &resp)
}

// firstBodyChunk is the buffer a body is first read into.
const firstBodyChunk = 4 << 10

// readBody reads the whole body, at most limit bytes. Nothing is allocated
// on the strength of Content-Length alone: the buffer starts small and at
// most doubles as bytes arrive (Content-Length only caps it, so a body that
// says its size ends in a buffer of that size). The buffer's capacity is
// reserved from the server's in-flight budget before each growth; errBusy
// when it is spent.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, held *reservation) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	if r.ContentLength == 0 {
		return nil, nil
	}
	want := limit + 1 // unknown length: read until EOF or past the limit
	if r.ContentLength > 0 {
		want = r.ContentLength
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) >= want {
				if want > limit {
					return nil, &http.MaxBytesError{Limit: limit}
				}
				return buf, nil // all of Content-Length; the body ends here
			}
			n := min(want, max(firstBodyChunk, 2*int64(cap(buf))))
			if !held.grow(n - int64(cap(buf))) {
				return nil, errBusy
			}
			next := make([]byte, len(buf), n)
			copy(next, buf)
			buf = next
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// errBusy is the in-flight budget being spent.
var errBusy = errors.New("too many request bytes in flight")

// byteBudget counts the bytes of request bodies held by requests in flight.
// A request over smallRequest may take only three quarters of it, so that
// a few large requests cannot turn away the ordinary ones.
type byteBudget struct {
	max  int64
	used atomic.Int64
}

// smallRequest is what a request may hold and still use the last quarter
// of the budget.
const smallRequest = 256 << 10

// reservation is one request's share of the budget.
type reservation struct {
	budget *byteBudget
	held   int64
}

// grow reserves n more bytes, or none and reports false.
func (r *reservation) grow(n int64) bool {
	limit := r.budget.max
	if r.held+n > smallRequest {
		limit -= r.budget.max / 4
	}
	if r.budget.used.Add(n) > limit {
		r.budget.used.Add(-n)
		return false
	}
	r.held += n
	return true
}

// release gives back all the request holds.
func (r *reservation) release() {
	r.budget.used.Add(-r.held)
	r.held = 0
}

// decodeRequest parses the body strictly: one JSON object of known fields.
// json.Unmarshal decodes in place (a Decoder would copy the body into a
// growing buffer first); unknownField then rejects typos such as "runtme".
func decodeRequest(body []byte) (req AssembleRequest, status int, code, msg string) {
	if req, ok := decodeFast(body); ok {
		return req, 0, "", ""
	}
	if err := json.Unmarshal(body, &req); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field == "runtime" {
			if name := nonString(body); name != "" {
				return req, http.StatusBadRequest, CodeInvalidRuntime, fmt.Sprintf("runtime section %q must be a string", name)
			}
			return req, http.StatusBadRequest, CodeInvalidRuntime, "runtime must be an object of strings"
		}
		return req, http.StatusBadRequest, CodeMalformed, "the body must be one JSON object {namespace, name, intent, runtime, query, scope}: " + jsonProblem(err)
	}
	if len(body) == 0 || body[skipSpace(body, 0)] != '{' {
		return req, http.StatusBadRequest, CodeMalformed, "the body must be one JSON object {namespace, name, intent, runtime, query, scope}"
	}
	if f, ok := unknownField(body); ok {
		return req, http.StatusBadRequest, CodeMalformed, fmt.Sprintf("unknown field %q: the fields are namespace, name, intent, runtime, query and scope", f)
	}
	return req, 0, "", ""
}

// unknownField returns the first top-level key of a valid JSON object that
// is none of the request's fields (matched as json.Unmarshal matches them,
// ignoring case).
func unknownField(body []byte) (string, bool) {
	i := skipSpace(body, 0) + 1 // past '{'
	for {
		i = skipSpace(body, i)
		if i >= len(body) || body[i] != '"' {
			return "", false // '}'
		}
		end := skipString(body, i)
		var key string
		if err := json.Unmarshal(body[i:end], &key); err != nil {
			return "", false
		}
		known := false
		for _, f := range [...]string{"namespace", "name", "intent", "runtime", "query", "scope"} {
			known = known || strings.EqualFold(key, f)
		}
		if !known {
			return key, true
		}
		i = skipSpace(body, end) + 1 // past ':'
		i = skipValue(body, skipSpace(body, i))
		i = skipSpace(body, i)
		if i >= len(body) || body[i] != ',' {
			return "", false
		}
		i++
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset after the string starting at b[i] == '"'.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the offset after the valid JSON value at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
		i++
	}
	return i
}

// nonString names a runtime section whose value is not a string; it runs
// only on the error path, so the body is decoded once when it is valid.
func nonString(body []byte) string {
	var req struct {
		Runtime map[string]json.RawMessage `json:"runtime"`
	}
	if json.Unmarshal(body, &req) != nil {
		return ""
	}
	names := make([]string, 0, len(req.Runtime))
	for name, raw := range req.Runtime {
		if len(raw) > 0 && raw[0] != '"' && string(raw) != "null" {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	return names[0]
}

// jsonProblem describes a decoding error without quoting the body.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %q must be %s", typ.Field, typ.Type)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends early"
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	return "invalid JSON"
}

func (s *Server) templates(w http.ResponseWriter, r *http.Request) int {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		return writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "use GET")
	}
	snap := s.store.Load()
	if snap == nil {
		return writeError(w, http.StatusServiceUnavailable, CodeNotReady, "no plans loaded yet")
	}
	out := struct {
		Templates []TemplateSummary `json:"templates"`
	}{Templates: make([]TemplateSummary, 0, snap.Len())}
	for _, k := range s.visible(r.Context(), snap.keys) {
		p := snap.plans[k]
		out.Templates = append(out.Templates, TemplateSummary{Namespace: p.Namespace, Name: p.Name, Revision: p.Revision, Encoding: p.Encoding, MaxTokens: p.MaxTokens, Intents: p.IntentNames()})
	}
	return writeJSON(w, http.StatusOK, &out)
}

func writeJSON(w http.ResponseWriter, status int, v any) int {
	data, err := json.Marshal(v)
	if err != nil {
		status, data = http.StatusInternalServerError, []byte(`{"error":{"code":"Internal","message":"encoding the answer failed"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(data)+1))
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
	return status
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) int {
	var b errorBody
	b.Error.Code, b.Error.Message = code, msg
	return writeJSON(w, status, &b)
}

func writeText(w http.ResponseWriter, status int, text string) int {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	io.WriteString(w, text+"\n")
	return status
}
