package controllers

import (
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

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
