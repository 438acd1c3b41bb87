package controllers

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

// setCondition sets a condition with the object's generation; the
// transition time moves only when the status does.
func setCondition(conds *[]metav1.Condition, gen int64, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(conds, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
}

// setReady sets Ready, and Stalled only while True (kstatus). Reconciling is
// never left behind once a reconcile finished.
func setReady(conds *[]metav1.Condition, gen int64, ready bool, stalled bool, reason, msg string) {
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	setCondition(conds, gen, promptopsv1.ConditionReady, status, reason, msg)
	if stalled {
		setCondition(conds, gen, promptopsv1.ConditionStalled, metav1.ConditionTrue, reason, msg)
	} else {
		meta.RemoveStatusCondition(conds, promptopsv1.ConditionStalled)
	}
}

// setReconciling marks work under way, or removes the condition.
func setReconciling(conds *[]metav1.Condition, gen int64, on bool, reason, msg string) {
	if on {
		setCondition(conds, gen, promptopsv1.ConditionReconciling, metav1.ConditionTrue, reason, msg)
		return
	}
	meta.RemoveStatusCondition(conds, promptopsv1.ConditionReconciling)
}

// readyOf returns the Ready condition's status and reason, for transition events.
func readyOf(conds []metav1.Condition) (metav1.ConditionStatus, string) {
	if c := meta.FindStatusCondition(conds, promptopsv1.ConditionReady); c != nil {
		return c.Status, c.Reason
	}
	return metav1.ConditionUnknown, ""
}
