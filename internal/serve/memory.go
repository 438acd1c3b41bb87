package serve

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/promptops/promptops/internal/telemetry"
	"github.com/promptops/promptops/plan"
)

// MemoryRecaller fills memory sections: it recalls a bank's items for a query,
// best first. HTTPRecaller calls a served bank; a bank served by this same
// process can answer in-process instead.
type MemoryRecaller interface {
	Recall(ctx context.Context, r plan.MemoryRequest) ([]plan.MemoryItem, error)
}

// DefaultServiceAccountTokenFile is the pod's projected ServiceAccount
// token, the default bearer token of recalls when it exists.
const DefaultServiceAccountTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// DefaultMaxRecallBytes bounds the body of a recall answer that is read;
// a longer answer is an error (code RecallTooLarge), not buffered.
const DefaultMaxRecallBytes = 4 << 20

// maxErrorBytes bounds the error body of a recall that is read.
const maxErrorBytes = 64 << 10

// HTTPRecaller calls POST {endpoint}/v1/banks/{namespace}/{name}/recall
// of a served bank with a bearer token read from a file (re-read when the
// file changes, as projected tokens are rotated), verifying an https
// endpoint's certificate against the system's roots or the CAs of CAFile.
type HTTPRecaller struct {
	// Client makes the calls; its redirects are refused, so the token goes
	// only to the endpoint.
	Client *http.Client
	// TokenFile holds the bearer token; empty sends none.
	TokenFile string
	// CAFile holds the PEM certificates of the CAs an https endpoint's
	// certificate must chain to, instead of the system's (re-read when the
	// file changes, as a mounted ConfigMap or Secret is updated).
	CAFile string
	// MaxBytes bounds the answer read; DefaultMaxRecallBytes when 0.
	MaxBytes int64

	mu    sync.Mutex
	token string
	stamp tokenStamp

	caMu     sync.Mutex
	caStamp  tokenStamp
	caClient *http.Client
}

type tokenStamp struct {
	mod  time.Time
	size int64
}

// NewHTTPRecaller returns a recaller that sends the token in tokenFile.
func NewHTTPRecaller(tokenFile string) *HTTPRecaller {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	return &HTTPRecaller{TokenFile: tokenFile, Client: &http.Client{
		Transport:     t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// bearer is the token, re-read when the file's time or size changed.
func (h *HTTPRecaller) bearer() (string, error) {
	if h.TokenFile == "" {
		return "", nil
	}
	fi, err := os.Stat(h.TokenFile)
	if err != nil {
		return "", fmt.Errorf("reading the memory token: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st := tokenStamp{fi.ModTime(), fi.Size()}
	if st == h.stamp && h.token != "" {
		return h.token, nil
	}
	data, err := os.ReadFile(h.TokenFile)
	if err != nil {
		return "", fmt.Errorf("reading the memory token: %w", err)
	}
	h.token, h.stamp = strings.TrimSpace(string(data)), st
	return h.token, nil
}

// client is Client, or with CAFile a copy of it that trusts the file's
// CAs, made again when the file's time or size changed.
func (h *HTTPRecaller) client() (*http.Client, error) {
	if h.CAFile == "" {
		return h.Client, nil
	}
	fi, err := os.Stat(h.CAFile)
	if err != nil {
		return nil, fmt.Errorf("reading the memory CA file: %w", err)
	}
	h.caMu.Lock()
	defer h.caMu.Unlock()
	st := tokenStamp{fi.ModTime(), fi.Size()}
	if st == h.caStamp && h.caClient != nil {
		return h.caClient, nil
	}
	data, err := os.ReadFile(h.CAFile)
	if err != nil {
		return nil, fmt.Errorf("reading the memory CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("the memory CA file %s holds no PEM certificate", h.CAFile)
	}
	base, _ := h.Client.Transport.(*http.Transport)
	if base == nil {
		base = http.DefaultTransport.(*http.Transport)
	}
	t := base.Clone()
	if t.TLSClientConfig == nil {
		t.TLSClientConfig = &tls.Config{}
	}
	t.TLSClientConfig.RootCAs = pool
	t.TLSClientConfig.MinVersion = tls.VersionTLS12
	if h.caClient != nil {
		h.caClient.CloseIdleConnections()
	}
	c := *h.Client
	c.Transport = t
	h.caClient, h.caStamp = &c, st
	return h.caClient, nil
}

// Recall asks the bank's endpoint. Errors are *plan.RecallError with a
// code and a message that quote neither the query nor any item.
func (h *HTTPRecaller) Recall(ctx context.Context, r plan.MemoryRequest) ([]plan.MemoryItem, error) {
	if r.Endpoint == "" {
		return nil, &plan.RecallError{Code: CodeNotServed, Message: fmt.Sprintf("bank %s has no serving endpoint", r.Bank)}
	}
	u, err := url.Parse(strings.TrimRight(r.Endpoint, "/") + "/v1/banks/" + url.PathEscape(r.Bank.Namespace) + "/" + url.PathEscape(r.Bank.Name) + "/recall")
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, &plan.RecallError{Code: CodeNotServed, Message: fmt.Sprintf("bank %s has an endpoint that is not an http(s) URL", r.Bank)}
	}
	body, _ := json.Marshal(recallRequestOf(r))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
	token, err := h.bearer()
	if err != nil {
		return nil, &plan.RecallError{Code: CodeTokenUnreadable, Message: err.Error()}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc, err := h.client()
	if err != nil {
		return nil, &plan.RecallError{Code: CodeCAUnreadable, Message: err.Error()}
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &plan.RecallError{Code: plan.MemoryRecallFailed, Message: fmt.Sprintf("calling bank %s failed", r.Bank)}
	}
	// Closing without draining drops the connection when an answer is
	// left unread: cheaper than reading a hostile one to its end.
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var eb errorBody
		_ = json.UnmarshalRead(io.LimitReader(resp.Body, maxErrorBytes), &eb)
		code := eb.Error.Code
		if code == "" || len(code) > 64 {
			code = fmt.Sprintf("%s%d", CodeRecallHTTP, resp.StatusCode)
		}
		return nil, &plan.RecallError{Code: plan.MemoryCode(code), Message: fmt.Sprintf("bank %s answered %d", r.Bank, resp.StatusCode)}
	}
	limit := h.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxRecallBytes
	}
	// One byte past the limit is read to tell an answer over it (one
	// whose JSON ends at that byte decodes, so N is checked either way).
	lr := &io.LimitedReader{R: resp.Body, N: limit + 1}
	var out RecallResponse
	err = json.UnmarshalRead(lr, &out)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case lr.N <= 0:
		return nil, &plan.RecallError{Code: CodeRecallTooLarge, Message: fmt.Sprintf("bank %s answered more than %d bytes", r.Bank, limit)}
	case err != nil:
		return nil, &plan.RecallError{Code: CodeRecallMalformed, Message: fmt.Sprintf("bank %s answered no recall JSON", r.Bank)}
	}
	return out.Items, nil
}

// MemorySummary is one memory section's share of an assemble answer.
type MemorySummary struct {
	Section string       `json:"section"`
	Bank    plan.BankRef `json:"bank"`
	// Items in the prompt, best first.
	Items []plan.MemoryItem `json:"items"`
	// Recalled is how many items the bank answered, Omitted how many of
	// them are not in the prompt.
	Recalled int  `json:"recalled"`
	Omitted  int  `json:"omitted"`
	TimedOut bool `json:"timedOut"`
	// Error is the code of why the section is empty, when it is for want
	// of an answer.
	Error string `json:"error,omitempty"`
}

// recallFunc counts each recall by bank and result.
func (s *Server) recallFunc() plan.RecallFunc {
	if s.recaller == nil {
		return nil
	}
	return func(ctx context.Context, r plan.MemoryRequest) ([]plan.MemoryItem, error) {
		// A memory section's recall, in the assembly's trace; the bank's
		// own span follows it (traceparent). No query, no scope.
		store := r.Bank.Namespace + "/" + r.Bank.Name
		ctx, span := telemetry.Tracer().Start(ctx, telemetry.OpSearchMemory+" "+store, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(telemetry.OperationName.String(telemetry.OpSearchMemory), telemetry.MemoryStoreID.String(store)))
		defer span.End()
		items, err := s.recaller.Recall(ctx, r)
		span.SetAttributes(telemetry.MemoryItems.Int(len(items)))
		result := "ok"
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			result = "timeout"
		case err != nil:
			result = "error"
		}
		if err != nil {
			code := result
			var re *plan.RecallError
			if errors.As(err, &re) {
				code = string(re.Code)
			}
			span.SetAttributes(telemetry.ErrorType.String(code))
			span.SetStatus(codes.Error, code)
		}
		s.metrics.recalls.WithLabelValues(r.Bank.Namespace, r.Bank.Name, result).Inc()
		return items, err
	}
}

// memorySummaries turns an assembly's memory results into the answer's,
// and counts the timeouts a recall that ignored its deadline did not.
func (s *Server) memorySummaries(a *plan.Assembly) []MemorySummary {
	if len(a.Memory) == 0 {
		return nil
	}
	out := make([]MemorySummary, len(a.Memory))
	for i, m := range a.Memory {
		items := m.Items
		if items == nil {
			items = []plan.MemoryItem{}
		}
		out[i] = MemorySummary{Section: m.Section, Bank: m.Bank, Items: items, Recalled: m.Recalled, Omitted: m.Omitted, TimedOut: m.TimedOut, Error: string(m.Code)}
		if m.TimedOut {
			s.metrics.memoryTimeouts.WithLabelValues(m.Bank.Namespace, m.Bank.Name).Inc()
		}
	}
	return out
}
