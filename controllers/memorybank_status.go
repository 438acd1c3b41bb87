package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/consolidation"
)

// noSummary starts lastRun.message while the run's summary is missing; the
// summary is looked for again until it is found.
const noSummary = "No run summary: "

// contentHash identifies a ConfigMap's data.
func contentHash(data map[string]string) string {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(data[k]), data[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// recordLastRun fills status.lastRun from the newest finished Job and the
// JSON summary its pod left as termination message. A missing or garbled
// summary is reported in lastRun.message, not treated as an error.
func (r *MemoryBankReconciler) recordLastRun(ctx context.Context, mb *promptopsv1.MemoryBank, finished []*batchv1.Job) (time.Duration, error) {
	if len(finished) == 0 {
		return 0, nil
	}
	jobs := append([]*batchv1.Job(nil), finished...)
	sortNewestFirst(jobs)
	job := jobs[0]
	last := mb.Status.LastRun
	if last != nil && last.JobName == job.Name && !strings.HasPrefix(last.Message, noSummary) {
		return 0, nil
	}
	if last != nil && last.JobName != job.Name && last.CompletionTime != nil && jobTime(job).Before(last.CompletionTime.Time) {
		// lastRun's own Job was pruned (a history limit of 0) or deleted;
		// an older run must not replace it.
		return 0, nil
	}
	succeeded, _ := jobFinished(job)
	run := &promptopsv1.RunSummary{JobName: job.Name, StartTime: job.Status.StartTime, Succeeded: succeeded, MissionHash: job.Annotations[promptopsv1.AnnotationMissionHash]}
	t := metav1.NewTime(jobTime(job))
	run.CompletionTime = &t
	sum, why, err := r.runSummary(ctx, mb, job)
	if err != nil {
		return 0, err
	}
	if sum != nil {
		run.FactsConsolidated, run.FactsFailed = sum.FactsConsolidated, sum.FactsFailed
		run.Created, run.Updated, run.Deleted = sum.Created, sum.Updated, sum.Deleted
		run.PromptTokens, run.CompletionTokens, run.Observations = sum.PromptTokens, sum.CompletionTokens, sum.Observations
		run.LLMCalls, run.Retries, run.DroppedItems = sum.LLMCalls, sum.Retries, boundedCounts(sum.DroppedItems, 32)
		run.PendingFacts, run.FailedFacts, run.CutShort = sum.PendingFacts, sum.FailedFacts, clipText(sum.CutShort, 1024)
		if sum.MissionHash != "" {
			run.MissionHash = sum.MissionHash
		}
		run.Recall = clipText(sum.Recall, 16)
		run.EmbeddingCalls, run.EmbeddingTokens, run.Reembedded = sum.EmbeddingCalls, sum.EmbeddingTokens, sum.Reembedded
		if sum.Error != "" {
			run.Succeeded = false
			run.Message = clipText(sum.Error, 4096)
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
	run.Message = clipText(run.Message, 4096)
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
	if sum == nil && r.Clock.Now().Sub(t.Time) < time.Minute {
		// The pod's status may trail the Job's; look again shortly.
		return 5 * time.Second, nil
	}
	return 0, nil
}

func jobFailure(job *batchv1.Job) string {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return strings.TrimSpace(c.Reason + ": " + c.Message)
		}
	}
	return ""
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

// markStalled reports a spec that cannot work until a user changes it.
func stallBank(mb *promptopsv1.MemoryBank, reason, msg string) {
	markStalled(&mb.Status.Conditions, mb.Generation, reason, msg)
	mb.Status.ObservedGeneration = mb.Generation
}

// markJobRejected reports a Job that could not be created and returns the
// error for the reconcile: terminal when the API server refuses the Job for
// good (only a spec change helps), else returned for a retry with backoff.
func markJobRejected(mb *promptopsv1.MemoryBank, err error) error {
	var rejected *jobRejectedError
	if !errors.As(err, &rejected) {
		return err
	}
	msg := fmt.Sprintf("The API server refused consolidation Job %s: %v", rejected.name, rejected.err)
	if permanentRefusal(rejected.err) {
		stallBank(mb, promptopsv1.ReasonJobRejected, msg+". Change spec.consolidation so that the Job is valid.")
		return recorded(reconcile.TerminalError(err))
	}
	markNotReady(&mb.Status.Conditions, mb.Generation, promptopsv1.ReasonJobRejected, msg+". Retrying.")
	return recorded(err)
}

// setStatus sets Ready and Reconciling from the run state.
func (r *MemoryBankReconciler) setStatus(mb *promptopsv1.MemoryBank, s *bankScope) {
	active, suspended, noImage := s.active, mb.Spec.Consolidation.Suspend, s.noImage
	gen := mb.Generation
	st := &mb.Status
	// A run is background work: the bank stays Ready (kstatus Current) and
	// the run shows as Consolidating, so that no GitOps wait overlapping a
	// 30-minute run blocks.
	if active != nil {
		setCondition(&st.Conditions, gen, promptopsv1.ConditionConsolidating, metav1.ConditionTrue, promptopsv1.ReasonJobRunning, fmt.Sprintf("Consolidation Job %s is running.", active.Name))
	} else {
		setCondition(&st.Conditions, gen, promptopsv1.ConditionConsolidating, metav1.ConditionFalse, promptopsv1.ReasonIdle, "No consolidation Job is running.")
	}
	var parts []string
	reason := promptopsv1.ReasonSucceeded
	switch {
	case suspended:
		reason = promptopsv1.ReasonSuspended
		parts = append(parts, "Suspended: no new runs start.")
	case st.NextScheduleTime != nil:
		parts = append(parts, fmt.Sprintf("Next run at %s.", st.NextScheduleTime.UTC().Format(time.RFC3339)))
	default:
		parts = append(parts, "No schedule: runs start on demand (annotation "+promptopsv1.AnnotationConsolidateRequestedAt+").")
	}
	if lr := st.LastRun; lr != nil {
		verdict := "succeeded"
		if !lr.Succeeded {
			verdict = "failed"
		}
		parts = append(parts, fmt.Sprintf("Last run %s %s; the bank holds %d observations.", lr.JobName, verdict, lr.Observations))
	}
	if noImage {
		parts = append(parts, "Runs need an image: start the manager with --job-image (or $PROMPTOPS_JOB_IMAGE), or set spec.consolidation.image.")
	}
	st.ObservedGeneration = gen
	// A served bank is Ready once its memory server is: until then a
	// GitOps wait on the bank waits for the server too.
	if mb.Spec.Serving != nil && !s.servingAvailable {
		markNotReady(&st.Conditions, gen, promptopsv1.ReasonServingNotAvailable, strings.Join(append([]string{s.servingMessage}, parts...), " "))
		return
	}
	if mb.Spec.Serving != nil {
		parts = append(parts, fmt.Sprintf("Serving at %s.", st.Serving.Endpoint))
	}
	markReady(&st.Conditions, gen, reason, strings.Join(parts, " "))
}

// boundedCounts keeps at most n entries of a summary's counts (the status
// field's bound), the first by key, so a garbled summary cannot block every
// status write.
func boundedCounts(m map[string]int64, n int) map[string]int64 {
	if len(m) <= n {
		return m
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]int64, n)
	for _, k := range keys[:n] {
		out[k] = m[k]
	}
	return out
}

// clipText shortens s to at most n bytes of whole characters.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}
