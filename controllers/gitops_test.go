package controllers

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/assembler"
)

// eventsOf lists the events about one object, by type and reason.
func eventsOf(t *testing.T, ns, name string) map[string]int {
	t.Helper()
	var evs eventsv1.EventList
	if err := k8sClient.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range evs.Items {
		if e.Regarding.Name == name {
			n := int(e.DeprecatedCount)
			if e.Series != nil {
				n = int(e.Series.Count)
			}
			out[e.Type+" "+e.Reason] += max(n, 1)
		}
	}
	return out
}

// TestTransitionEvents: a new Warn template gets a Warning for its overrun
// and a new Truncate template a Normal event for its cut; each transition
// is one event, not two.
func TestTransitionEvents(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, strings.Replace(overBudgetYAML("Warn", 100), "name: tight", "name: warned", 1))
	createYAML(t, ns, fmt.Sprintf(conformanceTemplate, "cut", 100, "Truncate", "", `text: "You are the assistant."`, strings.Repeat("Background. ", 200)))
	eventually(t, func() error {
		w, c := eventsOf(t, ns, "warned"), eventsOf(t, ns, "cut")
		if w[corev1.EventTypeWarning+" "+promptopsv1.ReasonBudgetExceeded] != 1 || c[corev1.EventTypeNormal+" "+promptopsv1.ReasonTruncated] != 1 {
			return fmt.Errorf("warned %v, cut %v", w, c)
		}
		return nil
	})
	// Back within budget: one Normal transition of BudgetExceeded, and the
	// Warning is not repeated.
	pt := getPT(t, ns, "warned")
	update(t, pt, func() { pt.Spec.Budget.MaxTokens = 4000 })
	waitCondition(t, ns, "warned", promptopsv1.ConditionBudgetExceeded, metav1.ConditionFalse, promptopsv1.ReasonWithinBudget)
	eventually(t, func() error {
		w := eventsOf(t, ns, "warned")
		if w[corev1.EventTypeNormal+" "+promptopsv1.ReasonWithinBudget] != 1 || w[corev1.EventTypeWarning+" "+promptopsv1.ReasonBudgetExceeded] != 1 {
			return fmt.Errorf("events %v", w)
		}
		return nil
	})
}

// TestForceReconcileAnnotation: Flux's reconcile.fluxcd.io/requestedAt (and
// promptops.io/reconcile-requested-at) reconciles at once, although the
// generation did not change, and is recorded in lastHandledReconcileAt.
func TestForceReconcileAnnotation(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, overBudgetYAML("Reject", 4000))
	pt := waitCondition(t, ns, "tight", promptopsv1.ConditionReady, metav1.ConditionTrue, "")
	for _, key := range []string{promptopsv1.AnnotationFluxReconcileRequestedAt, promptopsv1.AnnotationReconcileRequestedAt} {
		value := key + "-2026-12-01T10:00:00Z"
		update(t, pt, func() {
			if pt.Annotations == nil {
				pt.Annotations = map[string]string{}
			}
			pt.Annotations[key] = value
		})
		eventually(t, func() error {
			if got := getPT(t, ns, "tight").Status.LastHandledReconcileAt; got != value {
				return fmt.Errorf("lastHandledReconcileAt %q, want %q", got, value)
			}
			return nil
		})
		delete(pt.Annotations, key)
		update(t, pt, func() { delete(pt.Annotations, key) })
	}
}

// TestHandAddedKeysAreRemoved: the operator owns the whole rendered
// ConfigMap; keys added by hand (data or binaryData) go at the next render.
func TestHandAddedKeysAreRemoved(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, overBudgetYAML("Reject", 4000))
	pt := waitCondition(t, ns, "tight", promptopsv1.ConditionReady, metav1.ConditionTrue, "")
	cm := getCM(t, ns, "tight-prompts")
	want := len(cm.Data)
	update(t, cm, func() {
		cm.Data["extra.txt"] = "added by hand"
		cm.BinaryData = map[string][]byte{"blob": {1, 2, 3}}
	})
	// Any render (here a spec change) puts the ConfigMap back to what was
	// rendered, and nothing more.
	update(t, pt, func() { pt.Spec.Budget.MaxTokens = 3999 })
	eventually(t, func() error {
		cm := getCM(t, ns, "tight-prompts")
		if _, extra := cm.Data["extra.txt"]; extra || len(cm.BinaryData) != 0 || len(cm.Data) != want {
			return fmt.Errorf("data keys %d (want %d), binaryData %d", len(cm.Data), want, len(cm.BinaryData))
		}
		return nil
	})
}

// TestNeverSilent: messages of a 64-intent Truncate template stay under the
// condition limit (the status write goes through), a render over the API's
// 1 MiB is Stalled with its size, and the figures and metrics of a template
// that became invalid are dropped.
func TestNeverSilent(t *testing.T) {
	ns := newNamespace(t)
	var intents []string
	for i := 0; i < 64; i++ {
		intents = append(intents, fmt.Sprintf("{name: intent-with-a-rather-long-name-number-%02d, instruction: Answer.}", i))
	}
	many := fmt.Sprintf(`
apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: many}
spec:
  budget: {maxTokens: 60, onExceed: Truncate}
  sections:
  - {name: background-section-with-a-long-name, text: "%s"}
  - {name: task, intent: true}
  intents: [%s]
`, strings.Repeat("Background. ", 100), strings.Join(intents, ", "))
	createYAML(t, ns, many)
	pt := waitCondition(t, ns, "many", promptopsv1.ConditionTruncated, metav1.ConditionTrue, promptopsv1.ReasonTruncated)
	for _, c := range pt.Status.Conditions {
		if len(c.Message) > MaxConditionMessage {
			t.Fatalf("%s message is %d bytes", c.Type, len(c.Message))
		}
	}

	// 20 intents each carrying a 60,000-character section: 1.2 MB.
	var big []string
	for i := 0; i < 20; i++ {
		big = append(big, fmt.Sprintf("{name: i%d, instruction: x}", i))
	}
	createYAML(t, ns, fmt.Sprintf(`
apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: huge}
spec:
  budget: {maxTokens: 2000000, onExceed: Warn}
  sections: [{name: role, text: "%s"}, {name: task, intent: true}]
  intents: [%s]
`, strings.Repeat("y ", 30000), strings.Join(big, ", ")))
	pt = waitCondition(t, ns, "huge", promptopsv1.ConditionStalled, metav1.ConditionTrue, promptopsv1.ReasonTooLarge)
	if msg := meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionReady).Message; !strings.Contains(msg, "The rendered ConfigMap") || !strings.Contains(msg, fmt.Sprint(assembler.MaxConfigMapBytes)) {
		t.Fatalf("message %q", msg)
	}

	// A template that renders, then becomes invalid: no stale figures.
	createYAML(t, ns, overBudgetYAML("Reject", 4000))
	pt = waitCondition(t, ns, "tight", promptopsv1.ConditionReady, metav1.ConditionTrue, "")
	if v := testutil.ToFloat64(templateReady.WithLabelValues(ns, "tight", "True")); v != 1 {
		t.Fatalf("promptops_prompttemplate_ready{condition=True} = %v", v)
	}
	update(t, pt, func() { pt.Spec.Variables = nil; pt.Spec.Sections[0].Text = ptr("Hello {{ nobody }}") })
	pt = waitCondition(t, ns, "tight", promptopsv1.ConditionStalled, metav1.ConditionTrue, promptopsv1.ReasonInvalidTemplate)
	if len(pt.Status.Intents) != 0 || pt.Status.LargestTokens != 0 || meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionBudgetExceeded) != nil {
		t.Fatalf("stale figures: %+v", pt.Status)
	}
	if n := testutil.CollectAndCount(promptTokens); n > 0 {
		for _, intent := range []string{"chat", "analyze"} {
			if v := testutil.ToFloat64(promptTokens.WithLabelValues(ns, "tight", intent)); v != 0 {
				t.Fatalf("stale promptops_prompt_tokens for %s: %v", intent, v)
			}
		}
	}
	if v := testutil.ToFloat64(templateReady.WithLabelValues(ns, "tight", "False")); v != 1 {
		t.Fatalf("promptops_prompttemplate_ready{condition=False} = %v", v)
	}
	// "huge" and "tight" not Ready, in the counts of the namespace.
	if v := testutil.ToFloat64(templatesByReady.WithLabelValues(ns, "False")); v != 2 {
		t.Fatalf("promptops_prompttemplates{ready=False} = %v, want 2", v)
	}
	// Deleted: its series go.
	if err := k8sClient.Delete(ctx, pt); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		if n := seriesOf(t, ns, "tight"); n != 0 {
			return fmt.Errorf("%d series left for a deleted template", n)
		}
		return nil
	})
}

// seriesOf counts the metric series labelled with one object.
func seriesOf(t *testing.T, ns, name string) int {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var gotNS, gotName bool
			for _, l := range m.GetLabel() {
				gotNS = gotNS || (l.GetName() == "namespace" && l.GetValue() == ns)
				gotName = gotName || (l.GetName() == "name" && l.GetValue() == name)
			}
			if gotNS && gotName {
				n++
			}
		}
	}
	return n
}

// TestBankMetricsFromRunSummary: a finished run's summary becomes the
// bank's metrics, beside its ready gauge.
func TestBankMetricsFromRunSummary(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, bankYAML("metered", ""))
	waitMB(t, ns, "metered", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, ""))
	request(t, ns, "metered", "1")
	job := waitJobs(t, ns, 1)[0]
	finishJob(t, &job, true, `{"factsConsolidated":7,"factsFailed":1,"promptTokens":900,"completionTokens":80,"llmCalls":3,"observations":12,"pendingFacts":4,"failedFacts":2,"missionHash":"sha256:x"}`)
	waitMB(t, ns, "metered", func(mb *promptopsv1.MemoryBank) error {
		if mb.Status.LastRun == nil || mb.Status.LastRun.LLMCalls != 3 {
			return fmt.Errorf("lastRun %+v", mb.Status.LastRun)
		}
		return nil
	})
	eventually(t, func() error {
		for _, c := range []struct {
			got  float64
			want float64
			name string
		}{
			{testutil.ToFloat64(bankRunTokens.WithLabelValues(ns, "metered", "prompt")), 900, "prompt tokens"},
			{testutil.ToFloat64(bankRunTokens.WithLabelValues(ns, "metered", "completion")), 80, "completion tokens"},
			{testutil.ToFloat64(bankRunLLMCalls.WithLabelValues(ns, "metered")), 3, "llm calls"},
			{testutil.ToFloat64(bankRunFacts.WithLabelValues(ns, "metered", "consolidated")), 7, "consolidated"},
			{testutil.ToFloat64(bankRunFacts.WithLabelValues(ns, "metered", "failed")), 1, "failed"},
			{testutil.ToFloat64(bankObservations.WithLabelValues(ns, "metered")), 12, "observations"},
			{testutil.ToFloat64(bankFacts.WithLabelValues(ns, "metered", "pending")), 4, "pending"},
			{testutil.ToFloat64(bankReady.WithLabelValues(ns, "metered", "True")), 1, "ready"},
		} {
			if c.got != c.want {
				return fmt.Errorf("%s = %v, want %v", c.name, c.got, c.want)
			}
		}
		return nil
	})
}

// TestPrintColumnsFitATerminal reads the API server's own table (what
// kubectl get prints) for the samples: the default columns of pt and mb
// fit 120 columns, the long message is left to -o wide.
func TestPrintColumnsFitATerminal(t *testing.T) {
	ns := newNamespace(t)
	for _, f := range []string{"ssa-prompts-configmap.yaml", "promptops_v1_prompttemplate_ssa.yaml", "promptops_v1_prompttemplate_support.yaml", "promptops_v1_prompttemplate_overbudget.yaml", "promptops_v1_memorybank.yaml"} {
		applySample(t, ns, f)
	}
	rc, err := rest.RESTClientFor(restConfigFor(cfg))
	if err != nil {
		t.Fatal(err)
	}
	for _, resource := range []string{"prompttemplates", "memorybanks"} {
		eventually(t, func() error {
			var table metav1.Table
			err := rc.Get().AbsPath("/apis/promptops.io/v1/namespaces/"+ns+"/"+resource).
				SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(ctx).Into(&table)
			if err != nil {
				return err
			}
			// kubectl's layout: each column as wide as its widest cell,
			// three spaces between columns.
			var widths []int
			var names []string
			for i, c := range table.ColumnDefinitions {
				if c.Priority != 0 {
					continue
				}
				w := len(strings.ToUpper(c.Name))
				for _, row := range table.Rows {
					w = max(w, len(fmt.Sprint(row.Cells[i])))
				}
				widths = append(widths, w)
				names = append(names, c.Name)
			}
			total := 0
			for _, w := range widths {
				total += w + 3
			}
			if len(table.Rows) == 0 {
				return fmt.Errorf("%s: no rows yet", resource)
			}
			for _, row := range table.Rows {
				if fmt.Sprint(row.Cells[1]) == "" {
					return fmt.Errorf("%s: not reconciled yet", resource)
				}
			}
			if total-3 > 120 {
				return fmt.Errorf("%s: default columns %v are %d wide", resource, names, total-3)
			}
			return nil
		})
	}
}

// restConfigFor is cfg set up for a plain REST client of the API root.
func restConfigFor(c *rest.Config) *rest.Config {
	rc := rest.CopyConfig(c)
	rc.APIPath = "/apis"
	rc.GroupVersion = &promptopsv1.GroupVersion
	rc.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return rc
}
