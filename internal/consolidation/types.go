// Package consolidation turns a bank's new facts into observations with an
// LLM: it batches facts, recalls related observations, builds the prompt,
// validates the answer strictly and applies it in one transaction per batch.
// It is pure domain code; stores and the LLM are ports.
package consolidation

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Fact is one thing an application learned and wrote to the bank.
type Fact struct {
	ID string `json:"id"`
	// Scope is the fact's scope; empty for the bank's shared scope.
	Scope         string     `json:"scope,omitempty"`
	Text          string     `json:"text"`
	Entities      []string   `json:"entities,omitempty"`
	OccurredStart *time.Time `json:"occurredStart,omitempty"`
	OccurredEnd   *time.Time `json:"occurredEnd,omitempty"`
	MentionedAt   *time.Time `json:"mentionedAt,omitempty"`
	Tags          []string   `json:"tags,omitempty"`
	// Source names who said it (SourceProblem): "user", "crm",
	// "tool.web-search"; SourceUnspecified (or "") when not given. A bank's
	// Trust decides from it whether the fact is trusted.
	Source        string    `json:"source,omitempty"`
	Status        string    `json:"status,omitempty"`
	FailureReason string    `json:"failureReason,omitempty"`
	CreatedAt     time.Time `json:"createdAt"`
}

// Fact states.
const (
	FactPending      = "pending"
	FactConsolidated = "consolidated"
	FactFailed       = "failed"
)

// Observation is durable knowledge synthesised from facts.
type Observation struct {
	ID string `json:"id"`
	// Scope is the scope of the observation's source facts; empty for the
	// bank's shared scope.
	Scope         string     `json:"scope,omitempty"`
	Text          string     `json:"text"`
	ProofCount    int        `json:"proof_count"`
	OccurredStart *time.Time `json:"occurred_start,omitempty"`
	OccurredEnd   *time.Time `json:"occurred_end,omitempty"`
	Entities      []string   `json:"entities,omitempty"`
	SourceFactIDs []string   `json:"source_fact_ids"`
	// Provenance is the distinct sources of the facts it cites, sorted
	// (JoinProvenance); a Trust decides from it whether it is trusted.
	Provenance []string  `json:"provenance,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// Candidate is an observation a store recalled for a fact, with the facts
// that support it (for the prompt's source_memories).
type Candidate struct {
	Observation
	Sources []Fact
}

// Create, Update and Delete are validated operations ready to apply.
type Create struct {
	Text          string
	SourceFactIDs []string
	// Vector is the text's embedding in Ops.Space; nil when there is none.
	Vector []float32
}

// Update replaces an observation's text and adds sources.
type Update struct {
	ObservationID string
	Text          string
	SourceFactIDs []string
	// Vector is the new text's embedding in Ops.Space; nil drops the old
	// vector when the text changes (the next run with embeddings
	// re-embeds it).
	Vector []float32
}

// Merge adds sources to an observation without touching its text: what a
// create or update the duplicate guard caught becomes.
type Merge struct {
	ObservationID string
	SourceFactIDs []string
}

// Delete removes an observation; its text is kept in the history.
type Delete struct {
	ObservationID string
}

// Ops is a batch's validated answer.
type Ops struct {
	Creates []Create
	Updates []Update
	Deletes []Delete
	Merges  []Merge
	// Space is the embedding space of the vectors carried by creates,
	// updates and FactVectors.
	Space Space
	// FactVectors are vectors of the batch's facts the store does not have
	// yet, written with the batch (for the facts it consolidates).
	FactVectors map[string][]float32
}

// RunStore is what a run (the Engine) needs of the store a bank lives in
// (sqlstore's PostgreSQL and SQLite). A method that takes a ScopeKey
// reads and writes that one scope's rows only (the bank's shared scope is
// BankID.Scope("")); one that takes a BankID works over every scope of
// the bank. A RunStore is safe for concurrent use: a run claims its next
// batch, and renews its claims, while it works on the current one.
//
// Runs that overlap (a Job's old pod beside its replacement, a run by hand)
// share a bank safely through claims: a run claims the facts it is about to
// send to the LLM, and only the claim's holder may consolidate or fail them.
// A claim expires at its lease, so a killed run's facts are taken up again.
type RunStore interface {
	// EnsureBank registers a bank.
	EnsureBank(ctx context.Context, bank BankID) error
	// PendingScopes lists the keys of the bank's scopes that have pending
	// facts no live claim holds at now, the scope with the oldest such
	// fact first.
	PendingScopes(ctx context.Context, bank BankID, now time.Time) ([]ScopeKey, error)
	// ClaimFacts atomically claims up to limit pending facts of the scope
	// that no live claim holds, oldest first, for run until until. Two
	// runs never receive the same fact while its claim lasts.
	ClaimFacts(ctx context.Context, key ScopeKey, run string, limit int, now, until time.Time) ([]Fact, error)
	// ExtendClaims moves the lease of run's claimed pending facts of the
	// scope to until.
	ExtendClaims(ctx context.Context, key ScopeKey, run string, until time.Time) error
	// ReleaseClaims gives up run's claims on facts still pending, in every
	// scope of the bank.
	ReleaseClaims(ctx context.Context, bank BankID, run string) error
	// CountFacts counts the bank's facts per status, all scopes together.
	CountFacts(ctx context.Context, bank BankID) (map[string]int64, error)
	// CountObservations counts the bank's observations, all scopes
	// together.
	CountObservations(ctx context.Context, bank BankID) (int, error)
	// CountScopeObservations counts the observations of one scope.
	CountScopeObservations(ctx context.Context, key ScopeKey) (int, error)
	// Recall returns, per fact id, up to limit observations of the scope
	// related to the fact by text similarity and up to limit more by
	// shared entities, best first as Rank ranks them, for a batch's facts
	// at once; without the candidates' sources (CandidateSources loads
	// them for the observations that reach the pool). It is safe to call
	// beside the other methods: the engine runs it alongside the semantic
	// recall.
	Recall(ctx context.Context, key ScopeKey, facts []Fact, limit int) (map[string][]Candidate, error)
	// Candidates loads observations of the scope by id, in the order
	// given, without their sources; ids that are gone (or of another
	// scope) are left out.
	Candidates(ctx context.Context, key ScopeKey, ids []string) ([]Candidate, error)
	// CandidateSources returns, per observation of the scope, all its
	// source fact ids and up to the same number of source facts, newest
	// first.
	CandidateSources(ctx context.Context, key ScopeKey, ids []string) (map[string][]string, map[string][]Fact, error)
	// HasObservationTexts tells, for many normalised texts at once, which
	// are the text of an observation of the scope.
	HasObservationTexts(ctx context.Context, key ScopeKey, norms []string) (map[string]bool, error)
	// WarmRecall loads what Recall needs for a scope, so that the first
	// batch's recall does not wait for it; ReleaseRecall drops it again
	// when a run is done with the scope (a run over many scopes holds one
	// at a time).
	WarmRecall(ctx context.Context, key ScopeKey) error
	ReleaseRecall(key ScopeKey)

	// The vectors of recall by meaning, in an embedding space sp; the
	// engine asks for them only with an Embedder.

	// FactVectors returns the vectors in sp of the given facts of the
	// scope that have one.
	FactVectors(ctx context.Context, key ScopeKey, sp Space, ids []string) (map[string][]float32, error)
	// PutFactVectors stores vectors in sp of facts of the scope,
	// replacing older ones.
	PutFactVectors(ctx context.Context, key ScopeKey, sp Space, vecs map[string][]float32) error
	// ScanObservationQuantized calls q with every observation vector of
	// the scope in sp as Quantize makes it (the store keeps them so), and
	// vec with any the store holds only as floats, streaming; the slices
	// are valid only during the call.
	ScanObservationQuantized(ctx context.Context, key ScopeKey, sp Space, q func(id string, q []int8, scale float32), vec func(id string, vec []float32)) error
	// ObservationsWithoutVector returns up to limit observations (id and
	// text) of the scope that have no vector in sp, with ids after after,
	// by id.
	ObservationsWithoutVector(ctx context.Context, key ScopeKey, sp Space, after string, limit int) ([]Observation, error)
	// PutObservationVectors stores vectors in sp of observations of the
	// scope.
	PutObservationVectors(ctx context.Context, key ScopeKey, sp Space, vecs map[string][]float32) error
	// Apply applies ops to the scope and marks the facts consolidated,
	// all in one transaction: all of it happens or none. The facts must be
	// pending and claimed by run; otherwise nothing is applied and the
	// error is ErrClaimLost, or *GoneError when facts or observations it
	// names were erased meanwhile. It returns the ids created.
	Apply(ctx context.Context, key ScopeKey, run string, ops Ops, consolidated []string, now time.Time) ([]string, error)
	// MarkFailed marks run's claimed pending facts of the scope failed
	// with a reason.
	MarkFailed(ctx context.Context, key ScopeKey, run string, ids []string, reason string, now time.Time) error

	// Retention (Settings.RetentionMaxAge).

	// ExpiredFacts returns up to limit of the bank's facts, of any scope
	// and status, stored (created_at) before before and after after in
	// (key, created_at, id) order: their ids by scope, and the position
	// of the last one, from which the next call goes on. A zero after
	// starts at the first.
	ExpiredFacts(ctx context.Context, bank BankID, before time.Time, after FactCursor, limit int) (map[ScopeKey][]string, FactCursor, error)
	// DeleteScopeFacts erases facts of the scope by id as the bank API's
	// DELETE of a fact does: each with every observation citing it, the
	// other sources of those observations put back to pending, in one
	// transaction.
	DeleteScopeFacts(ctx context.Context, key ScopeKey, ids []string) (Erasure, error)
}

// FactCursor is a fact's position in the order ExpiredFacts lists facts:
// its scope's key, its created_at as the store holds it (opaque: passed
// back unchanged, so the store compares it exactly) and its id. The zero
// FactCursor is before every fact.
type FactCursor struct {
	Key       ScopeKey
	CreatedAt any
	ID        string
}

// GoneError is an Apply refused because facts of the batch, or
// observations its operations name, were erased while the run worked on
// them: nothing was applied, and the run applies the batch again without
// what names them.
type GoneError struct{ Facts, Observations []string }

func (e *GoneError) Error() string {
	return fmt.Sprintf("%d facts and %d observations of the batch were erased while the run worked on it", len(e.Facts), len(e.Observations))
}

// ErrClaimLost means a batch's facts are no longer claimed by the run (its
// lease expired and another run took them): the batch was not applied.
var ErrClaimLost = errors.New("the run's claim on the batch's facts was lost (lease expired); the batch was not applied")

// ErrAnswerTooLarge is what an LLM port returns for an answer body over its
// size cap: an unusable answer, asked again like invalid JSON.
var ErrAnswerTooLarge = errors.New("answer over the size cap")

// ChatMessage is one chat message to the LLM.
type ChatMessage struct {
	Role    string // system or user
	Content string
}

// Request is one chat completion to ask for.
type Request struct {
	Messages []ChatMessage
	// Schema is the JSON schema the answer must match.
	Schema map[string]any
	// MaxTokens caps the completion (sent as max_tokens).
	MaxTokens int
}

// Completion is an LLM's answer.
type Completion struct {
	Content          string
	PromptTokens     int64
	CompletionTokens int64
	// Truncated is set when the model stopped at MaxTokens.
	Truncated bool
}

// LLM answers chat completions with a JSON response.
type LLM interface {
	// Complete asks for a JSON object matching req.Schema. An error means
	// the LLM could not be reached or kept failing (or ErrAnswerTooLarge);
	// an unusable answer is not an error here.
	Complete(ctx context.Context, req Request) (Completion, error)
}

// Settings of a run.
type Settings struct {
	Bank            BankID
	Mission         string
	MaxObservations int // 0: no cap
	// MaxObservationsPerScope caps each scope's observations as
	// MaxObservations caps the bank's; 0: no cap.
	MaxObservationsPerScope int
	// Parallelism is how many scopes a run works on at once; 0 is 1.
	Parallelism     int
	BatchSize       int
	MaxFacts        int
	MaxPromptTokens int
	MaxAttempts     int
	Encoding        string
	// RecallPerFact is how many observations each fact recalls.
	RecallPerFact int
	// MaxTokensPerRun bounds prompt plus completion tokens of the run,
	// retries and splits included; 0 is DefaultMaxTokensPerRun.
	MaxTokensPerRun int64
	// MaxCompletionTokens caps one answer; 0 is DefaultMaxCompletionTokens.
	MaxCompletionTokens int
	// ClaimLease is how long a claim on facts lasts without renewal; the
	// run renews it before every call. 0 is DefaultClaimLease.
	ClaimLease time.Duration
	// RunID names the run's claims; empty draws a random one.
	RunID string
	// DuplicateSimilarity is the cosine at or above which a create (or an
	// update) is a duplicate of an observation; 0 is
	// DefaultDuplicateSimilarity. Used only with an Embedder.
	DuplicateSimilarity float64
	// SemanticFloor is the least cosine at which an observation is
	// recalled by meaning; 0 is DefaultSemanticFloor.
	SemanticFloor float64
	// MaxReembedPerRun bounds the observations a run embeds that have no
	// vector in the run's space (a new bank, a changed model or
	// dimensions); 0 is DefaultMaxReembedPerRun.
	MaxReembedPerRun int
	// EmbedBatchSize is the most texts per embeddings call when
	// re-embedding; 0 is DefaultEmbedBatchSize.
	EmbedBatchSize int
	// RetentionMaxAge is how long a fact is kept after it was stored: a
	// run first erases the facts stored longer ago than that, as their
	// erasure by id does. 0 keeps facts until they are erased.
	RetentionMaxAge time.Duration
	// Trust is the bank's trusted sources: an answer item whose sources
	// include an untrusted fact never updates, deletes or joins a trusted
	// observation (an update is kept as a new observation instead). The
	// zero Trust trusts every source.
	Trust Trust
}

// Summary is what a run reports; its JSON is the Job's termination message.
type Summary struct {
	FactsConsolidated int64  `json:"factsConsolidated"`
	FactsFailed       int64  `json:"factsFailed"`
	Created           int64  `json:"created"`
	Updated           int64  `json:"updated"`
	Deleted           int64  `json:"deleted"`
	PromptTokens      int64  `json:"promptTokens"`
	CompletionTokens  int64  `json:"completionTokens"`
	Observations      int64  `json:"observations"`
	MissionHash       string `json:"missionHash"`
	Batches           int64  `json:"batches"`
	// LLMCalls counts every chat completion sent, retries included.
	LLMCalls int64 `json:"llmCalls"`
	// Retries counts calls that asked again about a batch's facts: after an
	// answer that could not be used at all, or for the facts whose every
	// item was invalid.
	Retries int64 `json:"retries"`
	// DroppedItems counts the answer items left out, by reason (the Drop*
	// constants).
	DroppedItems map[string]int64 `json:"droppedItems,omitempty"`
	// PendingFacts and FailedFacts are the bank's facts left pending and
	// failed after the run.
	PendingFacts int64 `json:"pendingFacts"`
	FailedFacts  int64 `json:"failedFacts"`
	// CutShort says why the run stopped before its facts were done
	// (maxTokensPerRun reached); empty when it was not.
	CutShort string `json:"cutShort,omitempty"`
	// Recall is "hybrid" (embeddings and lexical) or "lexical" (no
	// embeddings configured).
	Recall string `json:"recall,omitempty"`
	// EmbeddingCalls and EmbeddingTokens count the embeddings calls and
	// their tokens (the server's usage, else our count); the tokens count
	// toward maxTokensPerRun.
	EmbeddingCalls  int64 `json:"embeddingCalls,omitempty"`
	EmbeddingTokens int64 `json:"embeddingTokens,omitempty"`
	// Reembedded counts observations embedded because they had no vector
	// in the run's space.
	Reembedded int64 `json:"reembedded,omitempty"`
	// Redacted counts the secrets and personal data the run redacted from
	// what it sent to the LLM and the embeddings API, by kind (a text sent
	// again is counted again); never their text.
	Redacted map[string]int64 `json:"redacted,omitempty"`
	// ExpiredFacts counts the facts the run erased because they were
	// stored longer ago than RetentionMaxAge (the observations citing them
	// went with them).
	ExpiredFacts int64 `json:"expiredFacts,omitempty"`
	// ExpiredMessages counts the messages the run erased because they
	// were stored longer ago than RetentionMaxAge.
	ExpiredMessages int64 `json:"expiredMessages,omitempty"`
	// RefusedByTrust counts the changes of trusted observations the run
	// refused because untrusted facts asked for them (Settings.Trust): an
	// update kept as a new observation, a delete not made, sources not
	// joined to a trusted observation.
	RefusedByTrust int64 `json:"refusedByTrust,omitempty"`
	// Extraction is what the run's extraction of messages did (its calls
	// and tokens are also in the run's LLMCalls, Retries and token
	// counts); nil when the run had no Extractor.
	Extraction *Extraction `json:"extraction,omitempty"`
	Error      string      `json:"error,omitempty"`
}

// Reasons an answer item is dropped, as keys of Summary.DroppedItems.
const (
	DropUnknownObservation = "unknownObservation" // update or delete of an id not in the pool
	DropNotRecalled        = "notRecalled"        // update not recalled by one of its own sources
	DropNoSource           = "noSource"           // no source_fact_ids from the batch
	DropBadText            = "badText"            // empty, or longer than MaxObservationText
	DropRepeated           = "repeated"           // repeats an existing or another new observation
	DropConflict           = "conflict"           // an observation already deleted or updated by the answer
	DropExcessDeletes      = "excessDeletes"      // deletes beyond the runaway cap
	DropOverCapacity       = "overCapacity"       // creates beyond the bank's capacity
	DropDuplicate          = "duplicate"          // near-identical to an observation (duplicateSimilarity); its sources joined that one
	DropErased             = "erased"             // cites a fact erased while the run worked on it
)

// RefusedByTrust is the code of a change of a trusted observation that
// untrusted facts asked for and the run refused (Settings.Trust): counted
// in Summary.RefusedByTrust, not in DroppedItems, and never lossy (an
// update is kept as a new observation; a delete names no facts).
const RefusedByTrust = "refusedByTrust"

// Extractor is a run's first step when the bank holds messages: it turns
// the bank's pending messages into pending facts (package extraction), so
// that the run consolidates them with the rest. Its LLM calls count toward
// the run's MaxTokensPerRun through budget.
type Extractor interface {
	Extract(ctx context.Context, budget Budget) (Extraction, error)
}

// Budget is the run's token budget as an Extractor books it: Reserve
// books n tokens for a call when they fit (false: MaxTokensPerRun is
// reached, start no call), Release gives the booking back once the call
// is done, and Spend counts the tokens it used.
type Budget interface {
	Reserve(n int64) bool
	Release(n int64)
	Spend(n int64)
}

// Extraction is what a run's extraction did, in the run's Summary.
type Extraction struct {
	// MessagesExtracted and MessagesFailed count the messages extracted
	// and those marked failed (no usable answer after the attempts).
	MessagesExtracted int64 `json:"messagesExtracted"`
	MessagesFailed    int64 `json:"messagesFailed"`
	// FactsExtracted counts the facts the answers gave; FactsStored those
	// the bank did not hold already (the same message extracted again
	// makes none).
	FactsExtracted int64 `json:"factsExtracted"`
	FactsStored    int64 `json:"factsStored"`
	// Batches, LLMCalls (retries included), Retries, PromptTokens and
	// CompletionTokens are extraction's share of the run's.
	Batches          int64 `json:"batches"`
	LLMCalls         int64 `json:"llmCalls"`
	Retries          int64 `json:"retries"`
	PromptTokens     int64 `json:"promptTokens"`
	CompletionTokens int64 `json:"completionTokens"`
	// CacheablePromptTokens counts the prompt tokens of the calls'
	// unchanging prefix (the system message, the same in every call of the
	// bank), which a provider's prompt cache can serve.
	CacheablePromptTokens int64 `json:"cacheablePromptTokens"`
	// Redacted counts what extraction redacted from the messages it sent
	// and the facts it made, by kind.
	Redacted map[string]int64 `json:"redacted,omitempty"`
	// CutShort says the run's budget stopped extraction before its
	// messages were done.
	CutShort bool `json:"cutShort,omitempty"`
}
