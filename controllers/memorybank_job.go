package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/trace"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/telemetry"
	"github.com/promptops/promptops/internal/textclip"
)

const (
	// configDir is where the consolidation ConfigMap's mission is mounted.
	configDir = "/etc/promptops"
	// annotationScheduledAt on a Job is the schedule slot it runs for.
	annotationScheduledAt = "promptops.io/scheduled-at"
)

// ConsolidateExitNoProgress is the exit code of `promptops consolidate` when
// facts failed and none was consolidated; the Job fails at once on it.
const ConsolidateExitNoProgress int32 = 3

// The runs of a bank, in three parts: the phases the reconcile calls; the
// decisions, pure functions of (spec, status, now, Jobs) table-tested
// without a control plane (memorybank_job_test.go); and the reads and
// writes of Jobs and their pods. The Job itself is desiredJob, below.

// reconcileJobs observes Jobs first, so that activeJob and lastRun stay
// current even while the spec keeps new runs from starting.
func (r *MemoryBankReconciler) reconcileJobs(ctx context.Context, s *bankScope) (phaseResult, error) {
	active, requeue, err := r.observeJobs(ctx, s.mb)
	s.active = active
	return requeueAfter(requeue), err
}

// reconcileSchedule parses the schedule and checks that a run can start
// when one is due: a schedule that can never work, or no image while a run
// is due, is Stalled.
func (r *MemoryBankReconciler) reconcileSchedule(_ context.Context, s *bankScope) (phaseResult, error) {
	mb := s.mb
	sched, msg := parseSchedule(mb.Spec.Consolidation.Schedule, s.now)
	if msg != "" {
		mb.Status.NextScheduleTime = nil
		return phaseResult{}, &stallingError{reason: promptopsv1.ReasonInvalidSchedule, message: msg}
	}
	s.sched = sched
	s.noImage = r.JobImage == "" && mb.Spec.Consolidation.Image == ""
	if s.noImage && !mb.Spec.Consolidation.Suspend && (requestPending(mb) || sched != nil) {
		return phaseResult{}, &stallingError{reason: promptopsv1.ReasonNoJobImage,
			message: "No image for consolidation Jobs: start the manager with --job-image (or $PROMPTOPS_JOB_IMAGE), or set spec.consolidation.image."}
	}
	return phaseResult{}, nil
}

// reconcileRuns starts at most one run, never while one is active, and
// sets when to look again for the next scheduled one.
func (r *MemoryBankReconciler) reconcileRuns(ctx context.Context, s *bankScope) (phaseResult, error) {
	mb := s.mb
	switch run := dueRun(mb, s.sched, s.now, s.active != nil, s.noImage); {
	case run.request != "":
		active, err := r.startRequestJob(ctx, mb, s.missionHash, run.request)
		if err != nil {
			return phaseResult{}, jobRejected(err)
		}
		s.active = active
		mb.Status.LastHandledRequest = run.request
	case !run.slot.IsZero():
		active, err := r.startJob(ctx, mb, scheduledJobName(mb, run.slot), s.missionHash, map[string]string{annotationScheduledAt: run.slot.Format(time.RFC3339)})
		if err != nil {
			return phaseResult{}, jobRejected(err)
		}
		if _, done := jobFinished(active); !done {
			s.active = active
		} // else the slot's run ended before a restart
		mb.Status.LastScheduleTime = &metav1.Time{Time: run.slot}
	}
	adoptRunning(mb, s.active)
	suspended := mb.Spec.Consolidation.Suspend
	if s.active != nil && !suspended && requestPending(mb) {
		r.announceDeferred(mb, s.active)
	}
	mb.Status.ActiveJob = ""
	if s.active != nil {
		mb.Status.ActiveJob = s.active.Name
	}
	mb.Status.NextScheduleTime = nil
	if s.sched == nil || suspended {
		return phaseResult{}, nil
	}
	next := s.sched.Next(s.now)
	mb.Status.NextScheduleTime = &metav1.Time{Time: next}
	return requeueAfter(next.Sub(s.now) + time.Second), nil
}

// run is a run that is due: a requested one (the annotation's value) or
// a scheduled one (its slot); neither when none is.
type run struct {
	request string
	slot    time.Time
}

// dueRun decides which run starts now: none while one runs, while
// suspended or without an image; a pending request before the schedule;
// else the latest scheduled slot that passed since the last one.
func dueRun(mb *promptopsv1.MemoryBank, sched cron.Schedule, now time.Time, running, noImage bool) run {
	switch {
	case running || noImage || mb.Spec.Consolidation.Suspend:
		return run{}
	case requestPending(mb):
		return run{request: mb.Annotations[promptopsv1.AnnotationConsolidateRequestedAt]}
	case sched != nil:
		if slot, due := dueSlot(sched, scheduleRef(mb), now); due {
			return run{slot: slot}
		}
	}
	return run{}
}

// requestPending tells whether the consolidate-requested-at annotation
// holds a value no run has handled yet.
func requestPending(mb *promptopsv1.MemoryBank) bool {
	request := mb.Annotations[promptopsv1.AnnotationConsolidateRequestedAt]
	return request != "" && request != mb.Status.LastHandledRequest
}

// adoptRunning records what the running Job runs for, in case its start's
// status write was lost to a conflict (or not seen yet): a scheduled Job
// its slot, a requested Job its request, which so is not deferred behind
// its own run.
func adoptRunning(mb *promptopsv1.MemoryBank, active *batchv1.Job) {
	if active == nil {
		return
	}
	if at, err := time.Parse(time.RFC3339, active.Annotations[annotationScheduledAt]); err == nil &&
		(mb.Status.LastScheduleTime == nil || mb.Status.LastScheduleTime.Before(&metav1.Time{Time: at})) {
		mb.Status.LastScheduleTime = &metav1.Time{Time: at}
	}
	if requestPending(mb) && active.Annotations[promptopsv1.AnnotationConsolidateRequestedAt] == mb.Annotations[promptopsv1.AnnotationConsolidateRequestedAt] {
		mb.Status.LastHandledRequest = mb.Annotations[promptopsv1.AnnotationConsolidateRequestedAt]
	}
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

// splitJobs sorts a bank's Jobs into the running one (the newest, if
// several) and the finished ones.
func splitJobs(jobs []*batchv1.Job) (active *batchv1.Job, finished []*batchv1.Job) {
	for _, j := range jobs {
		if _, done := jobFinished(j); done {
			finished = append(finished, j)
		} else if active == nil || j.CreationTimestamp.After(active.CreationTimestamp.Time) {
			active = j
		}
	}
	return active, finished
}

// noSummary starts lastRun.message while the run's summary is missing; the
// summary is looked for again until it is found.
const noSummary = "No run summary: "

// lastRunJob picks the finished Job status.lastRun is to describe: the
// newest; nil when lastRun already holds its summary, or when lastRun's
// own Job, newer, was pruned (a history limit of 0) or deleted, since an
// older run must not replace it.
func lastRunJob(last *promptopsv1.RunSummary, finished []*batchv1.Job) *batchv1.Job {
	if len(finished) == 0 {
		return nil
	}
	jobs := append([]*batchv1.Job(nil), finished...)
	sortNewestFirst(jobs)
	job := jobs[0]
	if last != nil && last.JobName == job.Name && !strings.HasPrefix(last.Message, noSummary) {
		return nil
	}
	if last != nil && last.JobName != job.Name && last.CompletionTime != nil && jobTime(job).Before(last.CompletionTime.Time) {
		return nil
	}
	return job
}

// finishedRun is what a finished Job means for status.lastRun: whether it
// succeeded (a summary's error fails it), the figures of the summary its
// pod left, or, without one (sum nil), why not; the Job's failure reason
// when it failed with no message of its own. last is the lastRun before.
func finishedRun(job *batchv1.Job, sum *consolidation.Summary, why string, last *promptopsv1.RunSummary) *promptopsv1.RunSummary {
	succeeded, _ := jobFinished(job)
	run := &promptopsv1.RunSummary{JobName: job.Name, StartTime: job.Status.StartTime, Succeeded: succeeded, MissionHash: job.Annotations[promptopsv1.AnnotationMissionHash]}
	t := metav1.NewTime(jobTime(job))
	run.CompletionTime = &t
	if sum != nil {
		run.FactsConsolidated, run.FactsFailed = sum.FactsConsolidated, sum.FactsFailed
		run.Created, run.Updated, run.Deleted = sum.Created, sum.Updated, sum.Deleted
		run.PromptTokens, run.CompletionTokens, run.Observations = sum.PromptTokens, sum.CompletionTokens, sum.Observations
		run.LLMCalls, run.Retries, run.DroppedItems = sum.LLMCalls, sum.Retries, boundedCounts(sum.DroppedItems, 32)
		run.PendingFacts, run.FailedFacts, run.CutShort = sum.PendingFacts, sum.FailedFacts, textclip.Fit(sum.CutShort, 1024, "...")
		if sum.MissionHash != "" {
			run.MissionHash = sum.MissionHash
		}
		run.Recall = textclip.Fit(sum.Recall, 16, "...")
		run.EmbeddingCalls, run.EmbeddingTokens, run.Reembedded = sum.EmbeddingCalls, sum.EmbeddingTokens, sum.Reembedded
		run.ExpiredFacts, run.RefusedByTrust, run.ExpiredMessages = sum.ExpiredFacts, sum.RefusedByTrust, sum.ExpiredMessages
		if x := sum.Extraction; x != nil && x.LLMCalls+x.MessagesExtracted+x.MessagesFailed > 0 {
			run.Extraction = &promptopsv1.RunExtraction{
				MessagesExtracted: x.MessagesExtracted, MessagesFailed: x.MessagesFailed,
				FactsExtracted: x.FactsExtracted, FactsStored: x.FactsStored,
				LLMCalls: x.LLMCalls, PromptTokens: x.PromptTokens, CompletionTokens: x.CompletionTokens,
				CacheablePromptTokens: x.CacheablePromptTokens,
			}
		}
		if sum.Error != "" {
			run.Succeeded = false
			run.Message = textclip.Fit(sum.Error, 4096, "...")
		}
	} else {
		run.Message = noSummary + why
		if last != nil && last.JobName == job.Name {
			run.Observations = last.Observations
		}
	}
	if !succeeded && (run.Message == "" || strings.HasPrefix(run.Message, noSummary)) {
		if msg := jobFailure(job); msg != "" {
			run.Message = strings.TrimSpace(msg + ". " + run.Message)
		}
	}
	run.Message = textclip.Fit(run.Message, 4096, "...")
	return run
}

func jobFailure(job *batchv1.Job) string {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return strings.TrimSpace(c.Reason + ": " + c.Message)
		}
	}
	return ""
}

// summaryRecheck is when to look again for the summary of a run that
// finished at done: the pod's status may trail the Job's for a while.
func summaryRecheck(run *promptopsv1.RunSummary, found bool, now time.Time) time.Duration {
	if !found && now.Sub(run.CompletionTime.Time) < time.Minute {
		return 5 * time.Second
	}
	return 0
}

// jobsToPrune are the finished Jobs beyond successfulJobsHistoryLimit
// succeeded and failedJobsHistoryLimit failed ones, oldest first kept
// last.
func jobsToPrune(c promptopsv1.ConsolidationSpec, finished []*batchv1.Job) []*batchv1.Job {
	var ok, failed, prune []*batchv1.Job
	for _, j := range finished {
		if s, _ := jobFinished(j); s {
			ok = append(ok, j)
		} else {
			failed = append(failed, j)
		}
	}
	for _, g := range []struct {
		jobs  []*batchv1.Job
		limit int
	}{{ok, int(valueOr(c.SuccessfulJobsHistoryLimit, promptopsv1.DefaultSuccessfulJobsHistoryLimit))}, {failed, int(valueOr(c.FailedJobsHistoryLimit, promptopsv1.DefaultFailedJobsHistoryLimit))}} {
		sortNewestFirst(g.jobs)
		if len(g.jobs) > g.limit {
			prune = append(prune, g.jobs[g.limit:]...)
		}
	}
	return prune
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

// jobRejectedError is the API server's refusal to create a Job.
type jobRejectedError struct {
	name string
	err  error
}

func (e *jobRejectedError) Error() string { return fmt.Sprintf("creating Job %s: %v", e.name, e.err) }
func (e *jobRejectedError) Unwrap() error { return e.err }

// jobRejected is the outcome of a Job that could not be created: the API
// server's refusal stalls the bank when sending the same Job again cannot
// help (only a spec change does), else is retried with backoff; any other
// error is returned as it is.
func jobRejected(err error) error {
	var rejected *jobRejectedError
	if !errors.As(err, &rejected) {
		return err
	}
	msg := fmt.Sprintf("The API server refused consolidation Job %s: %v", rejected.name, rejected.err)
	if permanentRefusal(rejected.err) {
		return &stallingError{reason: promptopsv1.ReasonJobRejected, message: msg + ". Change spec.consolidation so that the Job is valid.", cause: err}
	}
	return &waitingError{reason: promptopsv1.ReasonJobRejected, message: msg + ". Retrying.", cause: err}
}

// observeJobs records the last finished run, prunes the Job history and
// sets activeJob; it returns the running Job, if any, and when to look
// again for a summary that is not there yet.
func (r *MemoryBankReconciler) observeJobs(ctx context.Context, mb *promptopsv1.MemoryBank) (*batchv1.Job, time.Duration, error) {
	jobs, err := r.ownedJobs(ctx, mb)
	if err != nil {
		return nil, 0, err
	}
	active, finished := splitJobs(jobs)
	requeue, err := r.recordLastRun(ctx, mb, finished)
	if err != nil {
		return nil, 0, err
	}
	for _, j := range jobsToPrune(mb.Spec.Consolidation, finished) {
		if err := r.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &j.UID}); client.IgnoreNotFound(err) != nil {
			return nil, 0, fmt.Errorf("pruning Job %s: %w", j.Name, err)
		}
	}
	mb.Status.ActiveJob = ""
	if active != nil {
		mb.Status.ActiveJob = active.Name
	}
	return active, requeue, nil
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

// recordLastRun fills status.lastRun from the newest finished Job and the
// JSON summary its pod left as termination message, with the condition
// LastRunFailed and, for a run not recorded before, an event. A missing or
// garbled summary is reported in lastRun.message, not treated as an error.
func (r *MemoryBankReconciler) recordLastRun(ctx context.Context, mb *promptopsv1.MemoryBank, finished []*batchv1.Job) (time.Duration, error) {
	last := mb.Status.LastRun
	job := lastRunJob(last, finished)
	if job == nil {
		return 0, nil
	}
	sum, why, err := r.runSummary(ctx, mb, job)
	if err != nil {
		return 0, err
	}
	run := finishedRun(job, sum, why, last)
	first := last == nil || last.JobName != job.Name
	mb.Status.LastRun = run
	gen := mb.Generation
	if run.Succeeded {
		setCondition(&mb.Status.Conditions, gen, promptopsv1.ConditionLastRunFailed, metav1.ConditionFalse, promptopsv1.ReasonJobSucceeded,
			fmt.Sprintf("Job %s consolidated %d facts (%d failed): %d created, %d updated, %d deleted.", job.Name, run.FactsConsolidated, run.FactsFailed, run.Created, run.Updated, run.Deleted))
	} else {
		setCondition(&mb.Status.Conditions, gen, promptopsv1.ConditionLastRunFailed, metav1.ConditionTrue, promptopsv1.ReasonJobFailed,
			fmt.Sprintf("Job %s failed: %s", job.Name, orDefault(run.Message, "see the Job's pod logs")))
	}
	if first && r.Recorder != nil {
		typ, reason := corev1.EventTypeNormal, promptopsv1.ReasonJobSucceeded
		if !run.Succeeded {
			typ, reason = corev1.EventTypeWarning, promptopsv1.ReasonJobFailed
		}
		r.Recorder.Eventf(mb, job, typ, reason, "Consolidate", "%s", conditionMessage(mb.Status.Conditions, promptopsv1.ConditionLastRunFailed))
	}
	return summaryRecheck(run, sum != nil, r.Clock.Now()), nil
}

// runSummary reads the JSON summary from the Job's newest terminated pod.
func (r *MemoryBankReconciler) runSummary(ctx context.Context, mb *promptopsv1.MemoryBank, job *batchv1.Job) (*consolidation.Summary, string, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(mb.Namespace), client.MatchingLabels{promptopsv1.LabelMemoryBank: mb.Name}); err != nil {
		return nil, "", err
	}
	var msg string
	var when time.Time
	found := false
	for _, p := range pods.Items {
		if p.Labels["batch.kubernetes.io/job-name"] != job.Name && p.Labels["job-name"] != job.Name {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name != "consolidate" || cs.State.Terminated == nil {
				continue
			}
			if t := cs.State.Terminated.FinishedAt.Time; !found || t.After(when) {
				found, when, msg = true, t, cs.State.Terminated.Message
			}
		}
	}
	if !found {
		return nil, "the Job's pod or its terminated container was not found.", nil
	}
	if strings.TrimSpace(msg) == "" {
		return nil, "the pod left no termination message.", nil
	}
	var s consolidation.Summary
	if err := json.Unmarshal([]byte(msg), &s); err != nil || s.MissionHash == "" && s.FactsConsolidated == 0 && s.Error == "" && s.Observations == 0 {
		return nil, "the termination message is not a run summary.", nil
	}
	return &s, "", nil
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

// scheduledJobName is derived from the schedule slot, so a restarted
// operator finds the Job it already created instead of making another.
func scheduledJobName(mb *promptopsv1.MemoryBank, slot time.Time) string {
	return fmt.Sprintf("%s-%d", mb.Name, slot.Unix()/60)
}

// maxRequestJobNames bounds the names tried for one request.
const maxRequestJobNames = 10

// requestJobName is derived from the annotation's value and the value
// handled before it: a restarted operator derives the name of the Job it
// created for the current request, and reusing an earlier value (A, B, A)
// gives a new name. attempt > 0 gives the alternatives tried while finished
// Jobs of earlier requests hold the name. At most 63 characters for a
// bank name of 48.
func requestJobName(mb *promptopsv1.MemoryBank, previous, request string, attempt int) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s%d:%s", len(previous), previous, len(request), request)
	if attempt > 0 {
		fmt.Fprintf(h, "#%d", attempt)
	}
	return fmt.Sprintf("%s-manual-%s", mb.Name, hex.EncodeToString(h.Sum(nil))[:7])
}

// desiredJob is the consolidation Job of one run: the operator's image
// running `promptops consolidate`, configured through the environment,
// secrets only through secretKeyRef, under the Restricted Pod Security
// profile.
func desiredJob(mb *promptopsv1.MemoryBank, name, image, missionHash string, annotations map[string]string, extraEnv ...corev1.EnvVar) *batchv1.Job {
	c := mb.Spec.Consolidation
	if c.Image != "" {
		image = c.Image
	}
	env := []corev1.EnvVar{
		{Name: "PROMPTOPS_BANK", Value: mb.Namespace + "/" + mb.Name},
		{Name: "PROMPTOPS_LLM_BASE_URL", Value: mb.Spec.LLM.BaseURL},
		{Name: "PROMPTOPS_MODEL", Value: mb.Spec.LLM.Model},
		{Name: "PROMPTOPS_ENCODING", Value: string(orDefault(mb.Spec.LLM.Encoding, promptopsv1.DefaultEncoding))},
		{Name: "PROMPTOPS_MAX_PROMPT_TOKENS", Value: itoa(orDefault(mb.Spec.LLM.MaxPromptTokens, promptopsv1.DefaultMaxPromptTokens))},
		{Name: "PROMPTOPS_LLM_TIMEOUT_SECONDS", Value: itoa(orDefault(mb.Spec.LLM.TimeoutSeconds, promptopsv1.DefaultLLMTimeoutSeconds))},
		{Name: "PROMPTOPS_BATCH_SIZE", Value: itoa(orDefault(c.BatchSize, promptopsv1.DefaultBatchSize))},
		{Name: "PROMPTOPS_MAX_FACTS", Value: itoa(orDefault(c.MaxFactsPerRun, promptopsv1.DefaultMaxFactsPerRun))},
		{Name: "PROMPTOPS_MAX_ATTEMPTS", Value: itoa(orDefault(c.MaxAttempts, promptopsv1.DefaultMaxAttempts))},
		{Name: "PROMPTOPS_PARALLELISM", Value: itoa(orDefault(c.Parallelism, promptopsv1.DefaultParallelism))},
		{Name: "PROMPTOPS_MAX_TOKENS_PER_RUN", Value: itoa(orDefault(c.MaxTokensPerRun, promptopsv1.DefaultMaxTokensPerRun))},
		{Name: "PROMPTOPS_MISSION_FILE", Value: path.Join(configDir, missionKey)},
		{Name: "PROMPTOPS_TERMINATION_LOG", Value: "/dev/termination-log"},
	}
	env = append(env, embeddingsEnv(mb)...)
	if mb.Spec.MaxObservations != nil {
		env = append(env, corev1.EnvVar{Name: "PROMPTOPS_MAX_OBSERVATIONS", Value: itoa(*mb.Spec.MaxObservations)})
	}
	if mb.Spec.MaxObservationsPerScope != nil {
		env = append(env, corev1.EnvVar{Name: "PROMPTOPS_MAX_OBSERVATIONS_PER_SCOPE", Value: itoa(*mb.Spec.MaxObservationsPerScope)})
	}
	storeVar, storeVolumes, storeMounts := storePod(mb)
	env = append(env, storeVar)
	volumes := append([]corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: consolidationName(mb)},
		}}},
	}, storeVolumes...)
	mounts := append([]corev1.VolumeMount{
		// A subPath mount is not updated when the ConfigMap changes: a
		// running Job keeps the mission it started with.
		{Name: "config", MountPath: path.Join(configDir, missionKey), SubPath: missionKey, ReadOnly: true},
	}, storeMounts...)
	if ref := mb.Spec.LLM.APIKeySecretRef; ref != nil {
		env = append(env, corev1.EnvVar{Name: "OPENAI_API_KEY", ValueFrom: secretEnv(*ref)})
	}
	env = append(env, extraEnv...)
	labels := map[string]string{
		promptopsv1.LabelManagedBy:  promptopsv1.LabelManagedByValue,
		promptopsv1.LabelMemoryBank: mb.Name,
	}
	ann := map[string]string{promptopsv1.AnnotationMissionHash: missionHash}
	for k, v := range annotations {
		ann[k] = v
	}
	container := corev1.Container{
		Name:                     "consolidate",
		Image:                    image,
		Args:                     slices.Concat([]string{"consolidate"}, redactionArgs(mb), retentionArgs(mb), trustArgs(mb), extractionArgs(mb)),
		Env:                      env,
		VolumeMounts:             mounts,
		TerminationMessagePath:   "/dev/termination-log",
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		SecurityContext:          restrictedContainer(),
	}
	if c.Resources != nil {
		container.Resources = *c.Resources
	}
	job := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: mb.Namespace, Labels: labels, Annotations: ann},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptrTo(valueOr(c.BackoffLimit, promptopsv1.DefaultBackoffLimit)),
			ActiveDeadlineSeconds: ptrTo(orDefault(c.ActiveDeadlineSeconds, promptopsv1.DefaultActiveDeadlineSeconds)),
			// A run whose every fact failed is not retried: the facts are
			// marked failed, so a new pod would find nothing and succeed.
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:      batchv1.PodFailurePolicyActionFailJob,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{ContainerName: ptrTo("consolidate"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{ConsolidateExitNoProgress}},
			}}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: ann},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					ServiceAccountName:           c.ServiceAccountName,
					AutomountServiceAccountToken: ptrTo(false),
					NodeSelector:                 c.NodeSelector,
					Tolerations:                  c.Tolerations,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptrTo(true),
						RunAsUser:      ptrTo(jobUID),
						RunAsGroup:     ptrTo(jobUID),
						FSGroup:        ptrTo(jobUID),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{container},
					Volumes:    volumes,
				},
			},
		},
	}
	return job
}

// embeddingsEnv configures spec.embeddings, its key only through
// secretKeyRef; empty without embeddings.
func embeddingsEnv(mb *promptopsv1.MemoryBank) []corev1.EnvVar {
	e := mb.Spec.Embeddings
	if e == nil {
		return nil
	}
	env := []corev1.EnvVar{
		{Name: "PROMPTOPS_EMBEDDINGS_BASE_URL", Value: e.BaseURL},
		{Name: "PROMPTOPS_EMBEDDINGS_MODEL", Value: e.Model},
		{Name: "PROMPTOPS_EMBEDDINGS_TIMEOUT_SECONDS", Value: itoa(orDefault(e.TimeoutSeconds, promptopsv1.DefaultEmbeddingsTimeoutSeconds))},
		{Name: "PROMPTOPS_EMBEDDINGS_BATCH_SIZE", Value: itoa(orDefault(e.BatchSize, promptopsv1.DefaultEmbeddingsBatchSize))},
		{Name: "PROMPTOPS_RECALL_SIMILARITY", Value: itoa(orDefault(e.RecallSimilarity, promptopsv1.DefaultRecallSimilarityPerMille))},
		{Name: "PROMPTOPS_MAX_REEMBED_PER_RUN", Value: itoa(orDefault(e.MaxReembedPerRun, promptopsv1.DefaultMaxReembedPerRun))},
		{Name: "PROMPTOPS_DUPLICATE_SIMILARITY", Value: itoa(orDefault(mb.Spec.Consolidation.DuplicateSimilarity, promptopsv1.DefaultDuplicateSimilarityPerMille))},
	}
	if e.Dimensions != nil {
		env = append(env, corev1.EnvVar{Name: "PROMPTOPS_EMBEDDINGS_DIMENSIONS", Value: itoa(*e.Dimensions)})
	}
	if ref := e.APIKeySecretRef; ref != nil {
		env = append(env, corev1.EnvVar{Name: "PROMPTOPS_EMBEDDINGS_API_KEY", ValueFrom: secretEnv(*ref)})
	}
	return env
}
