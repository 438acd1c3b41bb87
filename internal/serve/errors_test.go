package serve

import (
	"errors"
	"net/http"
	"testing"
)

// The error values' own texts, which wrap their cause: what a caller of
// a handler outside the adapter, or a log of the error itself, reads.
func TestErrorTexts(t *testing.T) {
	cause := errors.New("connection refused")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{problem(http.StatusBadRequest, CodeInvalidScope, "scope: too long"), "InvalidScope: scope: too long"},
		{&storeError{err: cause, op: "retaining facts"}, "retaining facts: connection refused"},
		{&internalError{err: cause, op: "encoding the answer"}, "encoding the answer: connection refused"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
	if !errors.Is(&storeError{err: cause}, cause) || !errors.Is(&internalError{err: cause}, cause) {
		t.Error("a store or internal error does not unwrap to its cause")
	}
}
