package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/assembler"
	"github.com/promptops/promptops/internal/promtest"
	"github.com/promptops/promptops/plan"
)

// rolloutYAML is a template of one intent whose instruction says which
// version it is, with the rollout given (YAML of spec.rollout, indented).
func rolloutYAML(name, instruction, rollout, labels string) string {
	return fmt.Sprintf(`apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: %s, labels: {%s}}
spec:
  budget: {maxTokens: 200}
  sections: [{name: task, intent: true}]
  intents: [{name: chat, instruction: %q}]
  rollout:
%s
`, name, labels, instruction, rollout)
}

const heldThenAll = `    steps: [{weight: 10, pause: {}}, {weight: 100}]`

// setInstruction changes the template's one instruction: a new revision.
func setInstruction(t *testing.T, ns, name, instruction string) {
	t.Helper()
	pt := &promptopsv1.PromptTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	update(t, pt, func() { pt.Spec.Intents[0].Instruction = &instruction })
}

// annotate sets one annotation on the template.
func annotate(t *testing.T, ns, name, key, value string) {
	t.Helper()
	pt := &promptopsv1.PromptTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	update(t, pt, func() {
		if pt.Annotations == nil {
			pt.Annotations = map[string]string{}
		}
		pt.Annotations[key] = value
	})
}

// planRevision is the revision of a plan.json.
func planRevision(t *testing.T, data string) string {
	t.Helper()
	if data == "" {
		return ""
	}
	var p plan.Plan
	if err := json.Unmarshal([]byte(data), &p); err != nil {
		t.Fatal(err)
	}
	return p.Revision
}

// waitRollout waits until status.rollout satisfies ok, for the current
// generation.
func waitRollout(t *testing.T, ns, name string, limit time.Duration, ok func(*promptopsv1.RolloutStatus) bool) *promptopsv1.PromptTemplate {
	t.Helper()
	var pt *promptopsv1.PromptTemplate
	waitLong(t, limit, func() error {
		pt = getPT(t, ns, name)
		if pt.Status.ObservedGeneration != pt.Generation || pt.Status.Rollout == nil || !ok(pt.Status.Rollout) {
			return fmt.Errorf("status.rollout at generation %d (observed %d): %+v", pt.Generation, pt.Status.ObservedGeneration, pt.Status.Rollout)
		}
		return nil
	})
	return pt
}

// checkCanaryConfigMap checks the ConfigMap during a rollout: plan.json the
// stable revision, canary.plan.json the canary, rollout.json both and the
// weight.
func checkCanaryConfigMap(t *testing.T, cm *corev1.ConfigMap, stable, canary string, weight int) {
	t.Helper()
	if got := planRevision(t, cm.Data[assembler.PlanKey]); got != stable || cm.Annotations[promptopsv1.AnnotationRevision] != stable {
		t.Fatalf("plan.json holds %s (annotation %s), want the stable %s", got, cm.Annotations[promptopsv1.AnnotationRevision], stable)
	}
	if got := planRevision(t, cm.Data["canary.plan.json"]); got != canary {
		t.Fatalf("canary.plan.json holds %s, want %s", got, canary)
	}
	if cm.Data["canary.chat.txt"] == "" || cm.Data["chat.txt"] == "" {
		t.Fatalf("intent keys: %v", slicesOf(cm.Data))
	}
	var st assembler.RolloutState
	if err := json.Unmarshal([]byte(cm.Data[assembler.RolloutKey]), &st); err != nil {
		t.Fatal(err)
	}
	want := assembler.RolloutState{APIVersion: "promptops.io/v1", Kind: "PromptRollout", StableRevision: stable, CanaryRevision: canary, Weight: weight}
	if st != want {
		t.Fatalf("rollout.json %+v, want %+v", st, want)
	}
}

// checkNoCanary checks that the ConfigMap holds one revision only.
func checkNoCanary(t *testing.T, cm *corev1.ConfigMap, stable string) {
	t.Helper()
	for k := range cm.Data {
		if k == assembler.RolloutKey || strings.HasPrefix(k, assembler.CanaryPrefix) {
			t.Fatalf("key %s outside a rollout: %v", k, slicesOf(cm.Data))
		}
	}
	if got := planRevision(t, cm.Data[assembler.PlanKey]); got != stable {
		t.Fatalf("plan.json holds %s, want %s", got, stable)
	}
}

func slicesOf(m map[string]string) []string {
	var keys []string
	for k := range maps.Keys(m) {
		keys = append(keys, k)
	}
	return keys
}

// timeToConfigMap sets an annotation and polls the ConfigMap until changed
// says it changed, and logs how long that took: a figure, never asserted.
func timeToConfigMap(t *testing.T, ns, name, key, value string, changed func(*corev1.ConfigMap) bool) {
	t.Helper()
	start := time.Now()
	annotate(t, ns, name, key, value)
	waitLong(t, 30*time.Second, func() error {
		cm := &corev1.ConfigMap{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-prompts"}, cm); err != nil {
			return err
		}
		if !changed(cm) {
			return fmt.Errorf("ConfigMap not changed yet")
		}
		return nil
	})
	t.Logf("FIGURE: %s to the ConfigMap's change: %v", key, time.Since(start).Round(time.Millisecond))
}

func conditionReason(pt *promptopsv1.PromptTemplate, typ string) string {
	if c := meta.FindStatusCondition(pt.Status.Conditions, typ); c != nil {
		return string(c.Status) + " " + c.Reason
	}
	return "absent"
}

// TestRolloutHeldPromoteAbort: the first revision is live at once; a
// change holds at 10% until promoted; the next change is aborted and stays
// so; a third starts again at step 1.
func TestRolloutHeldPromoteAbort(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, rolloutYAML("canary", "Answer, v1.", heldThenAll, ""))
	pt := waitCondition(t, ns, "canary", promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded)
	rev1 := pt.Status.Revision
	if pt.Status.Rollout != nil {
		t.Fatalf("the first revision started a rollout: %+v", pt.Status.Rollout)
	}
	checkNoCanary(t, getCM(t, ns, "canary-prompts"), rev1)

	// A change: held at step 1, 10%.
	setInstruction(t, ns, "canary", "Answer, v2.")
	pt = waitRollout(t, ns, "canary", 30*time.Second, func(r *promptopsv1.RolloutStatus) bool {
		return r.Phase == promptopsv1.RolloutPaused && r.CanaryRevision != rev1
	})
	rev2 := pt.Status.Rollout.CanaryRevision
	if r := pt.Status.Rollout; r.StableRevision != rev1 || r.Step != 1 || r.Weight != 10 || r.StepStartedAt == nil || pt.Status.Revision != rev1 {
		t.Fatalf("status: revision %s, rollout %+v", pt.Status.Revision, r)
	}
	if got := conditionReason(pt, promptopsv1.ConditionReady); got != "False RolloutPaused" {
		t.Fatalf("Ready: %s", got)
	}
	if got := conditionReason(pt, promptopsv1.ConditionReconciling); got != "True RolloutPaused" {
		t.Fatalf("Reconciling: %s", got)
	}
	cm := getCM(t, ns, "canary-prompts")
	checkCanaryConfigMap(t, cm, rev1, rev2, 10)
	if cm.Data["chat.txt"] == cm.Data["canary.chat.txt"] || !strings.Contains(cm.Data["canary.chat.txt"], "v2") {
		t.Fatalf("chat.txt %q, canary.chat.txt %q", cm.Data["chat.txt"], cm.Data["canary.chat.txt"])
	}
	if got := testutil.ToFloat64(templateRolloutWeight.WithLabelValues(ns, "canary")); got != 10 {
		t.Fatalf("promptops_prompttemplate_rollout_weight %v, want 10", got)
	}
	waitKstatus(t, "PromptTemplate", ns, "canary", status.InProgressStatus, "until promoted")

	// A stale promote annotation is ignored.
	annotate(t, ns, "canary", promptopsv1.AnnotationRolloutPromote, rev1)
	reconciled(t, ns, "canary", "stale-promote")
	if r := getPT(t, ns, "canary").Status.Rollout; r.Phase != promptopsv1.RolloutPaused || r.Weight != 10 {
		t.Fatalf("a stale promote changed the rollout: %+v", r)
	}

	// Promote.
	timeToConfigMap(t, ns, "canary", promptopsv1.AnnotationRolloutPromote, rev2, func(cm *corev1.ConfigMap) bool {
		return planRevision(t, cm.Data[assembler.PlanKey]) == rev2
	})
	pt = waitCondition(t, ns, "canary", promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded)
	if r := pt.Status.Rollout; r == nil || r.Phase != promptopsv1.RolloutPromoted || r.StableRevision != rev2 || r.CanaryRevision != rev2 || r.Weight != 0 || pt.Status.Revision != rev2 {
		t.Fatalf("after promote: revision %s, rollout %+v", pt.Status.Revision, r)
	}
	checkNoCanary(t, getCM(t, ns, "canary-prompts"), rev2)
	waitKstatus(t, "PromptTemplate", ns, "canary", status.CurrentStatus, "")
	if got := testutil.ToFloat64(templateRolloutWeight.WithLabelValues(ns, "canary")); got != 0 {
		t.Fatalf("promptops_prompttemplate_rollout_weight %v after promote, want 0", got)
	}

	// Another change, aborted.
	setInstruction(t, ns, "canary", "Answer, v3.")
	pt = waitRollout(t, ns, "canary", 30*time.Second, func(r *promptopsv1.RolloutStatus) bool {
		return r.Phase == promptopsv1.RolloutPaused && r.CanaryRevision != rev2
	})
	rev3 := pt.Status.Rollout.CanaryRevision
	checkCanaryConfigMap(t, getCM(t, ns, "canary-prompts"), rev2, rev3, 10)
	timeToConfigMap(t, ns, "canary", promptopsv1.AnnotationRolloutAbort, rev3, func(cm *corev1.ConfigMap) bool {
		_, ok := cm.Data[assembler.RolloutKey]
		return !ok
	})
	pt = waitCondition(t, ns, "canary", promptopsv1.ConditionStalled, metav1.ConditionTrue, promptopsv1.ReasonRolloutAborted)
	if got := conditionReason(pt, promptopsv1.ConditionReady); got != "False RolloutAborted" {
		t.Fatalf("Ready: %s", got)
	}
	if r := pt.Status.Rollout; r.Phase != promptopsv1.RolloutAborted || r.Weight != 0 || r.CanaryRevision != rev3 || !strings.Contains(r.Message, "aborted by promptops.io/rollout-abort") || pt.Status.Revision != rev2 {
		t.Fatalf("after abort: revision %s, rollout %+v", pt.Status.Revision, r)
	}
	checkNoCanary(t, getCM(t, ns, "canary-prompts"), rev2)
	waitKstatus(t, "PromptTemplate", ns, "canary", status.FailedStatus, "aborted by promptops.io/rollout-abort")
	// It stays aborted, promote or not.
	annotate(t, ns, "canary", promptopsv1.AnnotationRolloutPromote, rev3)
	reconciled(t, ns, "canary", "after-abort")
	pt = getPT(t, ns, "canary")
	if r := pt.Status.Rollout; r.Phase != promptopsv1.RolloutAborted || conditionReason(pt, promptopsv1.ConditionStalled) != "True RolloutAborted" {
		t.Fatalf("not aborted any more: %+v", r)
	}
	checkNoCanary(t, getCM(t, ns, "canary-prompts"), rev2)

	// A third change starts again at step 1.
	setInstruction(t, ns, "canary", "Answer, v4.")
	pt = waitRollout(t, ns, "canary", 30*time.Second, func(r *promptopsv1.RolloutStatus) bool {
		return r.Phase == promptopsv1.RolloutPaused && r.CanaryRevision != rev3
	})
	if r := pt.Status.Rollout; r.Step != 1 || r.Weight != 10 || r.StableRevision != rev2 {
		t.Fatalf("third change: %+v", r)
	}
	checkCanaryConfigMap(t, getCM(t, ns, "canary-prompts"), rev2, pt.Status.Rollout.CanaryRevision, 10)

	eventually(t, func() error {
		evs := eventsOf(t, ns, "canary")
		if evs["Normal RolloutStep"] < 3 || evs["Normal RolloutPromoted"] != 1 || evs["Warning RolloutAborted"] != 1 {
			return fmt.Errorf("events: %v", evs)
		}
		return nil
	})
}

// TestRolloutTimedSteps: timed steps reach Promoted by themselves.
func TestRolloutTimedSteps(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, rolloutYAML("timed", "Answer, v1.", `    steps: [{weight: 20, pause: {duration: 2s}}, {weight: 60, pause: {duration: 2s}}]`, ""))
	rev1 := waitCondition(t, ns, "timed", promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded).Status.Revision
	setInstruction(t, ns, "timed", "Answer, v2.")
	pt := waitRollout(t, ns, "timed", 60*time.Second, func(r *promptopsv1.RolloutStatus) bool {
		return r.Phase == promptopsv1.RolloutPromoted && r.CanaryRevision != rev1
	})
	rev2 := pt.Status.Rollout.CanaryRevision
	if pt.Status.Revision != rev2 || pt.Status.Rollout.Step != 2 {
		t.Fatalf("promoted: revision %s, rollout %+v", pt.Status.Revision, pt.Status.Rollout)
	}
	waitCondition(t, ns, "timed", promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded)
	checkNoCanary(t, getCM(t, ns, "timed-prompts"), rev2)
	eventually(t, func() error {
		if evs := eventsOf(t, ns, "timed"); evs["Normal RolloutStep"] < 2 || evs["Normal RolloutPromoted"] != 1 {
			return fmt.Errorf("events: %v", evs)
		}
		return nil
	})
}

// TestRolloutChangeRestarts: a change during a rollout replaces the
// canary and starts again at step 1.
func TestRolloutChangeRestarts(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, rolloutYAML("again", "Answer, v1.", `    steps: [{weight: 10, pause: {duration: 1s}}, {weight: 50, pause: {}}]`, ""))
	rev1 := waitCondition(t, ns, "again", promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded).Status.Revision
	setInstruction(t, ns, "again", "Answer, v2.")
	pt := waitRollout(t, ns, "again", 30*time.Second, func(r *promptopsv1.RolloutStatus) bool {
		return r.Phase == promptopsv1.RolloutPaused && r.Step == 2 && r.CanaryRevision != rev1
	})
	rev2 := pt.Status.Rollout.CanaryRevision
	checkCanaryConfigMap(t, getCM(t, ns, "again-prompts"), rev1, rev2, 50)

	// Step 1 lasts long enough now to be seen.
	pt = &promptopsv1.PromptTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "again"}}
	update(t, pt, func() {
		pt.Spec.Intents[0].Instruction = ptr("Answer, v3.")
		pt.Spec.Rollout.Steps[0].Pause.Duration = &metav1.Duration{Duration: time.Hour}
	})
	pt = waitRollout(t, ns, "again", 30*time.Second, func(r *promptopsv1.RolloutStatus) bool {
		return r.CanaryRevision != rev2
	})
	if r := pt.Status.Rollout; r.Phase != promptopsv1.RolloutProgressing || r.Step != 1 || r.Weight != 10 || r.StableRevision != rev1 || r.CanaryRevision == rev1 {
		t.Fatalf("after a change mid-rollout: %+v", r)
	}
	if got := conditionReason(pt, promptopsv1.ConditionReady); got != "False RolloutProgressing" {
		t.Fatalf("Ready: %s", got)
	}
	waitKstatus(t, "PromptTemplate", ns, "again", status.InProgressStatus, "Step 1 of 2")
	checkCanaryConfigMap(t, getCM(t, ns, "again-prompts"), rev1, pt.Status.Rollout.CanaryRevision, 10)
}

// startTemplateManager starts a manager of the PromptTemplate controller
// alone, for the templates labelled unmanagedLabel (which the suite's
// manager leaves alone), and returns what stops it.
func startTemplateManager(t *testing.T) (stop func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(managerCfg, ctrl.Options{
		Scheme:                 NewScheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  CacheOptions(labels.SelectorFromSet(nil).Add(mustRequirement(unmanagedLabel, selection.Exists))),
		Controller:             config.Controller{SkipNameValidation: ptr(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &PromptTemplateReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("promptops-prompttemplate")}
	if err := r.SetupWithManager(mgr, controller.Options{}); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(c) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestRolloutSurvivesManagerRestart: a manager stopped mid-step and a new
// one started leave status.rollout and the ConfigMap as they were, and the
// rollout goes on.
func TestRolloutSurvivesManagerRestart(t *testing.T) {
	ns := newNamespace(t)
	stop := startTemplateManager(t)
	createYAML(t, ns, rolloutYAML("restart", "Answer, v1.", `    steps: [{weight: 30, pause: {}}, {weight: 100}]`, unmanagedLabel+`: "true"`))
	rev1 := waitCondition(t, ns, "restart", promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded).Status.Revision
	setInstruction(t, ns, "restart", "Answer, v2.")
	before := waitRollout(t, ns, "restart", 30*time.Second, func(r *promptopsv1.RolloutStatus) bool {
		return r.Phase == promptopsv1.RolloutPaused && r.CanaryRevision != rev1
	})
	rev2 := before.Status.Rollout.CanaryRevision
	cmBefore := getCM(t, ns, "restart-prompts")
	checkCanaryConfigMap(t, cmBefore, rev1, rev2, 30)
	stop()

	startTemplateManager(t)
	reconciled(t, ns, "restart", "after-restart")
	after := getPT(t, ns, "restart")
	if !reflect.DeepEqual(after.Status.Rollout, before.Status.Rollout) || after.Status.Revision != rev1 {
		t.Fatalf("status.rollout after a restart:\n%+v\nwas\n%+v", after.Status.Rollout, before.Status.Rollout)
	}
	if cm := getCM(t, ns, "restart-prompts"); cm.ResourceVersion != cmBefore.ResourceVersion {
		t.Fatalf("the new manager rewrote the ConfigMap")
	}
	annotate(t, ns, "restart", promptopsv1.AnnotationRolloutPromote, rev2)
	waitRollout(t, ns, "restart", 30*time.Second, func(r *promptopsv1.RolloutStatus) bool { return r.Phase == promptopsv1.RolloutPromoted })
	checkNoCanary(t, getCM(t, ns, "restart-prompts"), rev2)
}

// TestRolloutAnalysis: against a real Prometheus scraping a test exporter,
// a query over maxValue aborts the rollout by itself with the value in the
// message; one under it lets timed steps reach Promoted.
func TestRolloutAnalysis(t *testing.T) {
	reg := prometheus.NewRegistry()
	ratio := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rollout_test_error_ratio", Help: "A test's error ratio."}, []string{"case"})
	reg.MustRegister(ratio)
	ratio.WithLabelValues("over").Set(0.5)
	ratio.WithLabelValues("under").Set(0.01)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	base := promtest.Start(t, strings.TrimPrefix(srv.URL, "http://"))
	promtest.WaitFor(t, base, "rollout_test_error_ratio")

	ns := newNamespace(t)
	analysisYAML := func(c string, limit int) string {
		return fmt.Sprintf(`    analysis:
      prometheus: {address: %q, query: 'rollout_test_error_ratio{case="%s"}', maxValue: "0.05"}
      interval: 5s
      failureLimit: %d`, base, c, limit)
	}
	createYAML(t, ns, rolloutYAML("over", "Answer, v1.", heldThenAll+"\n"+analysisYAML("over", 2), ""))
	createYAML(t, ns, rolloutYAML("under", "Answer, v1.",
		`    steps: [{weight: 20, pause: {duration: 6s}}, {weight: 60, pause: {duration: 6s}}]`+"\n"+analysisYAML("under", 1), ""))
	revOver := waitCondition(t, ns, "over", promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded).Status.Revision
	revUnder := waitCondition(t, ns, "under", promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded).Status.Revision
	setInstruction(t, ns, "over", "Answer, v2.")
	setInstruction(t, ns, "under", "Answer, v2.")

	pt := waitRollout(t, ns, "over", 60*time.Second, func(r *promptopsv1.RolloutStatus) bool {
		return r.Phase == promptopsv1.RolloutAborted && r.CanaryRevision != revOver
	})
	r := pt.Status.Rollout
	if r.AnalysisFailures != 2 || !strings.Contains(r.Message, "0.5 is over maxValue 0.05") || r.LastAnalysisAt == nil {
		t.Fatalf("aborted by analysis: %+v", r)
	}
	t.Logf("FIGURE: analysis abort %v after the step began (interval 5s x failureLimit 2)", r.LastAnalysisAt.Sub(r.StepStartedAt.Time))
	if got := conditionReason(pt, promptopsv1.ConditionStalled); got != "True RolloutAborted" {
		t.Fatalf("Stalled: %s", got)
	}
	if c := meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionReady); !strings.Contains(c.Message, "0.5") {
		t.Fatalf("Ready's message does not give the value: %s", c.Message)
	}
	checkNoCanary(t, getCM(t, ns, "over-prompts"), revOver)

	pt = waitRollout(t, ns, "under", 90*time.Second, func(r *promptopsv1.RolloutStatus) bool {
		return r.Phase == promptopsv1.RolloutPromoted && r.CanaryRevision != revUnder
	})
	if r := pt.Status.Rollout; r.AnalysisFailures != 0 || r.LastAnalysisAt == nil {
		t.Fatalf("promoted without a passed measurement: %+v", r)
	}
	checkNoCanary(t, getCM(t, ns, "under-prompts"), pt.Status.Rollout.CanaryRevision)

	// The abort's event (Ready's transition) is a Warning naming the value.
	eventually(t, func() error {
		var evs eventsv1.EventList
		if err := k8sClient.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "over" && e.Reason == "RolloutAborted" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, "0.5") {
				return nil
			}
		}
		return fmt.Errorf("no Warning RolloutAborted event naming the value")
	})
}

// TestRolloutCanaryTooLarge: a canary that does not fit the ConfigMap
// beside the stable revision stalls (TooLarge) and the stable revision
// alone keeps serving.
func TestRolloutCanaryTooLarge(t *testing.T) {
	ns := newNamespace(t)
	// 9 intents each carrying a 60,000-character section: about 600 KB a
	// revision, so one fits and two do not.
	var intents []string
	for i := 0; i < 9; i++ {
		intents = append(intents, fmt.Sprintf("{name: i%d, instruction: x}", i))
	}
	big := func(word string) string {
		return fmt.Sprintf(`apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: big}
spec:
  budget: {maxTokens: 2000000, onExceed: Warn}
  sections: [{name: role, text: "%s"}, {name: task, intent: true}]
  intents: [%s]
  rollout:
%s
`, strings.Repeat(word+" ", 30000), strings.Join(intents, ", "), heldThenAll)
	}
	createYAML(t, ns, big("y"))
	rev1 := waitCondition(t, ns, "big", promptopsv1.ConditionReady, metav1.ConditionTrue, "").Status.Revision
	pt := &promptopsv1.PromptTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big"}}
	update(t, pt, func() { pt.Spec.Sections[0].Text = ptr(strings.Repeat("z ", 30000)) })
	pt = waitCondition(t, ns, "big", promptopsv1.ConditionStalled, metav1.ConditionTrue, promptopsv1.ReasonTooLarge)
	if msg := meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionReady).Message; !strings.Contains(msg, "stable and the canary") || !strings.Contains(msg, rev1+" keeps serving") {
		t.Fatalf("message %q", msg)
	}
	if pt.Status.Revision != rev1 {
		t.Fatalf("status.revision %s, want %s", pt.Status.Revision, rev1)
	}
	checkNoCanary(t, getCM(t, ns, "big-prompts"), rev1)
}
