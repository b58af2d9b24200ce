package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/dispatch"
	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/inspect/statuspage"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/fleet"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
)

// Run is `notifier run` once its configuration is loaded (from o.Path):
// the dispatcher on limits shared through Redis, with the fleet's
// heartbeat, reloads of the file on SIGHUP and when it changes, and the
// metrics port (/metrics, /healthz, /readyz, /status, /explain, the
// providers' callbacks), until ctx ends (nil) or something fails.
func Run(ctx context.Context, cfg config.Config, o Options) error {
	log := o.logger()
	RouteRedisLogs(log)
	// The providers first: a secret's variable unset or a key file that
	// cannot be read is a problem of the configuration (exit 2), found
	// before connecting to anything, as `check` finds it.
	popts := o.providerOptions(log)
	reg, err := BuildRegistry(o.Path, cfg.Providers, popts)
	if err != nil {
		return err
	}
	log.Info("starting", "version", o.Version, "workers", cfg.Workers, "redis", strings.Join(cfg.Redis.Addrs, ","),
		"on_failure", cfg.Redis.OnFailure, "providers", len(cfg.Providers))

	nc, js, cons, err := Connect(ctx, cfg, "notifier run", log)
	if err != nil {
		return err
	}
	defer nc.Close()

	rdb, err := config.NewRedisClient(cfg.Redis, cfg.Workers)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := CheckRedis(ctx, rdb, cfg.Redis, log); err != nil {
		return err
	}

	rl := newReloader(o.Path, cfg, reg, popts, o.getenv(), log)
	defer rl.close()
	horizons, err := queue.OpenHorizons(ctx, js, cfg.NATS.Replicas)
	if err != nil {
		return err
	}
	instance := InstanceID()
	lcfg := cfg.Limits()
	set, err := limits.Redis(rdb, lcfg)
	if err != nil {
		return err
	}

	var d *dispatch.Dispatcher
	hb := fleet.NewHeartbeat(rdb, cfg.Redis.KeyPrefix, instance, func() fleet.InstanceInfo {
		return InstanceInfo(d, cfg.Workers, o.Version)
	}, log)
	var fallback func() (*limits.Set, error)
	if cfg.Redis.OnFailure == config.OnFailureLocal {
		fallback = func() (*limits.Set, error) {
			lc := lcfg
			lc.Global = rl.current().Global // as last reloaded
			return limits.Memory(lc, hb.Live())
		}
	}
	return Dispatch(ctx, Setup{
		Config: cfg, Log: log, NC: nc, JS: js, Consumer: cons, Providers: reg, Instance: instance, Version: o.Version,
		Limits:   set,
		Horizons: horizons,
		Fallback: fallback,
		Peers:    hb.Live,
		Denials:  limits.NewDenials(rdb, cfg.Redis.KeyPrefix),
		Status: func(ctx context.Context, _ *dispatch.Dispatcher) (inspect.FleetStatus, error) {
			return ReadStatus(ctx, rdb, rl.current())
		},
		Explain: inspect.Handler(func() (*inspect.Inspector, error) {
			return NewInspector(rdb, js, rl.current())
		}, log),
		Also: []func(ctx context.Context, d *dispatch.Dispatcher) error{
			func(ctx context.Context, _ *dispatch.Dispatcher) error { return hb.Run(ctx) },
			func(ctx context.Context, d *dispatch.Dispatcher) error { return rl.run(ctx, d, reloadGrace(cfg)) },
		},
		Created: func(nd *dispatch.Dispatcher) { d = nd },
	})
}

// Connect connects to NATS for a dispatcher, whose
// disconnections and reconnections are logged (a connection closed on
// purpose, at a stop, is not), and sets up the streams and the consumers.
// The caller closes the connection.
func Connect(ctx context.Context, cfg config.Config, name string, log *slog.Logger) (*nats.Conn, jetstream.JetStream, *queue.Consumer, error) {
	nc, js, err := config.ConnectJetStream(ctx, cfg, name, true,
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil {
				return // the connection was closed on purpose: a stop, not a problem
			}
			log.Warn("nats disconnected", "err", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "server", c.ConnectedUrlRedacted()) }),
	)
	if err != nil {
		return nil, nil, nil, err
	}
	cons, err := queue.NewConsumer(ctx, js, cfg.NATS, queue.ConsumerConfig{FairLanes: cfg.Tenants.Lanes})
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	return nc, js, cons, nil
}

// Setup is what `notifier run` (Run) and `notifier dev` give the
// dispatcher they run: run limits in Redis shared by a fleet, dev limits in
// its memory.
type Setup struct {
	Config    config.Config
	Log       *slog.Logger
	NC        *nats.Conn
	JS        jetstream.JetStream
	Consumer  *queue.Consumer
	Providers dispatch.Registry
	Instance  string
	Version   string
	Limits    *limits.Set
	Horizons  dispatch.Horizons           // the slot horizons outside Redis; nil: none (every stateless queue starts cold)
	Fallback  func() (*limits.Set, error) // redis.on_failure: local; nil: hold
	Peers     func() int                  // live processes of the fleet; nil: this one alone
	Denials   *limits.Denials             // per-user cap denials for `notifier top`; nil: not counted
	// Status is what the metrics port's /status page shows.
	Status func(ctx context.Context, d *dispatch.Dispatcher) (inspect.FleetStatus, error)
	// Explain serves the metrics port's /explain; nil: not served.
	Explain http.Handler
	// Also run beside the dispatcher until it stops.
	Also []func(ctx context.Context, d *dispatch.Dispatcher) error
	// Created, when set, is told the dispatcher once it exists, before
	// anything runs; Started, the metrics address once it runs ("off"
	// when metrics.listen is).
	Created func(d *dispatch.Dispatcher)
	Started func(metricsAddr string)
}

// Dispatch runs a dispatcher as s says, with its metrics server and
// status page, until ctx ends (a stop: nil) or something fails.
func Dispatch(ctx context.Context, s Setup) error {
	cfg, log := s.Config, s.Log
	promReg := NewPromRegistry()
	metrics := dispatch.NewMetrics(promReg)
	tp, stopTracing, err := StartTracing(ctx, cfg.Tracing, s.Version, log)
	if err != nil {
		return err
	}
	defer stopTracing() // the last spans, sent after the stop
	caps := cfg.Caps()
	d, err := dispatch.New(dispatch.Options{
		Workers:        cfg.Workers,
		AckWait:        cfg.NATS.AckWait,
		Retry:          cfg.Retry,
		UserLimits:     caps.Channels,
		CategoryLimits: caps.Categories,
		Categories:     caps.Defaults,
		StopTimeout:    stopTimeout(cfg),
		Instance:       s.Instance,
		TenantWeights:  cfg.Tenants.Weights,
		SuppressTTL:    cfg.SuppressTTL(),
		Peers:          s.Peers,
		Source:         s.Consumer,
		Router:         s.Consumer.Router(),
		DeadLetters:    queue.NewPublisher(s.JS),
		Jobs:           queue.NewPublisher(s.JS, queue.WithLanes(s.Consumer.Lanes())),
		Providers:      s.Providers,
		Limits:         s.Limits,
		Fallback:       s.Fallback,
		Metrics:        metrics,
		Tracer:         tp,
		Denials:        s.Denials,
		Horizons:       s.Horizons,
		Logger:         log,
	})
	if err != nil {
		return err
	}
	if s.Created != nil {
		s.Created(d)
	}

	g, gctx := errgroup.WithContext(ctx)
	page := statuspage.New(func(ctx context.Context) (inspect.FleetStatus, error) {
		return s.Status(ctx, d)
	}, time.Second, 10*time.Minute)
	srv, err := startMetricsServer(cfg.Metrics.Listen, promReg, func() error {
		if !s.NC.IsConnected() {
			return errors.New("not connected to NATS")
		}
		return d.Ready()
	}, page, twilioCallbacks(d), s.Explain, log)
	if err != nil {
		return err
	}
	if srv != nil {
		g.Go(func() error { return srv.serve(gctx) })
		g.Go(func() error { return page.Run(gctx) })
	}
	for _, f := range s.Also {
		g.Go(func() error { return f(gctx, d) })
	}
	g.Go(func() error {
		err := d.Run(gctx)
		log.Info("dispatcher stopped")
		return err
	})
	metricsAddr := "off"
	if srv != nil {
		metricsAddr = srv.Addr() // the port bound, also when metrics.listen asked for port 0
	}
	log.Info("dispatching", "instance", s.Instance, "metrics", metricsAddr)
	if s.Started != nil {
		s.Started(metricsAddr)
	}
	err = g.Wait()
	// The NAKs of the jobs handed back at the stop, and the last acks, are
	// published without waiting: flush them before the connection closes
	// (with notifier dev the server stops right after, and a NAK lost
	// there leaves its job until ack_wait).
	if ferr := s.NC.FlushTimeout(2 * time.Second); ferr != nil && s.NC.IsConnected() {
		log.Warn("flush the last acknowledgements to NATS", "err", ferr)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// twilioCallbacks serves the Twilio status callbacks of the providers in
// use (the last reload's) at /callbacks/twilio: each verified report is
// counted, and an undelivered one dead-lettered (dispatch.ReportDelivery).
func twilioCallbacks(d *dispatch.Dispatcher) http.Handler {
	report := func(ctx context.Context, r providers.DeliveryReport) error {
		return d.ReportDelivery(ctx, r.Provider, r.Tenant, r.JobID, r.Status, r.ErrorCode, r.Detail)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		reg, ok := d.Providers().(*providers.Registry)
		if !ok {
			http.NotFound(w, req)
			return
		}
		reg.TwilioCallbacks(report).ServeHTTP(w, req)
	})
}

// stopTimeout bounds how long sends at a provider may finish after a stop:
// the longest provider timeout plus a second, and never past ack_wait.
func stopTimeout(cfg config.Config) time.Duration {
	var t time.Duration
	for _, p := range cfg.Providers {
		t = max(t, p.Timeout)
	}
	return min(t+time.Second, cfg.NATS.AckWait)
}

// reloadGrace is how long a replaced provider registry stays open after a
// reload: a job that picked a provider just before can still wait its
// longest queue delay and then send.
func reloadGrace(cfg config.Config) time.Duration {
	var q, t time.Duration
	for _, p := range cfg.Providers {
		q, t = max(q, p.MaxQueueDelay), max(t, p.Timeout)
	}
	return q + t + 5*time.Second
}

// CheckRedis pings Redis at start. Wrong credentials or a certificate that
// does not verify are fatal (they will not fix themselves); an unreachable
// server is not: the dispatcher holds (or runs locally) until it answers.
func CheckRedis(ctx context.Context, rdb redis.UniversalClient, c config.Redis, log *slog.Logger) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := rdb.Ping(pctx).Err()
	if err == nil {
		return nil
	}
	err = config.RedactErr(err, c.Password, c.SentinelPassword)
	msg := err.Error()
	for _, fatal := range []string{"WRONGPASS", "NOAUTH", "NOPERM", "invalid username-password", "x509:", "tls:", "certificate"} {
		if strings.Contains(msg, fatal) {
			return fmt.Errorf("connect to redis at %s: %w", strings.Join(c.Addrs, ","), err)
		}
	}
	log.Warn("redis unreachable at start", "addrs", strings.Join(c.Addrs, ","), "on_failure", c.OnFailure, "err", err)
	return nil
}

// InstanceID names this process in the fleet: host, pid and a random part.
func InstanceID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "host"
	}
	return fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), time.Now().UnixNano()&0xffff)
}

// InstanceInfo is what this process's heartbeat says of it: d's work
// (nil: none yet) and its workers.
func InstanceInfo(d *dispatch.Dispatcher, workers int, version string) fleet.InstanceInfo {
	host, _ := os.Hostname()
	info := fleet.InstanceInfo{Version: version, Host: host, Started: startedAt, Workers: workers, Limits: "redis"}
	if d != nil {
		info.InFlight = d.InFlight()
		info.Limits = d.LimitsName()
		info.Providers, info.Channels = d.Activity()
	}
	return info
}

var startedAt = time.Now().UTC()

// NewPromRegistry is a fresh registry with the Go and process collectors.
func NewPromRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}
