package controllers

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/assembler"
)

// configMapRefIndex indexes PromptTemplates by the ConfigMaps they read.
const configMapRefIndex = "promptops.io/configmap-refs"

// PromptTemplateReconciler renders PromptTemplates into ConfigMaps and
// reports their budgets.
type PromptTemplateReconciler struct {
	// Client reads from the cache; ConfigMaps are cached as metadata only.
	client.Client
	// APIReader reads the content of referenced and rendered ConfigMaps
	// directly, so the cache never holds ConfigMaps the operator does not need.
	APIReader client.Reader
	Recorder  events.EventRecorder

	cms *configMapWriter
}

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete

// SetupWithManager registers the controller.
func (r *PromptTemplateReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	r.init()
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &promptopsv1.PromptTemplate{}, configMapRefIndex,
		func(o client.Object) []string {
			pt := o.(*promptopsv1.PromptTemplate)
			var names []string
			seen := map[string]bool{}
			for _, ref := range assembler.References(&pt.Spec) {
				if !seen[ref.ConfigMap] {
					seen[ref.ConfigMap] = true
					names = append(names, ref.ConfigMap)
				}
			}
			return names
		}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&promptopsv1.PromptTemplate{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&corev1.ConfigMap{}, builder.OnlyMetadata).
		WatchesMetadata(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.templatesReading)).
		WithOptions(opts).
		Named("prompttemplate").
		Complete(r)
}

// templatesReading maps a ConfigMap to the templates that read it, in its
// namespace only.
func (r *PromptTemplateReconciler) templatesReading(ctx context.Context, o client.Object) []reconcile.Request {
	var list promptopsv1.PromptTemplateList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{configMapRefIndex: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing templates that read a ConfigMap", "configMap", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}})
	}
	return reqs
}

func (r *PromptTemplateReconciler) init() {
	if r.cms == nil {
		r.cms = &configMapWriter{Client: r.Client, APIReader: r.APIReader}
	}
}

// Reconcile renders one template.
func (r *PromptTemplateReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	r.init()
	pt := &promptopsv1.PromptTemplate{}
	if err := r.Get(ctx, req.NamespacedName, pt); err != nil {
		if apierrors.IsNotFound(err) {
			forgetTemplateMetrics(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pt.DeletionTimestamp.IsZero() {
		// Children go with their owner reference; nothing outside the
		// cluster to clean up.
		return ctrl.Result{}, nil
	}
	orig := pt.DeepCopy()
	defer func() {
		retErr = errors.Join(retErr, r.patchStatus(ctx, orig, pt))
	}()

	sources, err := r.readSources(ctx, pt)
	if err != nil {
		return ctrl.Result{}, err
	}
	res, err := assembler.Render(assembler.Input{Namespace: pt.Namespace, Name: pt.Name, Spec: &pt.Spec, Sources: sources})
	if err != nil {
		return r.stalled(pt, err)
	}
	verdict := judge(res)
	if verdict.apply {
		if err := r.applyConfigMaps(ctx, pt, res); err != nil {
			return ctrl.Result{}, err
		}
		pt.Status.Revision = res.Plan.Revision
		pt.Status.ConfigMapName = renderedName(pt)
	}
	if err := r.pruneHistory(ctx, pt); err != nil {
		return ctrl.Result{}, err
	}
	setTemplateStatus(pt, res, verdict)
	return ctrl.Result{}, nil
}

// readSources reads the ConfigMap keys the template references, directly
// from the API. A missing ConfigMap is absent from the result; the assembler
// decides whether a fallback applies.
func (r *PromptTemplateReconciler) readSources(ctx context.Context, pt *promptopsv1.PromptTemplate) (map[assembler.SourceKey]string, error) {
	refs := assembler.References(&pt.Spec)
	out := make(map[assembler.SourceKey]string, len(refs))
	cms := map[string]*corev1.ConfigMap{}
	for _, ref := range refs {
		cm, read := cms[ref.ConfigMap]
		if !read {
			cm = &corev1.ConfigMap{}
			// Same namespace only: the API has no field to name another.
			err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: pt.Namespace, Name: ref.ConfigMap}, cm)
			if apierrors.IsNotFound(err) {
				cm = nil
			} else if err != nil {
				return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", pt.Namespace, ref.ConfigMap, err)
			}
			cms[ref.ConfigMap] = cm
		}
		if cm == nil {
			continue
		}
		if v, ok := cm.Data[ref.Key]; ok {
			out[ref] = v
		}
	}
	return out, nil
}

// stalled records content that cannot render until something changes. A
// missing reference heals by itself through the ConfigMap watch; other
// errors need a spec change.
func (r *PromptTemplateReconciler) stalled(pt *promptopsv1.PromptTemplate, err error) (ctrl.Result, error) {
	reason := promptopsv1.ReasonInvalidTemplate
	var missing *assembler.MissingReferenceError
	if errors.As(err, &missing) {
		reason = promptopsv1.ReasonReferenceNotFound
	}
	gen := pt.Generation
	setReady(&pt.Status.Conditions, gen, false, true, reason, capitalize(err.Error())+".")
	setReconciling(&pt.Status.Conditions, gen, false, "", "")
	pt.Status.ObservedGeneration = gen
	if reason == promptopsv1.ReasonReferenceNotFound {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, reconcile.TerminalError(err)
}

// patchStatus writes the status once, as a merge patch, and only when it
// changed; it emits an event when Ready changes.
func (r *PromptTemplateReconciler) patchStatus(ctx context.Context, orig, pt *promptopsv1.PromptTemplate) error {
	if equality.Semantic.DeepEqual(orig.Status, pt.Status) {
		return nil
	}
	if err := r.Status().Patch(ctx, pt, client.MergeFrom(orig)); err != nil {
		return client.IgnoreNotFound(err)
	}
	readyEvent(r.Recorder, pt, orig.Status.Conditions, pt.Status.Conditions, "Render")
	return nil
}
