package providers

import (
	"context"
	"errors"
	"testing"
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
