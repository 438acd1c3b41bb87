package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/assembler"
	"github.com/promptops/promptops/internal/rollout"
	"github.com/promptops/promptops/internal/rollout/analysis"
)

// analysisTimeout bounds one measurement, so that a Prometheus that does
// not answer holds one worker for that long at most; the other templates
// have the other workers, and the next measurement is an interval later.
const analysisTimeout = 5 * time.Second

// rolloutData decides the template's rollout (internal/rollout) and
// returns what the live ConfigMap holds: its data, the stable revision
// (plan.json, the revision annotation and status.revision) and the stable
// revision's own keys (for the history copy). rendered is the render's
// data. A canary that does not fit beside the stable revision is a
// stallingError returned with the stable revision's data, which is still
// written. Without spec.rollout nothing is read: the render is live, as
// without rollouts. The stable revision is read back from the ConfigMap,
// never rendered again, so a restart of the manager loses nothing.
func (r *PromptTemplateReconciler) rolloutData(ctx context.Context, s *templateScope, rendered map[string]string) (data map[string]string, rev string, stableData map[string]string, res phaseResult, err error) {
	pt := s.pt
	renderedRev := s.res.Plan.Revision
	if pt.Spec.Rollout == nil {
		pt.Status.Rollout = nil
		return rendered, renderedRev, rendered, phaseResult{}, nil
	}
	stableRev, stableData, err := r.readStable(ctx, pt, renderedRev, rendered)
	if err != nil {
		return nil, "", nil, phaseResult{}, err
	}
	in := rollout.Input{
		Spec: pt.Spec.Rollout, Stable: stableRev, Rendered: renderedRev, Status: pt.Status.Rollout,
		Promote: pt.Annotations[promptopsv1.AnnotationRolloutPromote], Abort: pt.Annotations[promptopsv1.AnnotationRolloutAbort],
		Now: r.now(),
	}
	d := rollout.Decide(in)
	if d.Measure {
		m := measure(ctx, pt.Spec.Rollout.Analysis, renderedRev)
		in.Measurement = &m
		d = rollout.Decide(in)
	}
	s.rollout = &d
	res = requeueAfter(d.RequeueAfter)
	switch {
	case d.Stable == renderedRev:
		return rendered, renderedRev, rendered, res, nil
	case d.Canary:
		data, err := assembler.CanaryConfigMapData(stableData, rendered, assembler.RolloutState{
			StableRevision: d.Stable, CanaryRevision: renderedRev, Weight: int(d.Status.Weight)})
		if err != nil {
			// The stable revision alone keeps serving, and a canary
			// rolling out before is dropped: the spec must change.
			s.rollout = nil
			if prev := pt.Status.Rollout; prev != nil && (prev.Phase == promptopsv1.RolloutProgressing || prev.Phase == promptopsv1.RolloutPaused) {
				next := prev.DeepCopy()
				next.Phase, next.Weight = promptopsv1.RolloutAborted, 0
				next.Message = fmt.Sprintf("Replaced by revision %s, which does not fit the ConfigMap beside the stable revision %s.", renderedRev, d.Stable)
				pt.Status.Rollout = next
			}
			return stableData, d.Stable, stableData, phaseResult{}, &stallingError{reason: promptopsv1.ReasonTooLarge,
				message: RenderErrorMessage(err) + " The stable revision " + d.Stable + " keeps serving.", cause: err}
		}
		return data, d.Stable, stableData, res, nil
	default:
		return stableData, d.Stable, stableData, res, nil
	}
}

// readStable reads the stable revision from the template's live ConfigMap:
// from the cache's revision annotation when it is the render's (no read),
// else from plan.json itself. No ConfigMap of the template's, or none
// whose plan.json reads, has no stable revision ("").
func (r *PromptTemplateReconciler) readStable(ctx context.Context, pt *promptopsv1.PromptTemplate, renderedRev string, rendered map[string]string) (string, map[string]string, error) {
	key := types.NamespacedName{Namespace: pt.Namespace, Name: renderedName(pt)}
	m := configMapMeta()
	if err := r.Get(ctx, key, m); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil, nil
		}
		return "", nil, err
	}
	if !isControlledBy(m.OwnerReferences, pt.UID) {
		return "", nil, nil
	}
	if m.Annotations[promptopsv1.AnnotationRevision] == renderedRev {
		return renderedRev, rendered, nil
	}
	cm := &corev1.ConfigMap{}
	if err := r.APIReader.Get(ctx, key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil, nil
		}
		return "", nil, fmt.Errorf("reading ConfigMap %s: %w", key, err)
	}
	var stable struct {
		Revision string `json:"revision"`
	}
	if !isControlledBy(cm.OwnerReferences, pt.UID) || json.Unmarshal([]byte(cm.Data[assembler.PlanKey]), &stable) != nil || stable.Revision == "" {
		return "", nil, nil
	}
	return stable.Revision, assembler.StableData(cm.Data), nil
}

// measure runs the analysis once for the canary revision.
func measure(ctx context.Context, a *promptopsv1.RolloutAnalysis, revision string) rollout.Measurement {
	check, err := analysisCheck(a)
	if err != nil {
		return rollout.Measurement{Invalid: true, Message: err.Error()}
	}
	res, err := analysis.Evaluate(ctx, check, analysis.WithRevision(revision), analysis.WithTimeout(analysisTimeout))
	if err != nil {
		var aerr *analysis.Error
		if errors.As(err, &aerr) && aerr.Kind == analysis.Invalid {
			return rollout.Measurement{Invalid: true, Message: aerr.Message}
		}
		return rollout.Measurement{Message: err.Error()}
	}
	return rollout.Measurement{Passed: res.Passed, Message: res.Message}
}

// analysisCheck is spec.rollout.analysis as an analysis.Check.
func analysisCheck(a *promptopsv1.RolloutAnalysis) (analysis.Check, error) {
	if a == nil {
		return analysis.Check{}, errors.New("spec.rollout.analysis is not set")
	}
	p := a.Prometheus
	c := analysis.Check{Address: p.Address, Query: p.Query}
	switch {
	case p.MaxValue != nil:
		v, err := strconv.ParseFloat(*p.MaxValue, 64)
		if err != nil {
			return c, fmt.Errorf("spec.rollout.analysis.prometheus.maxValue %q is not a number", *p.MaxValue)
		}
		c.Bound = analysis.MaxValue(v)
	case p.MinValue != nil:
		v, err := strconv.ParseFloat(*p.MinValue, 64)
		if err != nil {
			return c, fmt.Errorf("spec.rollout.analysis.prometheus.minValue %q is not a number", *p.MinValue)
		}
		c.Bound = analysis.MinValue(v)
	}
	return c, nil
}

// setRolloutConditions sets what a running or aborted rollout says over
// the render's conditions (a live render keeps them).
func setRolloutConditions(pt *promptopsv1.PromptTemplate, d *rollout.Decision) {
	if d == nil {
		return
	}
	conds, gen := &pt.Status.Conditions, pt.Generation
	switch d.State {
	case rollout.Progressing, rollout.Paused:
		markNotReady(conds, gen, d.Reason, d.Message)
	case rollout.Aborted:
		markStalled(conds, gen, d.Reason, d.Message)
	}
}

// emitRolloutEvents emits a written decision's events.
func (r *PromptTemplateReconciler) emitRolloutEvents(pt *promptopsv1.PromptTemplate, d *rollout.Decision) {
	if d == nil || r.Recorder == nil {
		return
	}
	for _, e := range d.Events {
		typ := corev1.EventTypeNormal
		if e.Warning {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(pt, nil, typ, e.Reason, "Rollout", "%s", e.Message)
	}
}

// rolloutRequested passes updates that change the promote or abort
// annotation, which the generation predicate would drop.
var rolloutRequested = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		if e.ObjectOld == nil || e.ObjectNew == nil {
			return false
		}
		o, n := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
		return o[promptopsv1.AnnotationRolloutPromote] != n[promptopsv1.AnnotationRolloutPromote] ||
			o[promptopsv1.AnnotationRolloutAbort] != n[promptopsv1.AnnotationRolloutAbort]
	},
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// rolloutWeight is the share of keys on the canary, for the metric: 0
// outside a running rollout.
func rolloutWeight(st *promptopsv1.RolloutStatus) int32 {
	if st == nil || (st.Phase != promptopsv1.RolloutProgressing && st.Phase != promptopsv1.RolloutPaused) {
		return 0
	}
	return st.Weight
}
