package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/memscope"
	"github.com/promptops/promptops/plan"
)

// enforcedBounds are the bounds serve enforces on a request, each where
// openapi.json states it: a bound the server enforces and the document
// does not state (or states at another value) fails TestOpenAPIStatesEveryBound,
// so generated clients and the validator the tests run know it. A bound
// set by a flag (--max-facts-per-request, --max-retain-bytes) is no
// constant of the document: its description names the flag.
var enforcedBounds = []struct {
	pointer string
	value   int
}{
	// POST .../recall (recallQuery).
	{"/components/schemas/RecallRequest/properties/query/minLength", 1},
	{"/components/schemas/RecallRequest/properties/query/maxLength", MaxQueryBytes},
	{"/components/schemas/RecallRequest/properties/maxTokens/minimum", 1},
	{"/components/schemas/RecallRequest/properties/maxTokens/maximum", MaxRecallTokens},
	{"/components/schemas/RecallRequest/properties/maxItems/minimum", 1},
	{"/components/schemas/RecallRequest/properties/maxItems/maximum", MaxRecallItems},
	{"/components/schemas/RecallRequest/properties/minScorePerMille/minimum", 0},
	{"/components/schemas/RecallRequest/properties/minScorePerMille/maximum", plan.MaxMinScorePerMille},
	{"/components/schemas/RecallRequest/properties/tags/maxItems", MaxRecallTags},
	{"/components/schemas/RecallRequest/properties/tags/items/minLength", 1},
	{"/components/schemas/RecallRequest/properties/tags/items/maxLength", MaxLabelBytes},
	{"/components/schemas/RecallRequest/properties/scope/maxLength", memscope.MaxBytes},
	// POST .../facts (factBounds, consolidation.ParseFact).
	{"/components/schemas/Fact/properties/id/maxLength", MaxFactIDBytes},
	{"/components/schemas/Fact/properties/text/minLength", 1},
	{"/components/schemas/Fact/properties/text/maxLength", MaxFactTextBytes},
	{"/components/schemas/Fact/properties/entities/maxItems", MaxFactLabels},
	{"/components/schemas/Fact/properties/entities/items/maxLength", MaxLabelBytes},
	{"/components/schemas/Fact/properties/tags/maxItems", MaxFactLabels},
	{"/components/schemas/Fact/properties/tags/items/maxLength", MaxLabelBytes},
	{"/components/schemas/Scope/maxLength", memscope.MaxBytes},
	{"/components/schemas/RetainRequest/properties/facts/minItems", 1},
	// POST .../messages (consolidation.ParseMessages).
	{"/components/schemas/MessagesRequest/properties/conversation/maxLength", consolidation.MaxConversationBytes},
	{"/components/schemas/MessagesRequest/properties/messages/minItems", 1},
	{"/components/schemas/Message/properties/id/maxLength", consolidation.MaxMessageIDBytes},
	{"/components/schemas/Message/properties/content/maxLength", consolidation.MaxMessageContentBytes},
	// POST /v1/assemble.
	{"/components/schemas/AssembleRequest/properties/assignmentKey/minLength", 1},
	{"/components/schemas/AssembleRequest/properties/assignmentKey/maxLength", MaxAssignmentKeyBytes},
	{"/components/schemas/AssembleRequest/properties/scope/maxLength", memscope.MaxBytes},
	// DELETE .../facts/{id}.
	{"/paths/~1v1~1banks~1{namespace}~1{name}~1facts~1{id}/parameters/2/schema/maxLength", MaxFactIDBytes},
}

func TestOpenAPIStatesEveryBound(t *testing.T) {
	var doc any
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	for _, b := range enforcedBounds {
		got, err := jsonPointer(doc, b.pointer)
		if err != nil {
			t.Errorf("openapi.json lacks the bound %d the server enforces: %v", b.value, err)
			continue
		}
		if n, ok := got.(float64); !ok || n != float64(b.value) {
			t.Errorf("openapi.json %s is %v, the server enforces %d", b.pointer, got, b.value)
		}
	}
	facts := doc.(map[string]any)["components"].(map[string]any)["schemas"].(map[string]any)["RetainRequest"].(map[string]any)["properties"].(map[string]any)["facts"].(map[string]any)
	msgs := doc.(map[string]any)["components"].(map[string]any)["schemas"].(map[string]any)["MessagesRequest"].(map[string]any)["properties"].(map[string]any)["messages"].(map[string]any)
	for flag, schema := range map[string]map[string]any{"--max-facts-per-request": facts, "--max-retain-bytes": facts, "--max-messages-per-request": msgs} {
		if d, _ := schema["description"].(string); !strings.Contains(d, flag) {
			t.Errorf("openapi.json does not name %s where it bounds a request: %q", flag, d)
		}
	}
}

// jsonPointer resolves an RFC 6901 pointer in decoded JSON.
func jsonPointer(doc any, pointer string) (any, error) {
	cur := doc
	for _, tok := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, fmt.Errorf("no %q in %s", tok, pointer)
			}
			cur = v
		case []any:
			var i int
			if _, err := fmt.Sscan(tok, &i); err != nil || i < 0 || i >= len(c) {
				return nil, fmt.Errorf("no element %q in %s", tok, pointer)
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("%q of %s is in no object", tok, pointer)
		}
	}
	return cur, nil
}

// Each bound probed on a running server: a request at it is accepted by
// the server and by openapi.json; the same request one past it is refused
// by both (400, or 413 for a request too large). A bound the document
// lacks lets the second through its validator; one it states too tightly
// refuses the first.
func TestOpenAPIBoundsProbed(t *testing.T) {
	b := newBankServer(t, "sqlite://"+filepath.Join(t.TempDir(), "bank.db"), nil, BankLimits{}, nil)
	v, err := apiValidator()
	if err != nil {
		t.Fatal(err)
	}
	rep := strings.Repeat
	labels := func(n, size int) string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%q", rep("l", size))
		}
		return "[" + strings.Join(out, ",") + "]"
	}
	recall := func(field string) string { return `{"query": "tea", "maxTokens": 10, ` + field + `}` }
	fact := func(field string) string { return `{"facts": [{"text": "Ana likes tea.", ` + field + `}]}` }
	message := func(conv, field string) string {
		return `{"conversation": "` + conv + `", "messages": [{"role": "user", "at": "2026-01-02T03:04:05Z", ` + field + `}]}`
	}
	for _, c := range []struct {
		name, endpoint, at, past string
	}{
		{"recall query bytes", "recall", `{"query": "` + rep("q", MaxQueryBytes) + `", "maxTokens": 10}`, `{"query": "` + rep("q", MaxQueryBytes+1) + `", "maxTokens": 10}`},
		{"recall query blank", "recall", `{"query": " q", "maxTokens": 10}`, `{"query": "  ", "maxTokens": 10}`},
		{"recall maxTokens most", "recall", `{"query": "tea", "maxTokens": 32768}`, `{"query": "tea", "maxTokens": 32769}`},
		{"recall maxTokens least", "recall", `{"query": "tea", "maxTokens": 1}`, `{"query": "tea", "maxTokens": 0}`},
		{"recall maxItems most", "recall", recall(`"maxItems": 200`), recall(`"maxItems": 201`)},
		{"recall maxItems least", "recall", recall(`"maxItems": 1`), recall(`"maxItems": 0`)},
		{"recall minScorePerMille most", "recall", recall(`"minScorePerMille": 1000`), recall(`"minScorePerMille": 1001`)},
		{"recall minScorePerMille least", "recall", recall(`"minScorePerMille": 0`), recall(`"minScorePerMille": -1`)},
		{"recall minScorePerMille integer", "recall", recall(`"minScorePerMille": 250`), recall(`"minScorePerMille": 250.5`)},
		{"recall minScore of before", "recall", recall(`"minScorePerMille": 250`), recall(`"minScore": 0.25`)},
		{"recall tags", "recall", recall(`"tags": ` + labels(MaxRecallTags, 1)), recall(`"tags": ` + labels(MaxRecallTags+1, 1))},
		{"recall tag bytes", "recall", recall(`"tags": ` + labels(1, MaxLabelBytes)), recall(`"tags": ` + labels(1, MaxLabelBytes+1))},
		{"recall tag empty", "recall", recall(`"tags": ["t"]`), recall(`"tags": [""]`)},
		{"recall scope", "recall", recall(`"scope": "` + rep("s", memscope.MaxBytes) + `"`), recall(`"scope": "` + rep("s", memscope.MaxBytes+1) + `"`)},
		{"fact text", "facts", `{"facts": [{"text": "` + rep("t", MaxFactTextBytes) + `"}]}`, `{"facts": [{"text": "` + rep("t", MaxFactTextBytes+1) + `"}]}`},
		{"fact id", "facts", fact(`"id": "` + rep("i", MaxFactIDBytes) + `"`), fact(`"id": "` + rep("i", MaxFactIDBytes+1) + `"`)},
		{"fact entities", "facts", fact(`"entities": ` + labels(MaxFactLabels, 2)), fact(`"entities": ` + labels(MaxFactLabels+1, 2))},
		{"fact entity bytes", "facts", fact(`"entities": ` + labels(1, MaxLabelBytes)), fact(`"entities": ` + labels(1, MaxLabelBytes+1))},
		{"fact tags", "facts", fact(`"tags": ` + labels(MaxFactLabels, 3)), fact(`"tags": ` + labels(MaxFactLabels+1, 3))},
		{"fact tag bytes", "facts", fact(`"tags": ` + labels(1, MaxLabelBytes-1)), fact(`"tags": ` + labels(1, MaxLabelBytes+1))},
		{"fact scope", "facts", fact(`"scope": "` + rep("s", memscope.MaxBytes) + `"`), fact(`"scope": "` + rep("s", memscope.MaxBytes+1) + `"`)},
		{"facts none", "facts", fact(`"tags": ["x"]`), `{"facts": []}`},
		{"message conversation", "messages", message(rep("c", consolidation.MaxConversationBytes), `"content": "hi"`), message(rep("c", consolidation.MaxConversationBytes+1), `"content": "hi"`)},
		{"message id", "messages", message("c", `"content": "hi", "id": "`+rep("i", consolidation.MaxMessageIDBytes)+`"`), message("c", `"content": "hi", "id": "`+rep("i", consolidation.MaxMessageIDBytes+1)+`"`)},
		{"message content", "messages", message("c", `"content": "`+rep("w ", consolidation.MaxMessageContentBytes/2)+`"`), message("c", `"content": "`+rep("w ", consolidation.MaxMessageContentBytes/2)+`w"`)},
		{"messages none", "messages", message("c", `"content": "hi"`), `{"conversation": "c", "messages": []}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if code, body := b.post(t, c.endpoint, "", []byte(c.at)); code/100 != 2 {
				t.Errorf("at the bound: %d %.300s", code, body)
			}
			if ok, errs := v.ValidateHttpRequest(bankRequest(c.endpoint, c.at)); !ok {
				t.Errorf("at the bound, openapi.json refuses it: %s", describeErrs(errs))
			}
			if code, body := b.post(t, c.endpoint, "", []byte(c.past)); code != http.StatusBadRequest && code != http.StatusRequestEntityTooLarge {
				t.Errorf("past the bound: %d %.300s, want 400 or 413", code, body)
			}
			if ok, _ := v.ValidateHttpRequest(bankRequest(c.endpoint, c.past)); ok {
				t.Errorf("past the bound, openapi.json accepts what the server refuses: %.200s", c.past)
			}
		})
	}
}

// The bounds of POST /v1/assemble and DELETE .../facts/{id}, probed
// alike: no template is loaded and no fact stored, so the request at the
// bound is answered 404, not refused.
func TestOpenAPIBoundsProbedNotFound(t *testing.T) {
	b := newBankServer(t, "sqlite://"+filepath.Join(t.TempDir(), "bank.db"), nil, BankLimits{}, nil)
	v, err := apiValidator()
	if err != nil {
		t.Fatal(err)
	}
	rep := strings.Repeat
	assemble := func(field string) string { return `{"namespace": "ns", "name": "t", "intent": "chat", ` + field + `}` }
	for _, c := range []struct {
		name, method, path, at, past string
	}{
		{"assignmentKey most", http.MethodPost, "/v1/assemble", assemble(`"assignmentKey": "` + rep("k", MaxAssignmentKeyBytes) + `"`), assemble(`"assignmentKey": "` + rep("k", MaxAssignmentKeyBytes+1) + `"`)},
		{"assignmentKey least", http.MethodPost, "/v1/assemble", assemble(`"assignmentKey": "k"`), assemble(`"assignmentKey": ""`)},
		{"assemble scope", http.MethodPost, "/v1/assemble", assemble(`"scope": "` + rep("s", memscope.MaxBytes) + `"`), assemble(`"scope": "` + rep("s", memscope.MaxBytes+1) + `"`)},
		{"fact id in the path", http.MethodDelete, "/v1/banks/team-a/support/facts/", rep("i", MaxFactIDBytes), rep("i", MaxFactIDBytes+1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := func(x string) *http.Request {
				path, body := c.path, x
				if c.method == http.MethodDelete {
					path, body = c.path+x, ""
				}
				r, _ := http.NewRequest(c.method, b.ts.URL+path, strings.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				return r
			}
			answer := func(x string) (int, string) {
				resp, err := http.DefaultClient.Do(req(x))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var out bytes.Buffer
				out.ReadFrom(resp.Body)
				return resp.StatusCode, out.String()
			}
			if code, body := answer(c.at); code != http.StatusNotFound {
				t.Errorf("at the bound: %d %.300s, want 404", code, body)
			}
			if ok, errs := v.ValidateHttpRequest(req(c.at)); !ok {
				t.Errorf("at the bound, openapi.json refuses it: %s", describeErrs(errs))
			}
			if code, body := answer(c.past); code != http.StatusBadRequest {
				t.Errorf("past the bound: %d %.300s, want 400", code, body)
			}
			if ok, _ := v.ValidateHttpRequest(req(c.past)); ok {
				t.Errorf("past the bound, openapi.json accepts what the server refuses: %.200s", c.past)
			}
		})
	}
}

// bankRequest is a POST of body to the test bank's endpoint, as the
// document's validator reads it.
func bankRequest(endpoint, body string) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "http://serve/v1/banks/team-a/support/"+endpoint, bytes.NewReader([]byte(body)))
	r.Header.Set("Content-Type", "application/json")
	return r
}
