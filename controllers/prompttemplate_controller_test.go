package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/assembler"
	"github.com/promptops/promptops/internal/testenv"
	"github.com/promptops/promptops/plan"
)

var ctx = context.Background()

// applySample creates the objects of a file in config/samples in ns.
func applySample(t *testing.T, ns, file string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "config", "samples", file))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range decodeYAML(t, data) {
		u.SetNamespace(ns)
		if err := k8sClient.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
}

func createYAML(t *testing.T, ns, y string) {
	t.Helper()
	for _, u := range decodeYAML(t, []byte(y)) {
		u.SetNamespace(ns)
		if err := k8sClient.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
}

func getPT(t *testing.T, ns, name string) *promptopsv1.PromptTemplate {
	t.Helper()
	pt := &promptopsv1.PromptTemplate{}
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pt); err != nil {
		t.Fatal(err)
	}
	return pt
}

// waitCondition waits until the template's condition has the status and
// reason and describes the current generation.
func waitCondition(t *testing.T, ns, name, typ string, status metav1.ConditionStatus, reason string) *promptopsv1.PromptTemplate {
	t.Helper()
	return waitConditionAt(t, ns, name, typ, status, reason, true)
}

// waitConditionAt waits for a condition of the current generation; with
// handled, status.observedGeneration must have reached it too (it does not
// while a reconcile waits or retries).
func waitConditionAt(t *testing.T, ns, name, typ string, status metav1.ConditionStatus, reason string, handled bool) *promptopsv1.PromptTemplate {
	t.Helper()
	var pt *promptopsv1.PromptTemplate
	eventually(t, func() error {
		pt = getPT(t, ns, name)
		c := meta.FindStatusCondition(pt.Status.Conditions, typ)
		if c == nil || c.Status != status || (reason != "" && c.Reason != reason) || c.ObservedGeneration != pt.Generation || (handled && pt.Status.ObservedGeneration != pt.Generation) {
			return fmt.Errorf("%s is %+v at generation %d (observed %d)", typ, c, pt.Generation, pt.Status.ObservedGeneration)
		}
		return nil
	})
	return pt
}

func getCM(t *testing.T, ns, name string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

func update(t *testing.T, obj client.Object, mutate func()) {
	t.Helper()
	eventually(t, func() error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate()
		return k8sClient.Update(ctx, obj)
	})
}

// reconciled asks the manager to reconcile a template (the force-reconcile
// annotation, set to value) and waits until it has: every event of the
// template queued before has been handled by then, in that reconcile or an
// earlier one. The manager writes the template's status once for it
// (lastHandledReconcileAt).
func reconciled(t *testing.T, ns, name, value string) {
	t.Helper()
	pt := &promptopsv1.PromptTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	update(t, pt, func() {
		if pt.Annotations == nil {
			pt.Annotations = map[string]string{}
		}
		pt.Annotations[promptopsv1.AnnotationReconcileRequestedAt] = value
	})
	eventually(t, func() error {
		if got := getPT(t, ns, name).Status.LastHandledReconcileAt; got != value {
			return fmt.Errorf("lastHandledReconcileAt of %s is %q, want %q", name, got, value)
		}
		return nil
	})
}

// inManagerCache waits until the manager's cache holds a ConfigMap: its
// watch has delivered the ConfigMap's event to the controllers.
func inManagerCache(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, func() error {
		return mgrCache.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, configMapMeta())
	})
}

func TestTemplateReadyWithRenderedConfigMap(t *testing.T) {
	ns := newNamespace(t)
	applySample(t, ns, "ssa-prompts-configmap.yaml")
	applySample(t, ns, "promptops_v1_prompttemplate_ssa.yaml")
	pt := waitCondition(t, ns, "ssa-pro", promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded)

	if len(pt.Status.Intents) != 6 || pt.Status.ConfigMapName != "ssa-pro-prompts" || pt.Status.Encoding != "o200k_base" || pt.Status.LargestTokens == 0 {
		t.Fatalf("status: %+v", pt.Status)
	}
	for _, in := range pt.Status.Intents {
		// The role (341 tokens) comes before the runtime sections.
		if !in.WithinBudget || in.MaxTokens != 4000 || in.Tokens != in.FixedTokens+in.ReservedTokens || in.ReservedTokens != 2300 || in.CacheableTokens != 341 {
			t.Errorf("intent %+v", in)
		}
	}
	for _, typ := range []string{promptopsv1.ConditionStalled, promptopsv1.ConditionReconciling} {
		if meta.FindStatusCondition(pt.Status.Conditions, typ) != nil {
			t.Errorf("%s must be absent when false", typ)
		}
	}
	if c := meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionBudgetExceeded); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("BudgetExceeded should be False: %+v", c)
	}

	cm := getCM(t, ns, "ssa-pro-prompts")
	if cm.Annotations[promptopsv1.AnnotationRevision] != pt.Status.Revision || !strings.HasPrefix(pt.Status.Revision, "sha256:") {
		t.Fatalf("revision annotation %q, status %q", cm.Annotations[promptopsv1.AnnotationRevision], pt.Status.Revision)
	}
	for _, k := range []string{"chat.txt", "explore.txt", "consult.txt", "analyze.txt", "discuss.txt", "feedback.txt", "plan.json"} {
		if cm.Data[k] == "" {
			t.Errorf("ConfigMap lacks %s", k)
		}
	}
	// The base system comes from the referenced ConfigMap (not the
	// fallback), variables substituted, runtime slots as placeholders.
	chat := cm.Data["chat.txt"]
	if !strings.HasPrefix(chat, "你是 SSA-Pro 智能统计分析助手。你的职责是**规划") || !strings.Contains(chat, "{{runtime.data_context}}") ||
		!strings.HasSuffix(chat, "## 当前任务指令\n请基于统计知识和用户数据直接回答用户的问题。不要主动建议执行分析，除非用户明确要求。简洁作答，分点清晰。禁止编造任何数值。") {
		t.Fatalf("chat.txt:\n%s", chat)
	}
	var plan assembler.Plan
	if err := json.Unmarshal([]byte(cm.Data["plan.json"]), &plan); err != nil || plan.Revision != pt.Status.Revision || len(plan.Sections) != 6 {
		t.Fatalf("plan.json: %v %+v", err, plan)
	}
	// Owner reference: controlled by the template.
	if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != pt.UID || cm.OwnerReferences[0].Controller == nil || !*cm.OwnerReferences[0].Controller {
		t.Fatalf("owner references %+v", cm.OwnerReferences)
	}
	if cm.Labels[promptopsv1.LabelManagedBy] != "promptops" {
		t.Fatalf("labels %v", cm.Labels)
	}
	// Metrics on the manager's registry, set once the status is written.
	eventually(t, func() error {
		if v := testutil.ToFloat64(promptBudgetTokens.WithLabelValues(ns, "ssa-pro", "chat")); v != 4000 {
			return fmt.Errorf("promptops_prompt_budget_tokens = %v", v)
		}
		if v := testutil.ToFloat64(promptTokens.WithLabelValues(ns, "ssa-pro", "analyze")); int32(v) != pt.Status.Intents[3].Tokens {
			return fmt.Errorf("promptops_prompt_tokens = %v, status %d", v, pt.Status.Intents[3].Tokens)
		}
		return nil
	})

	// Edit an intent: a new revision and observedGeneration.
	oldRev := pt.Status.Revision
	update(t, pt, func() { pt.Spec.Intents[1].Instruction = ptr("请解读数据特征。") })
	eventually(t, func() error {
		pt = getPT(t, ns, "ssa-pro")
		if pt.Status.ObservedGeneration != 2 || pt.Status.Revision == oldRev {
			return fmt.Errorf("observedGeneration %d revision %s", pt.Status.ObservedGeneration, pt.Status.Revision)
		}
		return nil
	})
	cm = getCM(t, ns, "ssa-pro-prompts")
	if !strings.HasSuffix(cm.Data["explore.txt"], "请解读数据特征。") || cm.Annotations[promptopsv1.AnnotationRevision] != pt.Status.Revision {
		t.Fatalf("explore.txt not re-rendered: %s", cm.Data["explore.txt"])
	}

	// Edit the referenced ConfigMap: re-rendered without a spec change.
	src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ssa-prompts"}}
	update(t, src, func() { src.Data["SSA_INTENT_CHAT"] = "只回答统计问题。" })
	eventually(t, func() error {
		cm = getCM(t, ns, "ssa-pro-prompts")
		if !strings.HasSuffix(cm.Data["chat.txt"], "只回答统计问题。") {
			return fmt.Errorf("chat.txt still %q", cm.Data["chat.txt"][len(cm.Data["chat.txt"])-60:])
		}
		return nil
	})
	if pt = getPT(t, ns, "ssa-pro"); pt.Status.ObservedGeneration != 2 {
		t.Fatalf("a ConfigMap edit is not a generation: %d", pt.Status.ObservedGeneration)
	}
}

func TestConfigMapEditRerendersOnlyReaders(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, `
apiVersion: v1
kind: ConfigMap
metadata: {name: shared}
data: {ROLE: You are helpful.}
---
apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: reader}
spec:
  budget: {maxTokens: 200}
  sections:
  - {name: role, from: {configMapKeyRef: {name: shared, key: ROLE}}}
  - {name: task, intent: true}
  intents: [{name: chat, instruction: Answer.}]
---
apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: bystander}
spec:
  budget: {maxTokens: 200}
  sections: [{name: task, intent: true}]
  intents: [{name: chat, instruction: Answer.}]
`)
	waitCondition(t, ns, "reader", promptopsv1.ConditionReady, metav1.ConditionTrue, "")
	waitCondition(t, ns, "bystander", promptopsv1.ConditionReady, metav1.ConditionTrue, "")
	// The events of the bystander's first render (its ConfigMap's) are
	// handled before its writes are counted.
	inManagerCache(t, ns, "bystander-prompts")
	reconciled(t, ns, "bystander", "before-edit")
	before := writes.matching("/namespaces/"+ns+"/", "bystander")
	readerBefore := getCM(t, ns, "reader-prompts").ResourceVersion
	src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"}}
	update(t, src, func() { src.Data["ROLE"] = "You are very helpful." })
	eventually(t, func() error {
		if cm := getCM(t, ns, "reader-prompts"); cm.ResourceVersion == readerBefore || !strings.HasPrefix(cm.Data["chat.txt"], "You are very helpful.") {
			return fmt.Errorf("reader not re-rendered")
		}
		return nil
	})
	// Whatever the edit queued for the bystander has run once the manager
	// handled a later request of it, whose status write is the one
	// expected.
	reconciled(t, ns, "bystander", "after-edit")
	if after := writes.matching("/namespaces/"+ns+"/", "bystander"); after != before+1 {
		t.Fatalf("the bystander template was written %d times after an unrelated ConfigMap edit", after-before-1)
	}
}

func overBudgetYAML(onExceed string, maxTokens int) string {
	return fmt.Sprintf(`
apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: tight}
spec:
  budget: {maxTokens: %d, onExceed: %s}
  sections:
  - {name: rules, text: "Always be polite and accurate.", truncation: {policy: Never}}
  - name: examples
    text: "%s"
    truncation: {priority: 5, minTokens: 5}
  - name: context
    runtime: {reserveTokens: 20}
  - {name: task, intent: true, truncation: {policy: Never}}
  intents:
  - {name: chat, instruction: Answer the question.}
  - {name: analyze, instruction: Analyse the data step by step and explain each step.}
`, maxTokens, onExceed, strings.Repeat("Example: the customer asks about invoices and gets a short answer. ", 8))
}

func TestRejectKeepsLastRevisionThatFit(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, overBudgetYAML("Reject", 1000))
	pt := waitCondition(t, ns, "tight", promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded)
	goodRev := pt.Status.Revision
	update(t, pt, func() { pt.Spec.Budget.MaxTokens = 100 })
	pt = waitCondition(t, ns, "tight", promptopsv1.ConditionReady, metav1.ConditionFalse, promptopsv1.ReasonBudgetExceeded)
	be := meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionBudgetExceeded)
	if be == nil || be.Status != metav1.ConditionTrue {
		t.Fatalf("BudgetExceeded: %+v", be)
	}
	an := pt.Status.Intents[1]
	want := fmt.Sprintf("intent analyze needs %d tokens (%d fixed + 20 reserved), budget 100", an.Tokens, an.FixedTokens)
	if !strings.Contains(be.Message, want) || an.WithinBudget {
		t.Fatalf("message %q should contain %q", be.Message, want)
	}
	if pt.Status.Revision != goodRev || getCM(t, ns, "tight-prompts").Annotations[promptopsv1.AnnotationRevision] != goodRev {
		t.Fatal("Reject must keep the last revision that fit")
	}
	if v := testutil.ToFloat64(promptBudgetExceeded.WithLabelValues(ns, "tight", "analyze")); v != 1 {
		t.Fatalf("promptops_prompt_budget_exceeded = %v", v)
	}
	// Nothing changes until the spec does: Stalled, which GitOps waits read
	// as Failed instead of waiting forever.
	if c := meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionStalled); c == nil || c.Reason != promptopsv1.ReasonBudgetExceeded ||
		meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionReconciling) != nil || pt.Status.ObservedGeneration != pt.Generation {
		t.Fatalf("over budget under Reject is Stalled: %+v", pt.Status.Conditions)
	}
	// Raising the budget makes it Ready again with a new revision.
	update(t, pt, func() { pt.Spec.Budget.MaxTokens = 2000 })
	pt = waitCondition(t, ns, "tight", promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded)
	if pt.Status.Revision == goodRev {
		t.Fatal("new budget is a new revision")
	}
}

func TestWarnRendersAnyway(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, overBudgetYAML("Warn", 100))
	pt := waitCondition(t, ns, "tight", promptopsv1.ConditionBudgetExceeded, metav1.ConditionTrue, promptopsv1.ReasonBudgetExceeded)
	ready := meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionReady)
	if ready.Status != metav1.ConditionTrue || !strings.Contains(ready.Message, "onExceed: Warn") {
		t.Fatalf("Ready: %+v", ready)
	}
	if cm := getCM(t, ns, "tight-prompts"); cm.Annotations[promptopsv1.AnnotationRevision] != pt.Status.Revision {
		t.Fatal("Warn renders the over-budget revision")
	}
}

func TestTruncateCutsStaticSections(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, overBudgetYAML("Truncate", 100))
	pt := waitCondition(t, ns, "tight", promptopsv1.ConditionTruncated, metav1.ConditionTrue, promptopsv1.ReasonTruncated)
	tr := meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionTruncated)
	if !strings.Contains(tr.Message, "intent analyze: cut examples") {
		t.Fatalf("Truncated message %q", tr.Message)
	}
	if ready := meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionReady); ready.Status != metav1.ConditionTrue {
		t.Fatalf("Ready: %+v", ready)
	}
	for _, in := range pt.Status.Intents {
		if !in.WithinBudget || in.Tokens > 100 || len(in.TruncatedSections) != 1 || in.TruncatedSections[0] != "examples" {
			t.Fatalf("intent %+v", in)
		}
	}
	cm := getCM(t, ns, "tight-prompts")
	if !strings.HasPrefix(cm.Data["analyze.txt"], "Always be polite and accurate.") || !strings.HasSuffix(cm.Data["analyze.txt"], "explain each step.") {
		t.Fatalf("Never sections must be whole: %q", cm.Data["analyze.txt"])
	}
	// Never text alone over budget: over budget, not Ready, nothing kept.
	update(t, pt, func() { pt.Spec.Budget.MaxTokens = 25 })
	pt = waitCondition(t, ns, "tight", promptopsv1.ConditionReady, metav1.ConditionFalse, promptopsv1.ReasonBudgetExceeded)
}

func TestInvalidContentStallsThenHeals(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, `
apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: vars}
spec:
  budget: {maxTokens: 200}
  sections:
  - {name: role, text: "You help {{ customer }}."}
  - {name: task, intent: true}
  intents: [{name: chat, instruction: Answer.}]
---
apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: refs}
spec:
  budget: {maxTokens: 200}
  sections:
  - {name: role, from: {configMapKeyRef: {name: later, key: ROLE}}}
  - {name: task, intent: true}
  intents: [{name: chat, instruction: Answer.}]
`)
	pt := waitCondition(t, ns, "vars", promptopsv1.ConditionStalled, metav1.ConditionTrue, promptopsv1.ReasonInvalidTemplate)
	ready := meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionReady)
	if ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, "Section role uses the variable {{ customer }}, which spec.variables does not define") {
		t.Fatalf("Ready: %+v", ready)
	}
	// A Warning event says so (events.k8s.io, on the transition only).
	eventually(t, func() error {
		var evs eventsv1.EventList
		if err := k8sClient.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "vars" && e.Type == corev1.EventTypeWarning && e.Reason == promptopsv1.ReasonInvalidTemplate {
				return nil
			}
		}
		return fmt.Errorf("no Warning event among %d", len(evs.Items))
	})
	update(t, pt, func() { pt.Spec.Variables = map[string]string{"customer": "Acme"} })
	pt = waitCondition(t, ns, "vars", promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded)
	if meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionStalled) != nil {
		t.Fatal("Stalled must be removed once fixed")
	}

	// A reference applied in the wrong order is waited for, not stalled.
	pt = waitConditionAt(t, ns, "refs", promptopsv1.ConditionReconciling, metav1.ConditionTrue, promptopsv1.ReasonReferenceNotFound, false)
	if msg := meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionReady).Message; !strings.Contains(msg, `key "ROLE" of ConfigMap "later"`) ||
		meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionStalled) != nil {
		t.Fatalf("message %q, conditions %+v", msg, pt.Status.Conditions)
	}
	// The ConfigMap appears: Ready by itself, with no spec change.
	createYAML(t, ns, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: later}\ndata: {ROLE: You are late but here.}\n")
	pt = waitCondition(t, ns, "refs", promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded)
	if !strings.HasPrefix(getCM(t, ns, "refs-prompts").Data["chat.txt"], "You are late but here.") {
		t.Fatal("not rendered from the new ConfigMap")
	}
}

func TestRevisionHistory(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, `
apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: hist}
spec:
  budget: {maxTokens: 200}
  revisionHistoryLimit: 2
  sections: [{name: task, intent: true}]
  intents: [{name: chat, instruction: v1}]
`)
	pt := waitCondition(t, ns, "hist", promptopsv1.ConditionReady, metav1.ConditionTrue, "")
	for i := 2; i <= 4; i++ {
		update(t, pt, func() { pt.Spec.Intents[0].Instruction = ptr(fmt.Sprintf("v%d", i)) })
		eventually(t, func() error {
			if pt = getPT(t, ns, "hist"); pt.Status.ObservedGeneration != int64(i) {
				return fmt.Errorf("generation %d not observed", i)
			}
			return nil
		})
		// The next render prunes by the manager's cache, which holds this
		// revision's copy first (creation order is by name tie-break anyway).
		inManagerCache(t, ns, historyName(pt, pt.Status.Revision))
	}
	var list corev1.ConfigMapList
	eventually(t, func() error {
		if err := k8sClient.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{labelRole: roleHistory}); err != nil {
			return err
		}
		if len(list.Items) != 2 {
			return fmt.Errorf("%d history copies", len(list.Items))
		}
		return nil
	})
	current := historyName(pt, pt.Status.Revision)
	found := false
	for _, cm := range list.Items {
		if cm.Immutable == nil || !*cm.Immutable || len(cm.OwnerReferences) != 1 {
			t.Fatalf("history copy %s must be immutable and owned", cm.Name)
		}
		found = found || cm.Name == current
	}
	if !found || getCM(t, ns, current).Data["chat.txt"] != "v4" {
		t.Fatalf("current revision's copy %s missing", current)
	}
	// Limit 0 removes the copies.
	update(t, pt, func() { pt.Spec.RevisionHistoryLimit = ptr(int32(0)) })
	eventually(t, func() error {
		if err := k8sClient.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{labelRole: roleHistory}); err != nil {
			return err
		}
		if len(list.Items) != 0 {
			return fmt.Errorf("%d history copies left", len(list.Items))
		}
		return nil
	})
}

// TestNoWritesWhenSettled: a reconcile of an unchanged template writes
// nothing, and the running manager writes nothing once settled.
func TestNoWritesWhenSettled(t *testing.T) {
	ns := newNamespace(t)
	applySample(t, ns, "ssa-prompts-configmap.yaml")
	applySample(t, ns, "promptops_v1_prompttemplate_ssa.yaml")
	applySample(t, ns, "promptops_v1_prompttemplate_support.yaml")
	waitCondition(t, ns, "ssa-pro", promptopsv1.ConditionReady, metav1.ConditionTrue, "")
	waitCondition(t, ns, "support-assistant", promptopsv1.ConditionReady, metav1.ConditionTrue, "")

	// Every event of the first renders (their ConfigMaps') is handled once
	// the manager handled a later request of each template; from then on
	// it writes nothing but the status write each further request asks for.
	templates := []string{"ssa-pro", "support-assistant"}
	for _, name := range templates {
		inManagerCache(t, ns, name+"-prompts")
		reconciled(t, ns, name, "settle")
	}
	before := writes.matching("/namespaces/" + ns + "/")
	for _, name := range templates {
		reconciled(t, ns, name, "settled")
	}
	if after := writes.matching("/namespaces/" + ns + "/"); after != before+len(templates) {
		t.Fatalf("%d writes after settling", after-before-len(templates))
	}

	// A direct reconcile with a fresh reconciler (as after a restart) reads
	// but does not write; a second one does not even read the content.
	counting := &countingClient{Client: mgrClient} // the cache and its indexes, as the manager reads
	reader := &countingReader{Reader: k8sClient}
	r := &PromptTemplateReconciler{Client: counting, APIReader: reader}
	for i := 0; i < 2; i++ {
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "ssa-pro"}}); err != nil {
			t.Fatal(err)
		}
	}
	if counting.writes != 0 {
		t.Fatalf("no-op reconciles wrote %d times", counting.writes)
	}
	// Each reconcile reads the template itself (the cache holds its
	// outline); the first reads the referenced ConfigMap and the rendered
	// one, the second only the referenced one.
	if reader.reads != 5 {
		t.Fatalf("direct reads: %d, want 5", reader.reads)
	}
}

type countingClient struct {
	client.Client
	writes int
}

func (c *countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.writes++
	return c.Client.Create(ctx, obj, opts...)
}
func (c *countingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.writes++
	return c.Client.Update(ctx, obj, opts...)
}
func (c *countingClient) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	c.writes++
	return c.Client.Patch(ctx, obj, p, opts...)
}
func (c *countingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.writes++
	return c.Client.Delete(ctx, obj, opts...)
}
func (c *countingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	c.writes++
	return c.Client.Apply(ctx, obj, opts...)
}
func (c *countingClient) Status() client.SubResourceWriter {
	return &countingStatus{SubResourceWriter: c.Client.Status(), c: c}
}

type countingStatus struct {
	client.SubResourceWriter
	c *countingClient
}

func (s *countingStatus) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	s.c.writes++
	return s.SubResourceWriter.Patch(ctx, obj, p, opts...)
}
func (s *countingStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.c.writes++
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

type countingReader struct {
	client.Reader
	reads int
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.reads++
	return r.Reader.Get(ctx, key, obj, opts...)
}

func ptr[T any](v T) *T { return &v }

const memoryTemplateYAML = `
apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: recalls}
spec:
  encoding: cl100k_base
  budget: {maxTokens: 1000}
  sections:
  - {name: role, text: You are helpful.}
  - {name: question, heading: "## Question", runtime: {reserveTokens: 100}}
  - name: memory
    heading: "## What we know"
    memory: {bankRef: {name: customers}, query: {fromRuntime: question}, reserveTokens: 300, minScore: 250}
  - {name: task, intent: true}
  intents: [{name: chat, instruction: Answer.}]
`

func planOf(t *testing.T, ns, name string) *plan.Plan {
	t.Helper()
	p, err := plan.Load([]byte(getCM(t, ns, name+"-prompts").Data["plan.json"]))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The plan carries the bank's status.serving.endpoint and follows it; a
// missing or unserved bank is reported without failing the render.
func TestMemorySectionFollowsTheBankEndpoint(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, memoryTemplateYAML)
	pt := waitCondition(t, ns, "recalls", promptopsv1.ConditionMemoryUnavailable, metav1.ConditionTrue, promptopsv1.ReasonMemoryBankNotFound)
	if c := meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("an unknown bank fails the render: %+v", c)
	}
	if c := meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionMemoryUnavailable); !strings.Contains(c.Message, "customers") {
		t.Errorf("message %q does not name the bank", c.Message)
	}
	p := planOf(t, ns, "recalls")
	m := p.Sections[2]
	if m.Kind != plan.KindMemory || m.Memory.Endpoint != "" || m.Memory.Bank != (plan.BankRef{Namespace: ns, Name: "customers"}) || m.Memory.MinScorePerMille != 250 || m.Memory.MaxItems != 20 {
		t.Fatalf("memory section %+v %+v", m, m.Memory)
	}

	createYAML(t, ns, strings.Replace(validBank, "name: valid", "name: customers", 1))
	waitCondition(t, ns, "recalls", promptopsv1.ConditionMemoryUnavailable, metav1.ConditionTrue, promptopsv1.ReasonMemoryBankNotServed)

	// Served: the MemoryBank controller publishes the endpoint (writing
	// status.serving by hand would race it, as it clears status.serving of
	// a bank not served).
	mb := &promptopsv1.MemoryBank{}
	endpoint := "https://customers-memory." + ns + ".svc:8089"
	eventually(t, func() error {
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "customers"}, mb); err != nil {
			return err
		}
		mb.Spec.Serving = &promptopsv1.ServingSpec{}
		return k8sClient.Update(ctx, mb)
	})
	waitCondition(t, ns, "recalls", promptopsv1.ConditionMemoryUnavailable, metav1.ConditionFalse, promptopsv1.ReasonMemoryServed)
	eventually(t, func() error {
		if got := planOf(t, ns, "recalls").Sections[2].Memory.Endpoint; got != endpoint {
			return fmt.Errorf("endpoint %q in the plan", got)
		}
		return nil
	})
}

// TestSettledReconcileReadsNothing: a template whose render depends on its
// spec alone, once rendered and verified by a reconciler, is reconciled
// again (its ConfigMap's event, a resync) from the cache alone: no read of
// the API server, no write. A hand edit of its ConfigMap is seen again.
func TestSettledReconcileReadsNothing(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, `
apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: pure}
spec:
  budget: {maxTokens: 1000}
  sections:
  - {name: role, text: "You are terse."}
  - {name: task, intent: true}
  intents: [{name: chat, instruction: "Answer."}]
`)
	waitCondition(t, ns, "pure", promptopsv1.ConditionReady, metav1.ConditionTrue, "")
	counting := &countingClient{Client: mgrClient}
	reader := &countingReader{Reader: k8sClient}
	r := &PromptTemplateReconciler{Client: counting, APIReader: reader}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "pure"}}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	first := reader.reads
	if first == 0 {
		t.Fatal("the first reconcile of a fresh reconciler read nothing")
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if reader.reads != first || counting.writes != 0 {
		t.Fatalf("a settled reconcile read %d times and wrote %d times", reader.reads-first, counting.writes)
	}
	// A hand edit moves the ConfigMap's resourceVersion: read again and
	// repaired.
	cm := getCM(t, ns, "pure-prompts")
	cm.Data["chat.txt"] = "edited"
	if err := k8sClient.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		if getCM(t, ns, "pure-prompts").Data["chat.txt"] == "edited" {
			return fmt.Errorf("the edit is still there")
		}
		return nil
	})
}
