package controllers

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

// TestMarkError: an error a reconcile returns lands in status. Refusals the
// API server will repeat are Stalled and terminal; conflicts, timeouts and
// the unknown are retried with Reconciling=True; an error a phase already
// put in status is left alone.
func TestMarkError(t *testing.T) {
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
		err := markError(&conds, 3, &observed, tc.err)
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
	var conds []metav1.Condition
	var observed int64
	markStalled(&conds, 1, promptopsv1.ReasonJobRejected, "specific")
	if err := markError(&conds, 1, &observed, recorded(errors.New("x"))); err == nil || conds[0].Message != "specific" {
		t.Fatalf("a recorded error is left alone: %v %+v", err, conds)
	}
	if long := clipMessage(strings.Repeat("界", 20000)); len(long) > MaxConditionMessage {
		t.Fatalf("clipped to %d", len(long))
	}
}
