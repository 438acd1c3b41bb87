package analysis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/promptops/promptops/internal/textclip"
)

// DefaultTimeout bounds an evaluation without WithTimeout: long enough for
// a query over a few hours of a busy server, short enough that a
// reconcile waiting on it is not held for long.
const DefaultTimeout = 10 * time.Second

// Check is one analysis: a query to a Prometheus server and the bound its
// value must keep.
type Check struct {
	// Address is the base URL of the server's HTTP API, such as
	// http://prometheus.monitoring:9090.
	Address string
	// Query is a PromQL expression; {{revision}} stands for the revision
	// under test.
	Query string
	// Bound is MaxValue or MinValue.
	Bound Bound
}

// Bound is the limit a check's value must keep: at most a maximum
// (MaxValue) or at least a minimum (MinValue), inclusive.
type Bound struct {
	min   bool
	value float64
	set   bool
}

// MaxValue passes a value that is at most m.
func MaxValue(m float64) Bound { return Bound{value: m, set: true} }

// MinValue passes a value that is at least m.
func MinValue(m float64) Bound { return Bound{min: true, value: m, set: true} }

// String names the bound as spec.rollout.analysis does: "maxValue 0.05".
func (b Bound) String() string {
	if b.min {
		return "minValue " + number(b.value)
	}
	return "maxValue " + number(b.value)
}

// Result is a measurement: the query's value and whether it kept the bound.
type Result struct {
	// Value is the query's value.
	Value float64
	// Passed says whether Value kept the check's bound.
	Passed bool
	// Message is a sentence for a status: the value and the bound.
	Message string
}

// Option changes one evaluation.
type Option func(*options)

type options struct {
	revision string
	timeout  time.Duration
}

// WithRevision is the revision under test, which replaces {{revision}}.
func WithRevision(revision string) Option {
	return func(o *options) { o.revision = revision }
}

// WithTimeout bounds the evaluation by d instead of DefaultTimeout; a d
// that is not positive leaves DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.timeout = d
		}
	}
}

// Evaluate runs c's query once, as an instant query at the server's time,
// and judges its value by c's bound. A value it could not measure is an
// *Error, never a Result; the package doc says when.
func Evaluate(ctx context.Context, c Check, opts ...Option) (Result, error) {
	o := options{timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if err := c.validate(); err != nil {
		return Result{}, err
	}
	query, err := substitute(c.Query, o.revision)
	if err != nil {
		return Result{}, err
	}
	client, err := api.NewClient(api.Config{Address: c.Address})
	if err != nil {
		return Result{}, invalid("the address %s is not a URL", redacted(c.Address))
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	// The warnings are dropped: they can quote label names and values.
	v, _, err := promv1.NewAPI(client).Query(ctx, query, time.Time{}, promv1.WithTimeout(o.timeout))
	if err != nil {
		return Result{}, queryError(redacted(c.Address), err)
	}
	value, err := one(v)
	if err != nil {
		return Result{}, err
	}
	return judge(value, c.Bound), nil
}

func (c Check) validate() error {
	u, err := url.Parse(c.Address)
	if err != nil {
		return invalid("the address is not a URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalid("the address %s is not an http or https URL", u.Redacted())
	}
	if c.Query == "" {
		return invalid("the query is empty")
	}
	if !c.Bound.set {
		return invalid("the check has no bound: set maxValue or minValue")
	}
	if math.IsNaN(c.Bound.value) {
		return invalid("the check's %s is not a number", c.Bound)
	}
	return nil
}

// redacted is the address for a message, without a password it may hold.
func redacted(address string) string {
	u, err := url.Parse(address)
	if err != nil {
		return "(not a URL)"
	}
	return u.Redacted()
}

// one is the answer's one number, or why there is none. It reads nothing
// of a sample but its value, so no label reaches a message.
func one(v model.Value) (float64, error) {
	var value float64
	switch v := v.(type) {
	case *model.Scalar:
		value = float64(v.Value)
	case model.Vector:
		if len(v) != 1 {
			return 0, inconclusive("the query returned %d samples; it must return one (aggregate it, or match one series)", len(v))
		}
		if v[0].Histogram != nil {
			return 0, inconclusive("the query returned a histogram sample, not a number")
		}
		value = float64(v[0].Value)
	default:
		return 0, inconclusive("the query returned a %s; it must return a scalar or a vector of one sample", valueType(v))
	}
	if math.IsNaN(value) {
		return 0, inconclusive("the query's value is NaN (as 0/0 is): there is nothing to compare")
	}
	return value, nil
}

func valueType(v model.Value) string {
	if v == nil {
		return "nothing"
	}
	return v.Type().String()
}

// judge compares a measured value with the bound, inclusively.
func judge(value float64, b Bound) Result {
	r := Result{Value: value}
	switch {
	case b.min && value >= b.value:
		r.Passed, r.Message = true, fmt.Sprintf("the query's value %s is at least %s", number(value), b)
	case b.min:
		r.Message = fmt.Sprintf("the query's value %s is under %s", number(value), b)
	case value <= b.value:
		r.Passed, r.Message = true, fmt.Sprintf("the query's value %s is at most %s", number(value), b)
	default:
		r.Message = fmt.Sprintf("the query's value %s is over %s", number(value), b)
	}
	return r
}

// number prints a value as PromQL does: the shortest exact form, +Inf.
func number(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// messageLimit bounds what of Prometheus' own message an error keeps.
const messageLimit = 300

// queryError says why a query has no answer. Only a refused query
// (bad_data) keeps Prometheus' message, which is about the query's text;
// an execution error can quote series, so it keeps only its type.
func queryError(address string, err error) error {
	var apiErr *promv1.Error
	var urlErr *url.Error
	switch {
	case errors.As(err, &apiErr):
		switch apiErr.Type {
		case promv1.ErrBadData:
			return invalid("Prometheus refused the query: %s", textclip.Head(apiErr.Msg, messageLimit, "..."))
		case promv1.ErrExec:
			return inconclusive("Prometheus could not evaluate the query over its data (an execution error)")
		default:
			return &Error{Kind: Unreachable, Message: fmt.Sprintf("Prometheus at %s gave no answer: %s", address, textclip.Head(apiErr.Error(), messageLimit, "...")), Err: err}
		}
	case errors.As(err, &urlErr), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// net/http leaves a URL's password out of its errors.
		return &Error{Kind: Unreachable, Message: fmt.Sprintf("Prometheus at %s gave no answer: %v", address, err), Err: err}
	default:
		// The client decodes the answer in Query: an answer of another
		// type (a string) or one it cannot read ends here.
		return inconclusive("Prometheus' answer could not be read as a scalar or a vector: %s", textclip.Head(err.Error(), messageLimit, "..."))
	}
}
