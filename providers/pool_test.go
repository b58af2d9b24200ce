package providers_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestWebhookReusesConnections: answers, success or refusal, are drained
// and closed so the next request reuses the kept-alive connection.
func TestWebhookReusesConnections(t *testing.T) {
	t.Parallel()
	var conns, status atomic.Int32
	status.Store(200)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write([]byte(`{"reason":"short body"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	w := newWebhook(t, srv.URL, 5*time.Second)
	for i := range 20 {
		status.Store([]int32{200, 400, 503, 429}[i%4])
		_ = w.Send(context.Background(), smsMessage())
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("20 sequential sends opened %d connections, want 1", n)
	}
}
