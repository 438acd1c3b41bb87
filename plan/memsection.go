package plan

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/promptops/promptops/internal/memscope"
	"github.com/promptops/promptops/internal/tokens"
)

// MemorySource is where a memory section's items come from: a recall of a
// MemoryBank with a query taken from the request or from a runtime section.
type MemorySource struct {
	// Bank is the MemoryBank recalled from.
	Bank BankRef `json:"bank"`
	// Endpoint is the base URL the bank is served at (its
	// status.serving.endpoint when the plan was rendered); empty when the
	// bank was not served or not found.
	Endpoint string `json:"endpoint,omitempty"`
	// Query says where the recall's query comes from.
	Query MemoryQuery `json:"query"`
	// Scope says which scope of the bank is recalled; nil is the bank's
	// shared scope.
	Scope *MemoryScope `json:"scope,omitempty"`
	// MaxItems is the most items the section holds; 0 is no limit but the
	// tokens.
	MaxItems int `json:"maxItems,omitempty"`
	// MinScorePerMille is the lowest score of an item the section takes,
	// in thousandths of a recall score (0 to 1000; 250 takes a score of
	// 0.25 and above): the template's minScore, in the unit the CRD and
	// the recall API use. The minScore of before, 0 to 1, is refused
	// naming it (Load).
	MinScorePerMille int `json:"minScorePerMille,omitempty"`
	// TrustedOnly: the section takes trusted items alone (MemoryItem's
	// Trusted: of the sources the bank trusts).
	TrustedOnly bool `json:"trustedOnly,omitempty"`
}

// BankRef names a MemoryBank.
type BankRef struct {
	// Namespace of the MemoryBank.
	Namespace string `json:"namespace"`
	// Name of the MemoryBank.
	Name string `json:"name"`
}

// String is namespace/name.
func (b BankRef) String() string { return b.Namespace + "/" + b.Name }

// MemoryQuery is exactly one of FromRuntime and FromRequest.
type MemoryQuery struct {
	// FromRuntime names the runtime section whose content (as given, before
	// any cut) is the query.
	FromRuntime string `json:"fromRuntime,omitempty"`
	// FromRequest: the query is the one given WithQuery (the "query" of a
	// POST /v1/assemble).
	FromRequest bool `json:"fromRequest,omitempty"`
}

// MemoryScope is exactly one of FromRuntime and FromRequest: where the
// scope a memory section recalls from comes from. A scope is one user's,
// tenant's or conversation's part of a bank; without one the section is
// left empty (MemoryNoScope), never filled from another scope.
type MemoryScope struct {
	// FromRuntime names the runtime section whose content, as given, is
	// the scope.
	FromRuntime string `json:"fromRuntime,omitempty"`
	// FromRequest: the scope is the one given WithScope (the "scope" of a
	// POST /v1/assemble).
	FromRequest bool `json:"fromRequest,omitempty"`
	// IncludeShared also recalls the bank's shared scope.
	IncludeShared bool `json:"includeShared,omitempty"`
}

// ValidateScope returns an *InvalidScopeError when scope is not a valid
// scope name, nil when it is: 1 to 253 bytes of ASCII letters, digits and
// "._:@-" (so that it is a URL path segment as it is), or "" for the bank's
// shared scope.
func ValidateScope(scope string) error {
	if msg := memscope.Problem(scope); msg != "" {
		return &InvalidScopeError{Reason: msg}
	}
	return nil
}

// InvalidScopeError is a scope name that ValidateScope refuses. It does
// not quote the name, which may identify a person.
type InvalidScopeError struct {
	// Reason says what is wrong: its length, or the first byte not allowed.
	Reason string
}

// Error is "scope: " and the reason.
func (e *InvalidScopeError) Error() string { return "scope: " + e.Reason }

// MemorySections lists the names of the memory sections in order.
func (p *Plan) MemorySections() []string {
	var out []string
	for _, s := range p.Sections {
		if s.Kind == KindMemory {
			out = append(out, s.Name)
		}
	}
	return out
}

// HasMemory reports whether the plan has memory sections.
func (p *Plan) HasMemory() bool {
	for i := range p.Sections {
		if p.Sections[i].Kind == KindMemory {
			return true
		}
	}
	return false
}

func (p *Plan) validateMemory(s *Section) error {
	// An if per rule, not a switch: gremlins v0.6.0 counts the conditions
	// of case clauses as not covered.
	m := s.Memory
	if m == nil {
		return fmt.Errorf("memory section %s has no memory", s.Name)
	}
	if m.Bank.Name == "" {
		return fmt.Errorf("memory section %s names no bank", s.Name)
	}
	if (m.Query.FromRuntime != "") == m.Query.FromRequest {
		return fmt.Errorf("memory section %s needs exactly one of query.fromRuntime and query.fromRequest", s.Name)
	}
	if sc := m.Scope; sc != nil && (sc.FromRuntime != "") == sc.FromRequest {
		return fmt.Errorf("memory section %s needs exactly one of scope.fromRuntime and scope.fromRequest", s.Name)
	}
	if m.MaxItems < 0 {
		return fmt.Errorf("memory section %s has negative maxItems", s.Name)
	}
	if m.MinScorePerMille < 0 || m.MinScorePerMille > MaxMinScorePerMille {
		return fmt.Errorf("memory section %s has minScorePerMille %d, want 0 to %d", s.Name, m.MinScorePerMille, MaxMinScorePerMille)
	}
	if s.Policy == PolicyNever {
		return fmt.Errorf("memory section %s has policy Never: memory is always cut by priority", s.Name)
	}
	if q := m.Query.FromRuntime; q != "" {
		if r := p.section(q); r == nil || r.Kind != KindRuntime {
			return fmt.Errorf("memory section %s takes its query from %q, which is not a runtime section", s.Name, q)
		}
	}
	if sc := m.Scope; sc != nil && sc.FromRuntime != "" {
		if r := p.section(sc.FromRuntime); r == nil || r.Kind != KindRuntime {
			return fmt.Errorf("memory section %s takes its scope from %q, which is not a runtime section", s.Name, sc.FromRuntime)
		}
	}
	return nil
}

// MaxMinScorePerMille is the most a minScorePerMille may be: a score of 1.
const MaxMinScorePerMille = 1000

// ScoreOfPerMille is a threshold in thousandths as a recall score (0 to
// 1), which MemoryItem.Score is: 250 is 0.25, the nearest float64 to it,
// so an item scored exactly at the threshold is taken.
func ScoreOfPerMille(perMille int) float64 { return float64(perMille) / 1000 }

// DefaultMemoryTimeout bounds one recall when WithMemoryTimeout is not given.
const DefaultMemoryTimeout = 250 * time.Millisecond

// MemoryRequest is one recall a memory section asks for.
type MemoryRequest struct {
	// Section is the memory section's name.
	Section string
	// Bank is the section's bank.
	Bank BankRef
	// Endpoint is the section's (MemorySource.Endpoint); it may be empty.
	Endpoint string
	// Query is the recall's query, never empty or only white space.
	Query string
	// Scope is the bank's scope to recall from, "" for the shared scope;
	// always valid (ValidateScope).
	Scope string
	// IncludeShared also recalls the shared scope.
	IncludeShared bool
	// MaxTokens is the section's reserve: the most its items may take.
	MaxTokens int
	// MaxItems is the section's (0: no limit).
	MaxItems int
	// MinScorePerMille is the section's: the lowest score taken, in
	// thousandths (0 to 1000).
	MinScorePerMille int
	// TrustedOnly asks for trusted items alone; the section drops any
	// other the recall answers.
	TrustedOnly bool
}

// RecallFunc recalls a bank's items for a request, best first. It should
// return when ctx is done; assembly does not wait for it past the timeout
// either way.
type RecallFunc func(ctx context.Context, r MemoryRequest) ([]MemoryItem, error)

// RecallError is an error a RecallFunc may return to name its code in
// MemoryResult.Code (for example the bank's error code or "HTTP401").
type RecallError struct {
	// Code goes to MemoryResult.Code; empty is MemoryRecallFailed.
	Code MemoryCode
	// Message says what failed.
	Message string
}

// Error is the code and the message.
func (e *RecallError) Error() string { return string(e.Code) + ": " + e.Message }

// AssembleOption configures Assemble.
type AssembleOption func(*assembleConfig)

// assembleConfig is what Assemble needs beyond the runtime contents.
type assembleConfig struct {
	recall  RecallFunc
	query   string
	scope   string
	timeout time.Duration
}

// WithRecall fills memory sections with f's answers.
func WithRecall(f RecallFunc) AssembleOption { return func(c *assembleConfig) { c.recall = f } }

// WithQuery is the recall query of the memory sections whose query is
// fromRequest.
func WithQuery(q string) AssembleOption { return func(c *assembleConfig) { c.query = q } }

// WithScope is the bank scope of the memory sections whose scope is
// fromRequest (one user's memory, say); see ValidateScope.
func WithScope(s string) AssembleOption { return func(c *assembleConfig) { c.scope = s } }

// WithMemoryTimeout bounds each recall; DefaultMemoryTimeout when 0 or
// not given. Recalls run side by side.
func WithMemoryTimeout(d time.Duration) AssembleOption {
	return func(c *assembleConfig) { c.timeout = d }
}

// MemoryCode says why a memory section is empty (MemoryResult.Code): one
// of the codes below, or a RecallError's.
type MemoryCode string

// Codes of MemoryResult.Code for a section left empty without an answer.
const (
	// MemoryNoQuery: the recall's query is empty or only white space.
	MemoryNoQuery MemoryCode = "NoQuery"
	// MemoryNoScope: the section recalls a scope and none was given.
	MemoryNoScope MemoryCode = "NoScope"
	// MemoryInvalidScope: the scope given is not a valid scope name
	// (ValidateScope).
	MemoryInvalidScope MemoryCode = "InvalidScope"
	// MemoryNoRecall: Assemble was given no WithRecall.
	MemoryNoRecall MemoryCode = "NoRecall"
	// MemoryTimedOut: the recall took longer than the timeout.
	MemoryTimedOut MemoryCode = "TimedOut"
	// MemoryRecallFailed: the recall returned an error without a code.
	MemoryRecallFailed MemoryCode = "RecallFailed"
	// MemorySpecialToken: an item holds a special-token string of the
	// encoding and specialTokens is Reject. The section is left empty
	// rather than failing the request: the item is the bank's, not the
	// caller's, and stays until it is erased.
	MemorySpecialToken MemoryCode = "SpecialToken"
)

// MemoryResult is what recall gave a memory section.
type MemoryResult struct {
	// Section is the memory section.
	Section string
	// Bank is the section's bank.
	Bank BankRef
	// Scope is the scope the section was recalled from: "" for the shared
	// scope, or when no recall was asked. It names a person's memory: do
	// not log it.
	Scope string
	// Items are the items in the prompt, in rank order.
	Items []MemoryItem
	// Recalled is how many items the recall answered; Omitted how many of
	// them are not in the prompt (below MinScorePerMille, past MaxItems, over the
	// reserve, or cut to fit the budget).
	Recalled, Omitted int
	// TimedOut is true when the recall took longer than the timeout.
	TimedOut bool
	// Code is empty when the recall answered; otherwise why the section is
	// empty: MemoryNoQuery, MemoryNoScope, MemoryInvalidScope,
	// MemoryNoRecall, MemoryTimedOut,
	// MemoryRecallFailed or a RecallError's code.
	Code MemoryCode
	// Err is the recall's error, if any. It may quote the query; do not log
	// it where the query must not appear.
	Err error
}

// memoryFill is a section's recalled items fitted to its reserve.
type memoryFill struct {
	fit    MemoryFit
	result MemoryResult
}

type recalled struct {
	items []MemoryItem
	err   error
}

// recallAll asks every memory section's recall at once and fits each
// answer to its section. It returns when all answered or timed out; a
// RecallFunc that ignores its context is left behind.
func (p *Plan) recallAll(ctx context.Context, e *tokens.Encoder, runtime map[string]string, o assembleConfig) (map[string]*memoryFill, error) {
	timeout := o.timeout
	if timeout <= 0 {
		timeout = DefaultMemoryTimeout
	}
	mem := map[string]*memoryFill{}
	type pending struct {
		fill *memoryFill
		req  MemoryRequest
		ch   chan recalled
	}
	var waits []pending
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for i := range p.Sections {
		s := &p.Sections[i]
		if s.Kind != KindMemory {
			continue
		}
		f := &memoryFill{result: MemoryResult{Section: s.Name, Bank: s.Memory.Bank}}
		mem[s.Name] = f
		q := o.query
		if s.Memory.Query.FromRuntime != "" {
			q = runtime[s.Memory.Query.FromRuntime]
		}
		if o.recall == nil {
			f.result.Code = MemoryNoRecall
			continue
		}
		if strings.TrimSpace(q) == "" {
			f.result.Code = MemoryNoQuery
			continue
		}
		req := MemoryRequest{Section: s.Name, Bank: s.Memory.Bank, Endpoint: s.Memory.Endpoint, Query: q,
			MaxTokens: s.ReserveTokens, MaxItems: s.Memory.MaxItems, MinScorePerMille: s.Memory.MinScorePerMille, TrustedOnly: s.Memory.TrustedOnly}
		if sc := s.Memory.Scope; sc != nil {
			req.Scope, req.IncludeShared = o.scope, sc.IncludeShared
			if sc.FromRuntime != "" {
				req.Scope = runtime[sc.FromRuntime]
			}
			if req.Scope == "" {
				f.result.Code = MemoryNoScope
				continue
			}
			if ValidateScope(req.Scope) != nil {
				f.result.Code = MemoryInvalidScope
				continue
			}
			f.result.Scope = req.Scope
		}
		ch := make(chan recalled, 1)
		go func(recall RecallFunc) {
			var r recalled
			defer func() {
				if v := recover(); v != nil {
					r = recalled{err: fmt.Errorf("recall panicked: %v", v)}
				}
				ch <- r
			}()
			r.items, r.err = recall(rctx, req)
		}(o.recall)
		waits = append(waits, pending{fill: f, req: req, ch: ch})
	}
	for _, w := range waits {
		var r recalled
		select {
		case r = <-w.ch:
		case <-rctx.Done():
			select {
			case r = <-w.ch: // answered at the deadline
			default:
				r.err = rctx.Err()
			}
		}
		if err := ctx.Err(); err != nil {
			// The request itself is over: nobody reads this assembly.
			return nil, err
		}
		res := &w.fill.result
		if errors.Is(r.err, context.DeadlineExceeded) {
			res.TimedOut, res.Code, res.Err = true, MemoryTimedOut, r.err
			continue
		}
		if r.err != nil {
			res.Code, res.Err = MemoryRecallFailed, r.err
			var re *RecallError
			if errors.As(r.err, &re) && re.Code != "" {
				res.Code = re.Code
			}
			continue
		}
		res.Recalled = len(r.items)
		if p.rejectsSpecials(e) && slices.ContainsFunc(r.items, func(it MemoryItem) bool { _, ok := e.Special(it.Text); return ok }) {
			res.Code = MemorySpecialToken
			continue
		}
		fit, err := p.fitRecalled(w.req, r.items)
		if err != nil {
			return nil, err
		}
		w.fill.fit = fit
	}
	return mem, nil
}

// fitRecalled keeps the items a section may take: the recall's answer is
// not trusted to honour MinScorePerMille, TrustedOnly, MaxItems or
// MaxTokens. Items scored below it, and under TrustedOnly items not trusted, are
// dropped, then the first MaxItems are fitted to the reserve.
func (p *Plan) fitRecalled(req MemoryRequest, items []MemoryItem) (MemoryFit, error) {
	minScore := ScoreOfPerMille(req.MinScorePerMille)
	takes := func(it *MemoryItem) bool { return it.Score >= minScore && (it.Trusted || !req.TrustedOnly) }
	kept := items
	for i := range items {
		if !takes(&items[i]) {
			kept = make([]MemoryItem, 0, len(items))
			for j := range items {
				if takes(&items[j]) {
					kept = append(kept, items[j])
				}
			}
			break
		}
	}
	if req.MaxItems > 0 {
		kept = kept[:min(len(kept), req.MaxItems)]
	}
	return FitMemory(p.Encoding, kept, req.MaxTokens)
}
