// Package llmtest is an OpenAI-compatible chat completions server that plays
// scripted answers, good and bad, for tests and benchmarks.
package llmtest

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Request is what the server received.
type Request struct {
	Model          string
	System, User   string
	ResponseFormat string // json_schema or json_object
	Schema         map[string]any
	Authorization  string
	// Traceparent is the W3C trace context header the call carried.
	Traceparent string
	// MaxTokens is max_tokens, or max_completion_tokens when that was
	// sent instead (MaxTokensField says which; "" when neither).
	MaxTokens      int
	MaxTokensField string
}

// Reply is one scripted reply.
type Reply struct {
	Status int // 0: 200
	// Content is the assistant message for a 200.
	Content string
	// Body replaces the whole response body (errors, garbage).
	Body string
	// Delay before answering (timeouts).
	Delay time.Duration
	// PromptTokens and CompletionTokens reported in usage.
	PromptTokens, CompletionTokens int64
	// FinishReason of the choice; "" is "stop".
	FinishReason string
	// HugeContent streams an answer of this many bytes (a JSON string of
	// "x"), written in chunks so the server holds none of it.
	HugeContent int64
}

// Script chooses the reply to the n-th request (from 0).
type Script func(n int, req Request) Reply

// Server is a running scripted server.
type Server struct {
	*httptest.Server
	mu       sync.Mutex
	script   Script
	requests []Request
}

// New starts a server playing script.
func New(script Script) *Server {
	s := &Server{script: script}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	return s
}

// NewAt starts a server playing script on addr (host:port; port 0 picks a
// free one), e.g. an address that pods of a local cluster reach.
func NewAt(script Script, addr string) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{script: script}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.handle))
	_ = s.Server.Listener.Close()
	s.Server.Listener = l
	s.Server.Start()
	return s, nil
}

// BaseURL is what clients use as the API base.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// SetScript replaces the script.
func (s *Server) SetScript(script Script) {
	s.mu.Lock()
	s.script = script
	s.mu.Unlock()
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.NotFound(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var in struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
		MaxTokens           *int `json:"max_tokens"`
		MaxCompletionTokens *int `json:"max_completion_tokens"`
		ResponseFormat      struct {
			Type       string `json:"type"`
			JSONSchema struct {
				Schema map[string]any `json:"schema"`
			} `json:"json_schema"`
		} `json:"response_format"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	req := Request{Model: in.Model, ResponseFormat: in.ResponseFormat.Type, Schema: in.ResponseFormat.JSONSchema.Schema, Authorization: r.Header.Get("Authorization"), Traceparent: r.Header.Get("Traceparent")}
	switch {
	case in.MaxTokens != nil:
		req.MaxTokens, req.MaxTokensField = *in.MaxTokens, "max_tokens"
	case in.MaxCompletionTokens != nil:
		req.MaxTokens, req.MaxTokensField = *in.MaxCompletionTokens, "max_completion_tokens"
	}
	for _, m := range in.Messages {
		text := contentText(m.Content)
		switch m.Role {
		case "system":
			req.System += text
		case "user":
			req.User += text
		}
	}
	s.mu.Lock()
	n := len(s.requests)
	s.requests = append(s.requests, req)
	script := s.script
	s.mu.Unlock()
	rep := script(n, req)
	if rep.Delay > 0 {
		select {
		case <-time.After(rep.Delay):
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	status := rep.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	if rep.Body != "" {
		_, _ = io.WriteString(w, rep.Body)
		return
	}
	if rep.HugeContent > 0 {
		_, _ = fmt.Fprintf(w, `{"id":"chatcmpl-%d","object":"chat.completion","created":1700000000,"model":%q,"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"`, n, in.Model)
		chunk := []byte(strings.Repeat("x", 64<<10))
		for left := rep.HugeContent; left > 0; left -= int64(len(chunk)) {
			if _, err := w.Write(chunk[:min(int64(len(chunk)), left)]); err != nil {
				return // the client hung up: that is the point
			}
		}
		_, _ = io.WriteString(w, `"}}],"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}`)
		return
	}
	finish := rep.FinishReason
	if finish == "" {
		finish = "stop"
	}
	out := map[string]any{
		"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion", "created": 1700000000, "model": in.Model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "message": map[string]any{"role": "assistant", "content": rep.Content}}},
		"usage":   map[string]any{"prompt_tokens": rep.PromptTokens, "completion_tokens": rep.CompletionTokens, "total_tokens": rep.PromptTokens + rep.CompletionTokens},
	}
	_ = json.NewEncoder(w).Encode(out)
}

func contentText(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case []any:
		var b strings.Builder
		for _, p := range v {
			if m, ok := p.(map[string]any); ok {
				if t, ok := m["text"].(string); ok {
					b.WriteString(t)
				}
			}
		}
		return b.String()
	}
	return ""
}

// Fact is a fact line parsed from a prompt.
type Fact struct{ ID, Text string }

var factLineRE = regexp.MustCompile(`(?m)^\[([^\]]+)\] (.*?)(?: \| Involving: .*?)?(?: \((?:occurred_start|occurred_end|mentioned_at)=.*\))?$`)

// Facts parses the NEW FACTS section of a user prompt.
func Facts(user string) []Fact {
	section := user
	if i := strings.Index(section, "NEW FACTS:\n"); i >= 0 {
		section = section[i+len("NEW FACTS:\n"):]
	}
	if i := strings.Index(section, "\n\nEXISTING OBSERVATIONS"); i >= 0 {
		section = section[:i]
	}
	var out []Fact
	for _, m := range factLineRE.FindAllStringSubmatch(section, -1) {
		out = append(out, Fact{ID: m[1], Text: m[2]})
	}
	return out
}

// Observation is an existing observation parsed from a prompt.
type Observation struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// Observations parses the EXISTING OBSERVATIONS array of a user prompt.
func Observations(user string) []Observation {
	i := strings.Index(user, "EXISTING OBSERVATIONS")
	if i < 0 {
		return nil
	}
	rest := user[i:]
	start := strings.Index(rest, "\n[")
	if start < 0 {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(rest[start+1:]))
	var obs []Observation
	_ = dec.Decode(&obs)
	return obs
}

// Answer builds a JSON answer.
type Answer struct {
	Creates []map[string]any `json:"creates"`
	Updates []map[string]any `json:"updates"`
	Deletes []map[string]any `json:"deletes"`
}

// JSON renders the answer.
func (a Answer) JSON() string {
	if a.Creates == nil {
		a.Creates = []map[string]any{}
	}
	if a.Updates == nil {
		a.Updates = []map[string]any{}
	}
	if a.Deletes == nil {
		a.Deletes = []map[string]any{}
	}
	b, _ := json.Marshal(a)
	return string(b)
}

// OnePerFact answers like a careful model: each fact becomes an observation
// with the fact's text, unless an existing observation starts with the same
// first word, which is then updated.
func OnePerFact(_ int, req Request) Reply {
	obs := Observations(req.User)
	var a Answer
	for _, f := range Facts(req.User) {
		first := strings.Fields(f.Text)
		updated := false
		for _, o := range obs {
			if len(first) > 0 && strings.HasPrefix(o.Text, first[0]+" ") && first[0] != "The" {
				a.Updates = append(a.Updates, map[string]any{"observation_id": o.ID, "text": f.Text, "source_fact_ids": []string{f.ID}})
				updated = true
				break
			}
		}
		if !updated {
			a.Creates = append(a.Creates, map[string]any{"text": f.Text, "source_fact_ids": []string{f.ID}})
		}
	}
	return Reply{Content: a.JSON(), PromptTokens: int64(len(req.System)+len(req.User)) / 4, CompletionTokens: 50}
}

// Faults are how often a Faulty model spoils an answer, as fractions of
// prompts.
type Faults struct {
	// InvalidItem adds one invalid item to an otherwise good answer: half
	// the time a delete of an invented id, half the time the first update
	// (or create, turned into an update) names an invented id, so that its
	// fact has no valid item.
	InvalidItem float64
	// Truncated cuts the answer's JSON in half.
	Truncated float64
	// Fenced wraps a good answer in a ```json fence.
	Fenced float64
}

// Faulty plays a mostly-right model at temperature 0: the answers of
// OnePerFact, spoiled for a share of prompts chosen by a hash of the prompt,
// so the same prompt always gets the same mistake, as a real model at
// temperature 0 repeats its own.
func Faulty(f Faults) Script {
	return func(n int, req Request) Reply {
		rep := OnePerFact(n, req)
		h := fnv.New64a()
		_, _ = io.WriteString(h, req.System)
		_, _ = io.WriteString(h, req.User)
		sum := h.Sum64()
		u := float64(sum>>11) / float64(1<<53)
		switch {
		case u < f.InvalidItem:
			var a Answer
			_ = json.Unmarshal([]byte(rep.Content), &a)
			invented := fmt.Sprintf("%08x-0000-4000-8000-%012x", uint32(sum), sum>>16&0xffffffffffff)
			switch {
			case sum&(1<<7) == 0 || len(a.Creates)+len(a.Updates) == 0:
				a.Deletes = append(a.Deletes, map[string]any{"observation_id": invented})
			case len(a.Updates) > 0:
				a.Updates[0]["observation_id"] = invented
			default:
				c := a.Creates[0]
				a.Creates = a.Creates[1:]
				a.Updates = append(a.Updates, map[string]any{"observation_id": invented, "text": c["text"], "source_fact_ids": c["source_fact_ids"]})
			}
			rep.Content = a.JSON()
		case u < f.InvalidItem+f.Truncated:
			rep.Content = rep.Content[:len(rep.Content)/2]
			rep.FinishReason = "length"
		case u < f.InvalidItem+f.Truncated+f.Fenced:
			rep.Content = "```json\n" + rep.Content + "\n```"
		}
		return rep
	}
}
