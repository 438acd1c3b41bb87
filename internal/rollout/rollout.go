// Package rollout decides a PromptTemplate's rollout: from the spec's
// steps, the stable revision the ConfigMap holds, the revision the spec
// renders, status.rollout, the promote and abort annotations, the time and
// the last measurement, it says what status.rollout becomes, what the
// ConfigMap holds and when to look again.
//
// It is a pure function (Decide) with no client and no clock, so that every
// transition is a table test; the controller reads, calls Decide, measures
// when Decide asks it to (internal/rollout/analysis) and writes. The rules:
//
//   - No stable revision yet (no ConfigMap), no spec.rollout, or a render
//     equal to the stable revision: the render is live at once, as without
//     rollouts. A rollout under way is dropped (phase Aborted) when the
//     spec goes back to the stable revision, or cleared with spec.rollout.
//   - A render other than the stable one starts a rollout at step 1 unless
//     it is the canary already: a new change during a rollout replaces the
//     canary and starts again; one aborted stays aborted until the spec
//     renders another revision.
//   - A step ends when its pause.duration has passed, at once without a
//     pause (one reconcile per step), never with pause {} (Paused): only the
//     promote annotation naming the canary ends it. After the last step
//     the canary is promoted. Steps edited mid-rollout clamp the step index
//     to the last step, and the step's weight is the spec's.
//   - The abort annotation naming the canary aborts it, the promote one
//     promotes it; abort wins over promote; an annotation naming another
//     revision is ignored.
//   - Analysis: while Progressing or Paused, a measurement is due one
//     interval after the last one, and the first one interval after the
//     current step began. A failed measurement (out of bound, no answer, no
//     number) counts; failureLimit of them abort, with the measurement in
//     the message. A check that can never run (Invalid) aborts at once. A
//     canary is never promoted by its steps before its first measurement:
//     when every step was shorter than the interval, the last one waits
//     for it.
package rollout

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

// Input is what a decision is made from.
type Input struct {
	// Spec is spec.rollout; nil without one.
	Spec *promptopsv1.Rollout
	// Stable is the revision the ConfigMap's plan.json holds; "" when there
	// is no ConfigMap yet.
	Stable string
	// Rendered is the revision the current spec renders.
	Rendered string
	// Status is status.rollout as read; nil when none.
	Status *promptopsv1.RolloutStatus
	// Promote and Abort are the values of the promote and abort
	// annotations.
	Promote, Abort string
	// Now is the time of the decision.
	Now time.Time
	// Measurement is the analysis made for this decision, when the
	// previous decision asked for one (Decision.Measure); nil otherwise.
	Measurement *Measurement
}

// Measurement is the outcome of one analysis.
type Measurement struct {
	// Passed: the value kept the bound.
	Passed bool
	// Invalid: the check cannot run as written (analysis.Invalid).
	Invalid bool
	// Message is a sentence on the value and the bound, or why there is
	// none; it holds no label of any series.
	Message string
}

// State is what a decision asks the conditions to say.
type State string

const (
	// Live: no rollout runs; the render is (or stays) what plan.json holds
	// and the conditions are a render's.
	Live State = "Live"
	// Progressing: a rollout runs, Ready False and Reconciling True with
	// reason RolloutProgressing.
	Progressing State = "Progressing"
	// Paused: a rollout holds until promoted, Ready False and Reconciling
	// True with reason RolloutPaused.
	Paused State = "Paused"
	// Aborted: the spec's revision was aborted, Ready False and Stalled
	// True with reason RolloutAborted.
	Aborted State = "Aborted"
)

// Event is one event to emit for a decision; it names revisions and
// figures only.
type Event struct {
	// Warning is a failure (an abort); else Normal.
	Warning bool
	Reason  string
	Message string
}

// The reasons of a rollout's events.
const (
	EventStep     = "RolloutStep"
	EventPromoted = "RolloutPromoted"
	EventAborted  = promptopsv1.ReasonRolloutAborted
)

// Decision is what to do.
type Decision struct {
	// Status is the next status.rollout (nil: none).
	Status *promptopsv1.RolloutStatus
	// Stable is the revision plan.json holds next: Input.Stable, or
	// Input.Rendered when it goes live (first revision, no rollout,
	// promoted).
	Stable string
	// Canary: the ConfigMap also holds the rendered revision as the canary
	// and rollout.json with Status.Weight.
	Canary bool
	// State, Reason and Message are for the conditions (Reason and Message
	// empty when State is Live).
	State   State
	Reason  string
	Message string
	// Events to emit once the decision is written: each step and a
	// promotion. An abort has none of its own: the Ready condition's
	// transition to RolloutAborted is its Warning event.
	Events []Event
	// RequeueAfter is when to decide again: the earlier of the step's end
	// and the next measurement; zero leaves it to the watches.
	RequeueAfter time.Duration
	// Measure asks for a measurement now: call Decide again with
	// Input.Measurement set.
	Measure bool
}

// Analysis' defaults, parsed once from api/v1.
var defaultInterval = func() time.Duration {
	d, err := time.ParseDuration(promptopsv1.DefaultAnalysisInterval)
	if err != nil {
		panic(err)
	}
	return d
}()

// immediately is the requeue of a step without a pause: the next step
// follows in the next reconcile.
const immediately = time.Millisecond

// Decide makes the next decision. It is total: any input, however stale
// or inconsistent, has one.
func Decide(in Input) Decision {
	if in.Stable == "" || in.Spec == nil || len(in.Spec.Steps) == 0 {
		// The first revision, or no rollouts: live at once.
		return Decision{Stable: in.Rendered, State: Live}
	}
	st := in.Status
	if in.Rendered == in.Stable {
		d := Decision{Stable: in.Stable, State: Live, Status: st}
		if st != nil && running(st.Phase) {
			next := st.DeepCopy()
			next.Phase, next.Weight, next.StableRevision = promptopsv1.RolloutAborted, 0, in.Stable
			next.Message = fmt.Sprintf("The spec went back to the stable revision %s; canary %s was dropped.", in.Stable, st.CanaryRevision)
			d.Status = next
			d.Events = []Event{{Warning: true, Reason: EventAborted, Message: next.Message}}
		}
		return d
	}
	if st == nil || st.CanaryRevision != in.Rendered || st.Phase == promptopsv1.RolloutPromoted || st.Phase == "" {
		return start(in)
	}
	if st.Phase == promptopsv1.RolloutAborted {
		next := st.DeepCopy()
		next.StableRevision, next.Weight = in.Stable, 0
		return Decision{Stable: in.Stable, Status: next, State: Aborted, Reason: promptopsv1.ReasonRolloutAborted, Message: abortedMessage(next)}
	}
	return advance(in)
}

func running(p promptopsv1.RolloutPhase) bool {
	return p == promptopsv1.RolloutProgressing || p == promptopsv1.RolloutPaused
}

// start begins a rollout of the rendered revision at step 1.
func start(in Input) Decision {
	now := metav1.NewTime(in.Now)
	next := &promptopsv1.RolloutStatus{StableRevision: in.Stable, CanaryRevision: in.Rendered, StepStartedAt: &now}
	d := enter(in, next, 1)
	d.Events = []Event{{Reason: EventStep, Message: fmt.Sprintf("Rollout of revision %s started over stable %s: step 1 of %d, weight %d%%.", in.Rendered, in.Stable, len(in.Spec.Steps), next.Weight)}}
	return d
}

// enter puts the rollout at step (1-based, within the steps) from now, and
// says so.
func enter(in Input, next *promptopsv1.RolloutStatus, step int) Decision {
	s := in.Spec.Steps[step-1]
	now := metav1.NewTime(in.Now)
	next.Step, next.Weight, next.StepStartedAt = int32(step), s.Weight, &now
	d := hold(in, next)
	d.Events = []Event{{Reason: EventStep, Message: fmt.Sprintf("Revision %s at step %d of %d, weight %d%%.", next.CanaryRevision, step, len(in.Spec.Steps), s.Weight)}}
	return d
}

// hold keeps the rollout at its step: the phase, message and requeue of
// the step as it stands.
func hold(in Input, next *promptopsv1.RolloutStatus) Decision {
	steps := in.Spec.Steps
	s := steps[next.Step-1]
	d := Decision{Stable: in.Stable, Canary: true, Status: next}
	switch {
	case s.Pause != nil && s.Pause.Duration == nil:
		next.Phase = promptopsv1.RolloutPaused
		next.Message = fmt.Sprintf("Step %d of %d holds revision %s at weight %d%% until promoted (annotation %s=%s).",
			next.Step, len(steps), next.CanaryRevision, next.Weight, promptopsv1.AnnotationRolloutPromote, next.CanaryRevision)
		d.State, d.Reason = Paused, promptopsv1.ReasonRolloutPaused
	default:
		next.Phase = promptopsv1.RolloutProgressing
		end := stepEnd(next, s)
		until := "the next reconcile"
		if s.Pause != nil {
			until = end.UTC().Format(time.RFC3339)
		}
		next.Message = fmt.Sprintf("Step %d of %d sends %d%% of keys to revision %s until %s.",
			next.Step, len(steps), next.Weight, next.CanaryRevision, until)
		d.State, d.Reason = Progressing, promptopsv1.ReasonRolloutProgressing
		d.RequeueAfter = max(end.Sub(in.Now), immediately)
	}
	if a := in.Spec.Analysis; a != nil {
		if next.AnalysisFailures > 0 {
			next.Message += fmt.Sprintf(" Analysis failed %d of %d times.", next.AnalysisFailures, failureLimit(a))
		}
		wait := analysisDue(a, next).Sub(in.Now)
		if d.RequeueAfter == 0 || wait < d.RequeueAfter {
			d.RequeueAfter = max(wait, immediately)
		}
	}
	d.Message = next.Message
	return d
}

// stepEnd is when a timed step ends (or one without a pause: at its start).
func stepEnd(st *promptopsv1.RolloutStatus, s promptopsv1.RolloutStep) time.Time {
	start := time.Time{}
	if st.StepStartedAt != nil {
		start = st.StepStartedAt.Time
	}
	if s.Pause == nil || s.Pause.Duration == nil {
		return start
	}
	return start.Add(s.Pause.Duration.Duration)
}

// analysisDue is when the next measurement is due.
func analysisDue(a *promptopsv1.RolloutAnalysis, st *promptopsv1.RolloutStatus) time.Time {
	from := st.LastAnalysisAt
	if from == nil {
		from = st.StepStartedAt
	}
	if from == nil {
		return time.Time{}
	}
	return from.Add(interval(a))
}

func interval(a *promptopsv1.RolloutAnalysis) time.Duration {
	if a.Interval == nil || a.Interval.Duration <= 0 {
		return defaultInterval
	}
	return a.Interval.Duration
}

func failureLimit(a *promptopsv1.RolloutAnalysis) int32 {
	if a.FailureLimit < 1 {
		return promptopsv1.DefaultAnalysisFailureLimit
	}
	return a.FailureLimit
}

// advance moves a running rollout of the rendered revision on.
func advance(in Input) Decision {
	next := in.Status.DeepCopy()
	next.StableRevision = in.Stable
	steps := in.Spec.Steps
	next.Step = min(max(next.Step, 1), int32(len(steps)))
	next.Weight = steps[next.Step-1].Weight
	canary := next.CanaryRevision

	switch {
	case in.Abort == canary:
		return abort(in, next, "aborted by "+promptopsv1.AnnotationRolloutAbort)
	case in.Promote == canary:
		return promote(in, next, "promoted by "+promptopsv1.AnnotationRolloutPromote)
	}

	if a := in.Spec.Analysis; a != nil && !in.Now.Before(analysisDue(a, next)) {
		if in.Measurement == nil {
			d := hold(in, next)
			d.Measure = true
			return d
		}
		m := in.Measurement
		now := metav1.NewTime(in.Now)
		next.LastAnalysisAt = &now
		switch {
		case m.Invalid:
			return abort(in, next, "the analysis cannot run: "+m.Message)
		case !m.Passed:
			next.AnalysisFailures++
			if next.AnalysisFailures >= failureLimit(a) {
				return abort(in, next, fmt.Sprintf("analysis failed %d of %d times, last: %s", next.AnalysisFailures, failureLimit(a), m.Message))
			}
		}
	}

	s := steps[next.Step-1]
	if s.Pause != nil && s.Pause.Duration == nil {
		return hold(in, next)
	}
	if in.Now.Before(stepEnd(next, s)) {
		return hold(in, next)
	}
	if int(next.Step) >= len(steps) {
		if a := in.Spec.Analysis; a != nil && next.LastAnalysisAt == nil {
			return awaitMeasurement(in, next, a)
		}
		return promote(in, next, fmt.Sprintf("promoted after its last step (%d)", len(steps)))
	}
	return enter(in, next, int(next.Step)+1)
}

// awaitMeasurement holds a rollout with analysis at its last step until
// its first measurement: a canary is never promoted unmeasured, however
// short its steps were beside the interval.
func awaitMeasurement(in Input, next *promptopsv1.RolloutStatus, a *promptopsv1.RolloutAnalysis) Decision {
	d := hold(in, next)
	due := analysisDue(a, next)
	next.Message = fmt.Sprintf("Step %d of %d is over; revision %s waits for its first measurement, due %s, before it is promoted.",
		next.Step, len(in.Spec.Steps), next.CanaryRevision, due.UTC().Format(time.RFC3339))
	d.Message = next.Message
	d.RequeueAfter = max(due.Sub(in.Now), immediately)
	return d
}

// promote makes the canary the stable revision.
func promote(in Input, next *promptopsv1.RolloutStatus, why string) Decision {
	canary := next.CanaryRevision
	next.Phase, next.StableRevision, next.Weight = promptopsv1.RolloutPromoted, canary, 0
	next.Message = fmt.Sprintf("Revision %s was %s; it is the stable revision.", canary, why)
	return Decision{Stable: canary, Status: next, State: Live, Events: []Event{{Reason: EventPromoted, Message: next.Message}}}
}

// abort sends every key back to the stable revision.
func abort(in Input, next *promptopsv1.RolloutStatus, why string) Decision {
	next.Phase, next.Weight = promptopsv1.RolloutAborted, 0
	next.Message = clip(fmt.Sprintf("Revision %s was %s; every request gets the stable revision %s.", next.CanaryRevision, why, in.Stable))
	// No event of its own: Ready's transition to RolloutAborted is the
	// abort's Warning event, with this message.
	return Decision{Stable: in.Stable, Status: next, State: Aborted, Reason: promptopsv1.ReasonRolloutAborted, Message: abortedMessage(next)}
}

// abortedMessage is the Stalled condition's message of an aborted revision.
func abortedMessage(st *promptopsv1.RolloutStatus) string {
	return st.Message + " Change the spec to roll out another revision."
}

// maxMessage is status.rollout.message's bound.
const maxMessage = 1024

// clip keeps a message within status.rollout.message's bound, on a whole
// character.
func clip(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	const tail = "..."
	cut := maxMessage - len(tail)
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + tail
}
