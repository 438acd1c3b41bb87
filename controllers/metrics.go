package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
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
)

func init() {
	metrics.Registry.MustRegister(promptTokens, promptBudgetTokens, promptBudgetExceeded)
}

// forgetTemplateMetrics drops the series of a template (deleted, or before
// its intents are set again).
func forgetTemplateMetrics(namespace, name string) {
	l := prometheus.Labels{"namespace": namespace, "name": name}
	promptTokens.DeletePartialMatch(l)
	promptBudgetTokens.DeletePartialMatch(l)
	promptBudgetExceeded.DeletePartialMatch(l)
}
