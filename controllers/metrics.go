package controllers

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

var (
	// Per namespace, whatever the count of templates.
	templatesByReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "promptops_prompttemplates",
		Help: "PromptTemplates by the status of their Ready condition (True, False or Unknown).",
	}, []string{"namespace", "ready"})
	intentsOverBudget = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "promptops_prompttemplate_intents_over_budget",
		Help: "Intents whose prompt does not fit their template's budget.",
	}, []string{"namespace"})

	// Per template and intent, with --per-template-metrics.
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
	// The share of keys, in percent, on a template's canary revision: 0
	// outside a rollout. Only templates with a rollout (status.rollout)
	// have the series.
	templateRolloutWeight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "promptops_prompttemplate_rollout_weight",
		Help: "Share of assignment keys, in percent, on a PromptTemplate's canary revision; 0 outside a rollout.",
	}, []string{"namespace", "name"})
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
	metrics.Registry.MustRegister(templatesByReady, intentsOverBudget, promptTokens, promptBudgetTokens, promptBudgetExceeded, templateReady, templateRolloutWeight, bankReady,
		bankRunTokens, bankRunLLMCalls, bankRunFacts, bankObservations, bankFacts)
}

// templateMetrics publishes what the templates' statuses say: counts per
// namespace (templates by Ready status, intents over budget), and with
// perTemplate also each template's Ready and each intent's tokens, budget
// and overrun as series of their own. Those are about twenty series a
// template: 11 KB of the manager's memory each, 110 MB at 10,000
// templates, so they are asked for (--per-template-metrics); status.intents
// has the same figures.
type templateMetrics struct {
	perTemplate bool
	mu          sync.Mutex
	by          map[types.NamespacedName]templateFigures
}

// templateFigures are what a template's series last said.
type templateFigures struct {
	ready metav1.ConditionStatus
	over  int
	// intents whose series are set (perTemplate).
	intents []string
	// rollout: the template has a rollout weight series.
	rollout bool
}

// record publishes a template's status as its reconcile leaves it.
func (m *templateMetrics) record(pt *promptopsv1.PromptTemplate) {
	ns, name := pt.Namespace, pt.Name
	f := templateFigures{ready: readyStatus(pt.Status.Conditions)}
	for _, in := range pt.Status.Intents {
		if !in.WithinBudget {
			f.over++
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.by == nil {
		m.by = map[types.NamespacedName]templateFigures{}
	}
	key := types.NamespacedName{Namespace: ns, Name: name}
	old, had := m.by[key]
	if had {
		templatesByReady.WithLabelValues(ns, string(old.ready)).Dec()
		intentsOverBudget.WithLabelValues(ns).Sub(float64(old.over))
	}
	templatesByReady.WithLabelValues(ns, string(f.ready)).Inc()
	intentsOverBudget.WithLabelValues(ns).Add(float64(f.over))
	if m.perTemplate {
		setReadyGauge(templateReady, ns, name, pt.Status.Conditions)
		for _, in := range pt.Status.Intents {
			f.intents = append(f.intents, in.Name)
			promptTokens.WithLabelValues(ns, name, in.Name).Set(float64(in.Tokens))
			promptBudgetTokens.WithLabelValues(ns, name, in.Name).Set(float64(in.MaxTokens))
			exceeded := 0.0
			if !in.WithinBudget {
				exceeded = 1
			}
			promptBudgetExceeded.WithLabelValues(ns, name, in.Name).Set(exceeded)
		}
		for _, intent := range old.intents {
			if !slices.Contains(f.intents, intent) {
				deleteIntentSeries(ns, name, intent)
			}
		}
	}
	if pt.Status.Rollout != nil {
		f.rollout = true
		templateRolloutWeight.WithLabelValues(ns, name).Set(float64(rolloutWeight(pt.Status.Rollout)))
	} else if old.rollout {
		templateRolloutWeight.DeleteLabelValues(ns, name)
	}
	m.by[key] = f
}

// forget drops a deleted template from the counts, and its own series.
func (m *templateMetrics) forget(namespace, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := types.NamespacedName{Namespace: namespace, Name: name}
	old, had := m.by[key]
	if !had {
		return
	}
	delete(m.by, key)
	templatesByReady.WithLabelValues(namespace, string(old.ready)).Dec()
	intentsOverBudget.WithLabelValues(namespace).Sub(float64(old.over))
	if old.rollout {
		templateRolloutWeight.DeleteLabelValues(namespace, name)
	}
	if m.perTemplate {
		// Every series of the template, however set: deletions are rare
		// enough for a scan of the vectors.
		l := prometheus.Labels{"namespace": namespace, "name": name}
		for _, g := range []*prometheus.GaugeVec{promptTokens, promptBudgetTokens, promptBudgetExceeded, templateReady} {
			g.DeletePartialMatch(l)
		}
	}
}

// deleteIntentSeries drops an intent's series by their exact labels
// (DeletePartialMatch scans every series of a vector under its lock).
func deleteIntentSeries(namespace, name, intent string) {
	for _, g := range []*prometheus.GaugeVec{promptTokens, promptBudgetTokens, promptBudgetExceeded} {
		g.DeleteLabelValues(namespace, name, intent)
	}
}

// forgetBankMetrics drops every series of a deleted bank.
func forgetBankMetrics(namespace, name string) {
	l := prometheus.Labels{"namespace": namespace, "name": name}
	for _, v := range []*prometheus.GaugeVec{bankReady, bankRunTokens, bankRunLLMCalls, bankRunFacts, bankObservations, bankFacts} {
		v.DeletePartialMatch(l)
	}
}

// readyStatus is the status of a Ready condition, Unknown without one.
func readyStatus(conds []metav1.Condition) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(conds, promptopsv1.ConditionReady); c != nil {
		return c.Status
	}
	return metav1.ConditionUnknown
}

// setReadyGauge sets the per-status series of an object's Ready condition.
func setReadyGauge(g *prometheus.GaugeVec, namespace, name string, conds []metav1.Condition) {
	current := readyStatus(conds)
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
