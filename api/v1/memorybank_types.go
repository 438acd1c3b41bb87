package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SecretKeyRef selects a key of a Secret in the bank's own namespace. The
// operator never reads it: the consolidation pod gets it through
// env.valueFrom.secretKeyRef.
type SecretKeyRef struct {
	// name of the Secret, in the same namespace as the bank.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// key in the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// PostgresStore keeps the bank in PostgreSQL.
type PostgresStore struct {
	// dsnSecretRef is the Secret key holding the connection string
	// (postgres://user:password@host:5432/db?sslmode=require).
	// +required
	DSNSecretRef SecretKeyRef `json:"dsnSecretRef"`
}

// SQLiteStore keeps the bank in a SQLite file.
type SQLiteStore struct {
	// path of the database file inside the consolidation pod. With
	// persistentVolumeClaimName the claim is mounted at the file's directory
	// (for a file in /tmp, the claim is the pod's /tmp). It must be in a
	// directory other than /, and not under /etc/promptops, /dev, /proc or /sys.
	// +required
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/[^\x00]*[^/]$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('//') && !self.contains('/./') && !self.contains('/../') && !self.endsWith('/.') && !self.endsWith('/..')",message="store.sqlite.path must be a clean absolute path, without //, . or .. elements"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^/[^/]*$')",message="store.sqlite.path must be in a directory, not directly in /: the file's directory is mounted into the pod"
	// +kubebuilder:validation:XValidation:rule="self != '/etc/promptops' && !self.startsWith('/etc/promptops/')",message="store.sqlite.path must not be under /etc/promptops, where the consolidation ConfigMap is mounted"
	// +kubebuilder:validation:XValidation:rule="!['/dev', '/proc', '/sys'].exists(d, self == d || self.startsWith(d + '/'))",message="store.sqlite.path must not be under /dev, /proc or /sys"
	Path string `json:"path"`

	// persistentVolumeClaimName is a claim in the bank's namespace that holds
	// the database file. Without it the file lives in an emptyDir and is lost
	// when the pod ends, which is only useful for tests.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	PersistentVolumeClaimName string `json:"persistentVolumeClaimName,omitempty"`
}

// BankStore is where a bank's facts and observations live: exactly one of
// postgres or sqlite.
// +kubebuilder:validation:XValidation:rule="(has(self.postgres) ? 1 : 0) + (has(self.sqlite) ? 1 : 0) == 1",message="store needs exactly one of postgres or sqlite"
type BankStore struct {
	// postgres keeps the bank in PostgreSQL; several banks may share one database.
	// +optional
	Postgres *PostgresStore `json:"postgres,omitempty"`

	// sqlite keeps the bank in a SQLite file.
	// +optional
	SQLite *SQLiteStore `json:"sqlite,omitempty"`
}

// LLMSpec is the model that consolidates the bank.
type LLMSpec struct {
	// baseURL of an OpenAI-compatible chat completions API (OpenAI, vLLM,
	// Ollama, LiteLLM), for example http://vllm.llm.svc:8000/v1.
	// +required
	// +kubebuilder:validation:MinLength=8
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^\\\\s/]+')",message="baseURL must be an http:// or https:// URL"
	BaseURL string `json:"baseURL"`

	// model name passed to the API.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Model string `json:"model"`

	// apiKeySecretRef is the Secret key holding the API key; without it
	// requests carry no key (local servers need none).
	// +optional
	APIKeySecretRef *SecretKeyRef `json:"apiKeySecretRef,omitempty"`

	// encoding tokens are counted with when sizing prompts: o200k_base or
	// cl100k_base (consolidation Jobs carry no tokenizers directory, so not
	// a supplied encoding such as llama3).
	// +optional
	// +kubebuilder:default=o200k_base
	// +kubebuilder:validation:XValidation:rule="self in ['o200k_base', 'cl100k_base']",message="a bank's encoding is o200k_base or cl100k_base: consolidation Jobs have no tokenizers directory for a supplied encoding"
	Encoding Encoding `json:"encoding,omitempty"`

	// maxPromptTokens is the budget for one consolidation call; batches are
	// cut so each prompt fits it.
	// +optional
	// +kubebuilder:default=16000
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=2000000
	MaxPromptTokens int32 `json:"maxPromptTokens,omitempty"`

	// timeoutSeconds bounds one LLM call.
	// +optional
	// +kubebuilder:default=120
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
}

// EmbeddingsSpec is the embedding model that gives the bank recall by
// meaning and the duplicate guard.
type EmbeddingsSpec struct {
	// baseURL of an OpenAI-compatible embeddings API (/v1/embeddings of
	// OpenAI, vLLM, Ollama, LiteLLM, TEI), for example
	// http://tei.llm.svc:8080/v1. A server that cannot be reached (or
	// keeps answering 5xx after the retries) fails the run with the reason
	// in status.lastRun.message; its facts stay pending for the next run.
	// Put the key in apiKeySecretRef, never in the URL.
	// +required
	// +kubebuilder:validation:MinLength=8
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^\\\\s/]+')",message="baseURL must be an http:// or https:// URL"
	BaseURL string `json:"baseURL"`

	// model name passed to the API. The bank's vectors are pinned to the
	// model and dimensions: changing either re-embeds the observations,
	// a bounded number per run, and never compares vectors of two models.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Model string `json:"model"`

	// dimensions asks the model for vectors of this size (text-embedding-3
	// and later); unset sends none and takes the model's own. The Job
	// holds each observation's vector in memory as about one byte a
	// dimension (1.8 KB an observation at 1,536, beside 0.5-0.65 KB of
	// lexical index), so this sets its memory with the bank's size.
	// +optional
	// +kubebuilder:validation:Minimum=8
	// +kubebuilder:validation:Maximum=8192
	Dimensions *int32 `json:"dimensions,omitempty"`

	// apiKeySecretRef is the Secret key, in the bank's namespace, holding
	// the embeddings API key; the Job reads it from the Secret as an
	// environment variable and never logs it. Without it requests carry
	// no key (local servers need none).
	// +optional
	APIKeySecretRef *SecretKeyRef `json:"apiKeySecretRef,omitempty"`

	// timeoutSeconds bounds one embeddings call; a call that times out is
	// retried as LLM calls are.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`

	// batchSize is the most texts per embeddings request. A batch of facts
	// (consolidation.batchSize) is embedded in one request, and so are
	// the texts of its answer checked by the duplicate guard.
	// +optional
	// +kubebuilder:default=64
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2048
	BatchSize int32 `json:"batchSize,omitempty"`

	// recallSimilarity is the least cosine, per mille, at which an
	// observation is recalled by meaning for a fact (300 is 0.30). The
	// nearest observations above it are recalled beside the lexical and
	// entity matches, nearest first.
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	RecallSimilarity int32 `json:"recallSimilarity,omitempty"`

	// maxReembedPerRun bounds the observations one run embeds that have no
	// vector of the current model and dimensions (a new or changed model);
	// those left wait for the next run and are recalled lexically meanwhile.
	// +optional
	// +kubebuilder:default=20000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000000
	MaxReembedPerRun int32 `json:"maxReembedPerRun,omitempty"`
}

// ConsolidationSpec says when and how consolidation Jobs run.
type ConsolidationSpec struct {
	// schedule is a cron expression (five fields, or @hourly and the like) in
	// UTC. Empty runs only on demand, through the annotation
	// promptops.io/consolidate-requested-at.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Schedule string `json:"schedule,omitempty"`

	// suspend stops new runs; a running Job finishes.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// batchSize is the number of facts per LLM call.
	// +optional
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	BatchSize int32 `json:"batchSize,omitempty"`

	// maxFactsPerRun bounds the facts one run consolidates, and so its cost.
	// +optional
	// +kubebuilder:default=200
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MaxFactsPerRun int32 `json:"maxFactsPerRun,omitempty"`

	// parallelism is how many scopes one run consolidates at once (one LLM
	// call in flight per scope); every scope is taken in turns, a batch at a
	// time, so a scope with many pending facts does not starve the others.
	// All calls share the run's maxTokensPerRun.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	Parallelism int32 `json:"parallelism,omitempty"`

	// maxAttempts is how often one batch is sent again after an invalid
	// answer before it is split.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	MaxAttempts int32 `json:"maxAttempts,omitempty"`

	// maxTokensPerRun bounds the prompt plus completion tokens of one run,
	// retries and splits included; when reached the run starts no new LLM
	// call and the remaining facts stay pending for the next run.
	// +optional
	// +kubebuilder:default=2000000
	// +kubebuilder:validation:Minimum=1000
	// +kubebuilder:validation:Maximum=10000000000
	MaxTokensPerRun int64 `json:"maxTokensPerRun,omitempty"`

	// duplicateSimilarity is the cosine, per mille, at or above which a new
	// or updated observation counts as a duplicate of one the bank holds
	// (970 is 0.97): it is not stored, its facts join that observation.
	// Used only with spec.embeddings.
	// +optional
	// +kubebuilder:default=970
	// +kubebuilder:validation:Minimum=500
	// +kubebuilder:validation:Maximum=1000
	DuplicateSimilarity int32 `json:"duplicateSimilarity,omitempty"`

	// activeDeadlineSeconds bounds one run's Job.
	// +optional
	// +kubebuilder:default=1800
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:Maximum=86400
	ActiveDeadlineSeconds int64 `json:"activeDeadlineSeconds,omitempty"`

	// backoffLimit is how often a failed pod is retried within one Job.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=6
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`

	// successfulJobsHistoryLimit is how many succeeded Jobs are kept.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	SuccessfulJobsHistoryLimit *int32 `json:"successfulJobsHistoryLimit,omitempty"`

	// failedJobsHistoryLimit is how many failed Jobs are kept.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	FailedJobsHistoryLimit *int32 `json:"failedJobsHistoryLimit,omitempty"`

	// image overrides the operator's image for the consolidation pod.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image,omitempty"`

	// resources of the consolidation container.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// serviceAccountName runs the pod under this service account; its token
	// is not mounted.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// nodeSelector of the consolidation pod.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations of the consolidation pod.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// ServingSpec runs the bank's HTTP API (retain and recall, `promptops serve
// --bank`) as a Deployment and Service named <bank>-memory. Callers
// authenticate with their ServiceAccount token; RBAC on memorybanks/facts
// (retain) and memorybanks/recall (recall) decides who may write and read.
type ServingSpec struct {
	// replicas of the memory server. Above 1 the operator adds a
	// PodDisruptionBudget that keeps all but one available. A bank in SQLite
	// is served by one replica.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Replicas int32 `json:"replicas,omitempty"`

	// resources of the memory server container. Unset requests 50m CPU and
	// 64Mi of memory, with a memory limit of 256Mi.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// MemoryBankSpec is the desired state of a memory bank.
// +kubebuilder:validation:XValidation:rule="!has(self.maxObservations) || !has(self.maxObservationsPerScope) || self.maxObservationsPerScope <= self.maxObservations",message="maxObservationsPerScope must not exceed maxObservations"
// +kubebuilder:validation:XValidation:rule="!has(self.serving) || !has(self.store.sqlite) || has(self.store.sqlite.persistentVolumeClaimName)",message="serving a bank in SQLite needs store.sqlite.persistentVolumeClaimName: the memory server and the consolidation Jobs must share the database file"
// +kubebuilder:validation:XValidation:rule="!has(self.serving) || !has(self.store.sqlite) || !has(self.serving.replicas) || self.serving.replicas == 1",message="a bank in SQLite is served by one replica: SQLite takes one writer and is not safe on a shared network filesystem; use store.postgres for more"
type MemoryBankSpec struct {
	// mission says what consolidation should track. Empty uses the default
	// mission: track every detail, prefer specifics, never generalise.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	Mission string `json:"mission,omitempty"`

	// maxObservations caps the bank's observations; at the cap runs only
	// update and delete.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000000
	MaxObservations *int32 `json:"maxObservations,omitempty"`

	// maxObservationsPerScope caps the observations of each named scope (a
	// fact's "scope", e.g. one user of a product) as maxObservations caps the
	// bank; at the cap a scope's runs only update and delete. The shared
	// scope counts against maxObservations only. Unset, a scope has no cap
	// of its own.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000000
	MaxObservationsPerScope *int32 `json:"maxObservationsPerScope,omitempty"`

	// store is where the bank's facts and observations live.
	// +required
	Store BankStore `json:"store"`

	// llm is the model that consolidates the bank.
	// +required
	LLM LLMSpec `json:"llm"`

	// consolidation says when and how runs happen.
	// +optional
	// +kubebuilder:default={}
	Consolidation ConsolidationSpec `json:"consolidation,omitempty"`

	// embeddings is the embedding model for recall by meaning (beside the
	// lexical recall) and the duplicate guard
	// (consolidation.duplicateSimilarity). Without it recall is lexical
	// only and status.recall says so.
	// +optional
	Embeddings *EmbeddingsSpec `json:"embeddings,omitempty"`

	// serving runs the bank's HTTP API for applications (retain facts,
	// recall within a token budget) as the Deployment and Service
	// <bank>-memory, with the operator's image and the store, encoding and
	// embeddings of this spec. Unset, the bank is not served and those
	// objects are removed.
	// +optional
	Serving *ServingSpec `json:"serving,omitempty"`

	// redaction says what is removed from a fact before it is stored
	// (retained through the bank's API or imported) and again before a
	// consolidation run sends it to the LLM or the embeddings API: secrets
	// are replaced by [REDACTED:<kind>] unless secrets says otherwise;
	// personal data only for the kinds personalData names. Unset, secrets
	// are redacted and personal data kept.
	// +optional
	Redaction *RedactionSpec `json:"redaction,omitempty"`

	// retention says how long the bank keeps a fact: each consolidation
	// run first erases the facts stored longer ago than maxAge, with the
	// observations citing them, as erasing them by id does. Unset, facts
	// are kept until they are erased.
	// +optional
	Retention *RetentionSpec `json:"retention,omitempty"`

	// extraction tunes how runs extract facts from retained messages;
	// unset, the defaults of its fields.
	// +optional
	Extraction *ExtractionSpec `json:"extraction,omitempty"`

	// trustedSources names the sources the bank trusts (a fact's "source":
	// who said it, for example user, crm or tool.web-search). A fact
	// retained without a source is of the source "unspecified": name it to
	// trust such facts. An observation is trusted when every fact it cites
	// is. Consolidation enforces it, not the model: untrusted facts never
	// update, delete or join a trusted observation (an update they ask for
	// is kept as a new, untrusted observation, and the refusal counted in
	// status.lastRun.refusedByTrust); recall marks each item trusted or not
	// and a memory section with trustedOnly takes trusted items alone.
	// Unset, every source is trusted, as before sources existed.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z][a-z0-9]*([._-][a-z0-9]+)*$`
	TrustedSources []string `json:"trustedSources,omitempty"`
}

// ExtractionSpec says how a consolidation run extracts facts from the
// messages applications retain (POST .../messages): before it consolidates,
// a run sends each conversation's new messages to the bank's LLM, a batch
// at a time with the messages said before them for context, and stores
// the durable facts the answer names, pending, in the conversation's
// scope, with the role of the messages they come from as their source.
// The calls count toward consolidation.maxTokensPerRun.
type ExtractionSpec struct {
	// maxPromptTokens bounds one extraction call's prompt, in tokens of
	// spec.llm's encoding; a message longer than that is cut at token
	// boundaries into parts that each fit.
	// +optional
	// +kubebuilder:default=8000
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=1000000
	MaxPromptTokens int32 `json:"maxPromptTokens,omitempty"`

	// contextMessages is how many messages said before a batch its prompt
	// shows for context (never extracted from again), at most; fewer when
	// the prompt's budget is spent.
	// +optional
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	ContextMessages *int32 `json:"contextMessages,omitempty"`

	// messagesPerBatch is the most new messages of one conversation per
	// extraction call: more per call cost fewer calls and repeat the
	// prompt's fixed part less often.
	// +optional
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	MessagesPerBatch int32 `json:"messagesPerBatch,omitempty"`
}

// RetentionSpec is how long a bank keeps its facts.
type RetentionSpec struct {
	// maxAge is how long after it was stored a fact expires, as a
	// duration (for example 720h for 30 days; at least 1m). Expired facts
	// are erased at the start of the next consolidation run, with every
	// observation citing them; their other sources are consolidated again.
	// Until that run they stay stored and recallable (a bank whose runs
	// are suspended keeps them).
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="retention.maxAge must be at least 1m"
	MaxAge metav1.Duration `json:"maxAge"`
}

// SecretsPolicy says what becomes of a fact holding a secret.
// +kubebuilder:validation:Enum=Redact;Reject;Keep
type SecretsPolicy string

// Secrets policies.
const (
	SecretsRedact SecretsPolicy = "Redact"
	SecretsReject SecretsPolicy = "Reject"
	SecretsKeep   SecretsPolicy = "Keep"
)

// PersonalDataKind is a kind of personal data a bank may redact.
// +kubebuilder:validation:Enum=Email;Phone;PaymentCard;IBAN;NationalID
type PersonalDataKind string

// RedactionSpec is what a bank redacts from its facts.
type RedactionSpec struct {
	// secrets is what becomes of a fact holding a secret (an API key or
	// token of a known provider, a private key, a connection string with
	// a password, a credential said in a sentence): Redact replaces each
	// with [REDACTED:<kind>]; Reject refuses the request that holds it
	// (HTTP 422 SecretInFact; facts import fails) and stores nothing of
	// it; Keep stores it as it is.
	// +optional
	// +kubebuilder:default=Redact
	Secrets SecretsPolicy `json:"secrets,omitempty"`

	// personalData lists the kinds of personal data to redact as well:
	// Email, Phone, PaymentCard (numbers passing the Luhn check), IBAN
	// (passing its checksum), NationalID. None by default.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=5
	PersonalData []PersonalDataKind `json:"personalData,omitempty"`
}

// RunSummary is what one consolidation run reported.
type RunSummary struct {
	// jobName of the run.
	JobName string `json:"jobName"`
	// startTime of the Job.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// completionTime of the Job.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// succeeded is true when the run finished without a run-level error.
	Succeeded bool `json:"succeeded"`
	// factsConsolidated in this run.
	// +optional
	FactsConsolidated int64 `json:"factsConsolidated,omitempty"`
	// factsFailed in this run: facts marked failed with a reason.
	// +optional
	FactsFailed int64 `json:"factsFailed,omitempty"`
	// created observations.
	// +optional
	Created int64 `json:"created,omitempty"`
	// updated observations.
	// +optional
	Updated int64 `json:"updated,omitempty"`
	// deleted observations.
	// +optional
	Deleted int64 `json:"deleted,omitempty"`
	// promptTokens of every call the run sent, retries and extraction's
	// included: the prompt tokens the LLM server reported for a call, or,
	// for a call it reported no usage for (a call refused or failed
	// included), the prompt as the run counted it in the bank's encoding.
	// A run whose every call was refused still counts its prompts.
	// +optional
	PromptTokens int64 `json:"promptTokens,omitempty"`
	// completionTokens of every call the run sent: the completion tokens
	// the LLM server reported for a call, or, without usage, the answer's
	// bytes over three (the call's maximum for an answer too large to read,
	// 0 for a call refused or failed without an answer).
	// +optional
	CompletionTokens int64 `json:"completionTokens,omitempty"`
	// observations in the bank after the run.
	// +optional
	Observations int64 `json:"observations,omitempty"`
	// llmCalls counts every chat completion the run sent, retries included.
	// +optional
	LLMCalls int64 `json:"llmCalls,omitempty"`
	// retries counts calls that asked again about a batch's facts: after an
	// answer that could not be used at all, or for the facts whose every
	// item was invalid.
	// +optional
	Retries int64 `json:"retries,omitempty"`
	// droppedItems counts the answer items the run left out, by reason
	// (unknownObservation, notRecalled, noSource, badText, repeated,
	// conflict, excessDeletes, overCapacity, duplicate).
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	DroppedItems map[string]int64 `json:"droppedItems,omitempty"`
	// pendingFacts is the bank's count of facts still pending after the run.
	// +optional
	PendingFacts int64 `json:"pendingFacts,omitempty"`
	// failedFacts is the bank's count of failed facts after the run.
	// +optional
	FailedFacts int64 `json:"failedFacts,omitempty"`
	// cutShort says why the run stopped before its facts were done (for
	// example maxTokensPerRun reached); empty when it was not.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	CutShort string `json:"cutShort,omitempty"`
	// missionHash of the mission the run used.
	// +optional
	MissionHash string `json:"missionHash,omitempty"`
	// recall the run used: hybrid (embeddings and lexical) or lexical.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Recall string `json:"recall,omitempty"`
	// embeddingCalls the run sent.
	// +optional
	EmbeddingCalls int64 `json:"embeddingCalls,omitempty"`
	// embeddingTokens of the run (the server's usage, else counted); they
	// count toward maxTokensPerRun.
	// +optional
	EmbeddingTokens int64 `json:"embeddingTokens,omitempty"`
	// reembedded counts observations embedded because they had no vector
	// of the current embedding model and dimensions.
	// +optional
	Reembedded int64 `json:"reembedded,omitempty"`
	// expiredFacts counts the facts the run erased because they were
	// stored longer ago than spec.retention.maxAge.
	// +optional
	ExpiredFacts int64 `json:"expiredFacts,omitempty"`
	// refusedByTrust counts the changes of trusted observations the run
	// refused because facts of sources not in spec.trustedSources asked
	// for them: an update kept as a new observation instead, a delete not
	// made, sources not joined to a trusted observation.
	// +optional
	RefusedByTrust int64 `json:"refusedByTrust,omitempty"`
	// expiredMessages counts the retained messages the run erased because
	// they were stored longer ago than spec.retention.maxAge.
	// +optional
	ExpiredMessages int64 `json:"expiredMessages,omitempty"`
	// extraction is what the run's extraction of retained messages did;
	// its calls and tokens are included in llmCalls, retries,
	// promptTokens and completionTokens. Absent when the run extracted
	// nothing.
	// +optional
	Extraction *RunExtraction `json:"extraction,omitempty"`
	// message explains a failure or a missing summary.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}

// RunExtraction is what one run's extraction of messages did.
type RunExtraction struct {
	// messagesExtracted by the run.
	// +optional
	MessagesExtracted int64 `json:"messagesExtracted,omitempty"`
	// messagesFailed: messages without a usable answer after the attempts,
	// marked failed and kept.
	// +optional
	MessagesFailed int64 `json:"messagesFailed,omitempty"`
	// factsExtracted from the messages; factsStored of them were new to
	// the bank (a message extracted again makes no second fact).
	// +optional
	FactsExtracted int64 `json:"factsExtracted,omitempty"`
	// +optional
	FactsStored int64 `json:"factsStored,omitempty"`
	// llmCalls of extraction, retries included.
	// +optional
	LLMCalls int64 `json:"llmCalls,omitempty"`
	// promptTokens and completionTokens of extraction's calls, counted as
	// the run's are: the usage the LLM server reported, or, without it,
	// the prompt as counted and the answer's bytes over three.
	// +optional
	PromptTokens int64 `json:"promptTokens,omitempty"`
	// +optional
	CompletionTokens int64 `json:"completionTokens,omitempty"`
	// cacheablePromptTokens: the prompt tokens of the calls' unchanging
	// prefix, which a provider's prompt cache can serve.
	// +optional
	CacheablePromptTokens int64 `json:"cacheablePromptTokens,omitempty"`
}

// MemoryBankStatus is the observed state of a MemoryBank.
type MemoryBankStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready always; Reconciling and Stalled only while True;
	// BudgetExceeded; Consolidating (True while a Job runs; the bank stays
	// Ready meanwhile); LastRunFailed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// configMapName holds the rendered consolidation prompt.
	// +optional
	ConfigMapName string `json:"configMapName,omitempty"`

	// missionHash is the hash of the current mission.
	// +optional
	MissionHash string `json:"missionHash,omitempty"`

	// promptTokens of the fixed consolidation prompt.
	// +optional
	PromptTokens int32 `json:"promptTokens,omitempty"`

	// lastScheduleTime is the schedule slot of the last scheduled run.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`

	// nextScheduleTime is when the next scheduled run starts.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`

	// activeJob is the running consolidation Job, if any.
	// +optional
	ActiveJob string `json:"activeJob,omitempty"`

	// lastHandledRequest is the last value of the annotation
	// promptops.io/consolidate-requested-at that started a run.
	// +optional
	LastHandledRequest string `json:"lastHandledRequest,omitempty"`

	// lastHandledReconcileAt is the last value of the annotation
	// reconcile.fluxcd.io/requestedAt (or promptops.io/reconcile-requested-at)
	// that a reconcile handled.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`

	// lastRun is the summary of the last finished run.
	// +optional
	LastRun *RunSummary `json:"lastRun,omitempty"`

	// recall says how runs recall observations for a fact: Hybrid (the
	// embeddings of spec.embeddings, lexical matches and shared entities,
	// with the duplicate guard) or Lexical (no spec.embeddings: text
	// similarity and shared entities only, no duplicate guard).
	// +optional
	// +kubebuilder:validation:Enum=Hybrid;Lexical
	Recall RecallMode `json:"recall,omitempty"`

	// serving is the state of the bank's memory server; absent when
	// spec.serving is unset.
	// +optional
	Serving *ServingStatus `json:"serving,omitempty"`
}

// ServingStatus is the observed state of a bank's memory server.
type ServingStatus struct {
	// endpoint is the URL of the bank's HTTP API inside the cluster
	// (https://<bank>-memory.<namespace>.svc:8089); prompt templates with a
	// memory section carry it in their plan.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Endpoint string `json:"endpoint,omitempty"`

	// replicas is the number of memory servers asked for.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// readyReplicas is the number of memory servers that answer their
	// readiness probe.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
}

// RecallMode is how a bank's runs recall observations.
type RecallMode string

// Recall modes.
const (
	RecallHybrid  RecallMode = "Hybrid"
	RecallLexical RecallMode = "Lexical"
)

// MemoryBank is a bank of facts consolidated into observations by an LLM,
// following the bank's mission. The operator renders the consolidation prompt
// and runs consolidation Jobs on a schedule or on demand.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mb,categories=promptops
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Last Run",type=string,JSONPath=`.status.conditions[?(@.type=="LastRunFailed")].reason`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.lastRun.pendingFacts`
// +kubebuilder:printcolumn:name="Observations",type=integer,JSONPath=`.status.lastRun.observations`
// +kubebuilder:printcolumn:name="Next Run",type=string,JSONPath=`.status.nextScheduleTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Active Job",type=string,priority=1,JSONPath=`.status.activeJob`
// +kubebuilder:printcolumn:name="Schedule",type=string,priority=1,JSONPath=`.spec.consolidation.schedule`
// +kubebuilder:printcolumn:name="Endpoint",type=string,priority=1,JSONPath=`.status.serving.endpoint`
// +kubebuilder:printcolumn:name="Message",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 48",message="metadata.name must be at most 48 characters: it names the bank's Jobs, whose names are limited to 63"
type MemoryBank struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired bank.
	// +required
	Spec MemoryBankSpec `json:"spec"`

	// status is what the operator observed.
	// +optional
	Status MemoryBankStatus `json:"status,omitempty"`
}

// MemoryBankList is a list of MemoryBanks.
// +kubebuilder:object:root=true
type MemoryBankList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MemoryBank `json:"items"`
}
