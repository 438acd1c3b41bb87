package controllers

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

// TestTableSummarize: how a reconcile's outcome lands in status. An
// error of no phase's making: refusals the API server will repeat are
// Stalled and terminal; conflicts, timeouts and the unknown are retried with
// Reconciling=True. A phase's typed outcome keeps its own reason and
// message; only success and stalls move observedGeneration.
func TestTableSummarize(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		err               error
		reason            string
		stalled, terminal bool
	}{
		{apierrors.NewForbidden(gr, "x-prompts", errors.New("RBAC says no")), "Forbidden", true, true},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "x", nil), "Invalid", true, true},
		{apierrors.NewRequestEntityTooLargeError("too big"), "RequestEntityTooLarge", true, true},
		{apierrors.NewConflict(gr, "x-prompts", errors.New("changed")), "Conflict", false, false},
		{apierrors.NewTimeoutError("slow", 1), "Timeout", false, false},
		{fmt.Errorf("dial tcp: connection refused"), promptopsv1.ReasonReconcileError, false, false},
	} {
		var conds []metav1.Condition
		var observed int64
		_, err := summarize(&conds, 3, &observed, phaseResult{}, tc.err)
		ready := meta.FindStatusCondition(conds, promptopsv1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != tc.reason || !strings.Contains(ready.Message, capitalize(tc.err.Error())) {
			t.Errorf("%v: Ready %+v", tc.err, ready)
		}
		stalled := meta.IsStatusConditionTrue(conds, promptopsv1.ConditionStalled)
		reconciling := meta.IsStatusConditionTrue(conds, promptopsv1.ConditionReconciling)
		if stalled != tc.stalled || reconciling == tc.stalled || errors.Is(err, reconcile.TerminalError(nil)) != tc.terminal || (observed == 3) != tc.stalled {
			t.Errorf("%v: stalled %v reconciling %v terminal %v observed %d", tc.err, stalled, reconciling, errors.Is(err, reconcile.TerminalError(nil)), observed)
		}
	}
	if long := clipMessage(strings.Repeat("界", 20000)); len(long) > MaxConditionMessage {
		t.Fatalf("clipped to %d", len(long))
	}
}

// TestTableOutcomes: each typed outcome of a phase, as status and as what
// controller-runtime gets.
func TestTableOutcomes(t *testing.T) {
	cause := errors.New("cause")
	never := &stallingError{reason: "InvalidSchedule", message: "Never fires."}
	for _, tc := range []struct {
		name        string
		res         phaseResult
		err         error
		ready       metav1.ConditionStatus // "" when summarize leaves Ready to the phases
		reason      string
		stalled     bool
		reconciling bool
		observed    int64
		requeue     time.Duration
		returned    error
		terminal    bool
	}{
		{name: "success", res: requeueAfter(time.Minute), observed: 3, requeue: time.Minute},
		{name: "success without requeue", observed: 3},
		{name: "waiting for a watch", err: &waitingError{reason: "ReferenceNotFound", message: "Waiting."},
			ready: metav1.ConditionFalse, reason: "ReferenceNotFound", reconciling: true},
		{name: "waiting keeps the phases' requeue", res: requeueAfter(time.Hour), err: &waitingError{reason: "R", message: "M"},
			ready: metav1.ConditionFalse, reason: "R", reconciling: true, requeue: time.Hour},
		{name: "waiting with a cause", err: &waitingError{reason: "JobRejected", message: "Retrying.", cause: cause},
			ready: metav1.ConditionFalse, reason: "JobRejected", reconciling: true, returned: cause},
		{name: "stalled", err: &stallingError{reason: "InvalidTemplate", message: "Bad.", cause: cause},
			ready: metav1.ConditionFalse, reason: "InvalidTemplate", stalled: true, observed: 3, returned: cause, terminal: true},
		{name: "stalled without a cause", err: never,
			ready: metav1.ConditionFalse, reason: "InvalidSchedule", stalled: true, observed: 3, returned: never, terminal: true},
		{name: "stalled and rechecked", res: requeueAfter(time.Hour), err: &stallingError{reason: "TokenizerUnavailable", message: "No vocabulary.", recheckAfter: 30 * time.Second, cause: cause},
			ready: metav1.ConditionFalse, reason: "TokenizerUnavailable", stalled: true, observed: 3, requeue: 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conds []metav1.Condition
			var observed int64
			result, err := summarize(&conds, 3, &observed, tc.res, tc.err)
			ready := meta.FindStatusCondition(conds, promptopsv1.ConditionReady)
			switch {
			case tc.ready == "" && ready != nil:
				t.Fatalf("Ready %+v set by summarize", ready)
			case tc.ready != "" && (ready == nil || ready.Status != tc.ready || ready.Reason != tc.reason || ready.ObservedGeneration != 3):
				t.Fatalf("Ready %+v", ready)
			}
			if s, r := meta.IsStatusConditionTrue(conds, promptopsv1.ConditionStalled), meta.IsStatusConditionTrue(conds, promptopsv1.ConditionReconciling); s != tc.stalled || r != tc.reconciling {
				t.Fatalf("Stalled %v Reconciling %v", s, r)
			}
			if observed != tc.observed || result.RequeueAfter != tc.requeue {
				t.Fatalf("observedGeneration %d, requeueAfter %v", observed, result.RequeueAfter)
			}
			if (tc.returned == nil) != (err == nil) || tc.returned != nil && !errors.Is(err, tc.returned) || errors.Is(err, reconcile.TerminalError(nil)) != tc.terminal {
				t.Fatalf("returned %v", err)
			}
		})
	}
}
