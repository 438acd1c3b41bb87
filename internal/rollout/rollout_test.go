package rollout

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

const (
	revA = "sha256:aaaa"
	revB = "sha256:bbbb"
	revC = "sha256:cccc"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) *metav1.Time { t := metav1.NewTime(t0.Add(d)); return &t }

func held(w int32) promptopsv1.RolloutStep {
	return promptopsv1.RolloutStep{Weight: w, Pause: &promptopsv1.RolloutPause{}}
}

func timed(w int32, d time.Duration) promptopsv1.RolloutStep {
	return promptopsv1.RolloutStep{Weight: w, Pause: &promptopsv1.RolloutPause{Duration: &metav1.Duration{Duration: d}}}
}

func steps(s ...promptopsv1.RolloutStep) *promptopsv1.Rollout { return &promptopsv1.Rollout{Steps: s} }

func withAnalysis(r *promptopsv1.Rollout, every time.Duration, limit int32) *promptopsv1.Rollout {
	max := "0.05"
	r = r.DeepCopy()
	r.Analysis = &promptopsv1.RolloutAnalysis{
		Prometheus: promptopsv1.PrometheusAnalysis{Address: "http://prom:9090", Query: "x", MaxValue: &max},
		Interval:   &metav1.Duration{Duration: every}, FailureLimit: limit,
	}
	return r
}

// rolling is a status of revB rolling out over revA.
func rolling(phase promptopsv1.RolloutPhase, step, weight int32, started time.Duration) *promptopsv1.RolloutStatus {
	return &promptopsv1.RolloutStatus{StableRevision: revA, CanaryRevision: revB, Phase: phase, Step: step, Weight: weight, StepStartedAt: at(started)}
}

func TestDecide(t *testing.T) {
	heldThenAll := steps(held(10), promptopsv1.RolloutStep{Weight: 100})
	twoTimed := steps(timed(20, time.Minute), timed(60, time.Minute))
	for _, tc := range []struct {
		name string
		in   Input
		// want
		stable  string
		canary  bool
		state   State
		phase   promptopsv1.RolloutPhase // "" when status.rollout is nil
		step    int32
		weight  int32
		requeue time.Duration
		measure bool
		events  []string // reasons
		msg     string   // in status.rollout.message
	}{
		{name: "first revision is live at once", in: Input{Spec: heldThenAll, Rendered: revA, Now: t0},
			stable: revA, state: Live},
		{name: "no spec.rollout is live at once", in: Input{Stable: revA, Rendered: revB, Now: t0},
			stable: revB, state: Live},
		{name: "no spec.rollout clears a running rollout", in: Input{Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutPaused, 1, 10, 0), Now: t0},
			stable: revB, state: Live},
		{name: "render equal to stable: nothing to roll out", in: Input{Spec: heldThenAll, Stable: revA, Rendered: revA, Now: t0},
			stable: revA, state: Live},
		{name: "render equal to stable keeps a promoted status", in: Input{Spec: heldThenAll, Stable: revB, Rendered: revB, Now: t0,
			Status: &promptopsv1.RolloutStatus{StableRevision: revB, CanaryRevision: revB, Phase: promptopsv1.RolloutPromoted}},
			stable: revB, state: Live, phase: promptopsv1.RolloutPromoted},
		{name: "spec back to stable drops the canary", in: Input{Spec: heldThenAll, Stable: revA, Rendered: revA, Status: rolling(promptopsv1.RolloutPaused, 1, 10, 0), Now: t0},
			stable: revA, state: Live, phase: promptopsv1.RolloutAborted, step: 1, events: []string{EventAborted}, msg: "went back"},
		{name: "a change starts at step 1, held", in: Input{Spec: heldThenAll, Stable: revA, Rendered: revB, Now: t0},
			stable: revA, canary: true, state: Paused, phase: promptopsv1.RolloutPaused, step: 1, weight: 10, events: []string{EventStep}},
		{name: "a change starts at step 1, timed", in: Input{Spec: twoTimed, Stable: revA, Rendered: revB, Now: t0},
			stable: revA, canary: true, state: Progressing, phase: promptopsv1.RolloutProgressing, step: 1, weight: 20, requeue: time.Minute, events: []string{EventStep}},
		{name: "after a promotion a change starts again", in: Input{Spec: heldThenAll, Stable: revB, Rendered: revC, Now: t0,
			Status: &promptopsv1.RolloutStatus{StableRevision: revB, CanaryRevision: revB, Phase: promptopsv1.RolloutPromoted}},
			stable: revB, canary: true, state: Paused, phase: promptopsv1.RolloutPaused, step: 1, weight: 10, events: []string{EventStep}},
		{name: "a change during a rollout replaces the canary at step 1", in: Input{Spec: twoTimed, Stable: revA, Rendered: revC, Status: rolling(promptopsv1.RolloutProgressing, 2, 60, -30*time.Second), Now: t0},
			stable: revA, canary: true, state: Progressing, phase: promptopsv1.RolloutProgressing, step: 1, weight: 20, requeue: time.Minute, events: []string{EventStep}},
		{name: "paused stays paused", in: Input{Spec: heldThenAll, Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutPaused, 1, 10, -time.Hour), Now: t0},
			stable: revA, canary: true, state: Paused, phase: promptopsv1.RolloutPaused, step: 1, weight: 10, msg: "until promoted"},
		{name: "promote annotation promotes", in: Input{Spec: heldThenAll, Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutPaused, 1, 10, 0), Promote: revB, Now: t0},
			stable: revB, state: Live, phase: promptopsv1.RolloutPromoted, step: 1, events: []string{EventPromoted}, msg: "promoted by promptops.io/rollout-promote"},
		{name: "stale promote annotation is ignored", in: Input{Spec: heldThenAll, Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutPaused, 1, 10, 0), Promote: revC, Now: t0},
			stable: revA, canary: true, state: Paused, phase: promptopsv1.RolloutPaused, step: 1, weight: 10},
		{name: "abort annotation aborts", in: Input{Spec: heldThenAll, Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutPaused, 1, 10, 0), Abort: revB, Now: t0},
			stable: revA, state: Aborted, phase: promptopsv1.RolloutAborted, step: 1, msg: "aborted by promptops.io/rollout-abort"},
		{name: "abort wins over promote", in: Input{Spec: heldThenAll, Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutPaused, 1, 10, 0), Abort: revB, Promote: revB, Now: t0},
			stable: revA, state: Aborted, phase: promptopsv1.RolloutAborted, step: 1},
		{name: "stale abort annotation is ignored", in: Input{Spec: twoTimed, Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutProgressing, 1, 20, 0), Abort: revA, Now: t0},
			stable: revA, canary: true, state: Progressing, phase: promptopsv1.RolloutProgressing, step: 1, weight: 20, requeue: time.Minute},
		{name: "aborted stays aborted, promote ignored", in: Input{Spec: heldThenAll, Stable: revA, Rendered: revB, Promote: revB, Now: t0,
			Status: &promptopsv1.RolloutStatus{StableRevision: revA, CanaryRevision: revB, Phase: promptopsv1.RolloutAborted, Step: 1, Message: "Revision was aborted."}},
			stable: revA, state: Aborted, phase: promptopsv1.RolloutAborted, step: 1},
		{name: "aborted, a new change starts again", in: Input{Spec: heldThenAll, Stable: revA, Rendered: revC, Now: t0,
			Status: &promptopsv1.RolloutStatus{StableRevision: revA, CanaryRevision: revB, Phase: promptopsv1.RolloutAborted, Step: 1}},
			stable: revA, canary: true, state: Paused, phase: promptopsv1.RolloutPaused, step: 1, weight: 10, events: []string{EventStep}},
		{name: "a timed step before its end holds", in: Input{Spec: twoTimed, Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutProgressing, 1, 20, -20*time.Second), Now: t0},
			stable: revA, canary: true, state: Progressing, phase: promptopsv1.RolloutProgressing, step: 1, weight: 20, requeue: 40 * time.Second},
		{name: "a timed step at its end moves on", in: Input{Spec: twoTimed, Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutProgressing, 1, 20, -time.Minute), Now: t0},
			stable: revA, canary: true, state: Progressing, phase: promptopsv1.RolloutProgressing, step: 2, weight: 60, requeue: time.Minute, events: []string{EventStep}},
		{name: "the last step's end promotes", in: Input{Spec: twoTimed, Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutProgressing, 2, 60, -2*time.Minute), Now: t0},
			stable: revB, state: Live, phase: promptopsv1.RolloutPromoted, step: 2, events: []string{EventPromoted}, msg: "last step"},
		{name: "a step without pause moves on in the next reconcile", in: Input{Spec: steps(promptopsv1.RolloutStep{Weight: 5}, held(50)), Stable: revA, Rendered: revB, Now: t0},
			stable: revA, canary: true, state: Progressing, phase: promptopsv1.RolloutProgressing, step: 1, weight: 5, requeue: immediately, events: []string{EventStep}},
		{name: "steps edited mid-rollout clamp the index", in: Input{Spec: steps(held(30)), Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutProgressing, 2, 60, 0), Now: t0},
			stable: revA, canary: true, state: Paused, phase: promptopsv1.RolloutPaused, step: 1, weight: 30},
		{name: "a step index below 1 is read as 1", in: Input{Spec: twoTimed, Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutProgressing, 0, 0, 0), Now: t0},
			stable: revA, canary: true, state: Progressing, phase: promptopsv1.RolloutProgressing, step: 1, weight: 20, requeue: time.Minute},
		{name: "a status without phase starts over", in: Input{Spec: twoTimed, Stable: revA, Rendered: revB, Status: &promptopsv1.RolloutStatus{CanaryRevision: revB}, Now: t0},
			stable: revA, canary: true, state: Progressing, phase: promptopsv1.RolloutProgressing, step: 1, weight: 20, requeue: time.Minute, events: []string{EventStep}},
		{name: "analysis not due requeues for it", in: Input{Spec: withAnalysis(steps(held(10)), 10*time.Second, 2), Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutPaused, 1, 10, -4*time.Second), Now: t0},
			stable: revA, canary: true, state: Paused, phase: promptopsv1.RolloutPaused, step: 1, weight: 10, requeue: 6 * time.Second},
		{name: "analysis due asks for a measurement", in: Input{Spec: withAnalysis(steps(held(10)), 10*time.Second, 2), Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutPaused, 1, 10, -10*time.Second), Now: t0},
			stable: revA, canary: true, state: Paused, phase: promptopsv1.RolloutPaused, step: 1, weight: 10, requeue: immediately, measure: true},
		{name: "a passed measurement waits an interval", in: Input{Spec: withAnalysis(steps(held(10)), 10*time.Second, 2), Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutPaused, 1, 10, -10*time.Second), Now: t0,
			Measurement: &Measurement{Passed: true, Message: "the query's value 0 is at most maxValue 0.05"}},
			stable: revA, canary: true, state: Paused, phase: promptopsv1.RolloutPaused, step: 1, weight: 10, requeue: 10 * time.Second},
		{name: "a failed measurement under the limit counts", in: Input{Spec: withAnalysis(steps(held(10)), 10*time.Second, 2), Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutPaused, 1, 10, -10*time.Second), Now: t0,
			Measurement: &Measurement{Message: "the query's value 0.5 is over maxValue 0.05"}},
			stable: revA, canary: true, state: Paused, phase: promptopsv1.RolloutPaused, step: 1, weight: 10, requeue: 10 * time.Second, msg: "Analysis failed 1 of 2 times"},
		{name: "failureLimit failed measurements abort with the value", in: Input{Spec: withAnalysis(steps(held(10)), 10*time.Second, 2), Stable: revA, Rendered: revB, Now: t0,
			Status: func() *promptopsv1.RolloutStatus {
				s := rolling(promptopsv1.RolloutPaused, 1, 10, -time.Minute)
				s.AnalysisFailures, s.LastAnalysisAt = 1, at(-10*time.Second)
				return s
			}(),
			Measurement: &Measurement{Message: "the query's value 0.5 is over maxValue 0.05"}},
			stable: revA, state: Aborted, phase: promptopsv1.RolloutAborted, step: 1, msg: "the query's value 0.5 is over maxValue 0.05"},
		{name: "an invalid check aborts at once", in: Input{Spec: withAnalysis(steps(held(10)), 10*time.Second, 5), Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutPaused, 1, 10, -10*time.Second), Now: t0,
			Measurement: &Measurement{Invalid: true, Message: "Prometheus refused the query"}},
			stable: revA, state: Aborted, phase: promptopsv1.RolloutAborted, step: 1, msg: "cannot run"},
		{name: "a measurement given when none is due is not counted", in: Input{Spec: withAnalysis(steps(held(10)), 10*time.Second, 1), Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutPaused, 1, 10, -time.Second), Now: t0,
			Measurement: &Measurement{Message: "over"}},
			stable: revA, canary: true, state: Paused, phase: promptopsv1.RolloutPaused, step: 1, weight: 10, requeue: 9 * time.Second},
		{name: "steps shorter than the interval: the last waits for the first measurement", in: Input{Spec: withAnalysis(steps(timed(50, time.Second)), time.Minute, 1), Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutProgressing, 1, 50, -2*time.Second), Now: t0},
			stable: revA, canary: true, state: Progressing, phase: promptopsv1.RolloutProgressing, step: 1, weight: 50, requeue: 58 * time.Second, msg: "waits for its first measurement"},
		{name: "its first measurement passed: promoted", in: Input{Spec: withAnalysis(steps(timed(50, time.Second)), time.Minute, 1), Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutProgressing, 1, 50, -time.Minute), Now: t0,
			Measurement: &Measurement{Passed: true, Message: "the query's value 0 is at most maxValue 0.05"}},
			stable: revB, state: Live, phase: promptopsv1.RolloutPromoted, step: 1, events: []string{EventPromoted}},
		{name: "measured before: the last step promotes at its end", in: Input{Spec: withAnalysis(steps(timed(50, time.Second)), time.Minute, 1), Stable: revA, Rendered: revB, Now: t0,
			Status: func() *promptopsv1.RolloutStatus {
				s := rolling(promptopsv1.RolloutProgressing, 1, 50, -2*time.Second)
				s.LastAnalysisAt = at(-30 * time.Second)
				return s
			}()},
			stable: revB, state: Live, phase: promptopsv1.RolloutPromoted, step: 1, events: []string{EventPromoted}},
		{name: "analysis is sooner than the step end", in: Input{Spec: withAnalysis(twoTimed, 5*time.Second, 1), Stable: revA, Rendered: revB, Status: rolling(promptopsv1.RolloutProgressing, 1, 20, 0), Now: t0},
			stable: revA, canary: true, state: Progressing, phase: promptopsv1.RolloutProgressing, step: 1, weight: 20, requeue: 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.in.Status.DeepCopy()
			d := Decide(tc.in)
			if d.Stable != tc.stable || d.Canary != tc.canary || d.State != tc.state || d.RequeueAfter != tc.requeue || d.Measure != tc.measure {
				t.Errorf("got stable %s canary %v state %s requeue %v measure %v; want %s %v %s %v %v",
					d.Stable, d.Canary, d.State, d.RequeueAfter, d.Measure, tc.stable, tc.canary, tc.state, tc.requeue, tc.measure)
			}
			if tc.phase == "" {
				if d.Status != nil {
					t.Errorf("status.rollout %+v, want none", d.Status)
				}
			} else if d.Status == nil || d.Status.Phase != tc.phase || d.Status.Step != tc.step || d.Status.Weight != tc.weight {
				t.Errorf("status.rollout %+v, want phase %s step %d weight %d", d.Status, tc.phase, tc.step, tc.weight)
			} else if !strings.Contains(d.Status.Message, tc.msg) {
				t.Errorf("message %q does not say %q", d.Status.Message, tc.msg)
			}
			var reasons []string
			for _, e := range d.Events {
				reasons = append(reasons, e.Reason)
			}
			if strings.Join(reasons, ",") != strings.Join(tc.events, ",") {
				t.Errorf("events %v, want %v", reasons, tc.events)
			}
			if (d.State == Live) != (d.Reason == "") {
				t.Errorf("state %s with reason %q", d.State, d.Reason)
			}
			if d.Status != nil && d.Status.Phase != promptopsv1.RolloutPromoted && d.Canary && d.Status.StableRevision != tc.in.Stable {
				t.Errorf("stableRevision %s, want the ConfigMap's %s", d.Status.StableRevision, tc.in.Stable)
			}
			if d.Status != nil && d.Status.Phase == promptopsv1.RolloutPromoted && d.Status.StableRevision != d.Status.CanaryRevision {
				t.Errorf("promoted with stable %s and canary %s", d.Status.StableRevision, d.Status.CanaryRevision)
			}
			if d.Status != nil && !d.Canary && d.Status.Weight != 0 {
				t.Errorf("weight %d outside a rollout", d.Status.Weight)
			}
			if !reflect.DeepEqual(before, tc.in.Status) {
				t.Errorf("the input status was changed")
			}
		})
	}
}

// TestDecideIsBounded walks every phase through a day of reconciles: every
// state has a next one, weights stay in 0..100, and a rollout of timed
// steps ends.
func TestDecideIsBounded(t *testing.T) {
	spec := withAnalysis(steps(timed(10, time.Minute), promptopsv1.RolloutStep{Weight: 40}, timed(100, time.Hour)), 5*time.Minute, 3)
	in := Input{Spec: spec, Stable: revA, Rendered: revB, Now: t0}
	for i := 0; i < 24*60; i++ {
		d := Decide(in)
		if d.Measure {
			in.Measurement = &Measurement{Passed: true, Message: "m"}
			d = Decide(in)
			in.Measurement = nil
		}
		if d.Status != nil && (d.Status.Weight < 0 || d.Status.Weight > 100 || d.Status.Step < 1 || int(d.Status.Step) > len(spec.Steps)) {
			t.Fatalf("out of bounds: %+v", d.Status)
		}
		in.Status, in.Stable = d.Status, d.Stable
		if d.Status != nil && d.Status.Phase == promptopsv1.RolloutPromoted {
			if in.Stable != revB {
				t.Fatalf("promoted, plan.json %s", in.Stable)
			}
			return
		}
		in.Now = in.Now.Add(time.Minute)
	}
	t.Fatalf("not promoted after a day: %+v", in.Status)
}

func TestClip(t *testing.T) {
	long := strings.Repeat("é", 1000)
	if got := clip(long); len(got) > maxMessage || !strings.HasSuffix(got, "...") {
		t.Fatalf("clip: %d bytes", len(got))
	}
}
