package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/telemetry"
)

// The bank API: POST /v1/banks/{namespace}/{name}/facts (retain) and
// POST /v1/banks/{namespace}/{name}/recall, for the banks given with
// Options.Banks (promptops serve --bank).

// Limits of the bank API.
const (
	// DefaultMaxFactsPerRequest bounds the facts of one retain.
	DefaultMaxFactsPerRequest = 1000
	// DefaultMaxRetainBytes bounds a retain's body.
	DefaultMaxRetainBytes = 4 << 20
	// MaxFactTextBytes bounds a fact's text.
	MaxFactTextBytes = 64 << 10
	// MaxFactIDBytes bounds a fact's id.
	MaxFactIDBytes = 128
	// MaxFactLabels bounds a fact's entities and its tags, each; a label
	// is at most MaxLabelBytes.
	MaxFactLabels = 64
	MaxLabelBytes = 256
	// MaxQueryBytes bounds a recall's query.
	MaxQueryBytes = 4096
	// MaxRecallTokens bounds a recall's maxTokens.
	MaxRecallTokens = 32768
	// DefaultRecallItems is maxItems when a recall gives none; MaxRecallItems bounds it.
	DefaultRecallItems = 20
	MaxRecallItems     = 200
	// MaxRecallTags bounds a recall's tags.
	MaxRecallTags = 32
)

// Error codes of the bank API.
const (
	CodeBankNotFound     = "BankNotFound"
	CodeInvalidFact      = "InvalidFact"
	CodeTooManyFacts     = "TooManyFacts"
	CodeFactConflict     = "FactConflict"
	CodeInvalidRecall    = "InvalidRecall"
	CodeStoreUnavailable = "StoreUnavailable"
)

// memoryBanks is the resource a bank API caller needs create on, with the
// subresource facts (retain) or recall.
var memoryBanks = struct{ Group, Version, Resource string }{"promptops.io", "v1", "memorybanks"}

// BankStore is what retain writes to.
type BankStore interface {
	// RetainFacts stores facts (each with an id) in one transaction; a
	// *consolidation.FactConflictError stores nothing.
	RetainFacts(ctx context.Context, bank string, facts []consolidation.Fact) (stored, unchanged int, err error)
}

// Bank is one bank the server answers for.
type Bank struct {
	Namespace, Name string
	Store           BankStore
	Recaller        *consolidation.Recaller
	// Encoding counts recall's tokens.
	Encoding string
	// IndexCacheBytes bounds the indexes of the bank's scopes held in
	// memory, beside the shared scope's; DefaultIndexCacheBytes when 0.
	IndexCacheBytes int64

	once   sync.Once
	scoped *scopeRecallers
}

// BankLimits bound the bank API's requests.
type BankLimits struct {
	// MaxFactsPerRequest: DefaultMaxFactsPerRequest when 0.
	MaxFactsPerRequest int
	// MaxRetainBytes: DefaultMaxRetainBytes when 0.
	MaxRetainBytes int64
}

type bankAPI struct {
	banks    map[Key]*Bank
	limits   BankLimits
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	facts    *prometheus.CounterVec
	erasures *prometheus.CounterVec
}

func (s *Server) initBanks(banks []*Bank, limits BankLimits) {
	if limits.MaxFactsPerRequest <= 0 {
		limits.MaxFactsPerRequest = DefaultMaxFactsPerRequest
	}
	if limits.MaxRetainBytes <= 0 {
		limits.MaxRetainBytes = DefaultMaxRetainBytes
	}
	b := &bankAPI{banks: map[Key]*Bank{}, limits: limits,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "promptops_serve_bank_requests_total", Help: "Bank API requests by bank, endpoint (facts, recall) and status code.",
		}, []string{"namespace", "name", "endpoint", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "promptops_serve_bank_request_duration_seconds", Help: "Time to answer a bank API request, by bank and endpoint.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1, 5},
		}, []string{"namespace", "name", "endpoint"}),
		facts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "promptops_serve_bank_facts_total", Help: "Facts posted to a bank, by result: stored, or unchanged (the bank had the id with the same text).",
		}, []string{"namespace", "name", "result"}),
		erasures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "promptops_serve_bank_erasures_total", Help: "Erasures done through the bank API, by bank and kind (scope, fact).",
		}, []string{"namespace", "name", "kind"}),
	}
	for _, bk := range banks {
		b.banks[Key{bk.Namespace, bk.Name}] = bk
	}
	s.metrics.registry.MustRegister(b.requests, b.latency, b.facts, b.erasures)
	s.bank = b
}

// memorySpan names the request's span a memory operation of the GenAI
// conventions on the bank, its store: "search_memory team-a/support".
func memorySpan(ctx context.Context, op string, k Key) {
	span := trace.SpanFromContext(ctx)
	span.SetName(op + " " + k.String())
	span.SetAttributes(telemetry.OperationName.String(op), telemetry.MemoryStoreID.String(k.String()))
}

// bankRequest is a bank API path: /v1/banks/{namespace}/{name}/{endpoint}.
func bankRequest(path string) (k Key, endpoint string, ok bool) {
	rest, found := strings.CutPrefix(path, "/v1/banks/")
	parts := strings.Split(rest, "/")
	if !found || len(parts) != 3 || parts[0] == "" || parts[1] == "" || (parts[2] != "facts" && parts[2] != "recall") {
		return Key{}, "", false
	}
	return Key{parts[0], parts[1]}, parts[2], true
}

func (s *Server) bankEndpoint(w http.ResponseWriter, r *http.Request) int {
	k, endpoint, ok := bankRequest(r.URL.Path)
	if !ok {
		return writeError(w, http.StatusNotFound, CodeNotFound, "no such endpoint: use POST /v1/banks/{namespace}/{name}/facts or .../recall")
	}
	op := telemetry.OpSearchMemory
	if endpoint == "facts" {
		op = telemetry.OpUpdateMemory
	}
	memorySpan(r.Context(), op, k)
	start := time.Now()
	code := s.bankServe(w, r, k, endpoint)
	// Labels only for banks served: a caller cannot grow the metrics with
	// names of its own.
	if _, served := s.bank.banks[k]; served {
		s.bank.requests.WithLabelValues(k.Namespace, k.Name, endpoint, strconv.Itoa(code)).Inc()
		s.bank.latency.WithLabelValues(k.Namespace, k.Name, endpoint).Observe(time.Since(start).Seconds())
	}
	return code
}

func (s *Server) bankServe(w http.ResponseWriter, r *http.Request, k Key, endpoint string) int {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "use POST")
	}
	if code := s.authorizeBank(w, r, k, endpoint); code != 0 {
		return code
	}
	bk := s.bank.banks[k]
	if bk == nil {
		return writeError(w, http.StatusNotFound, CodeBankNotFound, fmt.Sprintf("bank %s is not served here", k))
	}
	limit := s.maxBodyBytes
	if endpoint == "facts" {
		limit = s.bank.limits.MaxRetainBytes
	}
	held := &reservation{budget: s.inflight}
	defer held.release()
	body, err := readBody(w, r, limit, held)
	if err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge) && endpoint == "facts":
			return writeError(w, http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("the request body is over %d bytes (--max-retain-bytes); send fewer facts per request", limit))
		case errors.As(err, &tooLarge):
			return writeError(w, http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("the request body is over %d bytes (--max-body-bytes)", limit))
		case errors.Is(err, errBusy):
			w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
			w.Header().Set("Connection", "close")
			return writeError(w, http.StatusServiceUnavailable, CodeBusy, "too many request bytes in flight; retry later")
		case errors.Is(err, os.ErrDeadlineExceeded), r.Context().Err() != nil:
			return writeError(w, http.StatusRequestTimeout, CodeTimeout, "the request body did not arrive in time")
		}
		return writeError(w, http.StatusBadRequest, CodeMalformed, "reading the request body failed")
	}
	if endpoint == "facts" {
		return s.retain(w, r, bk, body)
	}
	return s.recall(w, r, bk, body)
}

// authorizeBank answers 403 (or 500 when the check failed) unless the
// request's user may create the bank's subresource; 0 when it may.
func (s *Server) authorizeBank(w http.ResponseWriter, r *http.Request, k Key, endpoint string) int {
	return s.authorizeBankVerb(w, r, k, "create", endpoint)
}

// RetainResponse is the answer to POST .../facts.
type RetainResponse struct {
	// Stored counts the facts new to the bank.
	Stored int `json:"stored"`
	// Unchanged counts the facts the bank had already, same id and text.
	Unchanged int `json:"unchanged"`
	// IDs are the facts' ids in the order posted, assigned ones included.
	IDs []string `json:"ids"`
}

func (s *Server) retain(w http.ResponseWriter, r *http.Request, bk *Bank, body []byte) int {
	bad := func(msg string) int { return writeError(w, http.StatusBadRequest, CodeInvalidFact, msg) }
	if !utf8.Valid(body) {
		return bad("the body is not valid UTF-8")
	}
	var req struct {
		Facts []json.RawMessage `json:"facts"`
	}
	if err := strictDecode(body, &req); err != nil {
		return writeError(w, http.StatusBadRequest, CodeMalformed, `the body must be one JSON object {"facts": [...]}: `+err.Error())
	}
	if n, most := len(req.Facts), s.bank.limits.MaxFactsPerRequest; n > most {
		return writeError(w, http.StatusRequestEntityTooLarge, CodeTooManyFacts, fmt.Sprintf("facts: %d items, at most %d per request (--max-facts-per-request)", n, most))
	}
	if len(req.Facts) == 0 {
		return bad("facts: at least one fact is required")
	}
	bankID := bk.Namespace + "/" + bk.Name
	facts := make([]consolidation.Fact, len(req.Facts))
	ids := make([]string, len(req.Facts))
	for i, raw := range req.Facts {
		f, err := consolidation.ParseFact(raw)
		if err != nil {
			var fe *consolidation.FieldError
			if errors.As(err, &fe) {
				return bad(fmt.Sprintf("facts[%d].%s: %s", i, fe.Field, fe.Detail))
			}
			return bad(fmt.Sprintf("facts[%d]: %s", i, strings.TrimPrefix(err.Error(), "json: ")))
		}
		if msg := factBounds(f); msg != "" {
			return bad(fmt.Sprintf("facts[%d].%s", i, msg))
		}
		if f.ID == "" {
			f.ID = consolidation.DerivedFactID(bankID, f)
		}
		facts[i], ids[i] = f, f.ID
	}
	stored, unchanged, err := bk.Store.RetainFacts(r.Context(), bankID, facts)
	if err != nil {
		var conflict *consolidation.FactConflictError
		switch {
		case errors.As(err, &conflict):
			return writeError(w, http.StatusConflict, CodeFactConflict, fmt.Sprintf("fact %q is already in bank %s with other text; nothing of the request was stored", conflict.ID, bankID))
		case r.Context().Err() != nil:
			return writeError(w, http.StatusServiceUnavailable, CodeTimeout, "the request took longer than the server's request timeout; nothing of it was stored")
		}
		s.log.Error(err, "Storing facts failed", "bank", bankID)
		return writeError(w, http.StatusServiceUnavailable, CodeStoreUnavailable, "the store did not take the facts; nothing of the request was stored")
	}
	s.bank.facts.WithLabelValues(bk.Namespace, bk.Name, "stored").Add(float64(stored))
	s.bank.facts.WithLabelValues(bk.Namespace, bk.Name, "unchanged").Add(float64(unchanged))
	return writeJSON(w, http.StatusOK, &RetainResponse{Stored: stored, Unchanged: unchanged, IDs: ids})
}

// factBounds checks what facts import leaves to the line limit; it
// returns "field: problem" or "".
func factBounds(f consolidation.Fact) string {
	if len(f.Text) > MaxFactTextBytes {
		return fmt.Sprintf("text: %d bytes, at most %d", len(f.Text), MaxFactTextBytes)
	}
	if len(f.ID) > MaxFactIDBytes {
		return fmt.Sprintf("id: %d bytes, at most %d", len(f.ID), MaxFactIDBytes)
	}
	for _, l := range []struct {
		field  string
		labels []string
	}{{"entities", f.Entities}, {"tags", f.Tags}} {
		if len(l.labels) > MaxFactLabels {
			return fmt.Sprintf("%s: %d items, at most %d", l.field, len(l.labels), MaxFactLabels)
		}
		for j, v := range l.labels {
			if len(v) > MaxLabelBytes {
				return fmt.Sprintf("%s[%d]: %d bytes, at most %d", l.field, j, len(v), MaxLabelBytes)
			}
		}
	}
	return ""
}

// strictDecode decodes one JSON object of known fields. Other JSON (null
// above all, which encoding/json takes as an empty request) is refused, as
// decodeRequest refuses it for /v1/assemble.
func strictDecode(body []byte, v any) error {
	if b := bytes.TrimLeft(body, " \t\r\n"); len(b) > 0 && b[0] != '{' {
		return errors.New("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errors.New(jsonProblem(err))
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}
