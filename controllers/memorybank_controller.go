package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/trace"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/telemetry"
	"github.com/promptops/promptops/internal/tokens"
)

// MemoryBankReconciler renders a bank's consolidation prompt and runs its
// consolidation Jobs on schedule and on demand.
type MemoryBankReconciler struct {
	client.Client
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     Clock
	// JobImage is the operator's own image.
	JobImage string
	// JobEnv is set in every Job (Options.JobEnv).
	JobEnv []corev1.EnvVar

	cms *configMapWriter
	// deferred holds, per bank UID, the request value whose RunDeferred
	// event was emitted, so that a waiting request is announced once (once
	// more after a manager restart), not at every reconcile.
	deferred sync.Map
}

// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// SetupWithManager registers the controller.
func (r *MemoryBankReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	r.init()
	return ctrl.NewControllerManagedBy(mgr).
		For(&promptopsv1.MemoryBank{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Owns(&corev1.ConfigMap{}, builder.OnlyMetadata).
		Owns(&batchv1.Job{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}, builder.OnlyMetadata).
		Owns(&corev1.ServiceAccount{}, builder.OnlyMetadata).
		Owns(&policyv1.PodDisruptionBudget{}, builder.OnlyMetadata).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			name := o.GetLabels()[promptopsv1.LabelMemoryBank]
			if name == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
		})).
		WithOptions(opts).
		Named("memorybank").
		Complete(r)
}

func (r *MemoryBankReconciler) init() {
	if r.cms == nil {
		r.cms = &configMapWriter{Client: r.Client, APIReader: r.APIReader}
	}
	if r.Clock == nil {
		r.Clock = realClock{}
	}
}

// bankScope is what one reconcile of a bank works on, phase to phase.
type bankScope struct {
	mb *promptopsv1.MemoryBank
	// orig is the bank as read, from which the status patch is computed.
	orig        *promptopsv1.MemoryBank
	now         time.Time
	missionHash string
	// active is the running Job, if any.
	active *batchv1.Job
	// sched is the parsed schedule; nil runs on demand only.
	sched cron.Schedule
	// noImage: the manager has no Job image and the bank names none.
	noImage bool
	// servingAvailable: the memory server of spec.serving has its replicas
	// updated and available; servingMessage says how far it is.
	servingAvailable bool
	servingMessage   string
	result           ctrl.Result
}

// requeueAfter asks to be called again after d at the latest.
func (s *bankScope) requeueAfter(d time.Duration) {
	if d > 0 && (s.result.RequeueAfter == 0 || d < s.result.RequeueAfter) {
		s.result.RequeueAfter = d
	}
}

// Reconcile handles one bank in phases: render the consolidation ConfigMap,
// observe Jobs, check the schedule and image, start a due run; the status
// is written once, at the end, errors included.
func (r *MemoryBankReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	r.init()
	mb := &promptopsv1.MemoryBank{}
	if err := r.Get(ctx, req.NamespacedName, mb); err != nil {
		if apierrors.IsNotFound(err) {
			forgetBankMetrics(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !mb.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.finalizeBank(ctx, mb)
	}
	orig := mb.DeepCopy()
	scope := &bankScope{mb: mb, orig: orig, now: r.Clock.Now().UTC()}
	defer func() {
		retErr = markError(&mb.Status.Conditions, mb.Generation, &mb.Status.ObservedGeneration, retErr)
		if err := r.patchStatus(ctx, orig, mb); err != nil {
			// The status was not written: retry, even after a terminal
			// error, so that it is.
			if retErr != nil {
				err = fmt.Errorf("%w (after: %v)", err, retErr)
			}
			result, retErr = ctrl.Result{}, err
		}
		recordBankMetrics(mb)
	}()
	handleReconcileRequest(mb.Annotations, &mb.Status.LastHandledReconcileAt)

	for _, phase := range []func(context.Context, *bankScope) error{
		r.reconcileConfigMap,
		r.reconcileServing,
		r.reconcileJobs,
		r.reconcileSchedule,
		r.reconcileRuns,
	} {
		if err := phase(ctx, scope); err != nil {
			return scope.result, err
		}
	}
	r.setStatus(mb, scope)
	return scope.result, nil
}

func (r *MemoryBankReconciler) reconcileConfigMap(ctx context.Context, s *bankScope) error {
	hash, err := r.renderConfigMap(ctx, s.mb)
	s.missionHash = hash
	return err
}

// reconcileJobs observes Jobs first, so that activeJob and lastRun stay
// current even while the spec keeps new runs from starting.
func (r *MemoryBankReconciler) reconcileJobs(ctx context.Context, s *bankScope) error {
	active, requeue, err := r.observeJobs(ctx, s.mb)
	s.active = active
	s.requeueAfter(requeue)
	return err
}

// reconcileSchedule parses the schedule and checks that a run can start
// when one is due: a schedule that can never work, or no image while a run
// is due, is Stalled.
func (r *MemoryBankReconciler) reconcileSchedule(_ context.Context, s *bankScope) error {
	mb := s.mb
	sched, msg := parseSchedule(mb.Spec.Consolidation.Schedule, s.now)
	if msg != "" {
		stallBank(mb, promptopsv1.ReasonInvalidSchedule, msg)
		mb.Status.NextScheduleTime = nil
		return recorded(reconcile.TerminalError(errors.New(msg)))
	}
	s.sched = sched
	s.noImage = r.JobImage == "" && mb.Spec.Consolidation.Image == ""
	if s.noImage && !mb.Spec.Consolidation.Suspend && (requestPending(mb) || sched != nil) {
		msg := "No image for consolidation Jobs: start the manager with --job-image (or $PROMPTOPS_JOB_IMAGE), or set spec.consolidation.image."
		stallBank(mb, promptopsv1.ReasonNoJobImage, msg)
		return recorded(reconcile.TerminalError(errors.New(msg)))
	}
	return nil
}

func requestPending(mb *promptopsv1.MemoryBank) bool {
	request := mb.Annotations[promptopsv1.AnnotationConsolidateRequestedAt]
	return request != "" && request != mb.Status.LastHandledRequest
}

// reconcileRuns starts at most one run, never while one is active, and
// sets when to look again for the next scheduled one.
func (r *MemoryBankReconciler) reconcileRuns(ctx context.Context, s *bankScope) error {
	mb := s.mb
	suspended := mb.Spec.Consolidation.Suspend
	if s.active == nil && !suspended && !s.noImage {
		switch {
		case requestPending(mb):
			request := mb.Annotations[promptopsv1.AnnotationConsolidateRequestedAt]
			active, err := r.startRequestJob(ctx, mb, s.missionHash, request)
			if err != nil {
				return markJobRejected(mb, err)
			}
			s.active = active
			mb.Status.LastHandledRequest = request
		case s.sched != nil:
			if slot, due := dueSlot(s.sched, scheduleRef(mb), s.now); due {
				active, err := r.startJob(ctx, mb, scheduledJobName(mb, slot), s.missionHash, map[string]string{annotationScheduledAt: slot.Format(time.RFC3339)})
				if err != nil {
					return markJobRejected(mb, err)
				}
				if _, done := jobFinished(active); !done {
					s.active = active
				} // else the slot's run ended before a restart
				mb.Status.LastScheduleTime = &metav1.Time{Time: slot}
			}
		}
	}
	// A scheduled Job found running (its start's status write may have been
	// lost to a conflict) still records its slot.
	if s.active != nil {
		if at, err := time.Parse(time.RFC3339, s.active.Annotations[annotationScheduledAt]); err == nil &&
			(mb.Status.LastScheduleTime == nil || mb.Status.LastScheduleTime.Before(&metav1.Time{Time: at})) {
			mb.Status.LastScheduleTime = &metav1.Time{Time: at}
		}
	}
	// So does a requested Job: the running Job may be this very request's,
	// seen before its status write (or with that write lost to a conflict);
	// it is not deferred behind itself.
	if s.active != nil && requestPending(mb) &&
		s.active.Annotations[promptopsv1.AnnotationConsolidateRequestedAt] == mb.Annotations[promptopsv1.AnnotationConsolidateRequestedAt] {
		mb.Status.LastHandledRequest = mb.Annotations[promptopsv1.AnnotationConsolidateRequestedAt]
	}
	if s.active != nil && !suspended && requestPending(mb) {
		r.announceDeferred(mb, s.active)
	}
	mb.Status.ActiveJob = ""
	if s.active != nil {
		mb.Status.ActiveJob = s.active.Name
	}
	mb.Status.NextScheduleTime = nil
	if s.sched != nil && !suspended {
		next := s.sched.Next(s.now)
		mb.Status.NextScheduleTime = &metav1.Time{Time: next}
		s.requeueAfter(next.Sub(s.now) + time.Second)
	}
	return nil
}

// announceDeferred emits RunDeferred once per requested value that waits
// for the running Job; the request starts when that Job ends.
func (r *MemoryBankReconciler) announceDeferred(mb *promptopsv1.MemoryBank, active *batchv1.Job) {
	request := mb.Annotations[promptopsv1.AnnotationConsolidateRequestedAt]
	if prev, ok := r.deferred.Load(mb.UID); (ok && prev == request) || r.Recorder == nil {
		return
	}
	r.deferred.Store(mb.UID, request)
	r.Recorder.Eventf(mb, active, corev1.EventTypeNormal, promptopsv1.ReasonRunDeferred, "Consolidate",
		"The run requested at %q starts when Job %s, running now, ends.", request, active.Name)
}

// observeJobs records the last finished run, prunes the Job history and
// sets activeJob; it returns the running Job, if any, and when to look
// again for a summary that is not there yet.
func (r *MemoryBankReconciler) observeJobs(ctx context.Context, mb *promptopsv1.MemoryBank) (*batchv1.Job, time.Duration, error) {
	jobs, err := r.ownedJobs(ctx, mb)
	if err != nil {
		return nil, 0, err
	}
	var active *batchv1.Job
	var finished []*batchv1.Job
	for _, j := range jobs {
		if _, done := jobFinished(j); done {
			finished = append(finished, j)
		} else if active == nil || j.CreationTimestamp.After(active.CreationTimestamp.Time) {
			active = j
		}
	}
	requeue, err := r.recordLastRun(ctx, mb, finished)
	if err != nil {
		return nil, 0, err
	}
	if err := r.pruneJobs(ctx, mb, finished); err != nil {
		return nil, 0, err
	}
	mb.Status.ActiveJob = ""
	if active != nil {
		mb.Status.ActiveJob = active.Name
	}
	return active, requeue, nil
}

// parseSchedule parses spec.consolidation.schedule; an empty one is nil. The
// message says why a schedule can never work, and is empty when it can.
func parseSchedule(spec string, now time.Time) (cron.Schedule, string) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, ""
	}
	sched, err := cron.ParseStandard(s)
	if err != nil {
		return nil, fmt.Sprintf("Schedule %q does not parse: %v. Use five cron fields (minute hour day month weekday) or a descriptor such as @hourly.", s, err)
	}
	// robfig/cron gives up after five years and returns the zero time.
	if sched.Next(now).IsZero() {
		return nil, fmt.Sprintf("Schedule %q never fires: no date matches it (such as February 30). Change spec.consolidation.schedule.", s)
	}
	return sched, ""
}

// renderConfigMap writes <name>-consolidation and sets the prompt figures.
func (r *MemoryBankReconciler) renderConfigMap(ctx context.Context, mb *promptopsv1.MemoryBank) (string, error) {
	mission := strings.TrimSpace(mb.Spec.Mission)
	if mission == "" {
		mission = consolidation.DefaultMission
	}
	prompt := consolidation.SystemPrompt(mission)
	hash := consolidation.MissionHash(mission)
	enc, err := tokens.Get(string(orDefault(mb.Spec.LLM.Encoding, promptopsv1.DefaultEncoding)))
	if err != nil {
		return "", err
	}
	maxPrompt := int(orDefault(mb.Spec.LLM.MaxPromptTokens, promptopsv1.DefaultMaxPromptTokens))
	settings, _ := json.MarshalIndent(map[string]any{
		"bank":                    mb.Namespace + "/" + mb.Name,
		"missionHash":             hash,
		"model":                   mb.Spec.LLM.Model,
		"baseURL":                 mb.Spec.LLM.BaseURL,
		"encoding":                string(orDefault(mb.Spec.LLM.Encoding, promptopsv1.DefaultEncoding)),
		"maxPromptTokens":         maxPrompt,
		"maxObservations":         mb.Spec.MaxObservations,
		"maxObservationsPerScope": mb.Spec.MaxObservationsPerScope,
		"parallelism":             orDefault(mb.Spec.Consolidation.Parallelism, promptopsv1.DefaultParallelism),
		"batchSize":               orDefault(mb.Spec.Consolidation.BatchSize, promptopsv1.DefaultBatchSize),
		"maxFactsPerRun":          orDefault(mb.Spec.Consolidation.MaxFactsPerRun, promptopsv1.DefaultMaxFactsPerRun),
		"maxAttempts":             orDefault(mb.Spec.Consolidation.MaxAttempts, promptopsv1.DefaultMaxAttempts),
		"maxTokensPerRun":         orDefault(mb.Spec.Consolidation.MaxTokensPerRun, promptopsv1.DefaultMaxTokensPerRun),
		"schedule":                mb.Spec.Consolidation.Schedule,
		"note":                    "The capacity note is added per run: it depends on the bank's current count of observations.",
	}, "", "  ")
	data := map[string]string{missionKey: mission, promptKey: prompt, settingsKey: string(settings) + "\n"}
	rev := contentHash(data)
	if err := r.cms.ensure(ctx, bankOwner(mb), consolidationName(mb), roleLive, data, rev, map[string]string{promptopsv1.AnnotationMissionHash: hash}); err != nil {
		return "", err
	}
	n := enc.Count(prompt)
	mb.Status.ConfigMapName = consolidationName(mb)
	mb.Status.MissionHash = hash
	mb.Status.Recall = promptopsv1.RecallLexical
	if mb.Spec.Embeddings != nil {
		mb.Status.Recall = promptopsv1.RecallHybrid
	}
	mb.Status.PromptTokens = int32(n)
	gen := mb.Generation
	if left := maxPrompt - n; left*4 < maxPrompt {
		setCondition(&mb.Status.Conditions, gen, promptopsv1.ConditionBudgetExceeded, metav1.ConditionTrue, promptopsv1.ReasonBudgetExceeded,
			fmt.Sprintf("The fixed consolidation prompt takes %d of llm.maxPromptTokens %d, leaving %d for facts and observations, less than a quarter; shorten the mission or raise maxPromptTokens.", n, maxPrompt, left))
	} else {
		setCondition(&mb.Status.Conditions, gen, promptopsv1.ConditionBudgetExceeded, metav1.ConditionFalse, promptopsv1.ReasonWithinBudget,
			fmt.Sprintf("The fixed consolidation prompt takes %d of %d tokens.", n, maxPrompt))
	}
	return hash, nil
}

func (r *MemoryBankReconciler) ownedJobs(ctx context.Context, mb *promptopsv1.MemoryBank) ([]*batchv1.Job, error) {
	var list batchv1.JobList
	if err := r.List(ctx, &list, client.InNamespace(mb.Namespace), client.MatchingLabels{promptopsv1.LabelMemoryBank: mb.Name}); err != nil {
		return nil, err
	}
	var out []*batchv1.Job
	for i := range list.Items {
		if isControlledBy(list.Items[i].OwnerReferences, mb.UID) {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// jobFinished tells whether a Job ended, and whether it succeeded.
func jobFinished(j *batchv1.Job) (succeeded, done bool) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, true
		case batchv1.JobFailed:
			return false, true
		}
	}
	return false, false
}

func (r *MemoryBankReconciler) startJob(ctx context.Context, mb *promptopsv1.MemoryBank, name, missionHash string, annotations map[string]string) (*batchv1.Job, error) {
	// The run's trace starts here: the Job continues it (TRACEPARENT).
	store := mb.Namespace + "/" + mb.Name
	ctx, span := telemetry.Tracer().Start(ctx, "start consolidation "+store, trace.WithAttributes(
		telemetry.OperationName.String(telemetry.OpUpdateMemory), telemetry.MemoryStoreID.String(store)))
	defer span.End()
	extra := r.JobEnv
	for k, v := range telemetry.EnvFromContext(ctx) {
		extra = append(slices.Clip(extra), corev1.EnvVar{Name: k, Value: v})
	}
	job := desiredJob(mb, name, r.JobImage, missionHash, annotations, extra...)
	if err := ctrl.SetControllerReference(mb, job, r.Scheme()); err != nil {
		return nil, err
	}
	if err := r.Create(ctx, job); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Created before a restart; it is the same run.
			existing := &batchv1.Job{}
			if gerr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(job), existing); gerr != nil {
				return nil, gerr
			}
			return existing, nil
		}
		return nil, &jobRejectedError{name: name, err: err}
	}
	ctrl.LoggerFrom(ctx).Info("Started a consolidation Job", "job", name)
	if r.Recorder != nil {
		r.Recorder.Eventf(mb, job, corev1.EventTypeNormal, promptopsv1.ReasonJobRunning, "Consolidate", "Started Job %s", name)
	}
	return job, nil
}

// startRequestJob starts the run of an annotation value, or finds the Job
// a restarted operator created for it. A finished Job that holds the derived
// name belongs to an earlier request with the same value (A, B, A, B, A), so
// the next derived name is tried; it is this request's own only when it is
// the run lastRun recorded.
func (r *MemoryBankReconciler) startRequestJob(ctx context.Context, mb *promptopsv1.MemoryBank, missionHash, request string) (*batchv1.Job, error) {
	ann := map[string]string{promptopsv1.AnnotationConsolidateRequestedAt: request}
	for attempt := 0; attempt < maxRequestJobNames; attempt++ {
		job, err := r.startJob(ctx, mb, requestJobName(mb, mb.Status.LastHandledRequest, request, attempt), missionHash, ann)
		if err != nil {
			return nil, err
		}
		if _, done := jobFinished(job); !done {
			return job, nil
		}
		if lr := mb.Status.LastRun; lr != nil && lr.JobName == job.Name {
			return nil, nil
		}
	}
	return nil, fmt.Errorf("finished Jobs of earlier requests hold all %d names derived for request %q", maxRequestJobNames, request)
}

// jobRejectedError is the API server's refusal to create a Job.
type jobRejectedError struct {
	name string
	err  error
}

func (e *jobRejectedError) Error() string { return fmt.Sprintf("creating Job %s: %v", e.name, e.err) }
func (e *jobRejectedError) Unwrap() error { return e.err }

// pruneJobs keeps the newest successfulJobsHistoryLimit succeeded and
// failedJobsHistoryLimit failed Jobs.
func (r *MemoryBankReconciler) pruneJobs(ctx context.Context, mb *promptopsv1.MemoryBank, finished []*batchv1.Job) error {
	var ok, failed []*batchv1.Job
	for _, j := range finished {
		if s, _ := jobFinished(j); s {
			ok = append(ok, j)
		} else {
			failed = append(failed, j)
		}
	}
	c := mb.Spec.Consolidation
	for _, g := range []struct {
		jobs  []*batchv1.Job
		limit int
	}{{ok, int(valueOr(c.SuccessfulJobsHistoryLimit, promptopsv1.DefaultSuccessfulJobsHistoryLimit))}, {failed, int(valueOr(c.FailedJobsHistoryLimit, promptopsv1.DefaultFailedJobsHistoryLimit))}} {
		sortNewestFirst(g.jobs)
		for i := g.limit; i < len(g.jobs); i++ {
			j := g.jobs[i]
			if err := r.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &j.UID}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("pruning Job %s: %w", j.Name, err)
			}
		}
	}
	return nil
}

func sortNewestFirst(jobs []*batchv1.Job) {
	sort.Slice(jobs, func(a, b int) bool {
		ta, tb := jobTime(jobs[a]), jobTime(jobs[b])
		if !ta.Equal(tb) {
			return ta.After(tb)
		}
		return jobs[a].Name > jobs[b].Name
	})
}

func jobTime(j *batchv1.Job) time.Time {
	if j.Status.CompletionTime != nil {
		return j.Status.CompletionTime.Time
	}
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return j.CreationTimestamp.Time
}

// scheduleRef is the time after which the next scheduled slot counts.
func scheduleRef(mb *promptopsv1.MemoryBank) time.Time {
	if mb.Status.LastScheduleTime != nil {
		return mb.Status.LastScheduleTime.Time
	}
	return mb.CreationTimestamp.Time
}

// dueSlot returns the latest slot after ref that is not after now. Missed
// slots (the operator was down) collapse into one run, as with CronJobs.
func dueSlot(s cron.Schedule, ref, now time.Time) (time.Time, bool) {
	var slot time.Time
	for t, i := s.Next(ref), 0; !t.IsZero() && !t.After(now) && i < 100000; t, i = s.Next(t), i+1 {
		slot = t
	}
	return slot, !slot.IsZero()
}

// patchStatus writes the status once, only when it changed. The merge
// patch carries orig's resourceVersion: computed from a cached bank that
// trails our own last write, it would leave out fields that only look
// unchanged (activeJob naming a Job that has finished); the conflict makes
// the reconcile run again on a fresh bank instead.
func (r *MemoryBankReconciler) patchStatus(ctx context.Context, orig, mb *promptopsv1.MemoryBank) error {
	if equality.Semantic.DeepEqual(orig.Status, mb.Status) {
		return nil
	}
	if err := writeStatus(ctx, r.Client, mb, orig.Status, mb.Status); err != nil {
		return client.IgnoreNotFound(err)
	}
	conditionEvents(r.Recorder, mb, orig.Status.Conditions, mb.Status.Conditions, "Reconcile")
	return nil
}
