package controllers

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

var (
	promptTokens = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "promptops_prompt_tokens",
		Help: "Tokens of an intent's assembled prompt: fixed text plus runtime reserves.",
	}, []string{"namespace", "name", "intent"})
	promptBudgetTokens = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "promptops_prompt_budget_tokens",
		Help: "Token budget of a PromptTemplate's intent.",
	}, []string{"namespace", "name", "intent"})
	promptBudgetExceeded = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "promptops_prompt_budget_exceeded",
		Help: "1 when the intent's prompt does not fit its budget, else 0.",
	}, []string{"namespace", "name", "intent"})

	// Ready per object, in the style of cert-manager's
	// certmanager_certificate_ready_status: one series per condition
	// status, 1 for the current one.
	templateReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "promptops_prompttemplate_ready",
		Help: "Ready condition of a PromptTemplate: 1 for the current status (True, False or Unknown), 0 for the others.",
	}, []string{"namespace", "name", "condition"})
	bankReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "promptops_memorybank_ready",
		Help: "Ready condition of a MemoryBank: 1 for the current status (True, False or Unknown), 0 for the others.",
	}, []string{"namespace", "name", "condition"})

	// The last run's summary, per bank.
	bankRunTokens = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "promptops_memorybank_last_run_tokens",
		Help: "Tokens the last consolidation run reported, by type (prompt or completion).",
	}, []string{"namespace", "name", "type"})
	bankRunLLMCalls = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "promptops_memorybank_last_run_llm_calls",
		Help: "LLM calls of the last consolidation run, retries included.",
	}, []string{"namespace", "name"})
	bankRunFacts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "promptops_memorybank_last_run_facts",
		Help: "Facts the last consolidation run consolidated or marked failed, by result.",
	}, []string{"namespace", "name", "result"})
	bankObservations = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "promptops_memorybank_observations",
		Help: "Observations in the bank after its last run.",
	}, []string{"namespace", "name"})
	bankFacts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "promptops_memorybank_facts",
		Help: "Facts left in the bank after its last run, by status (pending or failed).",
	}, []string{"namespace", "name", "status"})
)

func init() {
	metrics.Registry.MustRegister(promptTokens, promptBudgetTokens, promptBudgetExceeded, templateReady, bankReady,
		bankRunTokens, bankRunLLMCalls, bankRunFacts, bankObservations, bankFacts)
}

// intentSeries are, per template ("namespace/name"), the intents whose
// series this process set: they are deleted by their exact labels.
// DeletePartialMatch scans every series of the vector under its lock, at
// every render: quadratic in the templates (60% of the manager's CPU at
// 3,000).
var intentSeries sync.Map // string -> []string

// setIntentSeries records the intents whose series a template has now.
func setIntentSeries(namespace, name string, intents []string) {
	intentSeries.Store(namespace+"/"+name, intents)
}

// forgetTemplateIntentMetrics drops the per-intent series of a template
// (before its intents are set again, or when it no longer renders).
func forgetTemplateIntentMetrics(namespace, name string) {
	v, ok := intentSeries.LoadAndDelete(namespace + "/" + name)
	if !ok {
		return
	}
	for _, intent := range v.([]string) {
		for _, g := range []*prometheus.GaugeVec{promptTokens, promptBudgetTokens, promptBudgetExceeded} {
			g.DeleteLabelValues(namespace, name, intent)
		}
	}
}

// forgetTemplateMetrics drops every series of a deleted template, however
// set (rare: a scan of the vectors is affordable here).
func forgetTemplateMetrics(namespace, name string) {
	intentSeries.Delete(namespace + "/" + name)
	l := prometheus.Labels{"namespace": namespace, "name": name}
	for _, g := range []*prometheus.GaugeVec{promptTokens, promptBudgetTokens, promptBudgetExceeded, templateReady} {
		g.DeletePartialMatch(l)
	}
}

// forgetBankMetrics drops every series of a deleted bank.
func forgetBankMetrics(namespace, name string) {
	l := prometheus.Labels{"namespace": namespace, "name": name}
	for _, v := range []*prometheus.GaugeVec{bankReady, bankRunTokens, bankRunLLMCalls, bankRunFacts, bankObservations, bankFacts} {
		v.DeletePartialMatch(l)
	}
}

// setReadyGauge sets the per-status series of an object's Ready condition.
func setReadyGauge(g *prometheus.GaugeVec, namespace, name string, conds []metav1.Condition) {
	current := metav1.ConditionUnknown
	if c := meta.FindStatusCondition(conds, promptopsv1.ConditionReady); c != nil {
		current = c.Status
	}
	for _, s := range []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown} {
		v := 0.0
		if s == current {
			v = 1
		}
		g.WithLabelValues(namespace, name, string(s)).Set(v)
	}
}

// recordBankMetrics publishes a bank's Ready and its last run's figures.
func recordBankMetrics(mb *promptopsv1.MemoryBank) {
	setReadyGauge(bankReady, mb.Namespace, mb.Name, mb.Status.Conditions)
	run := mb.Status.LastRun
	if run == nil {
		return
	}
	ns, n := mb.Namespace, mb.Name
	bankRunTokens.WithLabelValues(ns, n, "prompt").Set(float64(run.PromptTokens))
	bankRunTokens.WithLabelValues(ns, n, "completion").Set(float64(run.CompletionTokens))
	bankRunLLMCalls.WithLabelValues(ns, n).Set(float64(run.LLMCalls))
	bankRunFacts.WithLabelValues(ns, n, "consolidated").Set(float64(run.FactsConsolidated))
	bankRunFacts.WithLabelValues(ns, n, "failed").Set(float64(run.FactsFailed))
	bankObservations.WithLabelValues(ns, n).Set(float64(run.Observations))
	bankFacts.WithLabelValues(ns, n, "pending").Set(float64(run.PendingFacts))
	bankFacts.WithLabelValues(ns, n, "failed").Set(float64(run.FailedFacts))
}
