package consolidation

import (
	"time"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/redact"
)

// Engine runs consolidation for one bank.
type Engine struct {
	Store    RunStore
	LLM      LLM
	Settings Settings
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Progress receives one line per LLM call; nil discards them. Lines
	// name facts by id and never quote their text.
	Progress func(line string)
	// Embedder turns on hybrid recall and the duplicate guard; nil keeps
	// recall lexical.
	Embedder Embedder
	// Redactor redacts the facts and observations a run sends to the LLM
	// and the texts it sends to the embeddings API, in case facts were
	// written straight into the store; nil sends them as stored.
	Redactor *redact.Redactor
	// Extractor, when set, turns the bank's pending messages into facts
	// first, within the run's budget (package extraction); nil leaves
	// messages alone.
	Extractor Extractor
}

// Defaults of the settings a run leaves zero: a MemoryBank's, defined in
// api/v1, and the engine's own.
const (
	DefaultBatchSize           = int(promptopsv1.DefaultBatchSize)
	DefaultMaxFacts            = int(promptopsv1.DefaultMaxFactsPerRun)
	DefaultMaxPromptTokens     = int(promptopsv1.DefaultMaxPromptTokens)
	DefaultMaxAttempts         = int(promptopsv1.DefaultMaxAttempts)
	DefaultRecallPerFact       = 5
	DefaultMaxTokensPerRun     = promptopsv1.DefaultMaxTokensPerRun
	DefaultMaxCompletionTokens = 16384
	DefaultClaimLease          = 10 * time.Minute
	DefaultDuplicateSimilarity = float64(promptopsv1.DefaultDuplicateSimilarityPerMille) / 1000
	DefaultSemanticFloor       = float64(promptopsv1.DefaultRecallSimilarityPerMille) / 1000
	DefaultMaxReembedPerRun    = int(promptopsv1.DefaultMaxReembedPerRun)
	DefaultEmbedBatchSize      = int(promptopsv1.DefaultEmbeddingsBatchSize)
)

// messageOverhead is the tokens chat formatting adds per message.
const messageOverhead = 8

// SetDefaults fills the settings left unset.
func (s *Settings) SetDefaults() {
	if s.BatchSize <= 0 {
		s.BatchSize = DefaultBatchSize
	}
	if s.MaxFacts <= 0 {
		s.MaxFacts = DefaultMaxFacts
	}
	if s.MaxPromptTokens <= 0 {
		s.MaxPromptTokens = DefaultMaxPromptTokens
	}
	if s.MaxAttempts <= 0 {
		s.MaxAttempts = DefaultMaxAttempts
	}
	if s.Encoding == "" {
		s.Encoding = string(promptopsv1.DefaultEncoding)
	}
	if s.RecallPerFact <= 0 {
		s.RecallPerFact = DefaultRecallPerFact
	}
	if s.MaxTokensPerRun <= 0 {
		s.MaxTokensPerRun = DefaultMaxTokensPerRun
	}
	if s.MaxCompletionTokens <= 0 {
		s.MaxCompletionTokens = DefaultMaxCompletionTokens
	}
	if s.ClaimLease <= 0 {
		s.ClaimLease = DefaultClaimLease
	}
	if s.DuplicateSimilarity <= 0 {
		s.DuplicateSimilarity = DefaultDuplicateSimilarity
	}
	if s.SemanticFloor <= 0 {
		s.SemanticFloor = DefaultSemanticFloor
	}
	if s.MaxReembedPerRun <= 0 {
		s.MaxReembedPerRun = DefaultMaxReembedPerRun
	}
	if s.EmbedBatchSize <= 0 {
		s.EmbedBatchSize = DefaultEmbedBatchSize
	}
}

// CompletionBudget is the max_tokens of a call for n facts: room for an
// observation of each fact and for updates of what they recalled, within
// the cap.
func CompletionBudget(n, limit int) int {
	return min(limit, 1024+1024*n)
}
