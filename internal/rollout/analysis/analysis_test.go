package analysis

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/promptops/promptops/internal/promtest"
)

// weird is a revision that needs PromQL's escapes inside a string.
const weird = `we"ird\rev`

// labelValues are the exporter's label values: no message may quote them.
var labelValues = []string{"stable-1", "canary-2", "ird"}

// exporter serves the gauges the checks query, set once before the first
// scrape: a ratio of 0.25, a latency per revision and a NaN.
func exporter(t *testing.T) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	ratio := prometheus.NewGauge(prometheus.GaugeOpts{Name: "analysis_error_ratio", Help: "A ratio the checks bound."})
	latency := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "analysis_latency_seconds", Help: "A value per revision."}, []string{"revision"})
	nan := prometheus.NewGauge(prometheus.GaugeOpts{Name: "analysis_nan", Help: "Not a number."})
	reg.MustRegister(ratio, latency, nan)
	ratio.Set(0.25)
	latency.WithLabelValues("stable-1").Set(0.5)
	latency.WithLabelValues("canary-2").Set(2)
	latency.WithLabelValues(weird).Set(7)
	nan.Set(math.NaN())
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestEvaluateAgainstPrometheus runs each rule of the package doc against
// a real Prometheus scraping a test exporter.
func TestEvaluateAgainstPrometheus(t *testing.T) {
	base := promtest.Start(t, exporter(t))
	// One scrape brings every series; wait for it rather than for a time.
	promtest.WaitFor(t, base, "analysis_error_ratio")

	byRevision := "analysis_latency_seconds{revision={{revision}}}"
	for _, tc := range []struct {
		name      string
		query     string
		bound     Bound
		revision  string
		value     float64
		passed    bool
		message   string // a part of the Result's message or the error's
		errorKind Kind   // empty: a Result is expected
	}{
		{name: "under maxValue", query: "analysis_error_ratio", bound: MaxValue(0.5), value: 0.25, passed: true, message: "the query's value 0.25 is at most maxValue 0.5"},
		{name: "at maxValue passes", query: "analysis_error_ratio", bound: MaxValue(0.25), value: 0.25, passed: true},
		{name: "over maxValue", query: "analysis_error_ratio", bound: MaxValue(0.1), value: 0.25, message: "the query's value 0.25 is over maxValue 0.1"},
		{name: "over minValue", query: "analysis_error_ratio", bound: MinValue(0.1), value: 0.25, passed: true, message: "is at least minValue 0.1"},
		{name: "at minValue passes", query: "analysis_error_ratio", bound: MinValue(0.25), value: 0.25, passed: true},
		{name: "under minValue", query: "analysis_error_ratio", bound: MinValue(0.5), value: 0.25, message: "the query's value 0.25 is under minValue 0.5"},
		{name: "a scalar", query: "scalar(analysis_error_ratio) * 2", bound: MaxValue(1), value: 0.5, passed: true},
		{name: "the stable revision's value", query: byRevision, revision: "stable-1", bound: MaxValue(1), value: 0.5, passed: true},
		{name: "the canary's value", query: byRevision, revision: "canary-2", bound: MaxValue(1), value: 2, message: "value 2 is over maxValue 1"},
		{name: "spaces in the placeholder", query: "analysis_latency_seconds{revision={{ revision }}}", revision: "canary-2", bound: MaxValue(1), value: 2},
		{name: "a revision that needs escapes", query: byRevision, revision: weird, bound: MaxValue(10), value: 7, passed: true},
		{name: "the placeholder twice", query: byRevision + " - " + byRevision, revision: "canary-2", bound: MaxValue(0), value: 0, passed: true},
		{name: "a revision with no series", query: byRevision, revision: "nope", bound: MaxValue(1), errorKind: Inconclusive, message: "returned 0 samples"},
		{name: "no sample", query: "analysis_absent", bound: MaxValue(1), errorKind: Inconclusive, message: "returned 0 samples"},
		{name: "more than one sample", query: "analysis_latency_seconds", bound: MaxValue(100), errorKind: Inconclusive, message: "returned 3 samples"},
		{name: "a NaN series", query: "analysis_nan", bound: MaxValue(1), errorKind: Inconclusive, message: "NaN"},
		{name: "a NaN scalar", query: "0/0", bound: MinValue(0), errorKind: Inconclusive, message: "NaN"},
		{name: "+Inf is over maxValue", query: "1/0", bound: MaxValue(1e300), value: math.Inf(1), message: "value +Inf is over"},
		{name: "a range vector", query: "analysis_error_ratio[10s]", bound: MaxValue(1), errorKind: Inconclusive, message: "returned a matrix"},
		{name: "a string", query: `"text"`, bound: MaxValue(1), errorKind: Inconclusive, message: "could not be read"},
		{name: "a query Prometheus refuses", query: "rate(", bound: MaxValue(1), errorKind: Invalid, message: "Prometheus refused the query: "},
		{name: "an execution error, which quotes series", query: "analysis_error_ratio * on() analysis_latency_seconds", bound: MaxValue(1), errorKind: Inconclusive, message: "execution error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Evaluate(context.Background(), Check{Address: base, Query: tc.query, Bound: tc.bound}, WithRevision(tc.revision))
			text := r.Message
			if tc.errorKind != "" {
				var ae *Error
				if !errors.As(err, &ae) || ae.Kind != tc.errorKind {
					t.Fatalf("got %+v, %v; want an error of kind %s", r, err, tc.errorKind)
				}
				if r != (Result{}) {
					t.Errorf("an error came with the result %+v", r)
				}
				text = err.Error()
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if r.Value != tc.value || r.Passed != tc.passed {
					t.Errorf("got value %v passed %v, want %v and %v (%s)", r.Value, r.Passed, tc.value, tc.passed, r.Message)
				}
			}
			if !strings.Contains(text, tc.message) {
				t.Errorf("message %q does not say %q", text, tc.message)
			}
			for _, l := range labelValues {
				if strings.Contains(text, l) {
					t.Errorf("message %q quotes the label value %q", text, l)
				}
			}
		})
	}
}

// TestEvaluateUnreachable: nothing listening, a password in the address
// (left out of the message), and a server that never answers (stopped by
// the timeout) are Unreachable.
func TestEvaluateUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()

	// The server notices a client gone only once the body is read; release
	// ends the handler in any case, so that Close does not wait for it.
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hanging.Close()
	defer close(release)

	for _, tc := range []struct {
		name    string
		address string
		opts    []Option
		cause   error
	}{
		{name: "nothing listening", address: "http://" + closed},
		{name: "a password in the address", address: "http://reader:s3cret@" + closed},
		{name: "no answer within the timeout", address: hanging.URL, opts: []Option{WithTimeout(200 * time.Millisecond)}, cause: context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Evaluate(context.Background(), Check{Address: tc.address, Query: "up", Bound: MaxValue(1)}, tc.opts...)
			var ae *Error
			if !errors.As(err, &ae) || ae.Kind != Unreachable {
				t.Fatalf("got %v, want an Unreachable error", err)
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Errorf("%v is not %v", err, tc.cause)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the message %q holds the address's password", err)
			}
		})
	}
}
