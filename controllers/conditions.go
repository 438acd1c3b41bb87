package controllers

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

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

// readyEvent emits an event when Ready changed (status or reason): Warning
// when it is not True. A first success emits none: it is in the status
// already, and it would be a third write per object at scale.
func readyEvent(rec events.EventRecorder, obj runtime.Object, old, cur []metav1.Condition, action string) {
	oldStatus, oldReason := readyOf(old)
	newStatus, newReason := readyOf(cur)
	if rec == nil || (oldStatus == newStatus && oldReason == newReason) || (oldStatus == metav1.ConditionUnknown && newStatus == metav1.ConditionTrue) {
		return
	}
	typ := corev1.EventTypeNormal
	if newStatus != metav1.ConditionTrue {
		typ = corev1.EventTypeWarning
	}
	rec.Eventf(obj, nil, typ, newReason, action, "%s", conditionMessage(cur, promptopsv1.ConditionReady))
}

func conditionMessage(conds []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return c.Message
	}
	return ""
}

// readyOf returns the Ready condition's status and reason, for transition events.
func readyOf(conds []metav1.Condition) (metav1.ConditionStatus, string) {
	if c := meta.FindStatusCondition(conds, promptopsv1.ConditionReady); c != nil {
		return c.Status, c.Reason
	}
	return metav1.ConditionUnknown, ""
}
