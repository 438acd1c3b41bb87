package llm

import (
	"context"
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
	msgs := []consolidation.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}}
	for i := 0; i < 2; i++ {
		comp, err := c.Complete(context.Background(), msgs, consolidation.ResponseSchema(-1))
		if err != nil || comp.PromptTokens != 100 || comp.CompletionTokens != 7 || !strings.Contains(comp.Content, "creates") {
			t.Fatalf("%v %+v", err, comp)
		}
	}
	reqs := srv.Requests()
	if len(reqs) != 3 || reqs[0].ResponseFormat != "json_schema" || reqs[1].ResponseFormat != "json_object" || reqs[2].ResponseFormat != "json_object" {
		t.Fatalf("formats: %+v", reqs)
	}
	if reqs[0].System != "s" || reqs[0].User != "u" || reqs[0].Model != "m" {
		t.Fatalf("request %+v", reqs[0])
	}
}

func TestRetriesThenSucceeds(t *testing.T) {
	srv := llmtest.New(func(n int, _ llmtest.Request) llmtest.Reply {
		if n < 2 {
			return llmtest.Reply{Status: 429, Body: `{"error":{"message":"slow down"}}`}
		}
		return llmtest.Reply{Content: "{}"}
	})
	defer srv.Close()
	c := New(Config{BaseURL: srv.BaseURL(), Model: "m", Timeout: time.Second, MaxRetries: 3})
	if _, err := c.Complete(context.Background(), nil, consolidation.ResponseSchema(-1)); err != nil || len(srv.Requests()) != 3 {
		t.Fatalf("%v after %d requests", err, len(srv.Requests()))
	}
}
