package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/notifier/notifier/internal/connlimit"
)

// metricsServer serves /metrics, /healthz and /readyz.
type metricsServer struct {
	ln  net.Listener
	srv *http.Server
}

// startMetricsServer binds listen at once (a busy port fails the start, not
// later) and returns a server to run with serve; nil when listen is "off".
// ready answers /readyz: nil is ready. status, when set, serves /status;
// callbacks, when set, serves providers' delivery callbacks
// (/callbacks/twilio); explain, when set, serves /explain.
func startMetricsServer(listen string, reg *prometheus.Registry, ready func() error, status, callbacks, explain http.Handler, log *slog.Logger) (*metricsServer, error) {
	if listen == "off" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics on %s: %w", listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready: "+err.Error()+"\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	if callbacks != nil {
		mux.Handle("/callbacks/twilio", callbacks)
	}
	if explain != nil {
		mux.Handle("GET /explain", explain)
	}
	if status != nil {
		mux.Handle("GET /status", status)
		mux.Handle("GET /status.json", status)
		mux.Handle("GET /status/", status)
	}
	// The port shares the process's file descriptors with Redis, NATS and
	// the providers' connections, and may face the internet (Twilio's
	// callbacks): a bounded number of connections, each closed once idle
	// or slow, so that no client can starve the dispatcher of descriptors;
	// and bounded per address, the idle closed for newcomers, so that no
	// client can hold the port (metricsListener).
	conns := &metricsListener{Listener: ln, table: connlimit.New(maxMetricsConns, maxMetricsConnsPerIP)}
	return &metricsServer{ln: conns, srv: &http.Server{
		Handler:           mux,
		ConnState:         metricsConnState,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second, // /explain may take 10 s
		IdleTimeout:       30 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}, nil
}

// maxMetricsConns bounds the metrics port's open connections: scrapes,
// status pages and callbacks need a few.
const maxMetricsConns = 64

// maxMetricsConnsPerIP bounds one peer address's: a quarter of the port, so
// that the slow requests of one client (an /explain of a job reads up to
// 100,000 messages) leave room for the scrapes and callbacks.
const maxMetricsConnsPerIP = 16

// metricsListener is the metrics port's listener. A bound alone (a
// listener that stops accepting at it) let one client hold the port:
// sockets that send nothing, kept-alive connections asking /healthz now and
// then, or slow requests filled it, and Prometheus and Twilio's callbacks
// waited in the listen backlog behind them for as long as that client went
// on. So, as the gateway does: at a bound the connection of that scope idle
// longest (no request read yet, or between two) is closed for the new one;
// with none idle the new one is closed at once (scrapers and Twilio retry).
type metricsListener struct {
	net.Listener
	table *connlimit.Table
}

// Accept returns the next connection within the bounds. Its errors are the
// listener's (http.Server retries a temporary one).
func (l *metricsListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		counted, victims, _ := l.table.Admit(c)
		for _, v := range victims {
			_ = v.Close()
		}
		if counted != nil {
			return counted, nil
		}
		_ = c.Close()
	}
}

// metricsConnState is the server's ConnState hook. net/http reports a
// connection active once a request's headers are read, so one still
// sending them (a trickle, or nothing) is idle here, and closable for a
// newcomer.
func metricsConnState(c net.Conn, s http.ConnState) {
	cc, ok := c.(*connlimit.Conn)
	if !ok {
		return
	}
	switch s {
	case http.StateNew, http.StateIdle:
		cc.Idle()
	case http.StateActive:
		cc.Busy()
	}
}

// Addr is the bound address (useful with port 0).
func (m *metricsServer) Addr() string { return m.ln.Addr().String() }

// serve runs until ctx ends, then shuts down gracefully.
func (m *metricsServer) serve(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- m.srv.Serve(m.ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("metrics server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = m.srv.Shutdown(sctx)
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics server: %w", err)
	}
	return nil
}
