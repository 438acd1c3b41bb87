package controllers

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/consolidation"
)

// The decisions of a bank's runs, without a control plane.

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// testBank is a bank created at t0 with the given schedule, last handled
// request and last scheduled slot.
func testBank(schedule, requested, handled string, lastSlot time.Time) *promptopsv1.MemoryBank {
	mb := &promptopsv1.MemoryBank{ObjectMeta: metav1.ObjectMeta{Name: "b", CreationTimestamp: metav1.NewTime(t0)}}
	mb.Spec.Consolidation.Schedule = schedule
	if requested != "" {
		mb.Annotations = map[string]string{promptopsv1.AnnotationConsolidateRequestedAt: requested}
	}
	mb.Status.LastHandledRequest = handled
	if !lastSlot.IsZero() {
		mb.Status.LastScheduleTime = &metav1.Time{Time: lastSlot}
	}
	return mb
}

func TestTableParseSchedule(t *testing.T) {
	for _, tc := range []struct {
		spec  string
		ok    bool
		nilOK bool
		msg   string
	}{
		{spec: "", ok: true, nilOK: true},
		{spec: "  ", ok: true, nilOK: true},
		{spec: "0 * * * *", ok: true},
		{spec: "@hourly", ok: true},
		{spec: " */15 * * * * ", ok: true},
		{spec: "every hour", msg: "does not parse"},
		{spec: "0 0 30 2 *", msg: "never fires"},
	} {
		sched, msg := parseSchedule(tc.spec, t0)
		if tc.ok != (msg == "") || (sched == nil) != (tc.nilOK || !tc.ok) || !strings.Contains(msg, tc.msg) {
			t.Errorf("%q: schedule %v, message %q", tc.spec, sched, msg)
		}
	}
}

// TestTableScheduleSlots: the slot that is due is the latest one after the
// last scheduled slot (or the bank's creation) that is not after now;
// missed slots collapse into one run.
func TestTableScheduleSlots(t *testing.T) {
	for _, tc := range []struct {
		name     string
		schedule string
		lastSlot time.Time
		now      time.Time
		want     time.Time // zero: none due
	}{
		{name: "before the first slot", schedule: "0 * * * *", now: t0.Add(59 * time.Minute)},
		{name: "at the first slot", schedule: "0 * * * *", now: t0.Add(time.Hour), want: t0.Add(time.Hour)},
		{name: "after the first slot", schedule: "0 * * * *", now: t0.Add(time.Hour + time.Second), want: t0.Add(time.Hour)},
		{name: "missed slots collapse into the latest", schedule: "0 * * * *", now: t0.Add(5*time.Hour + 30*time.Minute), want: t0.Add(5 * time.Hour)},
		{name: "the last slot ran", schedule: "0 * * * *", lastSlot: t0.Add(5 * time.Hour), now: t0.Add(5*time.Hour + 30*time.Minute)},
		{name: "the next after the last ran", schedule: "0 * * * *", lastSlot: t0.Add(5 * time.Hour), now: t0.Add(6 * time.Hour), want: t0.Add(6 * time.Hour)},
		{name: "daily", schedule: "30 2 * * *", now: at("2026-03-03T03:00:00Z"), want: at("2026-03-03T02:30:00Z")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mb := testBank(tc.schedule, "", "", tc.lastSlot)
			sched, msg := parseSchedule(tc.schedule, tc.now)
			if msg != "" {
				t.Fatal(msg)
			}
			slot, due := dueSlot(sched, scheduleRef(mb), tc.now)
			if due != !tc.want.IsZero() || !slot.Equal(tc.want) {
				t.Fatalf("slot %v due %v, want %v", slot, due, tc.want)
			}
			if got := dueRun(mb, sched, tc.now, false, false); !got.slot.Equal(tc.want) || got.request != "" {
				t.Fatalf("dueRun %+v", got)
			}
		})
	}
}

// TestTableDueRun: when a run is due, and which: a pending request before
// the schedule; none while one runs, while suspended or without an image.
func TestTableDueRun(t *testing.T) {
	now := t0.Add(90 * time.Minute)
	for _, tc := range []struct {
		name                string
		schedule            string
		requested, handled  string
		running, noImage    bool
		suspend             bool
		wantRequest         string
		wantSlot            time.Time
		wantRequestPending  bool
		wantNothingToDecide bool
	}{
		{name: "nothing requested, no schedule", wantNothingToDecide: true},
		{name: "a new request", requested: "A", wantRequest: "A", wantRequestPending: true},
		{name: "a request handled", requested: "A", handled: "A", wantNothingToDecide: true},
		{name: "another value", requested: "B", handled: "A", wantRequest: "B", wantRequestPending: true},
		{name: "a value used before, not the last", requested: "A", handled: "B", wantRequest: "A", wantRequestPending: true},
		{name: "the request before the schedule", schedule: "0 * * * *", requested: "A", wantRequest: "A", wantRequestPending: true},
		{name: "the schedule", schedule: "0 * * * *", wantSlot: t0.Add(time.Hour)},
		{name: "a request while a run runs waits", requested: "A", running: true, wantRequestPending: true, wantNothingToDecide: true},
		{name: "a slot while a run runs waits", schedule: "0 * * * *", running: true, wantNothingToDecide: true},
		{name: "suspended", schedule: "0 * * * *", requested: "A", suspend: true, wantRequestPending: true, wantNothingToDecide: true},
		{name: "no image", schedule: "0 * * * *", requested: "A", noImage: true, wantRequestPending: true, wantNothingToDecide: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mb := testBank(tc.schedule, tc.requested, tc.handled, time.Time{})
			mb.Spec.Consolidation.Suspend = tc.suspend
			sched, _ := parseSchedule(tc.schedule, now)
			got := dueRun(mb, sched, now, tc.running, tc.noImage)
			if got.request != tc.wantRequest || !got.slot.Equal(tc.wantSlot) {
				t.Fatalf("dueRun %+v", got)
			}
			if tc.wantNothingToDecide != (got == run{}) || requestPending(mb) != tc.wantRequestPending {
				t.Fatalf("dueRun %+v, requestPending %v", got, requestPending(mb))
			}
		})
	}
}

func runningJob(annotations map[string]string) *batchv1.Job {
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "b-run", Annotations: annotations}}
}

// TestTableAdoptRunning: a running Job whose start's status write was lost
// still records its slot and its request, which so is not deferred behind
// its own run.
func TestTableAdoptRunning(t *testing.T) {
	slot := t0.Add(time.Hour)
	for _, tc := range []struct {
		name         string
		requested    string
		handled      string
		lastSlot     time.Time
		active       *batchv1.Job
		wantHandled  string
		wantLastSlot time.Time
	}{
		{name: "no Job", requested: "A", wantHandled: ""},
		{name: "a scheduled Job records its slot", active: runningJob(map[string]string{annotationScheduledAt: slot.Format(time.RFC3339)}), wantLastSlot: slot},
		{name: "an older slot is kept", lastSlot: slot, active: runningJob(map[string]string{annotationScheduledAt: t0.Format(time.RFC3339)}), wantLastSlot: slot},
		{name: "the request's own Job handles it", requested: "A", active: runningJob(map[string]string{promptopsv1.AnnotationConsolidateRequestedAt: "A"}), wantHandled: "A"},
		{name: "another request's Job does not", requested: "B", handled: "A", active: runningJob(map[string]string{promptopsv1.AnnotationConsolidateRequestedAt: "A"}), wantHandled: "A"},
		{name: "a scheduled Job does not handle a request", requested: "A", active: runningJob(map[string]string{annotationScheduledAt: slot.Format(time.RFC3339)}), wantLastSlot: slot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mb := testBank("", tc.requested, tc.handled, tc.lastSlot)
			adoptRunning(mb, tc.active)
			var last time.Time
			if mb.Status.LastScheduleTime != nil {
				last = mb.Status.LastScheduleTime.Time
			}
			if mb.Status.LastHandledRequest != tc.wantHandled || !last.Equal(tc.wantLastSlot) {
				t.Fatalf("lastHandledRequest %q, lastScheduleTime %v", mb.Status.LastHandledRequest, last)
			}
		})
	}
}

// finished is a Job that ended at end, succeeded or failed.
func finished(name string, ok bool, end time.Time) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(end.Add(-time.Minute)),
		Annotations: map[string]string{promptopsv1.AnnotationMissionHash: "sha256:job"}}}
	j.Status.StartTime = &metav1.Time{Time: end.Add(-time.Minute)}
	if ok {
		j.Status.CompletionTime = &metav1.Time{Time: end}
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	} else {
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: metav1.NewTime(end)}}
	}
	return j
}

func TestTableJobFinished(t *testing.T) {
	for _, tc := range []struct {
		name            string
		conds           []batchv1.JobCondition
		succeeded, done bool
	}{
		{name: "running"},
		{name: "suspended", conds: []batchv1.JobCondition{{Type: batchv1.JobSuspended, Status: corev1.ConditionTrue}}},
		{name: "complete", conds: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}, succeeded: true, done: true},
		{name: "failed", conds: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}, done: true},
		{name: "failure target only", conds: []batchv1.JobCondition{{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue}}},
		{name: "complete, not true", conds: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionFalse}}},
	} {
		j := &batchv1.Job{Status: batchv1.JobStatus{Conditions: tc.conds}}
		if s, d := jobFinished(j); s != tc.succeeded || d != tc.done {
			t.Errorf("%s: succeeded %v done %v", tc.name, s, d)
		}
	}
	old, newer := finished("b-1", true, t0), finished("b-2", false, t0.Add(time.Hour))
	running := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "b-3", CreationTimestamp: metav1.NewTime(t0.Add(2 * time.Hour))}}
	older := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "b-0", CreationTimestamp: metav1.NewTime(t0)}}
	active, done := splitJobs([]*batchv1.Job{old, older, running, newer})
	if active != running || len(done) != 2 {
		t.Fatalf("active %v, finished %d", active.Name, len(done))
	}
}

// TestTableLastRun: what a finished Job means for status.lastRun.
func TestTableLastRun(t *testing.T) {
	ok1, failed2 := finished("b-1", true, t0), finished("b-2", false, t0.Add(time.Hour))
	summary := &consolidation.Summary{FactsConsolidated: 4, FactsFailed: 1, Created: 2, Observations: 7, MissionHash: "sha256:run", ExpiredFacts: 3, RefusedByTrust: 2,
		ExpiredMessages: 5, Extraction: &consolidation.Extraction{MessagesExtracted: 9, MessagesFailed: 1, FactsExtracted: 4, FactsStored: 3, LLMCalls: 2, PromptTokens: 900, CompletionTokens: 80, CacheablePromptTokens: 600}}
	for _, tc := range []struct {
		name     string
		last     *promptopsv1.RunSummary
		finished []*batchv1.Job
		want     string // the Job lastRun describes next, "" to leave it
	}{
		{name: "no finished Job"},
		{name: "the first run", finished: []*batchv1.Job{ok1}, want: "b-1"},
		{name: "the newest of several", finished: []*batchv1.Job{ok1, failed2}, want: "b-2"},
		{name: "recorded with its summary", last: &promptopsv1.RunSummary{JobName: "b-2"}, finished: []*batchv1.Job{ok1, failed2}},
		{name: "recorded without its summary, looked for again", last: &promptopsv1.RunSummary{JobName: "b-2", Message: noSummary + "x"}, finished: []*batchv1.Job{failed2}, want: "b-2"},
		{name: "lastRun's own newer Job was pruned", last: &promptopsv1.RunSummary{JobName: "b-9", CompletionTime: &metav1.Time{Time: t0.Add(2 * time.Hour)}}, finished: []*batchv1.Job{ok1, failed2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := lastRunJob(tc.last, tc.finished)
			if (got == nil) != (tc.want == "") || got != nil && got.Name != tc.want {
				t.Fatalf("lastRunJob %v, want %q", got, tc.want)
			}
		})
	}

	for _, tc := range []struct {
		name      string
		job       *batchv1.Job
		sum       *consolidation.Summary
		why       string
		last      *promptopsv1.RunSummary
		succeeded bool
		message   string
		facts     int64
		obs       int64
		hash      string
		recheck   bool
	}{
		{name: "succeeded with a summary", job: ok1, sum: summary, succeeded: true, facts: 4, obs: 7, hash: "sha256:run"},
		{name: "a summary's error fails the run", job: ok1, sum: &consolidation.Summary{Error: "embeddings down", Observations: 7}, message: "embeddings down", obs: 7, hash: "sha256:job"},
		{name: "failed without a summary", job: failed2, why: "the pod left no termination message.",
			message: "BackoffLimitExceeded: Job has reached the specified backoff limit. " + noSummary + "the pod left no termination message.", hash: "sha256:job", recheck: true},
		{name: "no summary keeps the last count of the same run", job: ok1, why: "x.", last: &promptopsv1.RunSummary{JobName: "b-1", Observations: 9},
			succeeded: true, message: noSummary + "x.", obs: 9, hash: "sha256:job", recheck: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := finishedRun(tc.job, tc.sum, tc.why, tc.last)
			if run.JobName != tc.job.Name || run.Succeeded != tc.succeeded || run.Message != tc.message || run.FactsConsolidated != tc.facts ||
				run.Observations != tc.obs || run.MissionHash != tc.hash || !run.CompletionTime.Time.Equal(jobTime(tc.job)) {
				t.Fatalf("%+v", run)
			}
			if tc.sum != nil && run.ExpiredFacts != tc.sum.ExpiredFacts {
				t.Fatalf("expiredFacts %d, want the summary's %d", run.ExpiredFacts, tc.sum.ExpiredFacts)
			}
			if tc.sum != nil && run.RefusedByTrust != tc.sum.RefusedByTrust {
				t.Fatalf("refusedByTrust %d, want the summary's %d", run.RefusedByTrust, tc.sum.RefusedByTrust)
			}
			if tc.sum != nil && run.ExpiredMessages != tc.sum.ExpiredMessages {
				t.Fatalf("expiredMessages %d, want the summary's %d", run.ExpiredMessages, tc.sum.ExpiredMessages)
			}
			if x := tc.sum; x != nil && x.Extraction != nil {
				want := promptopsv1.RunExtraction{MessagesExtracted: 9, MessagesFailed: 1, FactsExtracted: 4, FactsStored: 3, LLMCalls: 2, PromptTokens: 900, CompletionTokens: 80, CacheablePromptTokens: 600}
				if run.Extraction == nil || *run.Extraction != want {
					t.Fatalf("extraction %+v, want %+v", run.Extraction, want)
				}
			} else if run.Extraction != nil {
				t.Fatalf("extraction %+v of a run without one", run.Extraction)
			}
			// The summary is looked for again for a minute after the end.
			if got := summaryRecheck(run, tc.sum != nil, run.CompletionTime.Time.Add(30*time.Second)); (got > 0) != tc.recheck {
				t.Fatalf("recheck after %v", got)
			}
			if got := summaryRecheck(run, tc.sum != nil, run.CompletionTime.Time.Add(2*time.Minute)); got != 0 {
				t.Fatalf("recheck after %v, a minute on", got)
			}
		})
	}
}

// TestTableJobsToPrune: the newest successfulJobsHistoryLimit succeeded
// and failedJobsHistoryLimit failed Jobs stay.
func TestTableJobsToPrune(t *testing.T) {
	var jobs []*batchv1.Job
	for i, ok := range []bool{true, false, true, true, false, true, false, false} {
		jobs = append(jobs, finished("b-"+itoa(i), ok, t0.Add(time.Duration(i)*time.Hour)))
	}
	names := func(js []*batchv1.Job) string {
		var n []string
		for _, j := range js {
			n = append(n, j.Name)
		}
		return strings.Join(n, " ")
	}
	for _, tc := range []struct {
		name         string
		ok, failed   *int32
		wantPrunable string
	}{
		{name: "defaults: three succeeded, one failed", wantPrunable: "b-0 b-6 b-4 b-1"},
		{name: "one each", ok: ptrTo(int32(1)), failed: ptrTo(int32(1)), wantPrunable: "b-3 b-2 b-0 b-6 b-4 b-1"},
		{name: "none", ok: ptrTo(int32(0)), failed: ptrTo(int32(0)), wantPrunable: "b-5 b-3 b-2 b-0 b-7 b-6 b-4 b-1"},
		{name: "more than there are", ok: ptrTo(int32(10)), failed: ptrTo(int32(2)), wantPrunable: "b-4 b-1"},
	} {
		c := promptopsv1.ConsolidationSpec{SuccessfulJobsHistoryLimit: tc.ok, FailedJobsHistoryLimit: tc.failed}
		if got := names(jobsToPrune(c, jobs)); got != tc.wantPrunable {
			t.Errorf("%s: prune %q, want %q", tc.name, got, tc.wantPrunable)
		}
	}
}

// TestTableRequestJobNames: a request's Job name is derived from its value
// and the value handled before it, so a restart finds the same Job and a
// reused value (A, B, A) gets a new one.
func TestTableRequestJobNames(t *testing.T) {
	mb := &promptopsv1.MemoryBank{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("b", 48)}}
	first := requestJobName(mb, "", "A", 0)
	if first != requestJobName(mb, "", "A", 0) || len(first) > 63 {
		t.Fatalf("%q", first)
	}
	seen := map[string]bool{first: true}
	for _, name := range []string{requestJobName(mb, "B", "A", 0), requestJobName(mb, "", "A", 1), requestJobName(mb, "", "B", 0), requestJobName(mb, "A", "", 0)} {
		if seen[name] {
			t.Fatalf("%q derived twice", name)
		}
		seen[name] = true
	}
	if got := scheduledJobName(mb, t0.Add(90*time.Second)); got != mb.Name+"-"+itoa(t0.Add(time.Minute).Unix()/60) {
		t.Fatalf("%q", got)
	}
}
