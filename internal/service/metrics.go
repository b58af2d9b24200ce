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
	"golang.org/x/net/netutil"
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
	// or slow, so that no client can starve the dispatcher of descriptors
	// (a connection past the bound waits in the listen backlog).
	return &metricsServer{ln: netutil.LimitListener(ln, maxMetricsConns), srv: &http.Server{
		Handler:           mux,
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
