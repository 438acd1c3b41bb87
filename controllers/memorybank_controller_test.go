package controllers

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/testenv"
)

func bankYAML(name, extra string) string {
	return fmt.Sprintf(`
apiVersion: promptops.io/v1
kind: MemoryBank
metadata: {name: %s}
spec:
  store: {sqlite: {path: /data/bank.db}}
  llm: {baseURL: "http://llm.local:8000/v1", model: m}
%s`, name, extra)
}

func getMB(t *testing.T, ns, name string) *promptopsv1.MemoryBank {
	t.Helper()
	mb := &promptopsv1.MemoryBank{}
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, mb); err != nil {
		t.Fatal(err)
	}
	return mb
}

func waitMB(t *testing.T, ns, name string, ok func(mb *promptopsv1.MemoryBank) error) *promptopsv1.MemoryBank {
	t.Helper()
	var mb *promptopsv1.MemoryBank
	eventually(t, func() error {
		mb = getMB(t, ns, name)
		if mb.Status.ObservedGeneration != mb.Generation {
			return fmt.Errorf("generation %d not observed (%d)", mb.Generation, mb.Status.ObservedGeneration)
		}
		return ok(mb)
	})
	return mb
}

func hasCondition(typ string, status metav1.ConditionStatus, reason string) func(*promptopsv1.MemoryBank) error {
	return func(mb *promptopsv1.MemoryBank) error {
		c := meta.FindStatusCondition(mb.Status.Conditions, typ)
		if c == nil || c.Status != status || (reason != "" && c.Reason != reason) {
			return fmt.Errorf("%s is %+v", typ, c)
		}
		return nil
	}
}

func jobsOf(t *testing.T, ns string) []batchv1.Job {
	t.Helper()
	var list batchv1.JobList
	if err := k8sClient.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func waitJobs(t *testing.T, ns string, n int) []batchv1.Job {
	t.Helper()
	var jobs []batchv1.Job
	eventually(t, func() error {
		if jobs = jobsOf(t, ns); len(jobs) != n {
			return fmt.Errorf("%d jobs, want %d", len(jobs), n)
		}
		return nil
	})
	return jobs
}

// poke changes an unrelated annotation so the controller reconciles now
// (after the test moved the clock).
func poke(t *testing.T, ns, name string) {
	t.Helper()
	mb := &promptopsv1.MemoryBank{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	value := time.Now().Format(time.RFC3339Nano)
	update(t, mb, func() {
		if mb.Annotations == nil {
			mb.Annotations = map[string]string{}
		}
		mb.Annotations[promptopsv1.AnnotationReconcileRequestedAt] = value
	})
	// The forced reconcile is observable: it records the value it handled.
	waitMB(t, ns, name, func(mb *promptopsv1.MemoryBank) error {
		if mb.Status.LastHandledReconcileAt != value {
			return fmt.Errorf("lastHandledReconcileAt %q, want %q", mb.Status.LastHandledReconcileAt, value)
		}
		return nil
	})
}

func request(t *testing.T, ns, name, value string) {
	t.Helper()
	mb := &promptopsv1.MemoryBank{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	update(t, mb, func() {
		if mb.Annotations == nil {
			mb.Annotations = map[string]string{}
		}
		mb.Annotations[promptopsv1.AnnotationConsolidateRequestedAt] = value
	})
}

// lastFinish keeps the finish times finishJob writes apart: the API keeps
// times to the second, and two Jobs of one bank finishing in the same
// second would leave which one is the newest to their names.
var lastFinish struct {
	sync.Mutex
	t time.Time
}

// finishJob plays the Job controller and the kubelet: the Job's status and
// a terminated pod with the given termination message.
func finishJob(t *testing.T, job *batchv1.Job, ok bool, message string) {
	t.Helper()
	lastFinish.Lock()
	at := time.Now().Truncate(time.Second)
	if !at.After(lastFinish.t) {
		at = lastFinish.t.Add(time.Second)
	}
	lastFinish.t = at
	lastFinish.Unlock()
	now := metav1.NewTime(at)
	start := metav1.NewTime(now.Add(-time.Minute))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-pod", Labels: map[string]string{}},
		Spec:       *job.Spec.Template.Spec.DeepCopy(),
	}
	for k, v := range job.Spec.Template.Labels {
		pod.Labels[k] = v
	}
	pod.Labels["batch.kubernetes.io/job-name"] = job.Name
	if err := k8sClient.Create(ctx, pod); err != nil {
		t.Fatalf("pod: %v", err)
	}
	exit := int32(0)
	pod.Status.Phase = corev1.PodSucceeded
	if !ok {
		exit, pod.Status.Phase = 1, corev1.PodFailed
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "consolidate", Image: job.Spec.Template.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Message: message, StartedAt: start, FinishedAt: now}}}}
	if err := k8sClient.Status().Update(ctx, pod); err != nil {
		t.Fatalf("pod status: %v", err)
	}
	eventually(t, func() error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return err
		}
		job.Status.StartTime = &start
		if ok {
			job.Status.Succeeded = 1
			job.Status.CompletionTime = &now
			job.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
			}
		} else {
			job.Status.Failed = 1
			job.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
			}
		}
		return k8sClient.Status().Update(ctx, job)
	})
}

func TestBankRendersConsolidationConfigMap(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, bankYAML("pets", "  mission: Track every pet, its name and its owner."))
	mb := waitMB(t, ns, "pets", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, ""))
	wantHash := consolidation.MissionHash("Track every pet, its name and its owner.")
	if mb.Status.MissionHash != wantHash || mb.Status.ConfigMapName != "pets-consolidation" || mb.Status.PromptTokens < 1000 {
		t.Fatalf("status %+v", mb.Status)
	}
	if c := meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionBudgetExceeded); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("BudgetExceeded %+v", c)
	}
	cm := getCM(t, ns, "pets-consolidation")
	if cm.Data[missionKey] != "Track every pet, its name and its owner." || cm.Data[promptKey] != consolidation.SystemPrompt("Track every pet, its name and its owner.") ||
		cm.Annotations[promptopsv1.AnnotationMissionHash] != wantHash || !strings.Contains(cm.Data[settingsKey], `"batchSize": 8`) ||
		!strings.Contains(cm.Data[settingsKey], fmt.Sprintf(`"maxTokensPerRun": %d`, promptopsv1.DefaultMaxTokensPerRun)) {
		t.Fatalf("ConfigMap %+v", cm.Data)
	}
	if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != mb.UID {
		t.Fatal("ConfigMap must be controlled by the bank")
	}
	if c := meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionReady); !strings.Contains(c.Message, "No schedule: runs start on demand") {
		t.Fatalf("Ready message %q", c.Message)
	}
	// A mission that leaves less than a quarter of the budget.
	update(t, mb, func() {
		mb.Spec.LLM.MaxPromptTokens = 1800
		mb.Spec.Mission = strings.Repeat("Track every detail of every conversation. ", 60)
	})
	waitMB(t, ns, "pets", hasCondition(promptopsv1.ConditionBudgetExceeded, metav1.ConditionTrue, promptopsv1.ReasonBudgetExceeded))
}

func TestScheduledRunsAtTheInjectedTimeOnlyOnce(t *testing.T) {
	ns := newNamespace(t)
	start := time.Now().UTC()
	testClock.Set(start)
	createYAML(t, ns, bankYAML("sched", "  consolidation: {schedule: \"*/10 * * * *\"}"))
	mb := waitMB(t, ns, "sched", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, ""))
	next := mb.Status.NextScheduleTime
	if next == nil || !next.After(start) || next.Sub(start) > 10*time.Minute {
		t.Fatalf("nextScheduleTime %v", next)
	}
	// The reconcile that wrote Ready would have created a Job before it.
	if n := len(jobsOf(t, ns)); n != 0 {
		t.Fatalf("%d Jobs before the schedule", n)
	}
	// The slot passes.
	testClock.Set(next.Add(time.Second))
	poke(t, ns, "sched")
	job := waitJobs(t, ns, 1)[0]
	if job.Name != fmt.Sprintf("sched-%d", next.Unix()/60) || job.Annotations[annotationScheduledAt] != next.UTC().Format(time.RFC3339) {
		t.Fatalf("job %s %v", job.Name, job.Annotations)
	}
	// A run is background work: the bank stays Ready and shows the run as
	// Consolidating, never Reconciling.
	mb = waitMB(t, ns, "sched", hasCondition(promptopsv1.ConditionConsolidating, metav1.ConditionTrue, promptopsv1.ReasonJobRunning))
	if mb.Status.ActiveJob != job.Name || !mb.Status.LastScheduleTime.Equal(next) ||
		meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionReconciling) != nil || !meta.IsStatusConditionTrue(mb.Status.Conditions, promptopsv1.ConditionReady) {
		t.Fatalf("status %+v", mb.Status)
	}
	// The next slot passes while the Job runs: no second Job. The reconcile
	// that saw the new time moved nextScheduleTime; it would have started
	// a Job before that.
	testClock.Set(next.Add(10*time.Minute + time.Second))
	poke(t, ns, "sched")
	waitMB(t, ns, "sched", func(mb *promptopsv1.MemoryBank) error {
		if n := mb.Status.NextScheduleTime; n == nil || !n.Equal(&metav1.Time{Time: next.Add(20 * time.Minute)}) {
			return fmt.Errorf("nextScheduleTime %v", n)
		}
		return nil
	})
	if n := len(jobsOf(t, ns)); n != 1 {
		t.Fatalf("%d Jobs: concurrency must be forbidden", n)
	}
	// The Job ends; the missed slot starts one new Job.
	finishJob(t, &job, true, `{"factsConsolidated":1,"observations":1,"missionHash":"sha256:x"}`)
	jobs := waitJobs(t, ns, 2)
	names := []string{jobs[0].Name, jobs[1].Name}
	if want := fmt.Sprintf("sched-%d", next.Add(10*time.Minute).Unix()/60); !strings.Contains(strings.Join(names, " "), want) {
		t.Fatalf("jobs %v, want %s", names, want)
	}
	for _, j := range jobs {
		if len(j.OwnerReferences) != 1 || j.OwnerReferences[0].UID != mb.UID || *j.OwnerReferences[0].Controller != true {
			t.Fatalf("job %s owner references %+v", j.Name, j.OwnerReferences)
		}
	}
}

func TestOnDemandRunsOncePerValueAndPrunesHistory(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, bankYAML("manual", "  consolidation: {successfulJobsHistoryLimit: 1}"))
	waitMB(t, ns, "manual", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, ""))
	request(t, ns, "manual", "2026-01-01T10:00:00Z")
	job := waitJobs(t, ns, 1)[0]
	if job.Name != requestJobName(&promptopsv1.MemoryBank{ObjectMeta: metav1.ObjectMeta{Name: "manual"}}, "", "2026-01-01T10:00:00Z", 0) {
		t.Fatalf("job name %s", job.Name)
	}
	waitMB(t, ns, "manual", func(mb *promptopsv1.MemoryBank) error {
		if mb.Status.LastHandledRequest != "2026-01-01T10:00:00Z" {
			return fmt.Errorf("lastHandledRequest %q", mb.Status.LastHandledRequest)
		}
		return nil
	})
	poke(t, ns, "manual")
	finishJob(t, &job, true, `{"factsConsolidated":2,"observations":2,"missionHash":"sha256:x","llmCalls":5,"retries":2,`+
		`"droppedItems":{"noSource":1,"repeated":3},"pendingFacts":7,"failedFacts":1,"cutShort":"maxTokensPerRun 2000000 reached"}`)
	mb := waitMB(t, ns, "manual", func(mb *promptopsv1.MemoryBank) error {
		if mb.Status.LastRun == nil || mb.Status.LastRun.JobName != job.Name || mb.Status.ActiveJob != "" {
			return fmt.Errorf("lastRun %+v active %q", mb.Status.LastRun, mb.Status.ActiveJob)
		}
		return nil
	})
	if lr := mb.Status.LastRun; lr.LLMCalls != 5 || lr.Retries != 2 || lr.PendingFacts != 7 || lr.FailedFacts != 1 ||
		lr.CutShort != "maxTokensPerRun 2000000 reached" || len(lr.DroppedItems) != 2 || lr.DroppedItems["noSource"] != 1 || lr.DroppedItems["repeated"] != 3 {
		t.Fatalf("lastRun %+v", lr)
	}
	if n := len(jobsOf(t, ns)); n != 1 {
		t.Fatalf("the same value must not run twice: %d jobs", n)
	}
	// A new value: a second run; the first Job is pruned once the second
	// succeeds (successfulJobsHistoryLimit: 1).
	request(t, ns, "manual", "2026-01-01T11:00:00Z")
	jobs := waitJobs(t, ns, 2)
	var second batchv1.Job
	for _, j := range jobs {
		if j.Name != job.Name {
			second = j
		}
	}
	finishJob(t, &second, true, `{"factsConsolidated":1,"observations":3,"missionHash":"sha256:x"}`)
	eventually(t, func() error {
		js := jobsOf(t, ns)
		if len(js) != 1 || js[0].Name != second.Name {
			return fmt.Errorf("%d jobs left", len(js))
		}
		return nil
	})
}

func TestSuspendAndInvalidSchedule(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, bankYAML("paused", "  consolidation: {suspend: true, schedule: \"@hourly\"}"))
	mb := waitMB(t, ns, "paused", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSuspended))
	if mb.Status.NextScheduleTime != nil {
		t.Fatal("a suspended bank has no next run")
	}
	request(t, ns, "paused", "now")
	poke(t, ns, "paused") // a reconcile after the request, observably
	if n := len(jobsOf(t, ns)); n != 0 {
		t.Fatalf("suspended bank started %d Jobs", n)
	}
	update(t, mb, func() { mb.Spec.Consolidation.Suspend = false })
	waitJobs(t, ns, 1) // the pending request runs on resume

	createYAML(t, ns, bankYAML("badcron", "  consolidation: {schedule: \"every day at noon\"}"))
	mb = waitMB(t, ns, "badcron", hasCondition(promptopsv1.ConditionStalled, metav1.ConditionTrue, promptopsv1.ReasonInvalidSchedule))
	if msg := meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionReady).Message; !strings.Contains(msg, `Schedule "every day at noon" does not parse: expected exactly 5 fields`) {
		t.Fatalf("message %q", msg)
	}
	update(t, mb, func() { mb.Spec.Consolidation.Schedule = "0 12 * * *" })
	mb = waitMB(t, ns, "badcron", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded))
	if meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionStalled) != nil {
		t.Fatal("Stalled must go once fixed")
	}
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// promptopsBinary builds the real binary once.
func promptopsBinary(t *testing.T) string {
	binOnce.Do(func() {
		binPath = filepath.Join(os.TempDir(), fmt.Sprintf("promptops-test-%d", os.Getpid()))
		out, err := exec.Command("go", "build", "-o", binPath, testenv.Root()).CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("%v: %s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// TestRealRunEndsInStatus: the real `promptops consolidate` against a
// scripted LLM; its termination log becomes the pod's termination message,
// and lastRun and the print columns show it.
func TestRealRunEndsInStatus(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, bankYAML("real", "  mission: Track pets."))
	waitMB(t, ns, "real", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, ""))
	request(t, ns, "real", "go")
	job := waitJobs(t, ns, 1)[0]

	// Run what the Job's pod would run, with the Job's own environment.
	bin := promptopsBinary(t)
	dir := t.TempDir()
	srv := llmtest.New(llmtest.OnePerFact)
	defer srv.Close()
	store := "sqlite://" + filepath.Join(dir, "bank.db")
	facts := filepath.Join(dir, "facts.jsonl")
	_ = os.WriteFile(facts, []byte(`{"text":"Rex is Alice's dog"}`+"\n"+`{"text":"Tom is Bob's cat"}`+"\n"), 0o644)
	if out, err := exec.Command(bin, "facts", "import", "--bank", ns+"/real", "--store", store, facts).CombinedOutput(); err != nil {
		t.Fatalf("import: %v %s", err, out)
	}
	mission := filepath.Join(dir, "mission.txt")
	_ = os.WriteFile(mission, []byte(getCM(t, ns, "real-consolidation").Data[missionKey]), 0o644)
	term := filepath.Join(dir, "termination-log")
	cmd := exec.Command(bin, "consolidate")
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		switch e.Name {
		case "PROMPTOPS_STORE", "PROMPTOPS_MISSION_FILE", "PROMPTOPS_TERMINATION_LOG", "PROMPTOPS_LLM_BASE_URL":
		default:
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
	}
	cmd.Env = append(cmd.Env, "PROMPTOPS_STORE="+store, "PROMPTOPS_MISSION_FILE="+mission, "PROMPTOPS_TERMINATION_LOG="+term, "PROMPTOPS_LLM_BASE_URL="+srv.BaseURL())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("consolidate: %v\n%s", err, out)
	}
	msg, err := os.ReadFile(term)
	if err != nil {
		t.Fatal(err)
	}
	finishJob(t, &job, true, string(msg))
	mb := waitMB(t, ns, "real", hasCondition(promptopsv1.ConditionLastRunFailed, metav1.ConditionFalse, promptopsv1.ReasonJobSucceeded))
	lr := mb.Status.LastRun
	if lr == nil || lr.JobName != job.Name || !lr.Succeeded || lr.FactsConsolidated != 2 || lr.Created != 2 || lr.Observations != 2 ||
		lr.MissionHash != consolidation.MissionHash("Track pets.") || lr.CompletionTime == nil || lr.Message != "" || lr.Recall != "lexical" {
		t.Fatalf("lastRun %+v", lr)
	}
	if mb.Status.Recall != promptopsv1.RecallLexical {
		t.Fatalf("a bank without spec.embeddings says its recall is lexical: %q", mb.Status.Recall)
	}
	// The print columns, as kubectl get mb shows them (server-side table).
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/apis/promptops.io/v1/namespaces/"+ns+"/memorybanks/real").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil || len(table.Rows) != 1 {
		t.Fatalf("table: %v %s", err, raw)
	}
	cols := map[string]any{}
	for i, c := range table.ColumnDefinitions {
		cols[c.Name] = table.Rows[0].Cells[i]
	}
	if cols["Ready"] != "True" || cols["Observations"] != float64(2) || cols["Last Run"] == nil || cols["Last Run"] == "" {
		t.Fatalf("print columns %v", cols)
	}
	if _, ok := cols["Schedule"]; !ok {
		t.Fatal("no Schedule column")
	}
}

func TestFailedJobAndGarbledMessage(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, bankYAML("fails", ""))
	waitMB(t, ns, "fails", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, ""))
	request(t, ns, "fails", "1")
	job := waitJobs(t, ns, 1)[0]
	finishJob(t, &job, false, "panic: something went wrong {")
	mb := waitMB(t, ns, "fails", hasCondition(promptopsv1.ConditionLastRunFailed, metav1.ConditionTrue, promptopsv1.ReasonJobFailed))
	if lr := mb.Status.LastRun; lr.Succeeded || !strings.Contains(lr.Message, "BackoffLimitExceeded") || !strings.Contains(lr.Message, "not a run summary") {
		t.Fatalf("lastRun %+v", lr)
	}
	if c := meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Fatal("a failed run does not make the bank unready")
	}
}

func TestMissionChangeLeavesRunningJobAlone(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, bankYAML("gitops", "  mission: Track pets."))
	waitMB(t, ns, "gitops", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, ""))
	request(t, ns, "gitops", "1")
	job := waitJobs(t, ns, 1)[0]
	oldHash := consolidation.MissionHash("Track pets.")
	if job.Annotations[promptopsv1.AnnotationMissionHash] != oldHash {
		t.Fatal("the Job records its mission hash")
	}
	mb := getMB(t, ns, "gitops")
	update(t, mb, func() { mb.Spec.Mission = "Track pets and their vets." })
	newHash := consolidation.MissionHash("Track pets and their vets.")
	waitMB(t, ns, "gitops", func(mb *promptopsv1.MemoryBank) error {
		if mb.Status.MissionHash != newHash {
			return fmt.Errorf("missionHash %s", mb.Status.MissionHash)
		}
		return nil
	})
	if cm := getCM(t, ns, "gitops-consolidation"); cm.Data[missionKey] != "Track pets and their vets." || cm.Annotations[promptopsv1.AnnotationMissionHash] != newHash {
		t.Fatal("ConfigMap not updated")
	}
	jobs := jobsOf(t, ns)
	if len(jobs) != 1 || jobs[0].UID != job.UID || jobs[0].Annotations[promptopsv1.AnnotationMissionHash] != oldHash {
		t.Fatal("the running Job must be left alone")
	}
	// The mission reaches the pod through a subPath mount, which a running
	// pod does not see change.
	for _, m := range job.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.Name == "config" && m.SubPath != missionKey {
			t.Fatal("mission must be mounted by subPath")
		}
	}
	finishJob(t, &job, true, fmt.Sprintf(`{"factsConsolidated":1,"observations":1,"missionHash":%q}`, oldHash))
	mb = waitMB(t, ns, "gitops", func(mb *promptopsv1.MemoryBank) error {
		if mb.Status.LastRun == nil {
			return fmt.Errorf("no lastRun")
		}
		return nil
	})
	if mb.Status.LastRun.MissionHash != oldHash || mb.Status.MissionHash != newHash {
		t.Fatalf("lastRun.missionHash %s, status.missionHash %s", mb.Status.LastRun.MissionHash, mb.Status.MissionHash)
	}
}

// TestJobPodIsRestrictedAndHoldsNoSecret: the pod template passes the
// apiserver's Restricted Pod Security admission, takes secrets only by
// reference, and no object the operator writes holds a secret's value.
func TestJobPodIsRestrictedAndHoldsNoSecret(t *testing.T) {
	ns := newNamespace(t)
	nsObj := &corev1.Namespace{}
	_ = k8sClient.Get(ctx, types.NamespacedName{Name: ns}, nsObj)
	update(t, nsObj, func() {
		if nsObj.Labels == nil {
			nsObj.Labels = map[string]string{}
		}
		nsObj.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	})
	const dsn, key = "postgres://bank:s3cr3t-pa55@db:5432/bank", "sk-very-secret-key"
	createYAML(t, ns, fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata: {name: bank-secrets}
stringData: {dsn: %q, apiKey: %q, embKey: "sk-embeddings-key"}
---
apiVersion: promptops.io/v1
kind: MemoryBank
metadata: {name: secure}
spec:
  store: {postgres: {dsnSecretRef: {name: bank-secrets, key: dsn}}}
  llm: {baseURL: "https://llm.example/v1", model: m, apiKeySecretRef: {name: bank-secrets, key: apiKey}}
  embeddings: {baseURL: "https://emb.example/v1", model: e, dimensions: 256, apiKeySecretRef: {name: bank-secrets, key: embKey}}
  consolidation:
    duplicateSimilarity: 950
    serviceAccountName: bank-runner
    nodeSelector: {pool: batch}
    resources: {limits: {memory: 256Mi}}
`, dsn, key))
	waitMB(t, ns, "secure", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, ""))
	request(t, ns, "secure", "1")
	job := waitJobs(t, ns, 1)[0]
	spec := job.Spec.Template.Spec
	c := spec.Containers[0]
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken || spec.ServiceAccountName != "bank-runner" || spec.NodeSelector["pool"] != "batch" {
		t.Fatalf("pod spec %+v", spec)
	}
	if c.SecurityContext == nil || !*c.SecurityContext.ReadOnlyRootFilesystem || *c.SecurityContext.AllowPrivilegeEscalation || c.SecurityContext.Capabilities.Drop[0] != "ALL" ||
		!*spec.SecurityContext.RunAsNonRoot || spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Fatalf("security context %+v %+v", c.SecurityContext, spec.SecurityContext)
	}
	if job.Spec.BackoffLimit == nil || *job.Spec.BackoffLimit != 1 || *job.Spec.ActiveDeadlineSeconds != 1800 || c.Args[0] != "consolidate" || c.Image != "promptops:test" {
		t.Fatalf("job spec %+v", job.Spec)
	}
	refs, values := map[string]string{}, map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			refs[e.Name] = e.ValueFrom.SecretKeyRef.Key
		}
		values[e.Name] = e.Value
	}
	if values["PROMPTOPS_MAX_TOKENS_PER_RUN"] != "2000000" {
		t.Fatalf("PROMPTOPS_MAX_TOKENS_PER_RUN %q", values["PROMPTOPS_MAX_TOKENS_PER_RUN"])
	}
	if refs["PROMPTOPS_STORE"] != "dsn" || refs["OPENAI_API_KEY"] != "apiKey" || refs["PROMPTOPS_EMBEDDINGS_API_KEY"] != "embKey" {
		t.Fatalf("secrets must come by secretKeyRef: %v", refs)
	}
	for k, want := range map[string]string{"PROMPTOPS_EMBEDDINGS_BASE_URL": "https://emb.example/v1", "PROMPTOPS_EMBEDDINGS_MODEL": "e", "PROMPTOPS_EMBEDDINGS_DIMENSIONS": "256",
		"PROMPTOPS_EMBEDDINGS_TIMEOUT_SECONDS": "60", "PROMPTOPS_EMBEDDINGS_BATCH_SIZE": "64", "PROMPTOPS_DUPLICATE_SIMILARITY": "950", "PROMPTOPS_RECALL_SIMILARITY": "300"} {
		if values[k] != want {
			t.Fatalf("%s %q, want %q", k, values[k], want)
		}
	}
	if r := getMB(t, ns, "secure").Status.Recall; r != promptopsv1.RecallHybrid {
		t.Fatalf("status.recall %q", r)
	}
	// The real apiserver's Pod Security admission judges the pod.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "restricted-check", Labels: job.Spec.Template.Labels}, Spec: *spec.DeepCopy()}
	if err := k8sClient.Create(ctx, pod); err != nil {
		t.Fatalf("the Job's pod violates the Restricted profile: %v", err)
	}
	// The operator's RBAC does not let it read the Secret at all.
	mc, err := client.New(managerCfg, client.Options{Scheme: NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := mc.Get(ctx, types.NamespacedName{Namespace: ns, Name: "bank-secrets"}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the manager's user must not read Secrets: %v", err)
	}
	// Nothing the operator wrote carries a secret's value.
	var blobs []any
	var cms corev1.ConfigMapList
	if err := k8sClient.List(ctx, &cms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var evs corev1.EventList
	if err := k8sClient.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	jobs := jobsOf(t, ns)
	// Looked at what is there: the consolidation ConfigMap and the Job.
	if len(cms.Items) == 0 || len(jobs) == 0 {
		t.Fatalf("nothing to check: %d ConfigMaps, %d Jobs", len(cms.Items), len(jobs))
	}
	blobs = append(blobs, cms, evs, jobs, getMB(t, ns, "secure").Status)
	for _, b := range blobs {
		data, _ := json.Marshal(b)
		if strings.Contains(string(data), "s3cr3t-pa55") || strings.Contains(string(data), key) {
			t.Fatalf("a secret value leaked into %T", b)
		}
	}
}

// TestRestartCreatesNoDuplicate: a fresh reconciler (an operator restarted
// before it recorded its run) finds the Job by its derived name.
func TestRestartCreatesNoDuplicate(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, bankYAML("restart", "  consolidation: {suspend: true}"))
	mb := waitMB(t, ns, "restart", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, ""))
	for i := 0; i < 2; i++ {
		r := &MemoryBankReconciler{Client: k8sClient, APIReader: k8sClient, JobImage: "promptops:test"}
		r.init()
		job, err := r.startRequestJob(ctx, mb, mb.Status.MissionHash, "same")
		if err != nil || job == nil || job.Name != requestJobName(mb, "", "same", 0) {
			t.Fatalf("start %d: %v %v", i, job, err)
		}
	}
	if n := len(jobsOf(t, ns)); n != 1 {
		t.Fatalf("%d Jobs for one run", n)
	}
	// The run ended before the restarted operator handled the request: the
	// Job is lastRun, not active, and no second run starts.
	job := jobsOf(t, ns)[0]
	finishJob(t, &job, true, `{"factsConsolidated":1,"observations":1,"missionHash":"sha256:x"}`)
	mb = waitMB(t, ns, "restart", func(mb *promptopsv1.MemoryBank) error {
		if mb.Status.LastRun == nil || mb.Status.LastRun.JobName != job.Name {
			return fmt.Errorf("lastRun %+v", mb.Status.LastRun)
		}
		return nil
	})
	r := &MemoryBankReconciler{Client: k8sClient, APIReader: k8sClient, JobImage: "promptops:test"}
	r.init()
	if active, err := r.startRequestJob(ctx, mb, mb.Status.MissionHash, "same"); err != nil || active != nil {
		t.Fatalf("a finished run is not active: %v %v", active, err)
	}
	if n := len(jobsOf(t, ns)); n != 1 {
		t.Fatalf("%d Jobs for one run", n)
	}
}

// reconcileWithoutImage runs a reconciler of a manager started without
// --job-image once. Status writes do not wake the suite's manager, so what
// the test reads afterwards is this reconcile's.
func reconcileWithoutImage(t *testing.T, ns, name string) error {
	t.Helper()
	r := &MemoryBankReconciler{Client: k8sClient, APIReader: k8sClient}
	_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	return err
}

// setStatus overwrites a bank's status, as a stale one the next reconcile
// must correct.
func setStatus(t *testing.T, ns, name string, change func(st *promptopsv1.MemoryBankStatus)) {
	t.Helper()
	eventually(t, func() error {
		mb := getMB(t, ns, name)
		change(&mb.Status)
		return k8sClient.Status().Update(ctx, mb)
	})
}

// TestNoJobImageStallsOnlyWhenARunIsDue: without an image a bank with
// nothing to run is Ready and says runs need an image; a pending request or
// a schedule stalls it. Either way its Jobs are observed.
func TestNoJobImageStallsOnlyWhenARunIsDue(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, bankYAML("noimage", ""))
	waitMB(t, ns, "noimage", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, ""))
	if err := reconcileWithoutImage(t, ns, "noimage"); err != nil {
		t.Fatalf("nothing to run: %v", err)
	}
	mb := getMB(t, ns, "noimage")
	if c := meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "Runs need an image") || !strings.Contains(c.Message, "--job-image") {
		t.Fatalf("Ready %+v", c)
	}
	if meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionStalled) != nil {
		t.Fatal("nothing to run is not Stalled")
	}

	// A run of the suite's manager (which has an image) ends.
	request(t, ns, "noimage", "1")
	job := waitJobs(t, ns, 1)[0]
	finishJob(t, &job, true, `{"factsConsolidated":1,"observations":4,"missionHash":"sha256:x"}`)
	waitMB(t, ns, "noimage", func(mb *promptopsv1.MemoryBank) error {
		if mb.Status.LastRun == nil || mb.Status.LastRun.JobName != job.Name || mb.Status.ActiveJob != "" {
			return fmt.Errorf("lastRun %+v active %q", mb.Status.LastRun, mb.Status.ActiveJob)
		}
		return nil
	})

	// From here on only the test's own reconciler (without an image) acts
	// on the bank: the suite's manager, which has one, would start the
	// pending run.
	mb = getMB(t, ns, "noimage")
	update(t, mb, func() {
		if mb.Labels == nil {
			mb.Labels = map[string]string{}
		}
		mb.Labels[unmanagedLabel] = "true"
	})

	stalled := func(what string) {
		t.Helper()
		if err := reconcileWithoutImage(t, ns, "noimage"); !errors.Is(err, reconcile.TerminalError(nil)) {
			t.Fatalf("%s: want a terminal error, got %v", what, err)
		}
		mb := getMB(t, ns, "noimage")
		if c := meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionStalled); c == nil || c.Reason != promptopsv1.ReasonNoJobImage || !strings.Contains(c.Message, "--job-image") {
			t.Fatalf("%s: Stalled %+v", what, c)
		}
		if c := meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != promptopsv1.ReasonNoJobImage {
			t.Fatalf("%s: Ready %+v", what, c)
		}
		// The Jobs were observed before the image check.
		if lr := mb.Status.LastRun; lr == nil || lr.JobName != job.Name || lr.Observations != 4 || mb.Status.ActiveJob != "" {
			t.Fatalf("%s: stale Job status: lastRun %+v activeJob %q", what, lr, mb.Status.ActiveJob)
		}
	}
	// A request not handled yet.
	setStatus(t, ns, "noimage", func(st *promptopsv1.MemoryBankStatus) {
		st.LastHandledRequest, st.LastRun, st.ActiveJob = "0", nil, "stale"
	})
	stalled("pending request")
	// A schedule.
	setStatus(t, ns, "noimage", func(st *promptopsv1.MemoryBankStatus) { st.LastHandledRequest = "1" })
	mb = getMB(t, ns, "noimage")
	update(t, mb, func() { mb.Spec.Consolidation.Schedule = "@hourly" })
	setStatus(t, ns, "noimage", func(st *promptopsv1.MemoryBankStatus) { st.LastRun, st.ActiveJob = nil, "stale" })
	stalled("schedule")
}

// TestScheduleThatNeverFiresStalls: February 30 parses but never comes; the
// bank is Stalled, shows no next run, and still observes its Jobs.
func TestScheduleThatNeverFiresStalls(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, bankYAML("feb30", ""))
	waitMB(t, ns, "feb30", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, ""))
	request(t, ns, "feb30", "1")
	job := waitJobs(t, ns, 1)[0]
	mb := waitMB(t, ns, "feb30", func(mb *promptopsv1.MemoryBank) error {
		if mb.Status.ActiveJob != job.Name {
			return fmt.Errorf("activeJob %q", mb.Status.ActiveJob)
		}
		return nil
	})
	update(t, mb, func() { mb.Spec.Consolidation.Schedule = "0 0 30 2 *" })
	mb = waitMB(t, ns, "feb30", hasCondition(promptopsv1.ConditionStalled, metav1.ConditionTrue, promptopsv1.ReasonInvalidSchedule))
	c := meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionReady)
	if c.Status != metav1.ConditionFalse || c.Reason != promptopsv1.ReasonInvalidSchedule || !strings.Contains(c.Message, `Schedule "0 0 30 2 *" never fires`) || strings.Contains(c.Message, "0001") {
		t.Fatalf("Ready %+v", c)
	}
	if mb.Status.NextScheduleTime != nil {
		t.Fatalf("nextScheduleTime %v", mb.Status.NextScheduleTime)
	}
	// The running Job ends while the schedule is invalid: lastRun and
	// activeJob follow.
	finishJob(t, &job, true, `{"factsConsolidated":1,"observations":1,"missionHash":"sha256:x"}`)
	waitMB(t, ns, "feb30", func(mb *promptopsv1.MemoryBank) error {
		if mb.Status.LastRun == nil || mb.Status.LastRun.JobName != job.Name || mb.Status.ActiveJob != "" {
			return fmt.Errorf("lastRun %+v active %q", mb.Status.LastRun, mb.Status.ActiveJob)
		}
		return hasCondition(promptopsv1.ConditionStalled, metav1.ConditionTrue, promptopsv1.ReasonInvalidSchedule)(mb)
	})
}

// TestJobRejectedByAPIServer: a Job the API server refuses for good (an
// invalid node selector label, which the CRD does not check) ends in
// Ready=False, Stalled=True with the server's words; fixing the spec runs
// the pending request.
func TestJobRejectedByAPIServer(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, bankYAML("refused", `  consolidation: {nodeSelector: {pool: "not a label!"}}`))
	waitMB(t, ns, "refused", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, ""))
	request(t, ns, "refused", "1")
	mb := waitMB(t, ns, "refused", hasCondition(promptopsv1.ConditionStalled, metav1.ConditionTrue, promptopsv1.ReasonJobRejected))
	c := meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionReady)
	if c.Status != metav1.ConditionFalse || c.Reason != promptopsv1.ReasonJobRejected ||
		!strings.Contains(c.Message, "spec.template.spec.nodeSelector") || !strings.Contains(c.Message, `"not a label!"`) || !strings.Contains(c.Message, "is invalid") {
		t.Fatalf("Ready %+v", c)
	}
	if meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionReconciling) != nil || mb.Status.LastHandledRequest != "" || mb.Status.ActiveJob != "" {
		t.Fatalf("status %+v", mb.Status)
	}
	if n := len(jobsOf(t, ns)); n != 0 {
		t.Fatalf("%d Jobs", n)
	}
	update(t, mb, func() { mb.Spec.Consolidation.NodeSelector = map[string]string{"pool": "batch"} })
	job := waitJobs(t, ns, 1)[0]
	mb = waitMB(t, ns, "refused", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded))
	if mb.Status.ActiveJob != job.Name || mb.Status.LastHandledRequest != "1" || meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionStalled) != nil {
		t.Fatalf("status %+v", mb.Status)
	}
}

// TestReusedRequestValueStartsNewRun: A, B, A, B, A are five runs, each
// shown active while it runs and never an earlier, finished Job; the bank's
// name is as long as allowed, so the longest Job name is accepted too.
func TestReusedRequestValueStartsNewRun(t *testing.T) {
	ns := newNamespace(t)
	name := strings.Repeat("r", 48)
	createYAML(t, ns, bankYAML(name, ""))
	waitMB(t, ns, name, hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, ""))
	seen := map[string]bool{}
	var names []string
	for i, value := range []string{"A", "B", "A", "B", "A"} {
		request(t, ns, name, value)
		var job batchv1.Job
		eventually(t, func() error {
			for _, j := range jobsOf(t, ns) {
				if !seen[j.Name] {
					job = j
					return nil
				}
			}
			return fmt.Errorf("request %d (%s): no new Job", i, value)
		})
		seen[job.Name] = true
		names = append(names, job.Name)
		waitMB(t, ns, name, func(mb *promptopsv1.MemoryBank) error {
			if mb.Status.ActiveJob != job.Name || mb.Status.LastHandledRequest != value {
				return fmt.Errorf("request %d (%s): activeJob %q lastHandledRequest %q, want %s", i, value, mb.Status.ActiveJob, mb.Status.LastHandledRequest, job.Name)
			}
			return nil
		})
		finishJob(t, &job, true, fmt.Sprintf(`{"factsConsolidated":1,"observations":%d,"missionHash":"sha256:x"}`, i+1))
		waitMB(t, ns, name, func(mb *promptopsv1.MemoryBank) error {
			if mb.Status.LastRun == nil || mb.Status.LastRun.JobName != job.Name || mb.Status.ActiveJob != "" {
				return fmt.Errorf("request %d (%s): lastRun %+v active %q", i, value, mb.Status.LastRun, mb.Status.ActiveJob)
			}
			return nil
		})
	}
	// The fifth request (B then A) is the third's again; the third's
	// finished Job still holds that name, so the fifth takes the next one.
	mb := &promptopsv1.MemoryBank{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if names[2] != requestJobName(mb, "B", "A", 0) || names[4] != requestJobName(mb, "B", "A", 1) || len(names[4]) > 63 {
		t.Fatalf("job names %v", names)
	}
}

// TestTableJobRejectionIsTerminalOnlyWhenPermanent: refusals that sending
// the same Job again cannot change stall the bank; others are retried.
func TestTableJobRejectionIsTerminalOnlyWhenPermanent(t *testing.T) {
	gr := batchv1.Resource("jobs")
	cases := []struct {
		name      string
		err       error
		permanent bool
	}{
		{"invalid", apierrors.NewInvalid(batchv1.SchemeGroupVersion.WithKind("Job").GroupKind(), "b-1", nil), true},
		{"forbidden", apierrors.NewForbidden(gr, "b-1", errors.New("exceeded quota")), true},
		{"bad request", apierrors.NewBadRequest("bad"), true},
		{"too large", apierrors.NewRequestEntityTooLargeError("limit is 3145728"), true},
		{"unavailable", apierrors.NewServiceUnavailable("etcd is down"), false},
		{"timeout", apierrors.NewTimeoutError("slow", 1), false},
		{"internal", apierrors.NewInternalError(errors.New("webhook unreachable")), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mb := &promptopsv1.MemoryBank{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 3}}
			_, err := summarize(&mb.Status.Conditions, mb.Generation, &mb.Status.ObservedGeneration, phaseResult{}, jobRejected(&jobRejectedError{name: "b-1", err: tc.err}))
			ready := meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionReady)
			stalled := meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionStalled)
			reconciling := meta.FindStatusCondition(mb.Status.Conditions, promptopsv1.ConditionReconciling)
			if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != promptopsv1.ReasonJobRejected || !strings.Contains(ready.Message, tc.err.Error()) {
				t.Fatalf("Ready %+v", ready)
			}
			if got := errors.Is(err, reconcile.TerminalError(nil)); got != tc.permanent || !errors.Is(err, tc.err) {
				t.Fatalf("terminal %v, want %v (%v)", got, tc.permanent, err)
			}
			if tc.permanent != (stalled != nil) || tc.permanent == (reconciling != nil) {
				t.Fatalf("Stalled %+v Reconciling %+v", stalled, reconciling)
			}
			if wantGen := map[bool]int64{true: 3, false: 0}[tc.permanent]; mb.Status.ObservedGeneration != wantGen {
				t.Fatalf("observedGeneration %d", mb.Status.ObservedGeneration)
			}
		})
	}
	// Other errors (a failed read) are returned as they are, and judged as
	// any other error of the reconcile.
	read := errors.New("read failed")
	if err := jobRejected(read); err != read {
		t.Fatalf("%v", err)
	}
}

// TestRequestWhileRunningIsDeferredWithAnEvent: a request made while a Job
// runs waits for it, says so once per requested value (not at every
// reconcile) with a Normal RunDeferred event, and starts when the Job ends.
// The Job fails at once, without a retry, when consolidate reports that no
// fact made progress.
func TestRequestWhileRunningIsDeferredWithAnEvent(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, bankYAML("busy", ""))
	waitMB(t, ns, "busy", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, ""))
	request(t, ns, "busy", "2026-01-01T10:00:00Z")
	job := waitJobs(t, ns, 1)[0]
	if p := job.Spec.PodFailurePolicy; p == nil || len(p.Rules) != 1 || p.Rules[0].Action != batchv1.PodFailurePolicyActionFailJob ||
		p.Rules[0].OnExitCodes == nil || len(p.Rules[0].OnExitCodes.Values) != 1 || p.Rules[0].OnExitCodes.Values[0] != ConsolidateExitNoProgress {
		t.Fatalf("pod failure policy %+v", p)
	}
	deferred := func(want int) {
		t.Helper()
		eventually(t, func() error {
			if n := eventsOf(t, ns, "busy")[corev1.EventTypeNormal+" "+promptopsv1.ReasonRunDeferred]; n != want {
				return fmt.Errorf("%d RunDeferred events, want %d", n, want)
			}
			return nil
		})
	}
	request(t, ns, "busy", "2026-01-01T11:00:00Z")
	deferred(1)
	poke(t, ns, "busy")
	poke(t, ns, "busy")
	// Another value is announced too; had the pokes announced the first
	// again, its events would have been written before this one.
	request(t, ns, "busy", "2026-01-01T12:00:00Z")
	deferred(2)
	if n := len(jobsOf(t, ns)); n != 1 {
		t.Fatalf("%d jobs while one runs", n)
	}
	finishJob(t, &job, true, `{"factsConsolidated":1,"observations":1,"missionHash":"sha256:x"}`)
	waitMB(t, ns, "busy", func(mb *promptopsv1.MemoryBank) error {
		if mb.Status.LastHandledRequest != "2026-01-01T12:00:00Z" || mb.Status.ActiveJob == "" || mb.Status.ActiveJob == job.Name {
			return fmt.Errorf("lastHandledRequest %q, activeJob %q", mb.Status.LastHandledRequest, mb.Status.ActiveJob)
		}
		return nil
	})
}
