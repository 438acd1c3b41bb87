package llm

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/strictjson"
	"github.com/promptops/promptops/internal/telemetry"
)

// EmbeddingsConfig of an embeddings client.
type EmbeddingsConfig struct {
	BaseURL string
	Model   string
	// Dimensions is sent only when set (text-embedding-3 and later).
	Dimensions int
	// APIKey is sent as a bearer token; empty sends none.
	APIKey string
	// Timeout bounds one call, retries excluded.
	Timeout time.Duration
	// MaxRetries on 408, 409, 429, 5xx and connection errors, with backoff.
	MaxRetries int
	// BatchSize is the most inputs per request; longer lists are sent in
	// several. 0 is 64.
	BatchSize int
	// HTTPClient overrides the HTTP client (tests).
	HTTPClient *http.Client
}

// maxEmbeddingsBody caps an embeddings response: 64 inputs at 3,072
// dimensions as JSON floats is about 4 MB.
const maxEmbeddingsBody = 64 << 20

// Embeddings is a consolidation.Embedder for any OpenAI-compatible
// /v1/embeddings API. It asks for base64 vectors (little-endian float32s:
// a tenth of the work of reading 1,536 decimal numbers, which a served
// recall pays per query; BenchmarkDecodeAnswer), and reads float arrays
// too, which a server that ignores encoding_format sends. A server that
// refuses base64 is asked for floats, then and from then on.
type Embeddings struct {
	cfg EmbeddingsConfig
	svc openai.EmbeddingService
	// floats is set once the server refused base64, base64 once it took
	// it: from then on a refusal is of an input, never asked again.
	floats, base64 atomic.Bool
}

var _ consolidation.Embedder = (*Embeddings)(nil)

// NewEmbeddings builds a client; like New it reads nothing from the
// environment.
func NewEmbeddings(cfg EmbeddingsConfig) *Embeddings {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.MaxRetries < 0 {
		cfg.MaxRetries = 0
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 64
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = pooledClient()
	}
	opts := requestOptions(cfg.BaseURL, cfg.APIKey, cfg.MaxRetries, cfg.Timeout, maxEmbeddingsBody, cfg.HTTPClient)
	return &Embeddings{cfg: cfg, svc: openai.NewEmbeddingService(opts...)}
}

// Model is the model the vectors come from.
func (e *Embeddings) Model() string { return e.cfg.Model }

// embeddingsAnswer is the response, decoded here (strictjson): openai-go
// reads only float arrays.
type embeddingsAnswer struct {
	Data []struct {
		Index     *int   `json:"index"`
		Embedding vector `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int64 `json:"prompt_tokens"`
		TotalTokens  int64 `json:"total_tokens"`
	} `json:"usage"`
}

// vector is an embedding as a server writes it: a JSON array of numbers,
// or a base64 string of little-endian float32s.
type vector []float32

// UnmarshalJSONFrom reads either form.
func (v *vector) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	if dec.PeekKind() == '"' {
		var s string
		if err := json.UnmarshalDecode(dec, &s); err != nil {
			return err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b)%4 != 0 {
			return errors.New("bad base64 vector")
		}
		fs := make([]float32, len(b)/4)
		for i := range fs {
			fs[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		*v = fs
		return nil
	}
	return json.UnmarshalDecode(dec, (*[]float32)(v))
}

// answerItem is one vector of an embeddings answer and the index the
// server gave it (-1 when it gave none).
type answerItem struct {
	index int
	vec   []float32
}

// decodeAnswer reads an embeddings answer.
func decodeAnswer(body []byte) (items []answerItem, prompt, total int64, err error) {
	var ans embeddingsAnswer
	if err := strictjson.Lenient(body, &ans); err != nil {
		return nil, 0, 0, fmt.Errorf("embeddings: the answer is not JSON of embeddings: %s", strictjson.Describe(err))
	}
	items = make([]answerItem, len(ans.Data))
	for i, d := range ans.Data {
		if len(d.Embedding) == 0 {
			return nil, 0, 0, fmt.Errorf("embeddings: vector %d: empty vector", i)
		}
		items[i] = answerItem{index: -1, vec: d.Embedding}
		if d.Index != nil {
			items[i].index = *d.Index
		}
	}
	return items, ans.Usage.PromptTokens, ans.Usage.TotalTokens, nil
}

// Embed embeds texts, BatchSize a request. A request the server refuses
// with 400 or 422 (an input too long) is sent again input by input, so
// only the inputs refused fail, each with the server's reason.
func (e *Embeddings) Embed(ctx context.Context, texts []string) (consolidation.Embeddings, error) {
	out := consolidation.Embeddings{Vectors: make([][]float32, len(texts)), Errs: make([]error, len(texts))}
	for start := 0; start < len(texts); start += e.cfg.BatchSize {
		end := min(start+e.cfg.BatchSize, len(texts))
		err := e.embed(ctx, texts[start:end], &out, start)
		if isRefusal(err) && end-start > 1 {
			for i := start; i < end; i++ {
				if err := e.embed(ctx, texts[i:i+1], &out, i); isRefusal(err) {
					out.Errs[i] = describeEmbeddings(err)
				} else if err != nil {
					return out, describeEmbeddings(err)
				}
			}
			continue
		}
		if isRefusal(err) {
			out.Errs[start] = describeEmbeddings(err)
			continue
		}
		if err != nil {
			return out, describeEmbeddings(err)
		}
	}
	return out, nil
}

func (e *Embeddings) embed(ctx context.Context, texts []string, out *consolidation.Embeddings, offset int) (err error) {
	ctx, span := telemetry.Tracer().Start(ctx, telemetry.OpEmbeddings+" "+e.cfg.Model, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(telemetry.OperationName.String(telemetry.OpEmbeddings), telemetry.ProviderName.String("openai"), telemetry.RequestModel.String(e.cfg.Model)))
	before, start := out.Tokens, time.Now()
	defer func() {
		errType := ""
		if err != nil {
			errType = errorType(err)
		}
		telemetry.RecordCall(ctx, telemetry.OpEmbeddings, e.cfg.Model, time.Since(start).Seconds(), out.Tokens-before, -1, errType)
		span.SetAttributes(telemetry.InputTokens.Int64(int64(out.Tokens - before)))
		if err != nil {
			span.SetAttributes(telemetry.ErrorType.String(errType))
			span.SetStatus(codes.Error, errType)
		}
		span.End()
	}()
	params := openai.EmbeddingNewParams{
		Model:          openai.EmbeddingModel(e.cfg.Model),
		Input:          openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts},
		EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64,
	}
	if e.floats.Load() {
		params.EncodingFormat = openai.EmbeddingNewParamsEncodingFormatFloat
	}
	if e.cfg.Dimensions > 0 {
		params.Dimensions = openai.Int(int64(e.cfg.Dimensions))
	}
	// The body is decoded here whatever its content type says.
	var body []byte
	_, err = e.svc.New(ctx, params, option.WithResponseBodyInto(&body))
	asked64 := params.EncodingFormat == openai.EmbeddingNewParamsEncodingFormatBase64
	if err == nil && asked64 {
		e.base64.Store(true)
	}
	if isRefusal(err) && asked64 && !e.base64.Load() {
		// Perhaps base64 is what it refused: asked again for floats, and
		// for floats from now on when that is taken.
		params.EncodingFormat = openai.EmbeddingNewParamsEncodingFormatFloat
		body = nil
		if _, err = e.svc.New(ctx, params, option.WithResponseBodyInto(&body)); err == nil {
			e.floats.Store(true)
		}
	}
	if err != nil {
		return err
	}
	items, prompt, total, err := decodeAnswer(body)
	if err != nil {
		return err
	}
	if len(items) != len(texts) {
		return fmt.Errorf("embeddings: the server returned %d vectors for %d inputs", len(items), len(texts))
	}
	for i, it := range items {
		idx := it.index
		if idx < 0 || idx >= len(texts) {
			idx = i
		}
		if e.cfg.Dimensions > 0 && len(it.vec) != e.cfg.Dimensions {
			return fmt.Errorf("embeddings: asked for %d dimensions, the server returned %d", e.cfg.Dimensions, len(it.vec))
		}
		out.Vectors[offset+idx] = it.vec
	}
	t := prompt
	if t == 0 {
		t = total
	}
	out.Tokens += t
	return nil
}

// isRefusal tells a 400 or 422 (this input cannot be embedded) from errors
// that are the server's or the network's.
func isRefusal(err error) bool {
	var apiErr *openai.Error
	return errors.As(err, &apiErr) && (apiErr.StatusCode == http.StatusBadRequest || apiErr.StatusCode == http.StatusUnprocessableEntity)
}

// describeEmbeddings keeps the status and the server's message, never the
// request.
func describeEmbeddings(err error) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return fmt.Errorf("embeddings answered %d: %s", apiErr.StatusCode, strings.TrimSpace(apiErr.Message))
	}
	return err
}

// pooledClient keeps up to 64 idle connections to the embeddings server
// where the default keeps 2: concurrent recalls of a served bank each
// embed their query, and beyond 2 they would dial a new connection each.
func pooledClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: t}
}
