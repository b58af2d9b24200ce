package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
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
	return &metricsServer{ln: ln, srv: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}, nil
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

// logOptions are the --log-level and --log-format flags.
type logOptions struct {
	level  string
	format string
}

func logFlags(c *cobra.Command) *logOptions {
	o := &logOptions{}
	c.Flags().StringVar(&o.level, "log-level", "info", "debug, info, warn or error")
	c.Flags().StringVar(&o.format, "log-format", "json", "json or text")
	return o
}

// readableDurations writes durations as Go duration strings ("1.5s"), not
// the JSON handler's raw nanoseconds.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// logger builds the structured logger on w.
func (o *logOptions) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.level)); err != nil {
		return nil, &usageError{err: fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", o.level)}
	}
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: readableDurations}
	switch strings.ToLower(o.format) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, &usageError{err: fmt.Errorf("--log-format: %q is not one of json, text", o.format)}
}
