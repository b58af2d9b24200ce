package providers_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/notifier/notifier/providers"
)

// writeCountingConn counts the writes made to a connection.
type writeCountingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c writeCountingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestHTTPSendOneWritePerRequest: a provider's request leaves in one write
// to its connection, headers and body together (one syscall and one TCP
// segment), under both retry_on_timeout settings. A body reader net/http
// does not know to be in memory makes it write the headers on their own
// first: two writes a request, which cost a loaded fleet about a tenth of
// its throughput.
func TestHTTPSendOneWritePerRequest(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	for _, retry := range []bool{true, false} {
		var writes atomic.Int64
		var d net.Dialer
		tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return writeCountingConn{Conn: c, writes: &writes}, nil
		}}
		client := &http.Client{Transport: tr}
		w, err := providers.NewWebhook(providers.Config{
			Name: "hook", Channel: "sms", Kind: "webhook", URL: srv.URL, Rate: 100, RetryOnTimeout: new(retry),
		}, providers.Options{HTTPClient: client})
		if err != nil {
			t.Fatalf("NewWebhook: %v", err)
		}
		const sends = 5
		for i := range sends {
			if err := w.Send(context.Background(), smsMessage()); err != nil {
				t.Fatalf("retry_on_timeout %v, send %d: %v", retry, i, err)
			}
		}
		if got := writes.Load(); got != sends {
			t.Errorf("retry_on_timeout %v: %d writes to the connection for %d requests, want one each", retry, got, sends)
		}
		tr.CloseIdleConnections()
	}
}
