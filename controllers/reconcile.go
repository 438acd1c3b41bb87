package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

// The phase contract of both reconcilers, as in Flux's source-controller
// (sreconcile.Result beside serror.Stalling and serror.Waiting): a phase
// returns a phaseResult and an error; the first error ends the reconcile;
// one deferred finish turns the outcome into conditions, observedGeneration
// and what controller-runtime gets, and writes the status once.
//
//	outcome                  Ready, Reconciling, Stalled  observedGeneration  returned
//	nil                      as the phases set them      moves               the phases' RequeueAfter
//	*waitingError            False, True, -              stays               nil, or its cause (backoff)
//	*stallingError           False, -, True              moves               TerminalError, or nil with recheckAfter
//	refused for good (API)   False, -, True              moves               TerminalError
//	any other error          False, True, -              stays               the error (backoff)

// phaseResult is what a phase that succeeded asks of the reconcile.
type phaseResult struct {
	// requeueAfter asks for the next reconcile after that long at the
	// latest; zero leaves it to the watches.
	requeueAfter time.Duration
}

// requeueAfter asks for another reconcile after d; d <= 0 asks nothing.
func requeueAfter(d time.Duration) phaseResult { return phaseResult{requeueAfter: max(d, 0)} }

// merge keeps the earlier of two requeues.
func (p phaseResult) merge(o phaseResult) phaseResult {
	if o.requeueAfter > 0 && (p.requeueAfter == 0 || o.requeueAfter < p.requeueAfter) {
		p.requeueAfter = o.requeueAfter
	}
	return p
}

// waitingError ends a reconcile that waits for something that will come
// (a referenced ConfigMap, a retry after a refusal the API server may
// change its mind about): Ready=False and Reconciling=True with its reason
// and message. Without a cause, a watch brings the next reconcile; with
// one, the cause is returned and retried with backoff.
type waitingError struct {
	reason, message string
	cause           error
}

func (e *waitingError) Error() string {
	if e.cause != nil {
		return e.cause.Error()
	}
	return e.message
}

func (e *waitingError) Unwrap() error { return e.cause }

// stallingError ends a reconcile that cannot succeed until someone changes
// something (the spec, a referenced ConfigMap, the platform):
// Ready=False and Stalled=True with its reason and message, and this
// generation counts as handled. It is a terminal error, unless
// recheckAfter asks to look again (for what no watch announces).
type stallingError struct {
	reason, message string
	recheckAfter    time.Duration
	cause           error
}

func (e *stallingError) Error() string {
	if e.cause != nil {
		return e.cause.Error()
	}
	return e.message
}

func (e *stallingError) Unwrap() error { return e.cause }

// runPhases runs the phases in order, stopping at the first error, and
// returns their merged result.
func runPhases[S any](ctx context.Context, s S, phases ...func(context.Context, S) (phaseResult, error)) (phaseResult, error) {
	var res phaseResult
	for _, phase := range phases {
		r, err := phase(ctx, s)
		res = res.merge(r)
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// summarize turns a reconcile's outcome into its kstatus conditions and
// observedGeneration (nowhere else in the package is it set), and returns
// what controller-runtime gets. An error of no phase's making (a failed
// read or write) is judged here: a refusal the API server will repeat for
// the same object (Invalid, Forbidden, too large, bad request) is Stalled
// and terminal; anything else (conflict, timeout, unreachable) is retried
// with backoff, Reconciling=True (kustomize-controller's
// ProgressingWithRetry).
func summarize(conds *[]metav1.Condition, gen int64, observed *int64, res phaseResult, err error) (ctrl.Result, error) {
	result, handled, ret := outcome(conds, gen, res, err)
	// The one place observedGeneration is set: it moves only when this
	// generation was fully handled, done or stalled until someone changes
	// something.
	if handled {
		*observed = gen
	}
	return result, ret
}

// outcome sets the kstatus conditions of a reconcile's outcome (on success
// the phases set Ready) and tells whether the generation was handled.
func outcome(conds *[]metav1.Condition, gen int64, res phaseResult, err error) (result ctrl.Result, handled bool, ret error) {
	var (
		waiting  *waitingError
		stalling *stallingError
	)
	switch {
	case err == nil:
		return ctrl.Result{RequeueAfter: res.requeueAfter}, true, nil
	case errors.As(err, &waiting):
		markNotReady(conds, gen, waiting.reason, waiting.message)
		if waiting.cause != nil {
			return ctrl.Result{}, false, waiting.cause
		}
		return ctrl.Result{RequeueAfter: res.requeueAfter}, false, nil
	case errors.As(err, &stalling):
		markStalled(conds, gen, stalling.reason, stalling.message)
		if stalling.recheckAfter > 0 {
			return ctrl.Result{RequeueAfter: res.merge(requeueAfter(stalling.recheckAfter)).requeueAfter}, true, nil
		}
		return ctrl.Result{}, true, reconcile.TerminalError(err)
	}
	reason := string(apierrors.ReasonForError(err))
	if reason == "" || reason == string(metav1.StatusReasonUnknown) {
		reason = promptopsv1.ReasonReconcileError
	}
	msg := capitalize(err.Error())
	if !strings.HasSuffix(msg, ".") {
		msg += "."
	}
	if permanentRefusal(err) {
		markStalled(conds, gen, reason, msg+" Nothing is retried until the object or its inputs change.")
		return ctrl.Result{}, true, reconcile.TerminalError(err)
	}
	markNotReady(conds, gen, reason, msg+" Retrying.")
	return ctrl.Result{}, false, err
}

// permanentRefusal tells whether sending the same object again cannot help.
func permanentRefusal(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsBadRequest(err)
}

// statusOf points at what the finish reads and writes of an object's
// status.
type statusOf struct {
	// status is a pointer to the kind's status, for the patch.
	status             any
	conditions         *[]metav1.Condition
	observedGeneration *int64
}

// statusWriter is the end every reconcile shares.
type statusWriter struct {
	client   client.Client
	recorder events.EventRecorder
	// action names what the events of condition transitions report on.
	action string
}

// finish is deferred by each Reconcile once it has read its object: it
// summarizes the phases' outcome into cur's status, writes the status
// (cur against orig, as read) and returns what controller-runtime gets.
// A status that was not written is retried, even after a terminal error.
func (w statusWriter) finish(ctx context.Context, obj client.Object, orig, cur statusOf, res phaseResult, err error) (ctrl.Result, error) {
	result, err := summarize(cur.conditions, obj.GetGeneration(), cur.observedGeneration, res, err)
	if perr := w.patchStatus(ctx, obj, orig, cur); perr != nil {
		if err != nil {
			perr = fmt.Errorf("%w (after: %v)", perr, err)
		}
		return ctrl.Result{}, perr
	}
	return result, err
}

// patchStatus writes the status once, only when it changed, as a merge
// patch under obj's resourceVersion: computed from a cached copy that
// trails our own last write, it would leave out fields that only look
// unchanged (a template's revision, a bank's activeJob naming a Job that
// has finished), and would repeat that write's events; the conflict makes
// the reconcile run again on a fresh copy instead. It emits an event per
// condition transition.
func (w statusWriter) patchStatus(ctx context.Context, obj client.Object, orig, cur statusOf) error {
	if equality.Semantic.DeepEqual(orig.status, cur.status) {
		return nil
	}
	if err := writeStatus(ctx, w.client, obj, orig.status, cur.status); err != nil {
		return client.IgnoreNotFound(err)
	}
	conditionEvents(w.recorder, obj, *orig.conditions, *cur.conditions, w.action)
	return nil
}
