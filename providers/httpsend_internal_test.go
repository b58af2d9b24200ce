package providers

import (
	"context"
	"errors"
	"io"
	"net/http/httptrace"
	"testing"
	"time"
)

// TestAmbiguous: a failure after the request was written is ambiguous,
// except an HTTP/2 stream the server did not process and, unless strict
// (retry_on_timeout: false), net/http's "server closed idle connection"
// (most likely the server had closed the pooled connection before the
// request reached it); nothing is ambiguous before the write.
func TestAmbiguous(t *testing.T) {
	for _, c := range []struct {
		wrote, strict bool
		err           error
		want          bool
	}{
		{true, false, context.DeadlineExceeded, true},
		{true, false, errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer"), true},
		{true, false, errors.New(`Post "http://x": http: server closed idle connection`), false},
		{true, true, errors.New(`Post "http://x": http: server closed idle connection`), true},
		{true, true, errors.New("http2: Transport: cannot retry err [stream error: stream ID 3; REFUSED_STREAM] after Request.Body was written; define Request.GetBody to avoid this error"), false},
		{true, true, errors.New("http2: Transport: cannot retry err [http2: Transport received Server's graceful shutdown GOAWAY] after Request.Body was written; define Request.GetBody to avoid this error"), false},
		{true, true, errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=5, ErrCode=NO_ERROR, debug=\"\""), true},
		{false, false, context.DeadlineExceeded, false},
		{false, true, errors.New("dial tcp: connection refused"), false},
	} {
		if got := ambiguous(c.wrote, c.err, c.strict); got != c.want {
			t.Errorf("ambiguous(%v, %q, strict %v) = %v, want %v", c.wrote, c.err, c.strict, got, c.want)
		}
	}
}

// TestWriteTraceWholeRequest: whether a request was written whole, as the
// transport's trace reports it. HTTP/2's "aborting request body write"
// after the transport read the whole body counts as written (the server
// answered before the stream's end went out); before that it does not. A
// report that comes after the round trip returned is waited for; a request
// that never got a connection is not.
func TestWriteTraceWholeRequest(t *testing.T) {
	t.Parallel()
	stopped := errors.New("http2: aborting request body write")
	readAll := func(w *writeTrace) {
		if _, err := io.ReadAll(&w.body); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name     string
		readBody bool
		err      error
		want     bool
	}{
		{"written", true, nil, true},
		{"stopped after the whole body was read", true, stopped, true},
		{"stopped before the body was read", false, stopped, false},
		{"a write error", true, errors.New("write: broken pipe"), false},
	} {
		w := newWriteTrace([]byte(`{"id":"j-1"}`))
		w.trace.GetConn("host:443")
		w.trace.GotConn(httptrace.GotConnInfo{})
		if c.readBody {
			readAll(w)
		}
		w.trace.WroteRequest(httptrace.WroteRequestInfo{Err: c.err})
		if got := w.whole(); got != c.want {
			t.Errorf("%s: whole() = %v, want %v", c.name, got, c.want)
		}
	}

	// The report comes after the round trip returned: whole waits for it.
	w := newWriteTrace([]byte("{}"))
	w.trace.GetConn("host:443")
	w.trace.GotConn(httptrace.GotConnInfo{})
	readAll(w)
	go func() {
		time.Sleep(20 * time.Millisecond)
		w.trace.WroteRequest(httptrace.WroteRequestInfo{Err: stopped})
	}()
	if !w.whole() {
		t.Error("a late report of a whole body: whole() = false, want true")
	}

	// No connection: nothing was written, and nothing is waited for.
	w = newWriteTrace([]byte("{}"))
	w.trace.GetConn("host:443")
	start := time.Now()
	if w.whole() || time.Since(start) > writeReportWait/2 {
		t.Errorf("no connection: whole() true or waited %s", time.Since(start))
	}

	// A resent request's body is counted anew.
	w = newWriteTrace([]byte(`{"id":"j-2"}`))
	readAll(w)
	again := w.again()
	w.trace.GetConn("host:443")
	w.trace.GotConn(httptrace.GotConnInfo{})
	w.trace.WroteRequest(httptrace.WroteRequestInfo{Err: stopped})
	if w.whole() {
		t.Error("resent, its body not read yet: whole() = true, want false")
	}
	if b, err := io.ReadAll(again); err != nil || string(b) != `{"id":"j-2"}` {
		t.Errorf("the resent body: %q, %v", b, err)
	}
	w.trace.WroteRequest(httptrace.WroteRequestInfo{Err: stopped})
	if !w.whole() {
		t.Error("resent, its body read: whole() = false, want true")
	}
}
