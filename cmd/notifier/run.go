package main

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
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/dispatch"
	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/statuspage"
)

func runCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "run",
		Short: "Run the dispatch workers until SIGINT or SIGTERM",
		Long: `Run consumes jobs from the NOTIFY stream and dispatches them through the per-user cap,
the fleet bucket and each provider's leaky queue. Start as many processes as you like,
on as many machines: they share the durable consumers and the limits in Redis.

On SIGINT or SIGTERM it stops taking jobs, hands the ones still waiting back to
JetStream at once, lets the sends already at a provider finish, and exits 0.`,
		Args: cobra.NoArgs,
	}
	path := configFlag(c)
	logf := logFlags(c)
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := config.Load(*path, e.getenv)
		if err != nil {
			return err
		}
		log, err := logf.logger(e.stderr)
		if err != nil {
			return err
		}
		return runDispatcher(cmd.Context(), *path, cfg, log, e)
	}
	return c
}

// runDispatcher is `notifier run` once the configuration at path is loaded:
// the dispatcher on limits shared through Redis, with the fleet's
// heartbeat and reloads of the file.
func runDispatcher(ctx context.Context, path string, cfg config.Config, log *slog.Logger, e *env) error {
	routeRedisLogs(log)
	// The providers first: a secret's variable unset or a key file that
	// cannot be read is a problem of the configuration (exit 2), found
	// before connecting to anything, as `check` finds it.
	popts := providers.Options{Version: version, Logger: log, Stdout: e.stdout, Getenv: e.getenv}
	reg, err := buildRegistry(path, cfg.Providers, popts)
	if err != nil {
		return err
	}
	log.Info("starting", "version", version, "workers", cfg.Workers, "redis", strings.Join(cfg.Redis.Addrs, ","),
		"on_failure", cfg.Redis.OnFailure, "providers", len(cfg.Providers))

	nc, js, cons, err := connectDispatcher(ctx, cfg, "notifier run", log)
	if err != nil {
		return err
	}
	defer nc.Close()

	rdb, err := config.NewRedisClient(cfg.Redis, cfg.Workers)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := checkRedis(ctx, rdb, cfg.Redis, log); err != nil {
		return err
	}

	rl := newReloader(path, cfg, reg, popts, e.getenv, log)
	defer rl.close()
	horizons, err := queue.OpenHorizons(ctx, js, cfg.NATS.Replicas)
	if err != nil {
		return err
	}
	instance := instanceID()
	lcfg := cfg.Limits()
	limits, err := dispatch.RedisLimits(rdb, lcfg)
	if err != nil {
		return err
	}

	var d *dispatch.Dispatcher
	fleet := dispatch.NewFleet(rdb, cfg.Redis.KeyPrefix, instance, func() dispatch.InstanceInfo {
		return instanceInfo(d, cfg.Workers)
	}, log)
	var fallback func() (*dispatch.Limits, error)
	if cfg.Redis.OnFailure == config.OnFailureLocal {
		fallback = func() (*dispatch.Limits, error) {
			lc := lcfg
			lc.Global = rl.current().Global // as last reloaded
			return dispatch.MemoryLimits(lc, fleet.Live())
		}
	}
	return dispatchJobs(ctx, dispatchSetup{
		cfg: cfg, log: log, nc: nc, js: js, cons: cons, reg: reg, instance: instance,
		limits:   limits,
		horizons: horizons,
		fallback: fallback,
		peers:    fleet.Live,
		denials:  dispatch.NewDenials(rdb, cfg.Redis.KeyPrefix),
		status: func(ctx context.Context, _ *dispatch.Dispatcher) (inspect.FleetStatus, error) {
			return readStatus(ctx, rdb, rl.current())
		},
		explain: explainHandler(func() (*inspect.Inspector, error) {
			return newInspector(rdb, queue.NewDeadLetters(js, cfg.NATS), rl.current())
		}, log),
		also: []func(ctx context.Context, d *dispatch.Dispatcher) error{
			func(ctx context.Context, _ *dispatch.Dispatcher) error { return fleet.Run(ctx) },
			func(ctx context.Context, d *dispatch.Dispatcher) error { return rl.run(ctx, d, reloadGrace(cfg)) },
		},
		created: func(nd *dispatch.Dispatcher) { d = nd },
	})
}

// connectDispatcher connects to NATS for a dispatcher, whose
// disconnections and reconnections are logged (a connection closed on
// purpose, at a stop, is not), and sets up the streams and the consumers.
// The caller closes the connection.
func connectDispatcher(ctx context.Context, cfg config.Config, name string, log *slog.Logger) (*nats.Conn, jetstream.JetStream, *queue.Consumer, error) {
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
	cons, err := queue.NewConsumer(ctx, js, cfg.NATS, queue.ConsumerConfig{})
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	return nc, js, cons, nil
}

// dispatchSetup is what `run` and `dev` give the dispatcher they run:
// `run` limits in Redis shared by a fleet, `dev` limits in its memory.
type dispatchSetup struct {
	cfg      config.Config
	log      *slog.Logger
	nc       *nats.Conn
	js       jetstream.JetStream
	cons     *queue.Consumer
	reg      dispatch.Registry
	instance string
	limits   *dispatch.Limits
	horizons dispatch.Horizons                // the slot horizons outside Redis; nil: none (every stateless queue starts cold)
	fallback func() (*dispatch.Limits, error) // redis.on_failure: local; nil: hold
	peers    func() int                       // live processes of the fleet; nil: this one alone
	denials  *dispatch.Denials                // per-user cap denials for `notifier top`; nil: not counted
	// status is what the metrics port's /status page shows.
	status func(ctx context.Context, d *dispatch.Dispatcher) (inspect.FleetStatus, error)
	// explain serves the metrics port's /explain; nil: not served.
	explain http.Handler
	// also run beside the dispatcher until it stops.
	also []func(ctx context.Context, d *dispatch.Dispatcher) error
	// created, when set, is told the dispatcher once it exists, before
	// anything runs; started, the metrics address once it runs ("off"
	// when metrics.listen is).
	created func(d *dispatch.Dispatcher)
	started func(metricsAddr string)
}

// dispatchJobs runs a dispatcher as s says, with its metrics server and
// status page, until ctx ends (a stop: nil) or something fails.
func dispatchJobs(ctx context.Context, s dispatchSetup) error {
	cfg, log := s.cfg, s.log
	promReg := newPromRegistry()
	metrics := dispatch.NewMetrics(promReg)
	tp, stopTracing, err := startTracing(ctx, cfg.Tracing, log)
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
		Instance:       s.instance,
		TenantWeights:  cfg.Tenants.Weights,
		Peers:          s.peers,
		Source:         s.cons,
		DeadLetters:    queue.NewPublisher(s.js),
		Providers:      s.reg,
		Limits:         s.limits,
		Fallback:       s.fallback,
		Metrics:        metrics,
		Tracer:         tp,
		Denials:        s.denials,
		Horizons:       s.horizons,
		Logger:         log,
	})
	if err != nil {
		return err
	}
	if s.created != nil {
		s.created(d)
	}

	g, gctx := errgroup.WithContext(ctx)
	page := statuspage.New(func(ctx context.Context) (inspect.FleetStatus, error) {
		return s.status(ctx, d)
	}, time.Second, 10*time.Minute)
	srv, err := startMetricsServer(cfg.Metrics.Listen, promReg, func() error {
		if !s.nc.IsConnected() {
			return errors.New("not connected to NATS")
		}
		return d.Ready()
	}, page, twilioCallbacks(d), s.explain, log)
	if err != nil {
		return err
	}
	if srv != nil {
		g.Go(func() error { return srv.serve(gctx) })
		g.Go(func() error { return page.Run(gctx) })
	}
	for _, f := range s.also {
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
	log.Info("dispatching", "instance", s.instance, "metrics", metricsAddr)
	if s.started != nil {
		s.started(metricsAddr)
	}
	err = g.Wait()
	// The NAKs of the jobs handed back at the stop, and the last acks, are
	// published without waiting: flush them before the connection closes
	// (with notifier dev the server stops right after, and a NAK lost
	// there leaves its job until ack_wait).
	if ferr := s.nc.FlushTimeout(2 * time.Second); ferr != nil && s.nc.IsConnected() {
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
		return d.ReportDelivery(ctx, r.Provider, r.JobID, r.Status, r.ErrorCode, r.Detail)
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

// checkRedis pings Redis at start. Wrong credentials or a certificate that
// does not verify are fatal (they will not fix themselves); an unreachable
// server is not: the dispatcher holds (or runs locally) until it answers.
func checkRedis(ctx context.Context, rdb redis.UniversalClient, c config.Redis, log *slog.Logger) error {
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

// instanceID names this process in the fleet: host, pid and a random part.
func instanceID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "host"
	}
	return fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), time.Now().UnixNano()&0xffff)
}

func instanceInfo(d *dispatch.Dispatcher, workers int) dispatch.InstanceInfo {
	host, _ := os.Hostname()
	info := dispatch.InstanceInfo{Version: version, Host: host, Started: startedAt, Workers: workers, Limits: "redis"}
	if d != nil {
		info.InFlight = d.InFlight()
		info.Limits = d.LimitsName()
		info.Providers, info.Channels = d.Activity()
	}
	return info
}

var startedAt = time.Now().UTC()

// newPromRegistry is a fresh registry with the Go and process collectors.
func newPromRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}
