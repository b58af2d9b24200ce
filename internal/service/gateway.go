package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/gateway"
	"github.com/notifier/notifier/queue"
)

// gatewayShutdownGrace is how long a stopping gateway lets the requests in
// flight finish (their publishes be acknowledged) before it closes their
// connections.
const gatewayShutdownGrace = 10 * time.Second

// Gateway is `notifier gateway` once the configuration is loaded: it
// connects to NATS (creating the streams if need be) and Redis, serves
// until ctx ends, then shuts down gracefully. listening is told the bound
// address.
func Gateway(ctx context.Context, cfg config.Config, version string, log *slog.Logger, listening func(addr string)) error {
	RouteRedisLogs(log)
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
	if err := CheckRedis(ctx, rdb, cfg.Redis, log); err != nil {
		return err
	}
	reg := NewPromRegistry()
	tp, stopTracing, err := StartTracing(ctx, cfg.Tracing, version, log)
	if err != nil {
		return err
	}
	defer stopTracing() // the last spans, sent after the stop
	gw, err := gateway.New(gcfg, gateway.Deps{
		Tracer:    tp,
		Redis:     rdb,
		KeyPrefix: cfg.Redis.KeyPrefix,
		Publisher: queue.NewPublisher(js, queue.WithFairLanes(cfg.Tenants.Lanes)),
		Ready: func(ctx context.Context) error {
			if !nc.IsConnected() {
				return fmt.Errorf("nats %s", strings.ToLower(nc.Status().String()))
			}
			if err := rdb.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("redis: %w", config.RedactErr(err, cfg.Redis.Password))
			}
			return nil
		},
		StreamDepth: func(ctx context.Context) (int64, error) {
			s, err := js.Stream(ctx, cfg.NATS.Stream)
			if err != nil {
				return 0, fmt.Errorf("read stream %s: %w", cfg.NATS.Stream, err)
			}
			return int64(s.CachedInfo().State.Msgs), nil
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
	srv := gw.Server()
	log.Info("gateway starting", "version", version, "listen", ln.Addr().String(), "keys", len(gcfg.Keys),
		"max_conns", gw.MaxConns(), "nats", queue.RedactURLs(cfg.NATS.URL), "redis", strings.Join(cfg.Redis.Addrs, ","))
	if listening != nil {
		listening(ln.Addr().String())
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return gw.Run(gctx) })
	g.Go(func() error {
		if err := gw.Serve(srv, ln); err != nil {
			return fmt.Errorf("gateway server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		log.Info("gateway stopping: finishing the requests in flight")
		sctx, cancel := context.WithTimeout(context.WithoutCancel(gctx), gatewayShutdownGrace)
		defer cancel()
		if err := srv.ShutdownWithContext(sctx); err != nil {
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
