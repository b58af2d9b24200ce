package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/gateway"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/worker"
)

// gatewayShutdownGrace is how long a stopping gateway lets the requests in
// flight finish (their publishes be acknowledged) before it closes their
// connections.
const gatewayShutdownGrace = 10 * time.Second

func gatewayCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "gateway",
		Short: "Serve the HTTP intake: POST /v1/notifications, limited per API key",
		Long: `Gateway serves jobs over HTTP on gateway.listen (default 127.0.0.1:8080) and publishes
them to the NOTIFY stream, answering 202 only once JetStream acknowledged them:

  POST /v1/notifications   one job (SPEC §2 JSON) or an array of up to 1000;
                           Authorization: Bearer <API key>; Idempotency-Key: <id>
  GET  /healthz, /readyz, /metrics, /openapi.json

Each key of gateway.keys has a token bucket (rate, burst) shared by every gateway
instance through Redis; failed authentications are limited per client IP
(gateway.auth_failures). It keeps no state of its own: run as many as you like behind
a load balancer. On SIGINT or SIGTERM it stops accepting connections, lets the
requests in flight finish, and exits 0.`,
		Args: cobra.NoArgs,
	}
	path := configFlag(c)
	logf := logFlags(c)
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := config.Load(*path, e.getenv)
		if err != nil {
			return err
		}
		if cfg.Gateway == nil {
			return &config.Error{File: *path, Problems: []error{errors.New("gateway: required by notifier gateway: at least gateway.keys (see `notifier gateway hash-key`)")}}
		}
		log, err := logf.logger(e.stderr)
		if err != nil {
			return err
		}
		return runGateway(cmd.Context(), cfg, log, func(addr string) {
			fmt.Fprintf(e.stdout, "gateway listening on http://%s\n", addr)
		})
	}
	c.AddCommand(hashKeyCmd(e))
	return c
}

func hashKeyCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "hash-key",
		Short: "Print the SHA-256 of an API key read from stdin, for gateway.keys[].sha256",
		Long: `Hash-key reads an API key from stdin (its first line; surrounding spaces and the
line end are not part of it) and prints its SHA-256 in hex, the value of
gateway.keys[].sha256: the configuration never holds a key in clear.

  head -c 32 /dev/urandom | base64 | tr -d '/+=' > key.txt     # a new key
  notifier gateway hash-key < key.txt`,
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			line, err := bufio.NewReader(io.LimitReader(e.stdin, 64<<10)).ReadString('\n')
			if err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("read the key from stdin: %w", err)
			}
			key := strings.TrimSpace(line)
			if key == "" {
				return &usageError{err: errors.New("no key on stdin: pipe the key in (notifier gateway hash-key < key.txt)")}
			}
			fmt.Fprintln(e.stdout, gateway.HashKey(key))
			return nil
		},
	}
}

// runGateway is `notifier gateway` once the configuration is loaded: it
// connects to NATS (creating the streams if need be) and Redis, serves
// until ctx ends, then shuts down gracefully. listening is told the bound
// address.
func runGateway(ctx context.Context, cfg config.Config, log *slog.Logger, listening func(addr string)) error {
	worker.RouteRedisLogs(log)
	gcfg := cfg.Gateway.WithDefaults()
	nc, js, err := config.ConnectJetStream(ctx, cfg, "notifier gateway", true,
		// A publish while disconnected fails at once (503) instead of
		// waiting in a buffer it might leave after the answer.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected: answering 503", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "server", c.ConnectedUrlRedacted()) }),
	)
	if err != nil {
		return err
	}
	defer nc.Close()
	rdb, err := config.NewRedisClient(cfg.Redis, 64)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := worker.CheckRedis(ctx, rdb, cfg.Redis, log); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	tp, stopTracing, err := worker.StartTracing(ctx, cfg.Tracing, version, log)
	if err != nil {
		return err
	}
	defer stopTracing() // the last spans, sent after the stop
	gw, err := gateway.New(gcfg, gateway.Deps{
		Tracer:    tp,
		Redis:     rdb,
		KeyPrefix: cfg.Redis.KeyPrefix,
		Publisher: queue.NewPublisher(js),
		Ready: func(ctx context.Context) error {
			if !nc.IsConnected() {
				return fmt.Errorf("nats %s", strings.ToLower(nc.Status().String()))
			}
			if err := rdb.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("redis: %w", config.RedactErr(err, cfg.Redis.Password))
			}
			return nil
		},
		Registerer: reg,
		Gatherer:   reg,
		Logger:     log,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", gcfg.Listen)
	if err != nil {
		return fmt.Errorf("listen for the gateway on %s (gateway.listen): %w", gcfg.Listen, err)
	}
	srv := &http.Server{
		Handler:           gw,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      gcfg.PublishTimeout + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("gateway starting", "version", version, "listen", ln.Addr().String(), "keys", len(gcfg.Keys),
		"nats", queue.RedactURLs(cfg.NATS.URL), "redis", strings.Join(cfg.Redis.Addrs, ","))
	if listening != nil {
		listening(ln.Addr().String())
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return gw.Run(gctx) })
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("gateway server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		log.Info("gateway stopping: finishing the requests in flight")
		sctx, cancel := context.WithTimeout(context.WithoutCancel(gctx), gatewayShutdownGrace)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
			return fmt.Errorf("gateway shutdown: %w", err)
		}
		return nil
	})
	err = g.Wait()
	if err == nil {
		log.Info("gateway stopped")
	}
	return err
}
