package serve

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics of one server, on its own registry.
type metrics struct {
	registry   *prometheus.Registry
	requests   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	tokens     *prometheus.CounterVec
	sections   *prometheus.CounterVec
	truncated  *prometheus.CounterVec
	revision   *prometheus.GaugeVec
	plans      prometheus.Gauge
	failing    prometheus.Gauge
	loadErrors prometheus.Counter
	refused    prometheus.Counter
	authDenied *prometheus.CounterVec
	// recalls of memory sections by bank and result (ok, timeout, error);
	// memoryTimeouts counts sections left empty by the timeout.
	recalls        *prometheus.CounterVec
	memoryTimeouts *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "promptops_serve_requests_total", Help: "HTTP requests by handler and status code.",
		}, []string{"handler", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "promptops_serve_request_duration_seconds", Help: "Time to answer a request, by handler.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1},
		}, []string{"handler"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "promptops_serve_prompt_tokens_total", Help: "Tokens of the assembled prompts, by template, intent and revision role (stable or canary).",
		}, []string{"namespace", "name", "intent", "revision_role"}),
		sections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "promptops_serve_section_tokens_total", Help: "Tokens of each section in the assembled prompts, by template, intent and section.",
		}, []string{"namespace", "name", "intent", "section"}),
		truncated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "promptops_serve_truncated_tokens_total", Help: "Tokens cut from runtime sections to fit the budget, by template, intent and section.",
		}, []string{"namespace", "name", "intent", "section"}),
		revision: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "promptops_serve_template_revision", Help: "1 for each revision a loaded template serves (its stable one, and its canary during a rollout).",
		}, []string{"namespace", "name", "revision"}),
		plans: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "promptops_serve_plans", Help: "Templates loaded.",
		}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "promptops_serve_plan_sources_failing", Help: "Plan sources whose current content does not load (each serves its previous version, if any).",
		}),
		loadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "promptops_serve_plan_load_errors_total", Help: "Plans that failed to load.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "promptops_serve_plan_sources_refused_total", Help: "Plan sources refused: not rendered by the operator, outside the directory layouts, or claiming another template than their place names.",
		}),
		authDenied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "promptops_serve_auth_denied_total", Help: "Requests refused by --auth=kubernetes, by reason (unauthenticated, forbidden, error).",
		}, []string{"reason"}),
	}
	m.recalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promptops_serve_memory_recalls_total", Help: "Recalls of memory sections, by bank and result (ok, timeout, error).",
	}, []string{"namespace", "bank", "result"})
	m.memoryTimeouts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promptops_serve_memory_timeouts_total", Help: "Memory sections left empty because their recall took longer than --memory-timeout, by bank.",
	}, []string{"namespace", "bank"})
	m.registry.MustRegister(m.recalls, m.memoryTimeouts)
	m.registry.MustRegister(m.requests, m.latency, m.tokens, m.sections, m.truncated, m.revision, m.plans, m.failing, m.loadErrors, m.refused, m.authDenied,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) published(s *Snapshot, failing int) {
	m.revision.Reset()
	for _, k := range s.keys {
		revs := s.plans[k]
		m.revision.WithLabelValues(k.Namespace, k.Name, revs.Stable.Revision).Set(1)
		if revs.Canary != nil {
			m.revision.WithLabelValues(k.Namespace, k.Name, revs.Canary.Revision).Set(1)
		}
	}
	m.plans.Set(float64(len(s.keys)))
	m.failing.Set(float64(failing))
}
