package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/redact"
	"github.com/promptops/promptops/internal/strictjson"
	"github.com/promptops/promptops/internal/telemetry"
)

// The bank API: POST /v1/banks/{namespace}/{name}/facts (retain) and
// POST /v1/banks/{namespace}/{name}/recall, for the banks given with
// Options.Banks (promptops serve --bank).

// Limits of the bank API.
const (
	// DefaultMaxFactsPerRequest bounds the facts of one retain.
	DefaultMaxFactsPerRequest = 1000
	// DefaultMaxMessagesPerRequest bounds the messages of one POST
	// .../messages.
	DefaultMaxMessagesPerRequest = 1000
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

// memoryBanks is the resource a bank API caller needs create on, with the
// subresource facts (retain) or recall.
var memoryBanks = struct{ Group, Version, Resource string }{"promptops.io", "v1", "memorybanks"}

// BankStore is what retain writes to.
type BankStore interface {
	// RetainFacts stores facts (each with an id) in one transaction; a
	// *consolidation.FactConflictError stores nothing.
	RetainFacts(ctx context.Context, bank consolidation.BankID, facts []consolidation.Fact) (stored, unchanged int, err error)
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
	// Redactor redacts each fact retained before it is stored (or, under
	// Reject, refuses the request); nil stores facts as posted.
	Redactor *redact.Redactor

	once   sync.Once
	scoped *scopeRecallers
}

// id is the bank's id in its store.
func (b *Bank) id() consolidation.BankID {
	return consolidation.BankID(b.Namespace + "/" + b.Name)
}

// BankLimits bound the bank API's requests.
type BankLimits struct {
	// MaxFactsPerRequest: DefaultMaxFactsPerRequest when 0.
	MaxFactsPerRequest int
	// MaxRetainBytes: DefaultMaxRetainBytes when 0; it bounds a POST
	// .../messages too.
	MaxRetainBytes int64
	// MaxMessagesPerRequest: DefaultMaxMessagesPerRequest when 0.
	MaxMessagesPerRequest int
}

type bankAPI struct {
	banks map[Key]*Bank
	// served are the same banks as the bank API answers them.
	served   map[Key]*servedBank
	limits   BankLimits
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	facts    *prometheus.CounterVec
	messages *prometheus.CounterVec
	erasures *prometheus.CounterVec
	// redactions counts what retain redacted, by bank and kind (a
	// bounded set: the rules' ids and the personal kinds).
	redactions *prometheus.CounterVec
}

func (s *Server) initBanks(banks []*Bank, limits BankLimits) {
	if limits.MaxFactsPerRequest <= 0 {
		limits.MaxFactsPerRequest = DefaultMaxFactsPerRequest
	}
	if limits.MaxRetainBytes <= 0 {
		limits.MaxRetainBytes = DefaultMaxRetainBytes
	}
	if limits.MaxMessagesPerRequest <= 0 {
		limits.MaxMessagesPerRequest = DefaultMaxMessagesPerRequest
	}
	b := &bankAPI{banks: map[Key]*Bank{}, served: map[Key]*servedBank{}, limits: limits,
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
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "promptops_serve_bank_messages_total", Help: "Messages posted to a bank, by result: stored, or unchanged (the bank had the id with the same conversation, role, time and content).",
		}, []string{"namespace", "name", "result"}),
		erasures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "promptops_serve_bank_erasures_total", Help: "Erasures done through the bank API, by bank and kind (scope, fact).",
		}, []string{"namespace", "name", "kind"}),
		redactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "promptops_serve_bank_redactions_total", Help: "Secrets and personal data redacted from retained facts and messages, by bank and kind (a rule's id or a personal data kind).",
		}, []string{"namespace", "name", "kind"}),
	}
	for _, bk := range banks {
		b.banks[Key{bk.Namespace, bk.Name}] = bk
		sb := &servedBank{Bank: bk, s: s}
		// Erasure and export are optional: resolved here, once.
		sb.scopeStore, _ = bk.Store.(ScopeStore)
		sb.messageStore, _ = bk.Store.(MessageStore)
		b.served[Key{bk.Namespace, bk.Name}] = sb
	}
	s.metrics.registry.MustRegister(b.requests, b.latency, b.facts, b.messages, b.erasures, b.redactions)
	s.bank = b
}

// memorySpan names the request's span a memory operation of the GenAI
// conventions on the bank, its store: "search_memory team-a/support".
func memorySpan(ctx context.Context, op string, k Key) {
	span := trace.SpanFromContext(ctx)
	span.SetName(op + " " + k.String())
	span.SetAttributes(telemetry.OperationName.String(op), telemetry.MemoryStoreID.String(k.String()))
}

// servedBank is a Bank as the bank API answers it: its handlers are its
// methods, and its store's optional capabilities are resolved once, in
// New.
type servedBank struct {
	*Bank
	s *Server
	// scopeStore is Store as a ScopeStore; nil when the store neither
	// erases nor exports (501).
	scopeStore ScopeStore
	// messageStore is Store as a MessageStore; nil when the store keeps
	// no messages (501).
	messageStore MessageStore
}

// bankRoute is one endpoint of the bank API.
type bankRoute struct {
	pattern string
	// endpoint labels the bank's metrics; op is the GenAI memory
	// operation of its span.
	endpoint, op string
	// verb and subresource are what the caller needs on the MemoryBank.
	verb, subresource string
	// serve answers the endpoint for one bank.
	serve func(bk *servedBank, w http.ResponseWriter, r *http.Request) error
}

var bankRoutes = []bankRoute{
	{pattern: "POST /v1/banks/{namespace}/{name}/facts", endpoint: "facts", op: telemetry.OpUpdateMemory, verb: "create", subresource: "facts",
		serve: (*servedBank).retain},
	{pattern: "POST /v1/banks/{namespace}/{name}/messages", endpoint: "messages", op: telemetry.OpUpdateMemory, verb: "create", subresource: "messages",
		serve: (*servedBank).retainMessages},
	{pattern: "POST /v1/banks/{namespace}/{name}/recall", endpoint: "recall", op: telemetry.OpSearchMemory, verb: "create", subresource: "recall",
		serve: (*servedBank).recall},
	{pattern: "DELETE /v1/banks/{namespace}/{name}/scopes/{scope}", endpoint: "erase_scope", op: telemetry.OpDeleteMemory, verb: "delete", subresource: "scopes",
		serve: (*servedBank).eraseScope},
	{pattern: "GET /v1/banks/{namespace}/{name}/scopes/{scope}/export", endpoint: "export", op: "export_memory", verb: "get", subresource: "scopes",
		serve: (*servedBank).exportScope},
	{pattern: "DELETE /v1/banks/{namespace}/{name}/facts/{id}", endpoint: "delete_fact", op: telemetry.OpDeleteMemory, verb: "delete", subresource: "facts",
		serve: (*servedBank).deleteFact},
}

// bankRoute serves one endpoint of the bank API: the span names the
// operation and the bank; the caller must have the route's verb on the
// bank's subresource (403 before anything else, so that a caller learns
// nothing of banks it may not use); a bank not served here is 404; the
// bank's requests are counted and timed by bank and endpoint (promhttp).
func (s *Server) bankRoute(b bankRoute) http.Handler {
	// Labels only for banks served: a caller cannot grow the metrics with
	// names of its own.
	served := map[Key]http.Handler{}
	for k, bk := range s.bank.served {
		labels := prometheus.Labels{"namespace": k.Namespace, "name": k.Name, "endpoint": b.endpoint}
		h := s.handle(func(w http.ResponseWriter, r *http.Request) error { return b.serve(bk, w, r) })
		served[k] = promhttp.InstrumentHandlerDuration(s.bank.latency.MustCurryWith(labels),
			promhttp.InstrumentHandlerCounter(s.bank.requests.MustCurryWith(labels), h))
	}
	return s.handle(func(w http.ResponseWriter, r *http.Request) error {
		k := Key{r.PathValue("namespace"), r.PathValue("name")}
		memorySpan(r.Context(), b.op, k)
		if err := s.authorize(r, bankAttributes(k, b.verb, b.subresource)); err != nil {
			return err
		}
		h := served[k]
		if h == nil {
			return problem(http.StatusNotFound, CodeBankNotFound, fmt.Sprintf("bank %s is not served here", k))
		}
		h.ServeHTTP(w, r)
		return nil
	})
}

// RetainResponse is the answer to POST .../facts.
type RetainResponse struct {
	// Stored counts the facts new to the bank.
	Stored int `json:"stored"`
	// Unchanged counts the facts the bank had already, same id and text.
	Unchanged int `json:"unchanged"`
	// IDs are the facts' ids in the order posted, assigned ones included.
	IDs []string `json:"ids"`
	// Redacted counts the secrets and personal data replaced by
	// [REDACTED:<kind>] in the facts, by kind; absent when none were.
	Redacted redact.Counts `json:"redacted,omitempty"`
}

// retain answers POST .../facts: the facts stored in one transaction.
// countRetained adds what a retain of facts or messages stored and found
// unchanged to its counter (promptops_serve_bank_facts_total or
// _messages_total) and what it redacted to the bank's redactions, and
// returns redacted, nil when nothing was (the answer leaves it out).
func (bk *servedBank) countRetained(items *prometheus.CounterVec, stored, unchanged int, redacted redact.Counts) redact.Counts {
	items.WithLabelValues(bk.Namespace, bk.Name, "stored").Add(float64(stored))
	items.WithLabelValues(bk.Namespace, bk.Name, "unchanged").Add(float64(unchanged))
	for kind, n := range redacted {
		bk.s.bank.redactions.WithLabelValues(bk.Namespace, bk.Name, kind).Add(float64(n))
	}
	if len(redacted) == 0 {
		return nil
	}
	return redacted
}

func (bk *servedBank) retain(w http.ResponseWriter, r *http.Request) error {
	s := bk.s
	body, release, err := s.body(w, r, s.bank.limits.MaxRetainBytes, "--max-retain-bytes", "; send fewer facts per request")
	defer release()
	if err != nil {
		return err
	}
	bad := func(msg string) error { return problem(http.StatusBadRequest, CodeInvalidFact, msg) }
	if !utf8.Valid(body) {
		return bad("the body is not valid UTF-8")
	}
	var req struct {
		Facts []jsontext.Value `json:"facts"`
	}
	if err := strictjson.Unmarshal(body, &req); err != nil {
		return problem(http.StatusBadRequest, CodeMalformed, `the body must be one JSON object {"facts": [...]}: `+jsonProblem(err))
	}
	if n, most := len(req.Facts), s.bank.limits.MaxFactsPerRequest; n > most {
		return problem(http.StatusRequestEntityTooLarge, CodeTooManyFacts, fmt.Sprintf("facts: %d items, at most %d per request (--max-facts-per-request)", n, most))
	}
	if len(req.Facts) == 0 {
		return bad("facts: at least one fact is required")
	}
	bankID := bk.id()
	facts := make([]consolidation.Fact, len(req.Facts))
	redacted := redact.Counts{}
	ids := make([]string, len(req.Facts))
	for i, raw := range req.Facts {
		f, err := consolidation.ParseFact(raw)
		if err != nil {
			var fe *consolidation.FieldError
			if errors.As(err, &fe) {
				return bad(fmt.Sprintf("facts[%d].%s: %s", i, fe.Field, fe.Detail))
			}
			return bad(fmt.Sprintf("facts[%d]: %v", i, err))
		}
		if msg := factBounds(f); msg != "" {
			return bad(fmt.Sprintf("facts[%d].%s", i, msg))
		}
		// Redacted before its id is derived: posting the same text again
		// finds the same fact.
		if err := consolidation.RedactFact(bk.Redactor, &f, redacted); err != nil {
			var se *consolidation.FactSecretError
			if !errors.As(err, &se) {
				return err
			}
			return problem(http.StatusUnprocessableEntity, CodeSecretInFact, fmt.Sprintf(
				"facts[%d].%s%s holds a secret (%s) and bank %s refuses secrets (secrets: Reject); nothing of the request was stored",
				i, se.Field, idNote(f.ID), strings.Join(se.Kinds, ", "), bankID))
		}
		if f.ID == "" {
			f.ID = consolidation.DerivedFactID(bankID, f)
		}
		facts[i], ids[i] = f, f.ID
	}
	stored, unchanged, err := bk.Store.RetainFacts(r.Context(), bankID, facts)
	if err != nil {
		var conflict *consolidation.FactConflictError
		if errors.As(err, &conflict) {
			return problem(http.StatusConflict, CodeFactConflict, fmt.Sprintf("fact %q is already in bank %s with other text or another source; nothing of the request was stored", conflict.ID, bankID))
		}
		se := storeFailed(err, bk.Bank, "Storing facts failed", "the store did not take the facts; nothing of the request was stored")
		se.note = "; nothing of it was stored"
		return se
	}
	redacted = bk.countRetained(s.bank.facts, stored, unchanged, redacted)
	writeJSON(w, http.StatusOK, &RetainResponse{Stored: stored, Unchanged: unchanged, IDs: ids, Redacted: redacted})
	return nil
}

// idNote is " of id X" for a fact posted with an id, "" for one without
// (whose id would be derived from the text).
func idNote(id string) string {
	if id == "" {
		return ""
	}
	return fmt.Sprintf(" of id %q", id)
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
