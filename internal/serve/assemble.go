package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/promptops/promptops/internal/strictjson"
	"github.com/promptops/promptops/internal/telemetry"
	"github.com/promptops/promptops/plan"
)

// AssembleRequest is the body of POST /v1/assemble.
type AssembleRequest struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Intent    string `json:"intent"`
	// Runtime holds each runtime section's content; a value must be a JSON
	// string (null is the same as leaving the section out).
	Runtime map[string]string `json:"runtime"`
	// Query is the recall query of memory sections that take it from the
	// request.
	Query string `json:"query"`
	// Scope is the bank scope of memory sections that take it from the
	// request (one user's memory, say); see plan.ValidateScope.
	Scope string `json:"scope"`
	// AssignmentKey, when set, is what assigns the request to a rollout's
	// stable or canary revision (an application's user, tenant or session
	// id): 1 to MaxAssignmentKeyBytes bytes of UTF-8. Without it the
	// scope assigns, and without a scope chance does (plan.Revisions).
	AssignmentKey *string `json:"assignmentKey"`
}

// MaxAssignmentKeyBytes bounds an assemble request's assignmentKey.
const MaxAssignmentKeyBytes = 1024

// AssembleResponse is the body of a 200 or 422 answer.
type AssembleResponse struct {
	Prompt       string `json:"prompt"`
	Tokens       int    `json:"tokens"`
	MaxTokens    int    `json:"maxTokens"`
	WithinBudget bool   `json:"withinBudget"`
	// CacheableTokens is the prompt's prefix that is the same in every
	// request (before its first runtime or memory section).
	CacheableTokens int `json:"cacheableTokens"`
	// Revision is the revision of the plan the prompt was assembled from;
	// Canary tells whether it is a rollout's canary (else the stable one).
	Revision string           `json:"revision"`
	Canary   bool             `json:"canary"`
	Sections []SectionSummary `json:"sections"`
	// Memory has one entry per memory section of the template.
	Memory []MemorySummary `json:"memory,omitempty"`
}

// SectionSummary is one section's share of the prompt.
type SectionSummary struct {
	Name            string `json:"name"`
	Tokens          int    `json:"tokens"`
	TruncatedTokens int    `json:"truncatedTokens"`
}

// TemplateSummary is one entry of GET /v1/templates.
type TemplateSummary struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Revision  string   `json:"revision"`
	Encoding  string   `json:"encoding"`
	MaxTokens int      `json:"maxTokens"`
	Intents   []string `json:"intents"`
}

// assemble answers POST /v1/assemble: the template's intent assembled
// with the request's runtime contents and recalled memory; 200 within the
// budget, 422 over it.
func (s *Server) assemble(w http.ResponseWriter, r *http.Request) error {
	snap := s.store.Load()
	if snap == nil {
		return problem(http.StatusServiceUnavailable, CodeNotReady, "no plans loaded yet")
	}
	body, release, err := s.body(w, r, s.maxBodyBytes, "--max-body-bytes", "")
	defer release()
	if err != nil {
		return err
	}
	req, err := decodeAssemble(body)
	body = nil // the decoded request holds its own copy
	if err != nil {
		return err
	}
	if err := plan.ValidateScope(req.Scope); err != nil {
		return problem(http.StatusBadRequest, CodeInvalidScope, err.Error())
	}
	assignment := req.Scope
	if key := req.AssignmentKey; key != nil {
		if len(*key) == 0 || len(*key) > MaxAssignmentKeyBytes || !utf8.ValidString(*key) {
			return problem(http.StatusBadRequest, CodeMalformed, fmt.Sprintf("assignmentKey must be 1 to %d bytes of UTF-8, or left out", MaxAssignmentKeyBytes))
		}
		assignment = *key
	}
	k := Key{req.Namespace, req.Name}
	if err := s.authorize(r, templateAttributes(k)); err != nil {
		return err
	}
	revs := snap.Revisions(k)
	if revs == nil {
		return problem(http.StatusNotFound, CodeTemplateNotFound, fmt.Sprintf("no template %s is loaded", k))
	}
	// The key assigns the revision and goes no further: not in a log, a
	// metric or a span.
	p, canary := revs.Choose(assignment)
	role := "stable"
	if canary {
		role = "canary"
	}
	span := trace.SpanFromContext(r.Context())
	span.SetName("assemble " + p.Name)
	span.SetAttributes(telemetry.PromptName.String(p.Name), telemetry.TemplateNamespace.String(p.Namespace),
		telemetry.PromptVersion.String(p.Revision), telemetry.Intent.String(req.Intent))
	a, err := p.Assemble(r.Context(), req.Intent, req.Runtime, plan.WithRecall(s.recallFunc()), plan.WithQuery(req.Query), plan.WithScope(req.Scope), plan.WithMemoryTimeout(s.memTimeout))
	if err != nil {
		return assembleFailed(r.Context(), err, k, p, req.Intent)
	}
	span.SetAttributes(telemetry.PromptTokens.Int(a.Tokens), telemetry.CacheableTokens.Int(a.CacheableTokens))
	resp := AssembleResponse{Prompt: a.Text, Tokens: a.Tokens, MaxTokens: a.MaxTokens, WithinBudget: a.WithinBudget, CacheableTokens: a.CacheableTokens, Revision: p.Revision, Canary: canary, Sections: make([]SectionSummary, len(a.Sections)),
		Memory: s.memorySummaries(a)}
	s.metrics.tokens.WithLabelValues(p.Namespace, p.Name, a.Intent, role).Add(float64(a.Tokens))
	for i, sec := range a.Sections {
		resp.Sections[i] = SectionSummary{Name: sec.Name, Tokens: sec.Tokens, TruncatedTokens: sec.TruncatedTokens}
		if sec.Tokens > 0 {
			s.metrics.sections.WithLabelValues(p.Namespace, p.Name, a.Intent, sec.Name).Add(float64(sec.Tokens))
		}
		if sec.TruncatedTokens > 0 {
			s.metrics.truncated.WithLabelValues(p.Namespace, p.Name, a.Intent, sec.Name).Add(float64(sec.TruncatedTokens))
		}
	}
	status := http.StatusOK
	if !a.WithinBudget {
		status = http.StatusUnprocessableEntity
	}
	writeJSON(w, status, &resp)
	return nil
}

// assembleFailed is the answer to plan's error err. Once the request's
// context is done nobody may read an answer: every error is then the
// adapter's 503 RequestTimeout, whatever plan said.
func assembleFailed(ctx context.Context, err error, k Key, p *plan.Plan, intent string) error {
	if ctx.Err() != nil {
		return err
	}
	var ui *plan.UnknownIntentError
	var us *plan.UnknownSectionError
	var st *plan.SpecialTokenError
	switch {
	case errors.As(err, &ui):
		return problem(http.StatusNotFound, CodeIntentNotFound, fmt.Sprintf("template %s has no intent %q (intents: %s)", k, ui.Intent, strings.Join(ui.Intents, ", ")))
	case errors.As(err, &us):
		return problem(http.StatusBadRequest, CodeUnknownSection, fmt.Sprintf("template %s has no runtime section %q (runtime sections: %s)", k, us.Section, strings.Join(p.RuntimeSections(), ", ")))
	case errors.As(err, &st):
		return problem(http.StatusUnprocessableEntity, CodeSpecialToken, fmt.Sprintf("runtime.%s: %v", st.Section, st))
	}
	return &internalError{err: err, op: "Assembly failed", kv: []any{"template", k, "intent", intent}, msg: "assembly failed"}
}

// decodeAssemble decodes the body of POST /v1/assemble; its error is the
// answer (400).
func decodeAssemble(body []byte) (req AssembleRequest, err error) {
	err = strictjson.Unmarshal(body, &req)
	if err == nil {
		return req, nil
	}
	if p := strictjson.Describe(err); !p.Unknown && !p.Repeated {
		switch {
		case strings.HasPrefix(p.Path, "runtime."):
			return req, problem(http.StatusBadRequest, CodeInvalidRuntime, fmt.Sprintf("runtime section %q must be a string", strictjson.Name(err)))
		case p.Path == "runtime":
			return req, problem(http.StatusBadRequest, CodeInvalidRuntime, "runtime must be an object of strings")
		}
	}
	return req, problem(http.StatusBadRequest, CodeMalformed, "the body must be one JSON object {namespace, name, intent, runtime, query, scope, assignmentKey}: "+jsonProblem(err))
}
