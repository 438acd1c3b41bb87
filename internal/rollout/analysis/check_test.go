package analysis

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
)

// TestInvalidChecks: a check that can never run is refused before any
// request (the address is never dialled: nothing listens on port 1).
func TestInvalidChecks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		check   Check
		message string
	}{
		{name: "no address", check: Check{Query: "up", Bound: MaxValue(1)}, message: "not an http or https URL"},
		{name: "not a URL", check: Check{Address: "http://[::1", Query: "up", Bound: MaxValue(1)}, message: "not a URL"},
		{name: "another scheme", check: Check{Address: "ftp://127.0.0.1:1", Query: "up", Bound: MaxValue(1)}, message: "not an http or https URL"},
		{name: "no host", check: Check{Address: "http://", Query: "up", Bound: MaxValue(1)}, message: "not an http or https URL"},
		{name: "a password in a bad address", check: Check{Address: "ftp://reader:s3cret@127.0.0.1:1", Query: "up", Bound: MaxValue(1)}, message: "reader:xxxxx@"},
		{name: "no query", check: Check{Address: "http://127.0.0.1:1", Bound: MaxValue(1)}, message: "the query is empty"},
		{name: "no bound", check: Check{Address: "http://127.0.0.1:1", Query: "up"}, message: "set maxValue or minValue"},
		{name: "a NaN bound", check: Check{Address: "http://127.0.0.1:1", Query: "up", Bound: MinValue(math.NaN())}, message: "minValue NaN is not a number"},
		{name: "a placeholder and no revision", check: Check{Address: "http://127.0.0.1:1", Query: "x{r={{revision}}}", Bound: MaxValue(1)}, message: "no revision is under test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Evaluate(context.Background(), tc.check)
			var ae *Error
			if !errors.As(err, &ae) || ae.Kind != Invalid {
				t.Fatalf("got %v, want an Invalid error", err)
			}
			if !strings.Contains(err.Error(), tc.message) || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("message %q does not say %q, or holds a password", err, tc.message)
			}
		})
	}
}

// TestOne holds the answers a real server gives rarely or never in the
// other tests: a histogram sample, no value at all.
func TestOne(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value model.Value
		want  float64
		error string
	}{
		{name: "a scalar", value: &model.Scalar{Value: 3}, want: 3},
		{name: "one sample", value: model.Vector{{Value: -2}}, want: -2},
		{name: "-Inf", value: model.Vector{{Value: model.SampleValue(math.Inf(-1))}}, want: math.Inf(-1)},
		{name: "a histogram sample", value: model.Vector{{Histogram: &model.SampleHistogram{Count: 1}}}, error: "a histogram sample"},
		{name: "no value", value: nil, error: "returned a nothing"},
		{name: "a string", value: &model.String{Value: "x"}, error: "returned a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := one(tc.value)
			if tc.error != "" {
				if err == nil || !strings.Contains(err.Error(), tc.error) {
					t.Fatalf("got %v, %v; want an error saying %q", got, err, tc.error)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestJudgeInfinities: an infinity is compared as a number.
func TestJudgeInfinities(t *testing.T) {
	for _, tc := range []struct {
		value  float64
		bound  Bound
		passed bool
	}{
		{math.Inf(1), MaxValue(math.MaxFloat64), false},
		{math.Inf(1), MaxValue(math.Inf(1)), true},
		{math.Inf(-1), MinValue(-math.MaxFloat64), false},
		{math.Inf(-1), MaxValue(0), true},
		{math.Inf(1), MinValue(0), true},
	} {
		if got := judge(tc.value, tc.bound); got.Passed != tc.passed || got.Value != tc.value {
			t.Errorf("judge(%v, %s) = %+v, want passed %v", tc.value, tc.bound, got, tc.passed)
		}
	}
}
