package service

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
)

// Options are what Run needs beyond the configuration.
type Options struct {
	// Path is the configuration file: reloaded on SIGHUP and when it
	// changes, named in problems.
	Path    string
	Version string              // the notifier's, in logs, heartbeats and User-Agent
	Logger  *slog.Logger        // nil: discard
	Stdout  io.Writer           // the log provider kind's output; nil: os.Stdout
	Getenv  func(string) string // nil: os.Getenv
}

func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

func (o Options) getenv() func(string) string {
	if o.Getenv == nil {
		return os.Getenv
	}
	return o.Getenv
}

// providerOptions are the providers' options for o with log.
func (o Options) providerOptions(log *slog.Logger) providers.Options {
	out := o.Stdout
	if out == nil {
		out = os.Stdout
	}
	return providers.Options{Version: o.Version, Logger: log, Stdout: out, Getenv: o.getenv()}
}

// NewInspector reads the fleet as cfg configures it, through the limit set
// `notifier run` builds (cfg.Limits), and its streams through js (nil: a
// job's answer looks at the ledger alone).
func NewInspector(rdb redis.UniversalClient, js jetstream.JetStream, cfg config.Config) (*inspect.Inspector, error) {
	caps := cfg.Caps()
	ic := inspect.Config{Limits: cfg.Limits(), UserLimits: caps.Channels,
		CategoryLimits: caps.Categories, Categories: caps.Defaults, Providers: cfg.Providers}
	var dead *queue.DeadLetters
	if js != nil {
		dead = queue.NewDeadLetters(js, cfg.NATS)
		ic.FindWaiting = func(ctx context.Context, tenant, id string, limit int) (queue.WaitingScan, error) {
			return queue.FindWaiting(ctx, js, cfg.NATS, tenant, id, limit)
		}
	}
	return inspect.New(rdb, dead, ic)
}

// BuildRegistry builds the providers of a loaded configuration. What it
// refuses (a secret's variable unset, a key file unreadable) is a problem
// of the configuration: a *config.Error, exit 2.
func BuildRegistry(path string, cfgs []providers.Config, opts providers.Options) (*providers.Registry, error) {
	reg, err := providers.NewRegistry(cfgs, opts)
	if err != nil {
		problems := config.Problems(errors.Unwrap(err))
		if len(problems) == 0 {
			problems = []error{err}
		}
		return nil, &config.Error{File: path, Problems: problems}
	}
	return reg, nil
}

// ReadStatus is the fleet's state as cfg configures it (`notifier status`,
// the /status page of `notifier run`).
func ReadStatus(ctx context.Context, rdb redis.UniversalClient, cfg config.Config) (inspect.FleetStatus, error) {
	in, err := NewInspector(rdb, nil, cfg)
	if err != nil {
		return inspect.FleetStatus{At: time.Now().UTC()}, err
	}
	return in.Status(ctx)
}
