package analysis

import "fmt"

// Kind says what kind of failure to measure an Error is, and so what a
// rollout does about it.
type Kind string

const (
	// Invalid is a check that cannot run as written, nor ever will: no
	// bound, an address that is not a URL, a misplaced {{revision}}, a
	// query Prometheus refuses. Only a change to the check mends it.
	Invalid Kind = "Invalid"
	// Unreachable is a query that got no answer: the connection failed,
	// the timeout passed, the server failed. Asked again, it may answer.
	Unreachable Kind = "Unreachable"
	// Inconclusive is an answer that is not one number: no sample, more
	// than one, NaN, or a value of another type.
	Inconclusive Kind = "Inconclusive"
)

// Error is a failure to measure: never a pass, never a fail. Its message
// is a sentence for a status and holds no label of any series.
type Error struct {
	Kind    Kind
	Message string
	// Err is the cause, kept only when it holds no label (a connection's
	// or a deadline's error), for errors.Is.
	Err error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the cause, if kept.
func (e *Error) Unwrap() error { return e.Err }

func invalid(format string, args ...any) error {
	return &Error{Kind: Invalid, Message: fmt.Sprintf(format, args...)}
}

func inconclusive(format string, args ...any) error {
	return &Error{Kind: Inconclusive, Message: fmt.Sprintf(format, args...)}
}
