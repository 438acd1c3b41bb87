package llm

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/llmtest"
)

func TestFallsBackToJSONModeWhenSchemaRejected(t *testing.T) {
	srv := llmtest.New(func(_ int, req llmtest.Request) llmtest.Reply {
		if req.ResponseFormat == "json_schema" {
			return llmtest.Reply{Status: 400, Body: `{"error":{"message":"response_format json_schema is not supported by this model","type":"invalid_request_error"}}`}
		}
		return llmtest.Reply{Content: `{"creates":[],"updates":[],"deletes":[]}`, PromptTokens: 100, CompletionTokens: 7}
	})
	defer srv.Close()
	c := New(Config{BaseURL: srv.BaseURL(), Model: "m", Timeout: time.Second})
	msgs := []consolidation.ChatMessage{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}}
	for i := 0; i < 2; i++ {
		comp, err := c.Complete(context.Background(), consolidation.Request{Messages: msgs, Schema: consolidation.ResponseSchema(-1), MaxTokens: 2048})
		if err != nil || comp.PromptTokens != 100 || comp.CompletionTokens != 7 || !strings.Contains(comp.Content, "creates") {
			t.Fatalf("%v %+v", err, comp)
		}
	}
	reqs := srv.Requests()
	if len(reqs) != 3 || reqs[0].ResponseFormat != "json_schema" || reqs[1].ResponseFormat != "json_object" || reqs[2].ResponseFormat != "json_object" {
		t.Fatalf("formats: %+v", reqs)
	}
	if reqs[0].System != "s" || reqs[0].User != "u" || reqs[0].Model != "m" || reqs[0].MaxTokens != 2048 || reqs[0].MaxTokensField != "max_tokens" {
		t.Fatalf("request %+v", reqs[0])
	}
}

// Two 429s and the answer: the client retries (after its backoff, which
// the timeout leaves room for on a loaded machine) and succeeds.
func TestRetriesThenSucceeds(t *testing.T) {
	srv := llmtest.New(func(n int, _ llmtest.Request) llmtest.Reply {
		if n < 2 {
			return llmtest.Reply{Status: 429, Body: `{"error":{"message":"slow down"}}`}
		}
		return llmtest.Reply{Content: "{}"}
	})
	defer srv.Close()
	c := New(Config{BaseURL: srv.BaseURL(), Model: "m", Timeout: 10 * time.Second, MaxRetries: 3})
	if _, err := c.Complete(context.Background(), consolidation.Request{Schema: consolidation.ResponseSchema(-1)}); err != nil || len(srv.Requests()) != 3 {
		t.Fatalf("%v after %d requests", err, len(srv.Requests()))
	}
}

// TestMaxCompletionTokensFallback: a model that takes only
// max_completion_tokens is asked again with it, and so afterwards.
func TestMaxCompletionTokensFallback(t *testing.T) {
	srv := llmtest.New(func(_ int, req llmtest.Request) llmtest.Reply {
		if req.MaxTokensField == "max_tokens" {
			return llmtest.Reply{Status: 400, Body: `{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.","type":"invalid_request_error","param":"max_tokens"}}`}
		}
		return llmtest.Reply{Content: "{}"}
	})
	defer srv.Close()
	c := New(Config{BaseURL: srv.BaseURL(), Model: "m", Timeout: time.Second})
	for i := 0; i < 2; i++ {
		if _, err := c.Complete(context.Background(), consolidation.Request{Schema: consolidation.ResponseSchema(-1), MaxTokens: 900}); err != nil {
			t.Fatal(err)
		}
	}
	reqs := srv.Requests()
	if len(reqs) != 3 || reqs[1].MaxTokensField != "max_completion_tokens" || reqs[1].MaxTokens != 900 || reqs[2].MaxTokensField != "max_completion_tokens" {
		t.Fatalf("%+v", reqs)
	}
}

// TestHugeAnswerIsCappedInMemory: a 300 MB answer is cut at the cap: the
// client reads about the cap, reports ErrAnswerTooLarge, and its
// allocations stay a small multiple of the cap.
func TestHugeAnswerIsCappedInMemory(t *testing.T) {
	srv := llmtest.New(func(int, llmtest.Request) llmtest.Reply { return llmtest.Reply{HugeContent: 300 << 20} })
	defer srv.Close()
	c := New(Config{BaseURL: srv.BaseURL(), Model: "m", Timeout: 30 * time.Second})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := c.Complete(context.Background(), consolidation.Request{Schema: consolidation.ResponseSchema(-1), MaxTokens: 100})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, consolidation.ErrAnswerTooLarge) {
		t.Fatalf("want ErrAnswerTooLarge, got %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 32*DefaultMaxResponseBytes {
		t.Fatalf("the client allocated %d bytes for a capped answer (cap %d)", got, DefaultMaxResponseBytes)
	}
	if len(srv.Requests()) != 1 {
		t.Fatalf("a too-large answer must not be fetched again by the client: %d requests", len(srv.Requests()))
	}
}
