package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Rollout sends a change of the template to a share of requests first, in
// steps, and makes it the stable revision at the end (promoted), or sends
// every request back to the stable revision (aborted). A request's
// revision is decided by its assignment key (docs/plan.md, "Rollout
// assignment"), so a key keeps its revision while the weight grows.
// Without spec.rollout a change goes live at once; the first revision of a
// template always does.
type Rollout struct {
	// steps, in order: each sends weight percent of the keys to the new
	// revision, for its pause. After the last step the new revision is
	// promoted. A change during a rollout replaces the canary and starts
	// again at the first step.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	Steps []RolloutStep `json:"steps"`

	// analysis, when set, queries Prometheus every interval while the
	// rollout runs; failureLimit failed measurements abort it, with the
	// query's value in status.rollout.message. The canary is not promoted
	// before its first measurement.
	// +optional
	Analysis *RolloutAnalysis `json:"analysis,omitempty"`
}

// RolloutStep is one step of a rollout.
type RolloutStep struct {
	// weight is the share of assignment keys, in percent, that get the new
	// revision during the step.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Weight int32 `json:"weight"`

	// pause is how long the step lasts: pause.duration, or pause: {} to hold
	// it until promoted (promptops rollout promote). Without pause the next
	// step follows at once.
	// +optional
	Pause *RolloutPause `json:"pause,omitempty"`
}

// RolloutPause is how long a step lasts.
type RolloutPause struct {
	// duration of the step (a Go duration, at least 1s, at most 168h).
	// Unset, the step holds until the rollout is promoted.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('168h')",message="pause.duration must be between 1s and 168h"
	Duration *metav1.Duration `json:"duration,omitempty"`
}

// RolloutAnalysis measures the new revision with a Prometheus query.
type RolloutAnalysis struct {
	// prometheus is the query and its bound.
	// +required
	Prometheus PrometheusAnalysis `json:"prometheus"`

	// interval between two measurements (at least 5s, at most 24h).
	// +optional
	// +kubebuilder:default="1m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s') && duration(self) <= duration('24h')",message="analysis.interval must be between 5s and 24h"
	Interval *metav1.Duration `json:"interval,omitempty"`

	// failureLimit is how many failed measurements abort the rollout. A
	// measurement that is no number (no sample, several, NaN) or an
	// unreachable server counts as failed.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	FailureLimit int32 `json:"failureLimit,omitempty"`
}

// PrometheusAnalysis is an instant query that must answer one number
// within a bound: exactly one of maxValue and minValue.
// +kubebuilder:validation:XValidation:rule="has(self.maxValue) != has(self.minValue)",message="analysis.prometheus needs exactly one of maxValue and minValue"
type PrometheusAnalysis struct {
	// address of the Prometheus server's HTTP API, http:// or https://.
	// +required
	// +kubebuilder:validation:MinLength=8
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	Address string `json:"address"`

	// query is a PromQL instant query that answers one sample. It may name
	// the revision under test as {{revision}}, which becomes that
	// revision as a PromQL string: revision={{revision}}.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Query string `json:"query"`

	// maxValue: a measurement passes when the value is at most this
	// number (a decimal, as a string: "0.05").
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$`
	MaxValue *string `json:"maxValue,omitempty"`

	// minValue: a measurement passes when the value is at least this
	// number.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$`
	MinValue *string `json:"minValue,omitempty"`
}

// RolloutPhase is where a rollout stands.
// +kubebuilder:validation:Enum=Progressing;Paused;Promoted;Aborted
type RolloutPhase string

// The RolloutPhase values.
const (
	// RolloutProgressing: the canary gets its step's weight; the step ends
	// at its pause's duration (or at once).
	RolloutProgressing RolloutPhase = "Progressing"
	// RolloutPaused: a step that holds until promoted.
	RolloutPaused RolloutPhase = "Paused"
	// RolloutPromoted: the canary became the stable revision.
	RolloutPromoted RolloutPhase = "Promoted"
	// RolloutAborted: every request is back on the stable revision; the
	// aborted revision stays in canaryRevision until the spec changes.
	RolloutAborted RolloutPhase = "Aborted"
)

// RolloutStatus is the state of the template's rollout.
type RolloutStatus struct {
	// stableRevision is the revision every request gets outside the
	// canary's share (plan.json of the ConfigMap).
	// +optional
	// +kubebuilder:validation:MaxLength=80
	StableRevision string `json:"stableRevision,omitempty"`

	// canaryRevision is the revision rolling out (canary.plan.json), or the
	// one promoted or aborted last.
	// +optional
	// +kubebuilder:validation:MaxLength=80
	CanaryRevision string `json:"canaryRevision,omitempty"`

	// weight is the share of keys, in percent, on the canary now.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Weight int32 `json:"weight"`

	// step is the current step, from 1; 0 when none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=20
	Step int32 `json:"step,omitempty"`

	// phase is Progressing, Paused, Promoted or Aborted.
	// +optional
	Phase RolloutPhase `json:"phase,omitempty"`

	// message says why the rollout is where it is: the step and its end,
	// the last measurement, why it was aborted.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// stepStartedAt is when the current step began.
	// +optional
	StepStartedAt *metav1.Time `json:"stepStartedAt,omitempty"`

	// analysisFailures counts the failed measurements of this rollout.
	// +optional
	// +kubebuilder:validation:Minimum=0
	AnalysisFailures int32 `json:"analysisFailures,omitempty"`

	// lastAnalysisAt is when the last measurement was made.
	// +optional
	LastAnalysisAt *metav1.Time `json:"lastAnalysisAt,omitempty"`
}
