package controllers

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/textclip"
)

// MaxConditionMessage bounds a condition's message, well under the API's
// 32 KiB: a template with 64 over-budget intents must not block every
// status write.
const MaxConditionMessage = 4096

// setCondition sets a condition with the object's generation, its message
// clipped to MaxConditionMessage; the transition time moves only when the
// status does.
func setCondition(conds *[]metav1.Condition, gen int64, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(conds, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: clipMessage(msg), ObservedGeneration: gen})
}

// clipMessage shortens a message to MaxConditionMessage bytes of whole
// characters.
func clipMessage(msg string) string {
	return textclip.Fit(msg, MaxConditionMessage, " [... message shortened]")
}

// The three states kstatus reads (see STYLE.md), each with its helper.

// markReady: reconciled. Ready=True; no Reconciling, no Stalled.
func markReady(conds *[]metav1.Condition, gen int64, reason, msg string) {
	setCondition(conds, gen, promptopsv1.ConditionReady, metav1.ConditionTrue, reason, msg)
	meta.RemoveStatusCondition(conds, promptopsv1.ConditionReconciling)
	meta.RemoveStatusCondition(conds, promptopsv1.ConditionStalled)
}

// markNotReady: waiting for something that will come, or retrying after a
// transient error. Ready=False and Reconciling=True with the same reason.
func markNotReady(conds *[]metav1.Condition, gen int64, reason, msg string) {
	setCondition(conds, gen, promptopsv1.ConditionReady, metav1.ConditionFalse, reason, msg)
	setCondition(conds, gen, promptopsv1.ConditionReconciling, metav1.ConditionTrue, reason, msg)
	meta.RemoveStatusCondition(conds, promptopsv1.ConditionStalled)
}

// markStalled: nothing changes until the user changes something.
// Ready=False and Stalled=True; no Reconciling.
func markStalled(conds *[]metav1.Condition, gen int64, reason, msg string) {
	setCondition(conds, gen, promptopsv1.ConditionReady, metav1.ConditionFalse, reason, msg)
	setCondition(conds, gen, promptopsv1.ConditionStalled, metav1.ConditionTrue, reason, msg)
	meta.RemoveStatusCondition(conds, promptopsv1.ConditionReconciling)
}

// eventConditions are the conditions whose transitions are events, with
// the status that is worth a Warning.
var eventConditions = []struct {
	typ  string
	warn metav1.ConditionStatus
}{
	{promptopsv1.ConditionReady, metav1.ConditionFalse},
	{promptopsv1.ConditionBudgetExceeded, metav1.ConditionTrue},
	{promptopsv1.ConditionTruncated, ""},
}

// conditionEvents emits one event per transition (status or reason) of
// Ready, BudgetExceeded and Truncated (a run's end has its own event, with
// the Job as related object): Warning for a failure
// or an overrun, reason = the condition's reason. A first Ready=True, and a
// domain condition that starts out False, emit none: they are in the status
// already, and they would be a third write per object at scale.
func conditionEvents(rec events.EventRecorder, obj runtime.Object, old, cur []metav1.Condition, action string) {
	if rec == nil {
		return
	}
	for _, ec := range eventConditions {
		c := meta.FindStatusCondition(cur, ec.typ)
		if c == nil {
			continue
		}
		o := meta.FindStatusCondition(old, ec.typ)
		switch {
		case o != nil && o.Status == c.Status && o.Reason == c.Reason:
			continue
		case o == nil && ec.typ == promptopsv1.ConditionReady && c.Status == metav1.ConditionTrue:
			continue
		case o == nil && ec.typ != promptopsv1.ConditionReady && c.Status == metav1.ConditionFalse:
			continue
		}
		typ := corev1.EventTypeNormal
		if c.Status == ec.warn {
			typ = corev1.EventTypeWarning
		}
		rec.Eventf(obj, nil, typ, c.Reason, action, "%s", c.Message)
	}
}

func conditionMessage(conds []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return c.Message
	}
	return ""
}

// handleReconcileRequest records the force-reconcile annotation's value
// (promptops.io/reconcile-requested-at, else Flux's) as handled.
func handleReconcileRequest(annotations map[string]string, last *string) {
	for _, k := range []string{promptopsv1.AnnotationReconcileRequestedAt, promptopsv1.AnnotationFluxReconcileRequestedAt} {
		if v := annotations[k]; v != "" {
			if len(v) > 256 {
				v = v[:256]
			}
			*last = v
			return
		}
	}
}

// reconcileRequested passes updates that change a force-reconcile
// annotation, which the generation predicate would drop.
var reconcileRequested = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		if e.ObjectOld == nil || e.ObjectNew == nil {
			return false
		}
		o, n := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
		return o[promptopsv1.AnnotationReconcileRequestedAt] != n[promptopsv1.AnnotationReconcileRequestedAt] ||
			o[promptopsv1.AnnotationFluxReconcileRequestedAt] != n[promptopsv1.AnnotationFluxReconcileRequestedAt]
	},
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}
