// Package llm is the consolidation engine's LLM port for any
// OpenAI-compatible chat completions API (OpenAI, vLLM, Ollama, LiteLLM).
package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/promptops/promptops/internal/consolidation"
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
	// HTTPClient overrides the HTTP client (tests).
	HTTPClient *http.Client
}

// Client calls chat completions with a JSON-schema response format, and
// falls back to plain JSON mode for servers that reject it.
type Client struct {
	cfg  Config
	chat openai.ChatService
	// jsonMode is set once the server rejected json_schema.
	jsonMode atomic.Bool
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
	opts := []option.RequestOption{
		option.WithBaseURL(strings.TrimRight(cfg.BaseURL, "/") + "/"),
		option.WithMaxRetries(cfg.MaxRetries),
		option.WithRequestTimeout(cfg.Timeout),
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	} else {
		opts = append(opts, option.WithHeaderDel("Authorization"))
	}
	// Environment defaults are not used: OPENAI_BASE_URL and friends must
	// not redirect a bank's traffic behind the operator's back.
	return &Client{cfg: cfg, chat: openai.NewChatService(opts...)}
}

var _ consolidation.LLM = (*Client)(nil)

// Complete asks for an answer matching schema.
func (c *Client) Complete(ctx context.Context, messages []consolidation.Message, schema map[string]any) (consolidation.Completion, error) {
	params := openai.ChatCompletionNewParams{Model: shared.ChatModel(c.cfg.Model), Temperature: openai.Float(0)}
	for _, m := range messages {
		switch m.Role {
		case "system":
			params.Messages = append(params.Messages, openai.SystemMessage(m.Content))
		default:
			params.Messages = append(params.Messages, openai.UserMessage(m.Content))
		}
	}
	if !c.jsonMode.Load() {
		params.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "consolidation", Schema: schema, Strict: openai.Bool(true)},
		}}
		resp, err := c.chat.Completions.New(ctx, params)
		if err == nil {
			return completion(resp)
		}
		if !rejectsSchema(err) {
			return consolidation.Completion{}, describe(err)
		}
		c.jsonMode.Store(true)
	}
	params.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
	resp, err := c.chat.Completions.New(ctx, params)
	if err != nil {
		return consolidation.Completion{}, describe(err)
	}
	return completion(resp)
}

func completion(resp *openai.ChatCompletion) (consolidation.Completion, error) {
	out := consolidation.Completion{PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens}
	if len(resp.Choices) == 0 {
		return out, nil // an empty answer is invalid, not a transport error
	}
	out.Content = resp.Choices[0].Message.Content
	return out, nil
}

// rejectsSchema tells a server that does not support json_schema (a 400 or
// 422 that mentions the response format) from other errors.
func rejectsSchema(err error) bool {
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		return false
	}
	if apiErr.StatusCode != http.StatusBadRequest && apiErr.StatusCode != http.StatusUnprocessableEntity {
		return false
	}
	msg := strings.ToLower(apiErr.Message + " " + apiErr.RawJSON())
	return strings.Contains(msg, "response_format") || strings.Contains(msg, "json_schema") || strings.Contains(msg, "schema")
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
