package serve

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
)

// body reads the request's body, at most limit bytes, holding its buffer
// in the server's in-flight budget until release is called (release is
// never nil). When it cannot, the error is the answer: 413 over the limit
// (flag names the option that sets it, hint what to do), 503 Busy with
// Retry-After when the budget is spent, 408 when the body is late, 400
// otherwise.
func (s *Server) body(w http.ResponseWriter, r *http.Request, limit int64, flag, hint string) (body []byte, release func(), err error) {
	held := &reservation{budget: s.inflight}
	body, err = readBody(w, r, limit, held)
	if err == nil {
		return body, held.release, nil
	}
	held.release()
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		err = problem(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("the request body is over %d bytes (%s)%s", limit, flag, hint))
	case errors.Is(err, errBusy):
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		w.Header().Set("Connection", "close") // the rest of the body is not read
		err = problem(http.StatusServiceUnavailable, CodeBusy, "too many request bytes in flight; retry later")
	case errors.Is(err, os.ErrDeadlineExceeded), r.Context().Err() != nil:
		err = problem(http.StatusRequestTimeout, CodeTimeout, "the request body did not arrive in time")
	default:
		err = problem(http.StatusBadRequest, CodeMalformed, "reading the request body failed")
	}
	return nil, func() {}, err
}

// firstBodyChunk is the buffer a body is first read into.
const firstBodyChunk = 4 << 10

// readBody reads the whole body, at most limit bytes. Nothing is allocated
// on the strength of Content-Length alone: the buffer starts small and at
// most doubles as bytes arrive (Content-Length only caps it, so a body that
// says its size ends in a buffer of that size). The buffer's capacity is
// reserved from the server's in-flight budget before each growth; errBusy
// when it is spent.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, held *reservation) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	if r.ContentLength == 0 {
		return nil, nil
	}
	want := limit + 1 // unknown length: read until EOF or past the limit
	if r.ContentLength > 0 {
		want = r.ContentLength
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) >= want {
				if want > limit {
					return nil, &http.MaxBytesError{Limit: limit}
				}
				return buf, nil // all of Content-Length; the body ends here
			}
			n := min(want, max(firstBodyChunk, 2*int64(cap(buf))))
			if !held.grow(n - int64(cap(buf))) {
				return nil, errBusy
			}
			next := make([]byte, len(buf), n)
			copy(next, buf)
			buf = next
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// errBusy is the in-flight budget being spent.
var errBusy = errors.New("too many request bytes in flight")

// byteBudget counts the bytes of request bodies held by requests in flight.
// A request over smallRequest may take only three quarters of it, so that
// a few large requests cannot turn away the ordinary ones.
type byteBudget struct {
	max  int64
	used atomic.Int64
}

// smallRequest is what a request may hold and still use the last quarter
// of the budget.
const smallRequest = 256 << 10

// reservation is one request's share of the budget.
type reservation struct {
	budget *byteBudget
	held   int64
}

// grow reserves n more bytes, or none and reports false.
func (r *reservation) grow(n int64) bool {
	limit := r.budget.max
	if r.held+n > smallRequest {
		limit -= r.budget.max / 4
	}
	if r.budget.used.Add(n) > limit {
		r.budget.used.Add(-n)
		return false
	}
	r.held += n
	return true
}

// release gives back all the request holds.
func (r *reservation) release() {
	r.budget.used.Add(-r.held)
	r.held = 0
}
