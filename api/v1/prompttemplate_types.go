package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SpecialTokens says what happens to a special-token string of the
// template's encoding (llama3's <|eot_id|>) in its prompt.
// +kubebuilder:validation:Enum=Reject;Allow
type SpecialTokens string

// The SpecialTokens values.
const (
	// SpecialTokensReject refuses a special-token string: in static text
	// the template does not render; at request time the assembly is refused
	// naming the section.
	SpecialTokensReject SpecialTokens = "Reject"
	// SpecialTokensAllow counts it as the model's tokenizer does: one token.
	SpecialTokensAllow SpecialTokens = "Allow"
)

// OnExceed says what the operator does when an intent does not fit its budget.
// +kubebuilder:validation:Enum=Reject;Warn;Truncate
type OnExceed string

const (
	// OnExceedReject keeps the last revision that fit and marks the template
	// not Ready.
	OnExceedReject OnExceed = "Reject"
	// OnExceedWarn renders anyway and reports BudgetExceeded.
	OnExceedWarn OnExceed = "Warn"
	// OnExceedTruncate cuts static sections by priority until every intent fits.
	OnExceedTruncate OnExceed = "Truncate"
)

// TruncationPolicy says whether a section may be cut.
// +kubebuilder:validation:Enum=Never;Priority
type TruncationPolicy string

const (
	// TruncationNever: the section is never cut.
	TruncationNever TruncationPolicy = "Never"
	// TruncationPriority: the section is cut by its priority, higher first.
	TruncationPriority TruncationPolicy = "Priority"
)

// Budget is the token budget every intent of a template must fit.
type Budget struct {
	// maxTokens is the most tokens one assembled prompt may have: fixed text
	// plus the reserves of runtime sections.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2000000
	MaxTokens int32 `json:"maxTokens"`

	// onExceed is what happens when an intent does not fit: Reject keeps the
	// last rendered revision that fit and sets Ready=False; Warn renders anyway;
	// Truncate cuts static sections by priority until it fits.
	// +optional
	// +kubebuilder:default=Reject
	OnExceed OnExceed `json:"onExceed,omitempty"`

	// minCacheableTokens, when set, is the least cacheable prefix an intent
	// should have: the tokens before its first runtime or memory section,
	// the same in every request, which a provider's prompt cache reuses
	// (OpenAI's from 1024 tokens). The webhook warns for each intent whose
	// prefix is shorter (status.intents[].cacheableTokens); nothing is
	// refused.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2000000
	MinCacheableTokens int32 `json:"minCacheableTokens,omitempty"`
}

// ConfigMapKeyRef selects a key of a ConfigMap in the template's own namespace.
type ConfigMapKeyRef struct {
	// name of the ConfigMap, in the same namespace as the template.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// key in the ConfigMap's data whose value is the text.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// TextSource is where a text comes from when it is not inline.
type TextSource struct {
	// configMapKeyRef reads the text from a key of a ConfigMap in the same
	// namespace. Editing that ConfigMap re-renders the template.
	// +required
	ConfigMapKeyRef ConfigMapKeyRef `json:"configMapKeyRef"`
}

// RuntimeSection is a slot the application fills at request time.
type RuntimeSection struct {
	// reserveTokens is the room the budget must leave for this section's
	// runtime content. It must be less than budget.maxTokens.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2000000
	ReserveTokens int32 `json:"reserveTokens,omitempty"`
}

// MemoryBankRef names a MemoryBank in the template's own namespace.
type MemoryBankRef struct {
	// name of the MemoryBank, in the same namespace as the template.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
}

// MemoryQuery says where a memory section's recall query comes from:
// exactly one of fromRuntime and fromRequest.
// +kubebuilder:validation:XValidation:rule="(has(self.fromRuntime) ? 1 : 0) + (has(self.fromRequest) && self.fromRequest ? 1 : 0) == 1",message="memory.query needs exactly one of fromRuntime and fromRequest: true"
type MemoryQuery struct {
	// fromRuntime names a runtime section of this template whose content
	// (as the application gives it) is the query.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-_a-z0-9]*[a-z0-9])?$`
	FromRuntime string `json:"fromRuntime,omitempty"`

	// fromRequest: the query is the "query" field of the assemble request.
	// +optional
	FromRequest bool `json:"fromRequest,omitempty"`
}

// MemoryScope says which scope of the bank a memory section recalls from
// (a scope is one user's, tenant's or conversation's part of the bank):
// exactly one of fromRuntime and fromRequest. A request that gives no
// scope leaves the section empty; it never falls back to another scope.
// +kubebuilder:validation:XValidation:rule="(has(self.fromRuntime) ? 1 : 0) + (has(self.fromRequest) && self.fromRequest ? 1 : 0) == 1",message="memory.scope needs exactly one of fromRuntime and fromRequest: true"
type MemoryScope struct {
	// fromRuntime names a runtime section of this template whose content
	// (as the application gives it) is the scope.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-_a-z0-9]*[a-z0-9])?$`
	FromRuntime string `json:"fromRuntime,omitempty"`

	// fromRequest: the scope is the "scope" field of the assemble request.
	// +optional
	FromRequest bool `json:"fromRequest,omitempty"`

	// includeShared also recalls the bank's shared scope (facts without a
	// scope), ranked with the scope's own items.
	// +optional
	IncludeShared bool `json:"includeShared,omitempty"`
}

// MemorySection is a slot filled at request time with what a MemoryBank
// recalls for a query: whole items, best first, within reserveTokens.
type MemorySection struct {
	// bankRef names the MemoryBank recalled from, in the template's
	// namespace. Its status.serving.endpoint goes into plan.json.
	// +required
	BankRef MemoryBankRef `json:"bankRef"`

	// query says where the recall's query comes from.
	// +required
	Query MemoryQuery `json:"query"`

	// scope says which scope of the bank is recalled. Unset, the bank's
	// shared scope is (facts retained without a scope).
	// +optional
	Scope *MemoryScope `json:"scope,omitempty"`

	// reserveTokens is the room the budget leaves for the recalled items,
	// counted like a runtime section's reserve; the section never holds
	// more. It must be less than budget.maxTokens.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2000000
	ReserveTokens int32 `json:"reserveTokens"`

	// maxItems is the most items the section holds.
	// +optional
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxItems int32 `json:"maxItems,omitempty"`

	// minScore is the lowest recall score of an item the section takes,
	// per mille (0 to 1000; 250 takes scores of 0.25 and above): the unit
	// of the plan's and the recall API's minScorePerMille and of a bank's
	// duplicateSimilarity. 0 (the default) takes any.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	MinScore int32 `json:"minScore,omitempty"`

	// trustedOnly recalls trusted observations and facts alone: those
	// whose every source is in the bank's spec.trustedSources (a bank that
	// names none trusts every source).
	// +optional
	TrustedOnly bool `json:"trustedOnly,omitempty"`
}

// Truncation says whether and how a section may be cut to fit the budget.
// +kubebuilder:validation:XValidation:rule="!has(self.policy) || self.policy != 'Never' || (!has(self.priority) && !has(self.minTokens))",message="priority and minTokens apply only to policy Priority"
type Truncation struct {
	// policy is Never (the section is never cut) or Priority (the default:
	// cut by priority when the prompt is over budget).
	// +optional
	// +kubebuilder:default=Priority
	Policy TruncationPolicy `json:"policy,omitempty"`

	// priority orders cuts: the section with the highest priority is cut first.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Priority *int32 `json:"priority,omitempty"`

	// minTokens is what a cut section keeps at least. It must be less than
	// budget.maxTokens.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2000000
	MinTokens *int32 `json:"minTokens,omitempty"`
}

// Section is one part of the assembled prompt. It has exactly one of text
// (inline), from (a ConfigMap key, with text as the fallback), runtime (filled
// by the application), memory (filled by recall from a MemoryBank) or
// intent: true (the chosen intent's instruction).
// +kubebuilder:validation:XValidation:rule="(has(self.text) || has(self.from) ? 1 : 0) + (has(self.runtime) ? 1 : 0) + (has(self.memory) ? 1 : 0) + (has(self.intent) && self.intent ? 1 : 0) == 1",message="a section has exactly one of text (or from), runtime, memory, or intent: true"
// +kubebuilder:validation:XValidation:rule="!has(self.memory) || !has(self.truncation) || !has(self.truncation.policy) || self.truncation.policy != 'Never'",message="a memory section is always cut by priority: truncation.policy Never does not apply to it"
type Section struct {
	// name identifies the section: lower case letters, digits, '-' and '_',
	// starting and ending with a letter or digit, unique in the template.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-_a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// heading is an optional line put before the section's text (for example
	// "## Tool results"). It counts towards the budget.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Heading string `json:"heading,omitempty"`

	// text is the section's inline text; with from it is the fallback used
	// when the referenced ConfigMap exists and lacks the key (a ConfigMap
	// that does not exist is ReferenceNotFound). {{ name }} is replaced by
	// the variable of that name.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Text *string `json:"text,omitempty"`

	// from reads the section's text from a ConfigMap key in the same namespace.
	// +optional
	From *TextSource `json:"from,omitempty"`

	// runtime marks a slot the application fills at request time.
	// +optional
	Runtime *RuntimeSection `json:"runtime,omitempty"`

	// memory marks a slot filled at request time by recall from a
	// MemoryBank (promptops serve, or the plan package's Assemble with
	// WithRecall). A recall that fails or is slow leaves it empty.
	// +optional
	Memory *MemorySection `json:"memory,omitempty"`

	// intent marks the section that holds the chosen intent's instruction.
	// Exactly one section has intent: true.
	// +optional
	Intent bool `json:"intent,omitempty"`

	// truncation says whether and how this section may be cut to fit the
	// budget. The default is policy Priority with priority 0, except for the
	// intent section: without a truncation of its own it is never cut.
	// +optional
	Truncation *Truncation `json:"truncation,omitempty"`
}

// Intent is one kind of request (chat, explore, analyze...) with its own
// instruction. Each intent is assembled and checked against the budget.
// +kubebuilder:validation:XValidation:rule="has(self.instruction) || has(self.from)",message="an intent needs instruction or from"
type Intent struct {
	// name of the intent: lower case letters, digits and '-', unique in the
	// template. It becomes the ConfigMap key <name>.txt.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// instruction is the intent's inline instruction; with from it is the
	// fallback used when the referenced ConfigMap exists and lacks the key
	// (a ConfigMap that does not exist is ReferenceNotFound).
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Instruction *string `json:"instruction,omitempty"`

	// from reads the instruction from a ConfigMap key in the same namespace.
	// +optional
	From *TextSource `json:"from,omitempty"`
}

// PromptTemplateSpec is the desired prompt: ordered sections, intents and a
// token budget.
// +kubebuilder:validation:XValidation:rule="self.sections.filter(s, has(s.intent) && s.intent).size() == 1",message="exactly one section must have intent: true"
// +kubebuilder:validation:XValidation:rule="self.sections.all(s, !has(s.runtime) || !has(s.runtime.reserveTokens) || s.runtime.reserveTokens < self.budget.maxTokens)",message="runtime.reserveTokens must be less than budget.maxTokens"
// +kubebuilder:validation:XValidation:rule="self.sections.all(s, !has(s.truncation) || !has(s.truncation.minTokens) || s.truncation.minTokens < self.budget.maxTokens)",message="truncation.minTokens must be less than budget.maxTokens"
// +kubebuilder:validation:XValidation:rule="self.sections.all(s, !has(s.memory) || s.memory.reserveTokens < self.budget.maxTokens)",message="memory.reserveTokens must be less than budget.maxTokens"
// +kubebuilder:validation:XValidation:rule="self.sections.all(s, !has(s.memory) || !has(s.memory.query.fromRuntime) || self.sections.exists(r, r.name == s.memory.query.fromRuntime && has(r.runtime)))",message="memory.query.fromRuntime must name a runtime section of this template"
// +kubebuilder:validation:XValidation:rule="self.sections.all(s, !has(s.memory) || !has(s.memory.scope) || !has(s.memory.scope.fromRuntime) || self.sections.exists(r, r.name == s.memory.scope.fromRuntime && has(r.runtime)))",message="memory.scope.fromRuntime must name a runtime section of this template"
type PromptTemplateSpec struct {
	// encoding is the tokenizer tokens are counted with: o200k_base
	// (GPT-4o and later) or cl100k_base (GPT-4, GPT-3.5), built in; or
	// llama3 (Llama 3.0-3.3), qwen3 (Qwen 3), deepseek_v3 (DeepSeek V3 and
	// R1), tekken (Mistral NeMo and later) or gemma3 (Gemma 3), whose
	// tokenizer.json the platform team supplies in the tokenizers
	// directory (the chart's tokenizers values).
	// Without it the template is Ready=False, TokenizerUnavailable.
	// +optional
	// +kubebuilder:default=o200k_base
	Encoding Encoding `json:"encoding,omitempty"`

	// specialTokens is what happens to a special-token string of the
	// encoding (llama3's <|eot_id|>, qwen3's <|im_end|>) in the prompt. A
	// model's serving stack turns one into a control token, so a runtime
	// value or a recalled memory that holds one could end the system turn
	// and start a turn of its own. Reject (the default) refuses it: in
	// static text the template is Stalled, InvalidTemplate (and the webhook
	// refuses it); in a runtime value or memory item the assembly is
	// refused naming the section (serve answers 422, code SpecialToken).
	// Allow counts it as the model's tokenizer does, one token. The
	// tiktoken encodings count such strings as text and have none. Of
	// gemma3's added tokens only those its file marks special
	// (<start_of_turn>, <end_of_turn>) are refused; its others are plain
	// text (line feeds, HTML tags), one token each.
	// +optional
	// +kubebuilder:default=Reject
	SpecialTokens SpecialTokens `json:"specialTokens,omitempty"`

	// budget is the token budget every intent must fit.
	// +required
	Budget Budget `json:"budget"`

	// variables are substituted for {{ name }} in every text, heading and
	// instruction. Names are letters, digits and '_', not starting with a
	// digit; values are at most 65536 characters, and a text with its
	// variables substituted is at most 65536 characters too.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[A-Za-z_][A-Za-z0-9_]{0,62}$'))",message="variable names are letters, digits and '_', not starting with a digit, at most 63 characters"
	// +kubebuilder:validation:XValidation:rule="self.all(k, self[k].size() <= 65536)",message="variable values are at most 65536 characters"
	Variables map[string]string `json:"variables,omitempty"`

	// sections are the parts of the prompt, rendered in this order and joined
	// by a blank line.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Sections []Section `json:"sections"`

	// intents are the kinds of request this prompt serves; each is assembled
	// with its instruction in the intent section and checked against the budget.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Intents []Intent `json:"intents"`

	// rollout, when set, sends a change of the template to a share of
	// requests first, in steps, before every request gets it; see Rollout.
	// +optional
	Rollout *Rollout `json:"rollout,omitempty"`

	// revisionHistoryLimit is how many immutable copies <name>-prompts-<hash8>
	// of past revisions are kept, for Deployments that roll on a new name.
	// 0 (the default) keeps none.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=20
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`
}

// SectionTokens is one section's share of an assembled intent.
type SectionTokens struct {
	// name of the section.
	Name string `json:"name"`
	// tokens the section takes: its text, or its reserve for a runtime section.
	Tokens int32 `json:"tokens"`
	// truncatedTokens is how many tokens were cut from the section.
	// +optional
	TruncatedTokens int32 `json:"truncatedTokens,omitempty"`
}

// IntentStatus is the budget verdict for one intent.
type IntentStatus struct {
	// name of the intent.
	Name string `json:"name"`
	// tokens of the assembled prompt: fixed text plus runtime reserves.
	Tokens int32 `json:"tokens"`
	// fixedTokens is the part of tokens that is static text.
	// +optional
	FixedTokens int32 `json:"fixedTokens,omitempty"`
	// reservedTokens is the part of tokens reserved for runtime sections.
	// +optional
	ReservedTokens int32 `json:"reservedTokens,omitempty"`
	// cacheableTokens counts the prompt's text before its first runtime or
	// memory section: the prefix that is the same in every request, which a
	// provider's prompt cache can reuse. Place sections that change per
	// request last to make it longer.
	// +optional
	CacheableTokens int32 `json:"cacheableTokens,omitempty"`
	// maxTokens is the budget.
	MaxTokens int32 `json:"maxTokens"`
	// withinBudget is true when tokens <= maxTokens.
	WithinBudget bool `json:"withinBudget"`
	// truncatedSections names the static sections cut to fit (onExceed: Truncate).
	// +optional
	// +listType=atomic
	TruncatedSections []string `json:"truncatedSections,omitempty"`
}

// PromptTemplateStatus is the observed state of a PromptTemplate.
type PromptTemplateStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready always; Reconciling and Stalled only while True;
	// BudgetExceeded and Truncated; MemoryUnavailable (with memory sections:
	// True while a bank they recall from is missing or not served).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// revision is the hash of everything rendered into the ConfigMap.
	// +optional
	Revision string `json:"revision,omitempty"`

	// configMapName is the rendered ConfigMap applications mount.
	// +optional
	ConfigMapName string `json:"configMapName,omitempty"`

	// encoding the counts were made with.
	// +optional
	Encoding Encoding `json:"encoding,omitempty"`

	// largestTokens is the token count of the largest intent.
	// +optional
	LargestTokens int32 `json:"largestTokens,omitempty"`

	// intents has one budget verdict per intent.
	// +optional
	// +listType=map
	// +listMapKey=name
	Intents []IntentStatus `json:"intents,omitempty"`

	// lastHandledReconcileAt is the last value of the annotation
	// reconcile.fluxcd.io/requestedAt (or promptops.io/reconcile-requested-at)
	// that a reconcile handled.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`

	// rollout is the state of the template's rollout (spec.rollout).
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`
}

// PromptTemplate is a system prompt as ordered sections, one instruction per
// intent and a token budget. The operator counts tokens exactly, renders the
// ConfigMap <name>-prompts and reports overruns as conditions.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pt,categories=promptops
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Max Tokens",type=integer,JSONPath=`.spec.budget.maxTokens`
// +kubebuilder:printcolumn:name="Largest",type=integer,JSONPath=`.status.largestTokens`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name must be at most 63 characters: it names and labels the rendered ConfigMaps"
type PromptTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired prompt.
	// +required
	Spec PromptTemplateSpec `json:"spec"`

	// status is what the operator observed and rendered.
	// +optional
	Status PromptTemplateStatus `json:"status,omitempty"`
}

// PromptTemplateList is a list of PromptTemplates.
// +kubebuilder:object:root=true
type PromptTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PromptTemplate `json:"items"`
}
