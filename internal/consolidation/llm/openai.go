// Package llm is the consolidation engine's LLM port for any
// OpenAI-compatible chat completions API (OpenAI, vLLM, Ollama, LiteLLM).
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/telemetry"
)

// Config of a client.
type Config struct {
	BaseURL string
	Model   string
	// APIKey is sent as a bearer token; empty sends none.
	APIKey string
	// Timeout bounds one call, retries excluded.
	Timeout time.Duration
	// MaxRetries on 408, 409, 429, 5xx and connection errors, with backoff.
	MaxRetries int
	// MaxResponseBytes caps the response body read from the server; past it
	// the answer is unusable (consolidation.ErrAnswerTooLarge) and the
	// connection is dropped. 0 is DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// HTTPClient overrides the HTTP client (tests).
	HTTPClient *http.Client
}

// DefaultMaxResponseBytes bounds an answer's body: far above what
// max_tokens allows a well-behaved server to send, far below what would
// strain the Job's memory.
const DefaultMaxResponseBytes = 1 << 20

// Client calls chat completions with a JSON-schema response format, and
// falls back to plain JSON mode for servers that reject it.
type Client struct {
	cfg  Config
	chat openai.ChatService
	// jsonMode is set once the server rejected json_schema.
	jsonMode atomic.Bool
	// completionTokens is set once the server rejected max_tokens (newer
	// OpenAI models take only max_completion_tokens).
	completionTokens atomic.Bool
}

// New builds a client. It reads nothing from the environment itself: the
// caller passes the key (from $OPENAI_API_KEY or a file, never a flag).
func New(cfg Config) *Client {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 120 * time.Second
	}
	if cfg.MaxRetries < 0 {
		cfg.MaxRetries = 0
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	limit := cfg.MaxResponseBytes
	opts := requestOptions(cfg.BaseURL, cfg.APIKey, cfg.MaxRetries, cfg.Timeout, limit, cfg.HTTPClient)
	// Environment defaults are not used: OPENAI_BASE_URL and friends must
	// not redirect a bank's traffic behind the operator's back.
	return &Client{cfg: cfg, chat: openai.NewChatService(opts...)}
}

var _ consolidation.LLM = (*Client)(nil)

// Complete asks for an answer matching req.Schema, at most req.MaxTokens
// long.
func (c *Client) Complete(ctx context.Context, req consolidation.Request) (out consolidation.Completion, err error) {
	// A span of the GenAI conventions: "chat <model>", its token usage,
	// and the messages only when OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
	// is true.
	ctx, span := telemetry.Tracer().Start(ctx, telemetry.OpChat+" "+c.cfg.Model, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(telemetry.OperationName.String(telemetry.OpChat), telemetry.ProviderName.String("openai"), telemetry.RequestModel.String(c.cfg.Model)))
	start := time.Now()
	defer func() {
		errType := ""
		if err != nil {
			errType = errorType(err)
		}
		telemetry.RecordCall(ctx, telemetry.OpChat, c.cfg.Model, time.Since(start).Seconds(), out.PromptTokens, out.CompletionTokens, errType)
		span.SetAttributes(telemetry.InputTokens.Int64(out.PromptTokens), telemetry.OutputTokens.Int64(out.CompletionTokens))
		finish := "stop"
		if out.Truncated {
			finish = "length"
		}
		if err != nil {
			span.SetAttributes(telemetry.ErrorType.String(errType))
			span.SetStatus(codes.Error, errType)
		} else {
			span.SetAttributes(telemetry.FinishReasons.StringSlice([]string{finish}))
		}
		if telemetry.CaptureContent() {
			in, _ := json.Marshal(req.Messages)
			span.SetAttributes(telemetry.InputMessages.String(string(in)), telemetry.OutputMessages.String(out.Content))
		}
		span.End()
	}()
	params := openai.ChatCompletionNewParams{Model: shared.ChatModel(c.cfg.Model), Temperature: openai.Float(0)}
	for _, m := range req.Messages {
		switch m.Role {
		case "system":
			params.Messages = append(params.Messages, openai.SystemMessage(m.Content))
		default:
			params.Messages = append(params.Messages, openai.UserMessage(m.Content))
		}
	}
	for {
		resp, err := c.send(ctx, params, req)
		if err == nil {
			return completion(resp)
		}
		// "Unsupported parameter: 'max_tokens' ... Use 'max_completion_tokens' instead."
		if req.MaxTokens > 0 && !c.completionTokens.Load() && rejects(err, "max_completion_tokens") {
			c.completionTokens.Store(true)
			continue
		}
		return consolidation.Completion{}, describe(err)
	}
}

// errorType is an error's class for error.type: the HTTP status of an
// API error, else the kind of failure; never its message, which may quote
// a prompt.
func errorType(err error) string {
	var apiErr *openai.Error
	switch {
	case errors.As(err, &apiErr):
		return strconv.Itoa(apiErr.StatusCode)
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, consolidation.ErrAnswerTooLarge):
		return "answer_too_large"
	}
	return "_OTHER"
}

// send makes the call with json_schema, falling back to plain JSON mode for
// a server that rejects it.
func (c *Client) send(ctx context.Context, params openai.ChatCompletionNewParams, req consolidation.Request) (*openai.ChatCompletion, error) {
	if req.MaxTokens > 0 {
		if c.completionTokens.Load() {
			params.MaxCompletionTokens = openai.Int(int64(req.MaxTokens))
		} else {
			params.MaxTokens = openai.Int(int64(req.MaxTokens))
		}
	}
	if !c.jsonMode.Load() {
		params.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "consolidation", Schema: req.Schema, Strict: openai.Bool(true)},
		}}
		resp, err := c.chat.Completions.New(ctx, params)
		if err == nil || !rejectsSchema(err) {
			return resp, err
		}
		c.jsonMode.Store(true)
	}
	params.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
	return c.chat.Completions.New(ctx, params)
}

// cappedBody fails a read past its limit with ErrAnswerTooLarge, so no
// more than the limit is ever held in memory.
type cappedBody struct {
	rc          io.ReadCloser
	left, limit int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the limit from a longer one.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n == 0 {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("%w: the answer is longer than %d bytes", consolidation.ErrAnswerTooLarge, b.limit)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }

func completion(resp *openai.ChatCompletion) (consolidation.Completion, error) {
	out := consolidation.Completion{PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens}
	if len(resp.Choices) == 0 {
		return out, nil // an empty answer is invalid, not a transport error
	}
	out.Content = resp.Choices[0].Message.Content
	out.Truncated = resp.Choices[0].FinishReason == "length"
	return out, nil
}

// rejectsSchema tells a server that does not support json_schema (a 400 or
// 422 that mentions the response format) from other errors.
func rejectsSchema(err error) bool {
	return rejects(err, "response_format") || rejects(err, "json_schema") || rejects(err, "schema")
}

// rejects tells whether err is a 400 or 422 whose message names what.
func rejects(err error, what string) bool {
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		return false
	}
	if apiErr.StatusCode != http.StatusBadRequest && apiErr.StatusCode != http.StatusUnprocessableEntity {
		return false
	}
	return strings.Contains(strings.ToLower(apiErr.Message+" "+apiErr.RawJSON()), what)
}

// describe keeps the status and the server's message, and never the
// request (which could carry the key).
func describe(err error) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return fmt.Errorf("chat completions answered %d: %s", apiErr.StatusCode, strings.TrimSpace(apiErr.Message))
	}
	return err
}

// requestOptions are the openai-go options of both clients: the base URL,
// retries and timeout, the answer body capped at limit bytes (read after
// the client's retry loop: a long answer fails its read, it is not sent
// again), and the key or no Authorization header at all.
func requestOptions(baseURL, apiKey string, maxRetries int, timeout time.Duration, limit int64, hc *http.Client) []option.RequestOption {
	opts := []option.RequestOption{
		option.WithBaseURL(strings.TrimRight(baseURL, "/") + "/"),
		option.WithMaxRetries(maxRetries),
		option.WithRequestTimeout(timeout),
		option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			// The call's span goes on in the server's trace (traceparent).
			otel.GetTextMapPropagator().Inject(req.Context(), propagation.HeaderCarrier(req.Header))
			resp, err := next(req)
			if err == nil && resp != nil && resp.Body != nil {
				resp.Body = &cappedBody{rc: resp.Body, left: limit, limit: limit}
			}
			return resp, err
		}),
	}
	if hc != nil {
		opts = append(opts, option.WithHTTPClient(hc))
	}
	if apiKey != "" {
		return append(opts, option.WithAPIKey(apiKey))
	}
	return append(opts, option.WithHeaderDel("Authorization"))
}
