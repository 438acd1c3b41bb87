package v1

// Condition types. Ready is always present; Reconciling and Stalled are
// present only while True (kstatus). The others are positive statements that
// are True while the thing they name is happening.
const (
	ConditionReady          = "Ready"
	ConditionReconciling    = "Reconciling"
	ConditionStalled        = "Stalled"
	ConditionBudgetExceeded = "BudgetExceeded"
	ConditionTruncated      = "Truncated"
	ConditionLastRunFailed  = "LastRunFailed"
	// ConditionConsolidating is True while a consolidation Job runs. A run
	// is background work, not a change of desired state: the bank stays
	// Ready (kstatus Current) meanwhile.
	ConditionConsolidating = "Consolidating"
	// ConditionMemoryUnavailable is True on a template with memory sections
	// while a bank they recall from is missing or not served: those
	// sections stay empty at request time. It does not fail the render.
	ConditionMemoryUnavailable = "MemoryUnavailable"
)

// Condition reasons, shared by both kinds.
const (
	// ReasonSucceeded: the object was fully reconciled.
	ReasonSucceeded = "Succeeded"
	// ReasonProgressing: work for the current generation is under way.
	ReasonProgressing = "Progressing"
	// ReasonRolloutProgressing: a change of the template is rolling out
	// (Ready False, Reconciling True).
	ReasonRolloutProgressing = "RolloutProgressing"
	// ReasonRolloutPaused: a rollout holds at a step until promoted (Ready
	// False, Reconciling True).
	ReasonRolloutPaused = "RolloutPaused"
	// ReasonRolloutAborted: the rollout of the template's current spec was
	// aborted; every request gets the stable revision (Ready False,
	// Stalled True) until the spec changes.
	ReasonRolloutAborted = "RolloutAborted"
	// ReasonBudgetExceeded: at least one intent does not fit its token budget.
	ReasonBudgetExceeded = "BudgetExceeded"
	// ReasonWithinBudget: every intent fits its token budget.
	ReasonWithinBudget = "WithinBudget"
	// ReasonTruncated: static sections were cut so that every intent fits.
	ReasonTruncated = "Truncated"
	// ReasonNotTruncated: nothing had to be cut.
	ReasonNotTruncated = "NotTruncated"
	// ReasonInvalidTemplate: the template's content cannot be rendered
	// (unknown variable, invalid text); a user must change the spec.
	ReasonInvalidTemplate = "InvalidTemplate"
	// ReasonReferenceNotFound: a referenced ConfigMap is missing, or a key
	// of one that exists is and the section or intent has no fallback text.
	ReasonReferenceNotFound = "ReferenceNotFound"
	// ReasonInvalidSchedule: the consolidation schedule does not parse, or
	// never fires.
	ReasonInvalidSchedule = "InvalidSchedule"
	// ReasonSuspended: consolidation is suspended by spec.consolidation.suspend.
	ReasonSuspended = "Suspended"
	// ReasonJobRunning: a consolidation Job is running.
	ReasonJobRunning = "JobRunning"
	// ReasonRunDeferred: a requested run waits for the running Job (an
	// event, once per value of the consolidate-requested-at annotation).
	ReasonRunDeferred = "RunDeferred"
	// ReasonJobFailed: the last consolidation Job failed.
	ReasonJobFailed = "JobFailed"
	// ReasonJobSucceeded: the last consolidation Job succeeded.
	ReasonJobSucceeded = "JobSucceeded"
	// ReasonNoJobImage: the manager has no image for consolidation Jobs and
	// the bank names none.
	ReasonNoJobImage = "NoJobImage"
	// ReasonJobRejected: the API server refused to create the consolidation
	// Job; the condition message carries its answer.
	ReasonJobRejected = "JobRejected"
	// ReasonReconcileError: a reconcile failed for a reason the API server
	// did not name (the message says what); it is retried.
	ReasonReconcileError = "ReconcileError"
	// ReasonTooLarge: what the object renders to is over a limit the API
	// server enforces (a ConfigMap's 1 MiB) or over a text's bound.
	ReasonTooLarge = "TooLarge"
	// ReasonIdle: no consolidation Job is running.
	ReasonIdle = "Idle"
	// ReasonMemoryBankNotFound: a MemoryBank a memory section names does
	// not exist in the template's namespace.
	ReasonMemoryBankNotFound = "MemoryBankNotFound"
	// ReasonTokenizerUnavailable: the encoding's vocabulary is not in the
	// manager's tokenizers directory, or is another model's.
	ReasonTokenizerUnavailable = "TokenizerUnavailable"
	// ReasonMemoryBankNotServed: a MemoryBank a memory section names has no
	// status.serving.endpoint.
	ReasonMemoryBankNotServed = "MemoryBankNotServed"
	// ReasonMemoryServed: every bank the memory sections name is served.
	ReasonMemoryServed = "MemoryServed"
	// ReasonInvalidRunSummary: the finished pod's termination message was
	// missing or not a run summary.
	ReasonInvalidRunSummary = "InvalidRunSummary"
	// ReasonServingNotAvailable: the bank's memory server Deployment does
	// not yet have its replicas updated and available.
	ReasonServingNotAvailable = "ServingNotAvailable"
	// ReasonCertificateConflict: the Secret a served bank's certificate
	// goes into exists and was not written by the manager, which does not
	// overwrite it.
	ReasonCertificateConflict = "CertificateConflict"
)

// Annotations and labels.
const (
	// AnnotationConsolidateRequestedAt starts one consolidation run for each
	// new value (for example the output of `date -Iseconds`).
	AnnotationConsolidateRequestedAt = "promptops.io/consolidate-requested-at"
	// AnnotationReconcileRequestedAt asks for a reconcile now, whatever
	// changed; its value is recorded in status.lastHandledReconcileAt.
	AnnotationReconcileRequestedAt = "promptops.io/reconcile-requested-at"
	// AnnotationFluxReconcileRequestedAt is Flux's equivalent (`flux
	// reconcile` sets it), honoured the same way.
	AnnotationFluxReconcileRequestedAt = "reconcile.fluxcd.io/requestedAt"
	// AnnotationRevision on a rendered ConfigMap is the revision it holds.
	AnnotationRevision = "promptops.io/revision"
	// AnnotationRolloutPromote, set to a template's canary revision
	// (status.rollout.canaryRevision), promotes that revision: it becomes
	// the stable one. A value naming another revision is ignored.
	AnnotationRolloutPromote = "promptops.io/rollout-promote"
	// AnnotationRolloutAbort, set to a template's canary revision, aborts
	// its rollout: every request goes back to the stable revision. A
	// value naming another revision is ignored.
	AnnotationRolloutAbort = "promptops.io/rollout-abort"
	// AnnotationMissionHash on a consolidation ConfigMap or Job is the hash
	// of the mission it carries.
	AnnotationMissionHash = "promptops.io/mission-hash"
	// LabelManagedBy marks every object the operator writes.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelManagedByValue is the value of LabelManagedBy.
	LabelManagedByValue = "promptops"
	// LabelPromptTemplate names the PromptTemplate a ConfigMap was rendered from.
	LabelPromptTemplate = "promptops.io/prompttemplate"
	// LabelMemoryBank names the MemoryBank an object belongs to.
	LabelMemoryBank = "promptops.io/memorybank"
)

// Encoding is the tokenizer tokens are counted with: a tiktoken encoding
// (built in) or an open model's, whose vocabulary the platform team
// supplies (the manager's and serve's tokenizers directory).
// +kubebuilder:validation:Enum=cl100k_base;o200k_base;llama3;qwen3;deepseek_v3;tekken;gemma3
type Encoding string

// Supported encodings.
const (
	EncodingCL100K Encoding = "cl100k_base"
	EncodingO200K  Encoding = "o200k_base"
	// EncodingLlama3 is Llama 3.0-3.3's; its vocabulary is supplied.
	EncodingLlama3 Encoding = "llama3"
	// EncodingQwen3 is Qwen 3's (and Qwen 2.5's BPE); its vocabulary is
	// supplied.
	EncodingQwen3 Encoding = "qwen3"
	// EncodingDeepSeekV3 is DeepSeek V3's and R1's; its vocabulary is
	// supplied.
	EncodingDeepSeekV3 Encoding = "deepseek_v3"
	// EncodingTekken is Mistral's Tekken (Mistral NeMo and later); its
	// vocabulary is supplied.
	EncodingTekken Encoding = "tekken"
	// EncodingGemma3 is Gemma 3's (SentencePiece); its vocabulary is
	// supplied.
	EncodingGemma3 Encoding = "gemma3"
)
