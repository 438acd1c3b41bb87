package promtest

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestStartScrapes: a gauge an exporter serves reaches the server Start
// runs, with the job label Start documents.
func TestStartScrapes(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "promtest_value", Help: "A value the test sets."})
	reg.MustRegister(g)
	g.Set(42.5)
	exporter := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer exporter.Close()

	base := Start(t, strings.TrimPrefix(exporter.URL, "http://"))
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("base URL %q is not on loopback", base)
	}
	got := WaitFor(t, base, `promtest_value{job="`+Job+`"}`)
	if len(got) != 1 || float64(got[0].Value) != 42.5 {
		t.Fatalf("got %v, want one sample of 42.5", got)
	}
}

// TestBinaryMissing: without the binary the error names the make target
// and the variable, rather than the test skipping.
func TestBinaryMissing(t *testing.T) {
	t.Setenv("PROMPTOPS_PROMETHEUS", filepath.Join(t.TempDir(), "prometheus"))
	_, err := Binary()
	if err == nil || !strings.Contains(err.Error(), "make prometheus") || !strings.Contains(err.Error(), "PROMPTOPS_PROMETHEUS") {
		t.Fatalf("got %v, want an error naming make prometheus and PROMPTOPS_PROMETHEUS", err)
	}
}
