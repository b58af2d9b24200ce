package providers

import (
	"context"
	"errors"
	"testing"
)

// TestAmbiguous: a failure after the request was written is ambiguous,
// except net/http's "server closed idle connection" (the server had closed
// the pooled connection before the request reached it); nothing is
// ambiguous before the write.
func TestAmbiguous(t *testing.T) {
	for _, c := range []struct {
		wrote bool
		err   error
		want  bool
	}{
		{true, context.DeadlineExceeded, true},
		{true, errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer"), true},
		{true, errors.New(`Post "http://x": http: server closed idle connection`), false},
		{false, context.DeadlineExceeded, false},
		{false, errors.New("dial tcp: connection refused"), false},
	} {
		if got := ambiguous(c.wrote, c.err); got != c.want {
			t.Errorf("ambiguous(%v, %q) = %v, want %v", c.wrote, c.err, got, c.want)
		}
	}
}
