package controllers

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

// seriesIn counts a vector's series of a namespace.
func seriesIn(t *testing.T, c prometheus.Collector, ns string) int {
	t.Helper()
	ch := make(chan prometheus.Metric, 1024)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "namespace" && l.GetValue() == ns {
				n++
			}
		}
	}
	return n
}

func metricsTemplate(ns, name string, ready metav1.ConditionStatus, intents ...promptopsv1.IntentStatus) *promptopsv1.PromptTemplate {
	pt := &promptopsv1.PromptTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	pt.Status.Intents = intents
	if ready != "" {
		pt.Status.Conditions = []metav1.Condition{{Type: promptopsv1.ConditionReady, Status: ready}}
	}
	return pt
}

// The counts per namespace follow each template's latest status; the
// series of each template and intent exist only when asked for, and go
// with their intent or template.
func TestTemplateMetrics(t *testing.T) {
	ns := "metrics-counts"
	within := func(name string) promptopsv1.IntentStatus {
		return promptopsv1.IntentStatus{Name: name, WithinBudget: true}
	}
	over := func(name string) promptopsv1.IntentStatus {
		return promptopsv1.IntentStatus{Name: name, Tokens: 900, MaxTokens: 800}
	}
	counts := func(wantTrue, wantFalse, wantUnknown, wantOver float64) {
		t.Helper()
		for s, want := range map[string]float64{"True": wantTrue, "False": wantFalse, "Unknown": wantUnknown} {
			if got := testutil.ToFloat64(templatesByReady.WithLabelValues(ns, s)); got != want {
				t.Errorf("templates Ready=%s: %v, want %v", s, got, want)
			}
		}
		if got := testutil.ToFloat64(intentsOverBudget.WithLabelValues(ns)); got != wantOver {
			t.Errorf("intents over budget: %v, want %v", got, wantOver)
		}
	}
	m := &templateMetrics{}
	m.record(metricsTemplate(ns, "a", metav1.ConditionTrue, within("chat"), over("analyze")))
	m.record(metricsTemplate(ns, "b", metav1.ConditionFalse))
	m.record(metricsTemplate(ns, "c", ""))
	counts(1, 1, 1, 1)
	m.record(metricsTemplate(ns, "a", metav1.ConditionFalse, within("chat")))
	counts(0, 2, 1, 0)
	for _, v := range []*prometheus.GaugeVec{templateReady, promptTokens, promptBudgetTokens, promptBudgetExceeded} {
		if n := seriesIn(t, v, ns); n != 0 {
			t.Errorf("%d series of each template without perTemplate", n)
		}
	}
	m.forget(ns, "a")
	m.forget(ns, "b")
	m.forget(ns, "c")
	m.forget(ns, "never-recorded")
	counts(0, 0, 0, 0)

	ns = "metrics-per-template"
	p := &templateMetrics{perTemplate: true}
	p.record(metricsTemplate(ns, "a", metav1.ConditionTrue, within("chat"), over("analyze")))
	if got := testutil.ToFloat64(promptBudgetExceeded.WithLabelValues(ns, "a", "analyze")); got != 1 {
		t.Errorf("analyze over budget: %v", got)
	}
	if n := seriesIn(t, promptTokens, ns); n != 2 {
		t.Errorf("%d token series, want one an intent", n)
	}
	if n := seriesIn(t, templateReady, ns); n != 3 {
		t.Errorf("%d Ready series, want one a status", n)
	}
	p.record(metricsTemplate(ns, "a", metav1.ConditionTrue, within("chat")))
	for _, v := range []*prometheus.GaugeVec{promptTokens, promptBudgetTokens, promptBudgetExceeded} {
		if n := seriesIn(t, v, ns); n != 1 {
			t.Errorf("%d series after an intent went, want 1", n)
		}
	}
	counts(1, 0, 0, 0)
	p.forget(ns, "a")
	for _, v := range []*prometheus.GaugeVec{templateReady, promptTokens, promptBudgetTokens, promptBudgetExceeded} {
		if n := seriesIn(t, v, ns); n != 0 {
			t.Errorf("%d series after the template went", n)
		}
	}
	counts(0, 0, 0, 0)
}
