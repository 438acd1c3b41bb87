package serve

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// A body that claims 4 MiB and brings 2 bytes costs a 4 KiB buffer, not
// 4 MiB: nothing is allocated on the strength of Content-Length.
func TestBodyIsNotSizedByContentLength(t *testing.T) {
	budget := &byteBudget{max: DefaultMaxInflightBytes}
	const runs = 50
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < runs; i++ {
		r := httptest.NewRequest(http.MethodPost, "/v1/assemble", strings.NewReader("{}"))
		r.ContentLength = 4 << 20
		held := &reservation{budget: budget}
		body, err := readBody(httptest.NewRecorder(), r, DefaultMaxBodyBytes, held)
		if err != nil || string(body) != "{}" {
			t.Fatalf("got %q, %v", body, err)
		}
		if cap(body) > firstBodyChunk || held.held != int64(cap(body)) {
			t.Fatalf("a 2-byte body got a %d-byte buffer and holds %d bytes of the budget", cap(body), held.held)
		}
		held.release()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 64<<10 {
		t.Fatalf("%d bytes allocated per request that claims 4 MiB and sends 2", per)
	}
	if budget.used.Load() != 0 {
		t.Fatalf("%d bytes still held", budget.used.Load())
	}

	// A body that arrives whole ends in a buffer of its size.
	data := strings.Repeat("x", 100<<10)
	r := httptest.NewRequest(http.MethodPost, "/v1/assemble", strings.NewReader(data))
	held := &reservation{budget: budget}
	body, err := readBody(httptest.NewRecorder(), r, DefaultMaxBodyBytes, held)
	if err != nil || string(body) != data || cap(body) != len(data) {
		t.Fatalf("len %d cap %d, %v", len(body), cap(body), err)
	}
	held.release()
}

// Requests that would hold more than --max-inflight-bytes of body get 503
// Busy with Retry-After; small requests still pass, and the bytes come back
// when a request ends.
func TestInflightBytesCap(t *testing.T) {
	s := New(Options{MaxInflightBytes: 64 << 10, Log: logr.Discard()})
	ts := newServer(t, s.Handler())
	t.Cleanup(ts.Close)
	loadSamples(t, s)

	// A client sends 20 KiB of a body that claims 1 MiB, and stalls: it
	// holds 32 KiB (the buffer the 20 KiB arrived in), not 1 MiB.
	slow := stall(t, ts, 1<<20, 20<<10)
	waitHeld(t, s, 32<<10)
	if resp, err := http.Get(ts.URL + "/metrics"); err != nil {
		t.Fatal(err)
	} else {
		m, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(m), "promptops_serve_inflight_body_bytes 32768\n") {
			t.Fatal("promptops_serve_inflight_body_bytes is not 32768")
		}
	}

	big := fmt.Sprintf(`{"namespace":"default","name":"ssa-pro","intent":"analyze","runtime":{"data_context":%q}}`, strings.Repeat("均值 45.2。\n", 3000))
	resp, err := http.Post(ts.URL+"/v1/assemble", "application/json", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if c, _ := errorCode(t, out); resp.StatusCode != http.StatusServiceUnavailable || c != CodeBusy || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("over the cap: %d %s, Retry-After %q", resp.StatusCode, out, resp.Header.Get("Retry-After"))
	}
	if code, out := post(t, ts.URL, `{"namespace":"default","name":"ssa-pro","intent":"chat"}`); code != 200 {
		t.Fatalf("a small request beside it: %d %s", code, out)
	}

	slow.Close()
	waitHeld(t, s, 0)
	if code, out := post(t, ts.URL, big); code != 200 && code != 422 {
		t.Fatalf("once the stalled request is gone: %d %.200s", code, out)
	}
	waitHeld(t, s, 0) // the handler may return just after the client has its answer
}

// A request larger than smallRequest may use three quarters of the budget;
// the last quarter is left to small requests.
func TestLargeRequestsLeaveRoomForSmallOnes(t *testing.T) {
	b := &byteBudget{max: 4 << 20}
	large1, large2, small := &reservation{budget: b}, &reservation{budget: b}, &reservation{budget: b}
	if !large1.grow(2 << 20) {
		t.Fatal("the first large request fits")
	}
	if large2.grow(2 << 20) {
		t.Fatal("a second one would leave no room for small requests")
	}
	if !small.grow(smallRequest) {
		t.Fatal("a small request uses the last quarter")
	}
	large1.release()
	small.release()
	if b.used.Load() != 0 || large2.held != 0 {
		t.Fatalf("used %d, refused request holds %d", b.used.Load(), large2.held)
	}
}

// A body that does not arrive before --request-timeout is answered 408,
// and what it held is given back.
func TestRequestTimeoutStopsBodyReading(t *testing.T) {
	s := New(Options{RequestTimeout: 50 * time.Millisecond, Log: logr.Discard()})
	ts := newServer(t, s.Handler())
	t.Cleanup(ts.Close)
	loadSamples(t, s)
	if status, code, out := answer(t, stall(t, ts, 4<<20, 0)); status != http.StatusRequestTimeout || code != CodeTimeout {
		t.Fatalf("got %d %s", status, out)
	}
	waitHeld(t, s, 0)
}

// answer reads the response on conn: its status, error code and body.
func answer(t *testing.T, conn net.Conn) (int, Code, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	code, _ := errorCode(t, out)
	return resp.StatusCode, code, out
}

// stall opens a connection, sends the headers of a POST whose body claims
// contentLength bytes, then send bytes of it, and nothing more.
func stall(t *testing.T, ts *httptest.Server, contentLength, send int) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /v1/assemble HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", contentLength, strings.Repeat(" ", send))
	return conn
}

// waitHeld waits until the requests in flight hold exactly n bytes.
func waitHeld(t *testing.T, s *Server, n int64) {
	t.Helper()
	for s.inflight.used.Load() != n {
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

// A body that cannot be read (a broken chunked encoding) is answered 400,
// not 408: it arrived in time.
func TestUnreadableBodyIsMalformed(t *testing.T) {
	s := New(Options{Log: logr.Discard()})
	ts := newServer(t, s.Handler())
	t.Cleanup(ts.Close)
	loadSamples(t, s)
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /v1/assemble HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
	if status, code, out := answer(t, conn); status != http.StatusBadRequest || code != CodeMalformed {
		t.Fatalf("got %d %s", status, out)
	}
	waitHeld(t, s, 0)
}

// A body of exactly the limit is read, with its length known or not; one
// byte more is refused.
func TestBodyAtTheLimit(t *testing.T) {
	const limit = 100 << 10 // more than the first chunk, so the buffer grows
	budget := &byteBudget{max: DefaultMaxInflightBytes}
	for _, known := range []bool{true, false} {
		for _, n := range []int{limit, limit + 1} {
			r := httptest.NewRequest(http.MethodPost, "/v1/assemble", io.LimitReader(zeros{}, int64(n)))
			r.ContentLength = -1
			if known {
				r.ContentLength = int64(n)
			}
			held := &reservation{budget: budget}
			body, err := readBody(httptest.NewRecorder(), r, limit, held)
			var tooLarge *http.MaxBytesError
			if n == limit && (err != nil || len(body) != limit) || n > limit && !errors.As(err, &tooLarge) {
				t.Errorf("length known %v, %d bytes at a limit of %d: %d bytes, %v", known, n, limit, len(body), err)
			}
			held.release()
		}
	}
}

// A request of exactly smallRequest bytes is small: it may use the last
// quarter of the budget; one byte more may not.
func TestSmallRequestBound(t *testing.T) {
	b := &byteBudget{max: 4 << 20}
	large := &reservation{budget: b}
	if !large.grow(3 << 20) {
		t.Fatal("a large request takes three quarters")
	}
	small := &reservation{budget: b}
	if !small.grow(smallRequest) {
		t.Fatalf("a request of %d bytes is small and fits in the last quarter", smallRequest)
	}
	small.release()
	if over := (&reservation{budget: b}); over.grow(smallRequest + 1) {
		t.Fatalf("a request of %d bytes is large: the first three quarters are full", smallRequest+1)
	}
	large.release()
	if b.used.Load() != 0 {
		t.Fatalf("%d bytes still held", b.used.Load())
	}
}
