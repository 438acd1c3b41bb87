package serve

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/promptops/promptops/plan"
)

func testutilValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

func mustLoad(t testing.TB, data []byte) *plan.Plan {
	t.Helper()
	p, err := plan.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
