package service

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/dispatch"
	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/fleet"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
)

// DevOptions are what Dev needs beyond the configuration.
type DevOptions struct {
	Options
	DataDir    string // the JetStream server's state, kept across restarts (created if missing)
	NATSListen string // host:port of its clients (port 0: any free port)
	// Sandbox serves each provider's contract by a sandbox provider in
	// this process instead of the provider itself.
	Sandbox bool
	// Answered is told of every request a sandbox answers; Lane of each
	// sandbox path and the provider it stands for.
	Answered func(path string, body []byte, status int)
	Lane     func(path, provider string)
	// Started is told the configuration in force (the server's URL, the
	// sandbox's providers), the data directory and the metrics address
	// once the dispatcher runs.
	Started func(cfg config.Config, dir, metricsAddr string)
}

// DevLanes are dev's sandbox providers without a configuration: the demo's
// contracts, no failures.
var DevLanes = []providers.Config{
	{Name: "sms-sandbox", Channel: "sms", Rate: 100},
	{Name: "push-sandbox", Channel: "push", Rate: 250},
	{Name: "email-sandbox", Channel: "email", Rate: 50},
}

// Dev is `notifier dev`: a JetStream server on o.NATSListen with its state
// in o.DataDir (locked: one dev per directory), and a dispatcher on limits
// in this process's memory, on cfg's providers or, with o.Sandbox, sandbox
// providers of the same names and contracts (cfg without providers: the
// three of DevLanes); until ctx ends. It returns the data directory's
// absolute path.
func Dev(ctx context.Context, cfg config.Config, o DevOptions) (dir string, err error) {
	log := o.logger()
	path := o.Path
	if path == "" {
		path = "(notifier dev, no --config)"
	}
	if len(cfg.Providers) == 0 {
		for _, p := range DevLanes {
			p.Default = true
			cfg.Providers = append(cfg.Providers, p)
		}
	}
	// Both ports before anything starts: a taken one is the likeliest
	// problem (a NATS server already on 4222), and nats-server would only
	// log it.
	host, port, _ := SplitListen(o.NATSListen)
	if port != 0 {
		if err := localenv.CheckFree("the NATS port", o.NATSListen, "--nats-listen"); err != nil {
			return dir, err
		}
	}
	if l := cfg.Metrics.Listen; l != "off" {
		if _, mport, err := SplitListen(l); err == nil && mport != 0 {
			if err := localenv.CheckFree("the metrics port", l, "--metrics-listen"); err != nil {
				return dir, err
			}
		}
	}
	dir, err = filepath.Abs(o.DataDir)
	if err != nil {
		return dir, fmt.Errorf("--data-dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return dir, fmt.Errorf("--data-dir: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return dir, err
	}
	defer unlock()

	srv, err := localenv.StartNATS(localenv.WithNATSName("notifier-dev"), localenv.WithNATSListen(host, port),
		localenv.WithNATSStore(dir), localenv.WithNATSLog(log))
	if err != nil {
		return dir, err
	}
	defer srv.Close()
	// The file's stream names and ack_wait; its address, credentials and
	// TLS are those of another server.
	cfg.NATS = queue.Config{URL: srv.URL(), Stream: cfg.NATS.Stream, DeadStream: cfg.NATS.DeadStream, AckWait: cfg.NATS.AckWait}.WithDefaults()

	var sb *localenv.Sandbox
	if o.Sandbox {
		sb, err = localenv.StartSandbox(localenv.SandboxOptions{Retain: 10 * time.Minute, Answered: o.Answered})
		if err != nil {
			return dir, err
		}
		defer sb.Close()
		for i, p := range cfg.Providers {
			lane := "/" + url.PathEscape(p.Name)
			if o.Lane != nil {
				o.Lane(lane, p.Name)
			}
			cfg.Providers[i] = providers.Config{
				Name: p.Name, Channel: p.Channel, Default: p.Default, Kind: "webhook",
				URL:  sb.Lane(lane, max(1, int(math.Ceil(p.Rate))), 0),
				Rate: p.Rate, Unit: p.Unit, MaxQueueDelay: p.MaxQueueDelay, Timeout: p.Timeout,
				JitterBudget: p.JitterBudget, MaxPause: p.MaxPause,
			}.WithDefaults()
		}
	}
	reg, err := BuildRegistry(path, cfg.Providers, o.providerOptions(log))
	if err != nil {
		return dir, err
	}
	defer reg.Close()
	log.Info("starting", "version", o.Version, "workers", cfg.Workers, "nats", cfg.NATS.URL, "data_dir", dir, "limits", "memory",
		"sandbox", o.Sandbox, "providers", len(cfg.Providers))

	nc, js, cons, err := Connect(ctx, cfg, "notifier dev", log)
	if err != nil {
		return dir, err
	}
	defer nc.Close()
	instance := InstanceID()
	set, err := limits.Memory(cfg.Limits(), 1)
	if err != nil {
		return dir, err
	}
	err = Dispatch(ctx, Setup{
		Config: cfg, Log: log, NC: nc, JS: js, Consumer: cons, Providers: reg, Instance: instance, Version: o.Version,
		Limits: set,
		Status: func(ctx context.Context, d *dispatch.Dispatcher) (inspect.FleetStatus, error) {
			return inspect.StatusOf(ctx, []fleet.Instance{{ID: instance, Info: InstanceInfo(d, cfg.Workers, o.Version)}}, set.Leaky, set.Reasons, cfg.Providers)
		},
		Started: func(metricsAddr string) {
			if o.Started != nil {
				o.Started(cfg, dir, metricsAddr)
			}
		},
	})
	return dir, err
}

// SplitListen splits a host:port listen address.
func SplitListen(addr string) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port", addr)
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: the port must be a number from 0 to 65535", addr)
	}
	return host, port, nil
}
