package serve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/memscope"
	"github.com/promptops/promptops/internal/strictjson"
	"github.com/promptops/promptops/plan"
)

// RecallRequest is the body of POST /v1/banks/{namespace}/{name}/recall.
type RecallRequest struct {
	// Query is the text to recall memories about; required, at most
	// MaxQueryBytes.
	Query string `json:"query"`
	// MaxTokens bounds the answer's text in the bank's encoding; required,
	// 1..MaxRecallTokens.
	MaxTokens *int `json:"maxTokens"`
	// MaxItems bounds the items; DefaultRecallItems when left out,
	// 1..MaxRecallItems.
	MaxItems *int `json:"maxItems,omitempty"`
	// MinScorePerMille drops items scoring below it, in thousandths of a
	// score: 0..plan.MaxMinScorePerMille, 0 when left out. Read as a
	// number so that one with a fraction is refused naming the unit; the
	// minScore of before (0..1) is refused naming this field (LegacyMinScore).
	MinScorePerMille *float64 `json:"minScorePerMille,omitempty"`
	// LegacyMinScore is the minScore of before, 0..1: present, the recall is
	// refused naming minScorePerMille, as facts' snake_case names are.
	LegacyMinScore *float64 `json:"minScore,omitempty"`
	// Tags, when set, keep only items with one of them.
	Tags []string `json:"tags,omitempty"`
	// IncludePending adds facts not consolidated yet, as kind "fact".
	IncludePending bool `json:"includePending,omitempty"`
	// Scope is the scope to recall from; the bank's shared scope when
	// left out. Tags never cross a scope.
	Scope string `json:"scope,omitempty"`
	// IncludeShared also recalls the shared scope's items.
	IncludeShared bool `json:"includeShared,omitempty"`
	// TrustedOnly keeps trusted items alone: observations whose every
	// source fact is of a source the bank trusts (--trusted-sources),
	// facts of such a source. Left out of a body when false (omitzero), so
	// that a bank server of before takes a memory section's recall that
	// does not ask for it.
	TrustedOnly bool `json:"trustedOnly,omitzero"`
}

// RecallResponse is the answer: the items that fit, best first, and
// their text as it goes into a prompt (plan.FitMemory).
type RecallResponse struct {
	Items     []plan.MemoryItem `json:"items"`
	Text      string            `json:"text"`
	Tokens    int               `json:"tokens"`
	MaxTokens int               `json:"maxTokens"`
	// Omitted counts the items recalled that did not fit in maxTokens.
	Omitted int `json:"omitted"`
}

// recall answers POST .../recall: the items that fit in maxTokens.
func (bk *servedBank) recall(w http.ResponseWriter, r *http.Request) error {
	s := bk.s
	body, release, err := s.body(w, r, s.maxBodyBytes, "--max-body-bytes", "")
	defer release()
	if err != nil {
		return err
	}
	var req RecallRequest
	if err := strictjson.Unmarshal(body, &req); err != nil {
		return problem(http.StatusBadRequest, CodeMalformed, `the body must be one JSON object {"query", "maxTokens", "maxItems", "minScorePerMille", "tags", "includePending", "scope", "includeShared", "trustedOnly"}: `+jsonProblem(err))
	}
	q, msg := recallQuery(&req)
	if msg != "" {
		return problem(http.StatusBadRequest, CodeInvalidRecall, msg)
	}
	fit, err := recallFit(r.Context(), bk.Bank, req.Scope, req.IncludeShared, q, *req.MaxTokens)
	var fe *fitError
	switch {
	case errors.As(err, &fe):
		s.log.Error(fe.err, "Fitting recalled memory failed", "bank", Key{bk.Namespace, bk.Name})
		return problem(http.StatusInternalServerError, CodeInternal, "counting the recalled memory's tokens failed")
	case err != nil:
		return storeFailed(err, bk.Bank, "Recall failed", "the bank's store could not be read")
	}
	if fit.Items == nil {
		fit.Items = []plan.MemoryItem{}
	}
	writeJSON(w, http.StatusOK, &RecallResponse{Items: fit.Items, Text: fit.Text, Tokens: fit.Tokens, MaxTokens: *req.MaxTokens, Omitted: fit.Omitted})
	return nil
}

// fitError is a failure to count the recalled items' tokens.
type fitError struct{ err error }

func (e *fitError) Error() string { return e.err.Error() }

// recallFit recalls q from bk and keeps the items that fit in maxTokens,
// whole and in rank order (plan.FitMemory); a failure to count is a
// *fitError, any other error the recall's.
func recallFit(ctx context.Context, bk *Bank, scope string, includeShared bool, q consolidation.Query, maxTokens int) (plan.MemoryFit, error) {
	recalled, err := recallScoped(ctx, bk, scope, includeShared, q)
	if err != nil {
		return plan.MemoryFit{}, err
	}
	items := make([]plan.MemoryItem, len(recalled))
	for i, it := range recalled {
		items[i] = plan.MemoryItem{ID: it.ID, Kind: plan.MemoryKind(it.Kind), Text: it.Text, Score: it.Score, ProofCount: it.ProofCount,
			OccurredStart: it.OccurredStart, OccurredEnd: it.OccurredEnd, SourceFactIDs: it.SourceFactIDs, Trusted: it.Trusted}
	}
	fit, err := plan.FitMemory(bk.Encoding, items, maxTokens)
	if err != nil {
		return plan.MemoryFit{}, &fitError{err}
	}
	return fit, nil
}

// localRecaller fills memory sections of the banks this process serves
// (--bank) by recalling in-process, without HTTP or authentication: the
// same recall and fit as POST .../recall. Other banks go to next.
type localRecaller struct {
	banks map[Key]*Bank
	next  MemoryRecaller
}

func (l *localRecaller) Recall(ctx context.Context, r plan.MemoryRequest) ([]plan.MemoryItem, error) {
	bk := l.banks[Key{r.Bank.Namespace, r.Bank.Name}]
	if bk == nil {
		if l.next == nil {
			return nil, &plan.RecallError{Code: plan.MemoryNoRecall, Message: fmt.Sprintf("bank %s is not served here and no recaller is set", r.Bank)}
		}
		return l.next.Recall(ctx, r)
	}
	req := recallRequestOf(r)
	q, msg := recallQuery(&req)
	if msg != "" {
		return nil, &plan.RecallError{Code: plan.MemoryCode(CodeInvalidRecall), Message: fmt.Sprintf("bank %s: %s", r.Bank, msg)}
	}
	fit, err := recallFit(ctx, bk, req.Scope, req.IncludeShared, q, r.MaxTokens)
	var fe *fitError
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.As(err, &fe):
		return nil, &plan.RecallError{Code: plan.MemoryRecallFailed, Message: fmt.Sprintf("bank %s: counting the recalled memory's tokens failed", r.Bank)}
	case err != nil:
		return nil, &plan.RecallError{Code: plan.MemoryCode(CodeStoreUnavailable), Message: fmt.Sprintf("bank %s: the store could not be read", r.Bank)}
	}
	return fit.Items, nil
}

// recallRequestOf is the recall a memory section asks for, as the bank
// API's body: what HTTPRecaller sends and localRecaller validates alike.
func recallRequestOf(r plan.MemoryRequest) RecallRequest {
	req := RecallRequest{Query: r.Query, MaxTokens: &r.MaxTokens, Scope: r.Scope, IncludeShared: r.IncludeShared, TrustedOnly: r.TrustedOnly}
	if r.MaxItems > 0 {
		req.MaxItems = &r.MaxItems
	}
	if r.MinScorePerMille > 0 {
		m := float64(r.MinScorePerMille)
		req.MinScorePerMille = &m
	}
	return req
}

// recallQuery validates a recall; the message names the field at fault.
func recallQuery(req *RecallRequest) (consolidation.Query, string) {
	switch {
	case strings.TrimSpace(req.Query) == "":
		return consolidation.Query{}, "query: required"
	case len(req.Query) > MaxQueryBytes:
		return consolidation.Query{}, fmt.Sprintf("query: %d bytes, at most %d", len(req.Query), MaxQueryBytes)
	case !utf8.ValidString(req.Query):
		return consolidation.Query{}, "query: not valid UTF-8"
	case req.MaxTokens == nil:
		return consolidation.Query{}, fmt.Sprintf("maxTokens: required, 1..%d", MaxRecallTokens)
	case *req.MaxTokens < 1 || *req.MaxTokens > MaxRecallTokens:
		return consolidation.Query{}, fmt.Sprintf("maxTokens: %d, want 1..%d", *req.MaxTokens, MaxRecallTokens)
	case req.MaxItems != nil && (*req.MaxItems < 1 || *req.MaxItems > MaxRecallItems):
		return consolidation.Query{}, fmt.Sprintf("maxItems: %d, want 1..%d", *req.MaxItems, MaxRecallItems)
	case req.LegacyMinScore != nil:
		return consolidation.Query{}, fmt.Sprintf("minScore: a field renamed minScorePerMille, in thousandths of a score (0..%d): for minScore %g send minScorePerMille %g", plan.MaxMinScorePerMille, *req.LegacyMinScore, math.Round(*req.LegacyMinScore*1000))
	case req.MinScorePerMille != nil && !(*req.MinScorePerMille >= 0 && *req.MinScorePerMille <= plan.MaxMinScorePerMille && *req.MinScorePerMille == math.Trunc(*req.MinScorePerMille)):
		return consolidation.Query{}, fmt.Sprintf("minScorePerMille: %g, want an integer 0..%d (250 takes scores of 0.25 and above)", *req.MinScorePerMille, plan.MaxMinScorePerMille)
	case memscope.Problem(req.Scope) != "":
		return consolidation.Query{}, "scope: " + memscope.Problem(req.Scope)
	case len(req.Tags) > MaxRecallTags:
		return consolidation.Query{}, fmt.Sprintf("tags: %d items, at most %d", len(req.Tags), MaxRecallTags)
	}
	for i, t := range req.Tags {
		if len(t) > MaxLabelBytes || t == "" {
			return consolidation.Query{}, fmt.Sprintf("tags[%d]: %d bytes, want 1..%d", i, len(t), MaxLabelBytes)
		}
	}
	q := consolidation.Query{Text: req.Query, Limit: DefaultRecallItems, Tags: req.Tags, IncludePending: req.IncludePending, TrustedOnly: req.TrustedOnly}
	if req.MaxItems != nil {
		q.Limit = *req.MaxItems
	}
	if req.MinScorePerMille != nil {
		q.MinScore = plan.ScoreOfPerMille(int(*req.MinScorePerMille))
	}
	return q, ""
}
