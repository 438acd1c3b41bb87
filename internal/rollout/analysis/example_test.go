package analysis_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/promptops/promptops/internal/rollout/analysis"
)

// The error ratio of the canary's requests, bounded at 5%; an error says
// why there is no measurement, and whether asking again can help.
func ExampleEvaluate() {
	check := analysis.Check{
		Address: "http://prometheus.monitoring:9090",
		Query:   `sum(rate(requests_total{code=~"5..", revision={{revision}}}[5m])) / sum(rate(requests_total{revision={{revision}}}[5m]))`,
		Bound:   analysis.MaxValue(0.05),
	}
	r, err := analysis.Evaluate(context.Background(), check, analysis.WithRevision("7f3a9c"), analysis.WithTimeout(5*time.Second))
	var ae *analysis.Error
	switch {
	case errors.As(err, &ae) && ae.Kind == analysis.Invalid:
		fmt.Println("the check must change:", ae)
	case err != nil:
		fmt.Println("no measurement this time:", err)
	case !r.Passed:
		fmt.Println("failed:", r.Message)
	}
}
