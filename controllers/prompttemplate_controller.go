package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/assembler"
	"github.com/promptops/promptops/internal/rollout"
	"github.com/promptops/promptops/internal/telemetry"
	"github.com/promptops/promptops/internal/tokens"
)

// configMapRefIndex indexes PromptTemplates by the ConfigMaps they read.
const configMapRefIndex = "promptops.io/configmap-refs"

// memoryBankRefIndex indexes PromptTemplates by the MemoryBanks their
// memory sections recall from.
const memoryBankRefIndex = "promptops.io/memorybank-refs"

// PromptTemplateReconciler renders PromptTemplates into ConfigMaps and
// reports their budgets.
type PromptTemplateReconciler struct {
	// Client reads from the cache; ConfigMaps are cached as metadata only.
	client.Client
	// APIReader reads the content of referenced and rendered ConfigMaps
	// directly, so the cache never holds ConfigMaps the operator does not need.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// PerTemplateMetrics publishes series of each template and intent
	// besides the counts per namespace.
	PerTemplateMetrics bool
	// TokenizerRetry is how often a template whose encoding's vocabulary
	// is not supplied looks for it again.
	TokenizerRetry time.Duration

	cms     *configMapWriter
	metrics *templateMetrics
	// now tells the time of a rollout's steps and measurements.
	now func() time.Time
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
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), configMapMeta(), historyOfIndex, historyOf); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &promptopsv1.PromptTemplate{}, memoryBankRefIndex,
		func(o client.Object) []string { return assembler.MemoryBanks(&o.(*promptopsv1.PromptTemplate).Spec) }); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&promptopsv1.PromptTemplate{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, reconcileRequested, rolloutRequested))).
		Owns(&corev1.ConfigMap{}, builder.OnlyMetadata).
		WatchesMetadata(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.templatesReading)).
		Watches(&promptopsv1.MemoryBank{}, handler.EnqueueRequestsFromMapFunc(r.templatesRecalling), builder.WithPredicates(endpointChanged)).
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

// templatesRecalling maps a MemoryBank to the templates whose memory
// sections recall from it, in its namespace only.
func (r *PromptTemplateReconciler) templatesRecalling(ctx context.Context, o client.Object) []reconcile.Request {
	var list promptopsv1.PromptTemplateList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{memoryBankRefIndex: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing templates that recall from a MemoryBank", "memoryBank", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}})
	}
	return reqs
}

// bankEndpoint is a MemoryBank's status.serving.endpoint, "" when none.
func bankEndpoint(o client.Object) string {
	mb, ok := o.(*promptopsv1.MemoryBank)
	if !ok || mb.Status.Serving == nil {
		return ""
	}
	return mb.Status.Serving.Endpoint
}

// endpointChanged passes a MemoryBank's creation, deletion and changes of
// its endpoint: the rest of its status (runs, schedules) does not concern
// templates.
var endpointChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool { return bankEndpoint(e.ObjectOld) != bankEndpoint(e.ObjectNew) },
}

func (r *PromptTemplateReconciler) init() {
	if r.cms == nil {
		r.cms = &configMapWriter{Client: r.Client, APIReader: r.APIReader}
	}
	if r.metrics == nil {
		r.metrics = &templateMetrics{perTemplate: r.PerTemplateMetrics}
	}
	if r.TokenizerRetry == 0 {
		r.TokenizerRetry = DefaultTokenizerRetry
	}
	if r.now == nil {
		r.now = time.Now
	}
}

// templateScope is what one reconcile of a template works on, phase to
// phase.
type templateScope struct {
	pt      *promptopsv1.PromptTemplate
	sources assembler.ConfigMaps
	// banks the memory sections recall from, in spec order, and their
	// endpoints ("" when not served).
	banks     []bankState
	endpoints map[string]string
	res       *assembler.Result
	verdict   verdict
	// rollout is the rollout's decision, when one was made and written.
	rollout *rollout.Decision
}

// Reconcile renders one template in phases: read the referenced ConfigMaps,
// render, write the ConfigMaps, prune history, set the status. The status is
// written once, at the end, errors included, by the deferred finish, which
// also decides what is returned.
func (r *PromptTemplateReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	r.init()
	pt := &promptopsv1.PromptTemplate{}
	if err := r.Get(ctx, req.NamespacedName, pt); err != nil {
		if apierrors.IsNotFound(err) {
			r.metrics.forget(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.settled(ctx, pt) {
		return ctrl.Result{}, nil
	}
	// The cache holds the template's outline (templateOutline): the whole
	// one comes from the API server, at least as new as the outline, so
	// from its watch cache rather than a read of etcd.
	seen := pt.ResourceVersion
	pt = &promptopsv1.PromptTemplate{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, pt, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: seen}}); err != nil {
		if apierrors.IsNotFound(err) {
			r.metrics.forget(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pt.DeletionTimestamp.IsZero() {
		// Children go with their owner reference; nothing outside the
		// cluster to clean up.
		return ctrl.Result{}, nil
	}
	orig := pt.DeepCopy()
	var res phaseResult
	scope := &templateScope{pt: pt}
	defer func() {
		result, retErr = r.statusWriter().finish(ctx, pt, templateStatus(orig), templateStatus(pt), res, retErr)
		r.metrics.record(pt)
		if retErr == nil {
			r.emitRolloutEvents(pt, scope.rollout)
		}
	}()
	handleReconcileRequest(pt.Annotations, &pt.Status.LastHandledReconcileAt)

	if res, retErr = runPhases(ctx, scope,
		r.reconcileSources,
		r.reconcileRender,
		r.reconcileConfigMaps,
		r.reconcileHistory,
	); retErr != nil {
		return ctrl.Result{}, retErr
	}
	setTemplateStatus(pt, scope.res, scope.verdict)
	setMemoryCondition(pt, scope.banks)
	setRolloutConditions(pt, scope.rollout)
	return ctrl.Result{}, nil
}

// templateStatus points the status finish at a template's.
func templateStatus(pt *promptopsv1.PromptTemplate) statusOf {
	return statusOf{status: &pt.Status, conditions: &pt.Status.Conditions, observedGeneration: &pt.Status.ObservedGeneration}
}

func (r *PromptTemplateReconciler) statusWriter() statusWriter {
	return statusWriter{client: r.Client, recorder: r.Recorder, action: "Render"}
}

// settled tells, from the cached o alone, that a reconcile has nothing to do,
// so that it reads nothing from the API server (the event of the template's
// own rendered ConfigMap, a resync): the template's render is a function of
// its spec only (no ConfigMap or MemoryBank inputs, no history copies), its
// status says this generation rendered and is Ready with no reconcile
// request pending, and the live ConfigMap holds that revision with the
// content this process verified or wrote.
func (r *PromptTemplateReconciler) settled(ctx context.Context, o *promptopsv1.PromptTemplate) bool {
	if !o.DeletionTimestamp.IsZero() {
		return false
	}
	st := &o.Status
	if st.ObservedGeneration != o.Generation || st.Revision == "" || historyLimit(o) > 0 ||
		len(assembler.References(&o.Spec)) > 0 || len(assembler.MemoryBanks(&o.Spec)) > 0 {
		return false
	}
	last := st.LastHandledReconcileAt
	handleReconcileRequest(o.Annotations, &last)
	if last != st.LastHandledReconcileAt {
		return false
	}
	ready := meta.FindStatusCondition(st.Conditions, promptopsv1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != o.Generation {
		return false
	}
	return r.cms.verifiedAt(ctx, o.UID, types.NamespacedName{Namespace: o.Namespace, Name: renderedName(o)}, roleLive, st.Revision)
}

func (r *PromptTemplateReconciler) reconcileSources(ctx context.Context, s *templateScope) (phaseResult, error) {
	sources, err := ReadSources(ctx, r.APIReader, s.pt, func(name string, err error) error {
		return fmt.Errorf("reading ConfigMap %s/%s: %w", s.pt.Namespace, name, err)
	})
	s.sources = sources
	if err != nil {
		return phaseResult{}, err
	}
	return phaseResult{}, r.readBanks(ctx, s)
}

// ReadSources reads the ConfigMaps a template references, in its
// namespace, with r (the API server itself: the manager caches ConfigMaps
// as metadata only), for the reconciler and the admission webhook alike. A
// missing ConfigMap is absent from the result; the assembler decides what
// a missing ConfigMap or key means (a fallback applies to a key only). Any
// other failure to read one goes to unreadable: its error ends the read,
// nil counts the ConfigMap as missing.
func ReadSources(ctx context.Context, r client.Reader, pt *promptopsv1.PromptTemplate, unreadable func(configMap string, err error) error) (assembler.ConfigMaps, error) {
	out := assembler.ConfigMaps{}
	read := map[string]bool{}
	for _, ref := range assembler.References(&pt.Spec) {
		if !read[ref.ConfigMap] {
			read[ref.ConfigMap] = true
			cm := &corev1.ConfigMap{}
			// Same namespace only: the API has no field to name another.
			if err := r.Get(ctx, types.NamespacedName{Namespace: pt.Namespace, Name: ref.ConfigMap}, cm); err != nil {
				if !apierrors.IsNotFound(err) {
					if err := unreadable(ref.ConfigMap, err); err != nil {
						return nil, err
					}
				}
				continue
			}
			out[ref.ConfigMap] = cm.Data // nil when it has no data: it exists all the same
		}
	}
	return out, nil
}

// bankState is what a template's render knows of a MemoryBank.
type bankState struct {
	name     string
	found    bool
	endpoint string
}

// readBanks reads, from the cache, the MemoryBanks the memory sections
// name. A missing or unserved bank is not an error: its sections render
// with no endpoint and the MemoryUnavailable condition says so.
func (r *PromptTemplateReconciler) readBanks(ctx context.Context, s *templateScope) error {
	s.banks, s.endpoints = nil, map[string]string{}
	for _, name := range assembler.MemoryBanks(&s.pt.Spec) {
		mb := &promptopsv1.MemoryBank{}
		err := r.Get(ctx, types.NamespacedName{Namespace: s.pt.Namespace, Name: name}, mb)
		if apierrors.IsNotFound(err) {
			s.banks = append(s.banks, bankState{name: name})
			continue
		} else if err != nil {
			return fmt.Errorf("reading MemoryBank %s/%s: %w", s.pt.Namespace, name, err)
		}
		ep := bankEndpoint(mb)
		s.banks = append(s.banks, bankState{name: name, found: true, endpoint: ep})
		if ep != "" {
			s.endpoints[name] = ep
		}
	}
	return nil
}

// renderTimeout bounds one render's counts and cuts: far above what the
// largest template takes, so that a pathological one fails and is retried
// with backoff instead of holding a worker.
const renderTimeout = 30 * time.Second

// reconcileRender renders the template. Content that cannot render is
// Stalled, except a missing reference, which is waited for. A render that
// runs out of time is an error, retried.
func (r *PromptTemplateReconciler) reconcileRender(ctx context.Context, s *templateScope) (phaseResult, error) {
	pt := s.pt
	ctx, cancel := context.WithTimeout(ctx, renderTimeout)
	defer cancel()
	ctx, span := telemetry.Tracer().Start(ctx, "render "+pt.Name, trace.WithAttributes(
		telemetry.PromptName.String(pt.Name), telemetry.TemplateNamespace.String(pt.Namespace), attribute.Int64("promptops.template.generation", pt.Generation)))
	defer span.End()
	res, err := assembler.RenderContext(ctx, assembler.Input{Namespace: pt.Namespace, Name: pt.Name, Spec: &pt.Spec, Sources: s.sources, MemoryEndpoints: s.endpoints})
	if err == nil {
		span.SetAttributes(telemetry.PromptVersion.String(res.Plan.Revision), telemetry.PromptTokens.Int(res.Largest()))
	} else {
		span.SetStatus(codes.Error, "the template does not render")
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return phaseResult{}, fmt.Errorf("rendering %s/%s: %w", pt.Namespace, pt.Name, err)
	}
	if err != nil {
		return phaseResult{}, r.notRendered(pt, err)
	}
	s.res, s.verdict = res, judge(res)
	return phaseResult{}, nil
}

// reconcileConfigMaps writes the render when the verdict lets it: live at
// once, or as the canary of a rollout (spec.rollout) beside the stable
// revision.
func (r *PromptTemplateReconciler) reconcileConfigMaps(ctx context.Context, s *templateScope) (phaseResult, error) {
	if !s.verdict.apply {
		return phaseResult{}, nil
	}
	rendered, err := assembler.ConfigMapData(s.res)
	if err != nil {
		var tooLarge *assembler.TooLargeError
		if errors.As(err, &tooLarge) {
			return phaseResult{}, r.notRendered(s.pt, err)
		}
		return phaseResult{}, err
	}
	data, rev, stable, res, rolloutErr := r.rolloutData(ctx, s, rendered)
	if data == nil {
		return phaseResult{}, rolloutErr
	}
	if err := r.applyConfigMaps(ctx, s.pt, data, rev, stable); err != nil {
		s.rollout = nil
		return phaseResult{}, err
	}
	if rolloutErr != nil {
		return phaseResult{}, rolloutErr
	}
	if s.rollout != nil {
		// The rollout moves on only once the ConfigMap holds its step.
		s.pt.Status.Rollout = s.rollout.Status
	}
	s.pt.Status.Revision = rev
	s.pt.Status.ConfigMapName = renderedName(s.pt)
	return res, nil
}

func (r *PromptTemplateReconciler) reconcileHistory(ctx context.Context, s *templateScope) (phaseResult, error) {
	return phaseResult{}, r.pruneHistory(ctx, s.pt)
}

// notRendered says why a template did not render. A missing reference
// is waited for (Reconciling): the ConfigMap watch brings the next
// reconcile. Anything else needs a change of the spec, its variables or a
// referenced ConfigMap (Stalled). The figures of the last render are
// dropped with their metrics, so nothing stale is reported; the ConfigMap
// keeps the last revision that rendered.
func (r *PromptTemplateReconciler) notRendered(pt *promptopsv1.PromptTemplate, err error) error {
	st := &pt.Status
	st.Intents, st.LargestTokens = nil, 0
	meta.RemoveStatusCondition(&st.Conditions, promptopsv1.ConditionBudgetExceeded)
	meta.RemoveStatusCondition(&st.Conditions, promptopsv1.ConditionTruncated)
	msg := RenderErrorMessage(err)
	var missing *assembler.MissingReferenceError
	if errors.As(err, &missing) {
		return &waitingError{reason: promptopsv1.ReasonReferenceNotFound, message: msg + " Waiting for it."}
	}
	// A vocabulary not supplied needs the platform team, not the author
	// (Stalled), and is looked for again after TokenizerRetry (a mounted
	// directory has no watch): Ready once it is there.
	var noTokenizer *tokens.UnavailableError
	if errors.As(err, &noTokenizer) {
		return &stallingError{reason: promptopsv1.ReasonTokenizerUnavailable, message: msg, recheckAfter: r.TokenizerRetry, cause: err}
	}
	reason := promptopsv1.ReasonInvalidTemplate
	var tooLarge *assembler.TooLargeError
	if errors.As(err, &tooLarge) {
		reason = promptopsv1.ReasonTooLarge
	}
	return &stallingError{reason: reason, message: msg, cause: err}
}
