package config

import (
	"time"

	"github.com/notifier/notifier/dispatch"
	"github.com/notifier/notifier/gateway"
	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/userlimit"
)

// Config is the whole YAML file of SPEC §4. Each section is the owning
// package's own config type; this package only reads, merges the environment,
// fills defaults and collects every problem.
type Config struct {
	NATS       queue.Config         `mapstructure:"nats"`
	Redis      Redis                `mapstructure:"redis"`
	Workers    int                  `mapstructure:"workers"`
	Metrics    Metrics              `mapstructure:"metrics"`
	DedupTTL   time.Duration        `mapstructure:"dedup_ttl"`
	Retry      dispatch.RetryConfig `mapstructure:"retry"`
	Global     *globallimit.Config  `mapstructure:"global"`
	UserLimits map[string]Cap       `mapstructure:"user_limits"`
	// Categories are the channels' categories: what a job without one on a
	// channel's normal lane is (left out: transactional).
	Categories map[string]queue.Category `mapstructure:"categories"`
	Tenants    Tenants                   `mapstructure:"tenants"`
	// Suppression is YAML suppression: the list of recipients providers
	// refused as gone (left out: kept for DefaultSuppressionTTL).
	Suppression Suppression        `mapstructure:"suppression"`
	Providers   []providers.Config `mapstructure:"providers"`
	Tracing     Tracing            `mapstructure:"tracing"`
	// Gateway is read by `notifier gateway` only (nil: left out); `check`
	// and every command validate it when present.
	Gateway *gateway.Config `mapstructure:"gateway"`
}

// Cap is YAML user_limits.<channel>: the channel's per-user cap
// (limit, window, ...; left out: none) and, under transactional: and
// marketing:, a cap of its own for that category's jobs, which they take
// instead of the channel's, counted apart.
type Cap struct {
	userlimit.Rule `mapstructure:",squash"`
	Transactional  *userlimit.Rule `mapstructure:"transactional"`
	Marketing      *userlimit.Rule `mapstructure:"marketing"`
}

// Own reports whether the entry sets a cap for the channel itself.
func (c Cap) Own() bool { return c.Rule != (userlimit.Rule{}) }

// Category is the entry's cap of category cat, or nil.
func (c Cap) Category(cat queue.Category) *userlimit.Rule {
	switch cat {
	case queue.Transactional:
		return c.Transactional
	case queue.Marketing:
		return c.Marketing
	}
	return nil
}

// ChannelCaps are the channels' own caps (user_limits.<channel>).
func (c Config) ChannelCaps() map[string]userlimit.Rule {
	out := map[string]userlimit.Rule{}
	for ch, cc := range c.UserLimits {
		if cc.Own() {
			out[ch] = cc.Rule
		}
	}
	return out
}

// CategoryCaps are the categories' caps (user_limits.<channel>.<category>).
func (c Config) CategoryCaps() map[limits.CategoryCap]userlimit.Rule {
	out := map[limits.CategoryCap]userlimit.Rule{}
	for ch, cc := range c.UserLimits {
		for _, cat := range queue.Categories {
			if r := cc.Category(cat); r != nil {
				out[limits.CategoryCap{Channel: ch, Category: cat}] = *r
			}
		}
	}
	return out
}

// Caps are the per-user caps and the channels' categories as the
// dispatcher takes them: one way to ask which cap a job has
// (limits.Caps.CapFor), for run, reload, explain and top alike.
func (c Config) Caps() limits.Caps {
	return limits.Caps{Channels: c.ChannelCaps(), Categories: c.CategoryCaps(), Defaults: c.Categories}
}

// Tenants is YAML tenants:.
type Tenants struct {
	// Weights are the tenants' shares of a provider's contract while
	// several have jobs waiting; a tenant left out (and the default
	// tenant) weighs 1. File only: no environment variable sets it.
	Weights map[string]float64 `mapstructure:"weights"`
	// Lanes is the number of fair lanes per channel and lane kind that the
	// tenants' jobs share (queue.DefaultFairLanes; 1 to
	// queue.MaxFairLanes). Every process, gateway and publisher of a fleet
	// should use the same number.
	Lanes int `mapstructure:"lanes"`
}

// Suppression is YAML suppression:.
type Suppression struct {
	// TTL is how long a recipient a provider refused as gone stays on the
	// fleet's suppression list, its jobs suppressed unsent; 0 keeps no
	// list; left out: DefaultSuppressionTTL.
	TTL *time.Duration `mapstructure:"ttl"`
}

// DefaultSuppressionTTL is suppression.ttl's default: 30 days.
const DefaultSuppressionTTL = 720 * time.Hour

// SuppressTTL is suppression.ttl as the dispatcher takes it (0: no list).
func (c Config) SuppressTTL() time.Duration {
	if c.Suppression.TTL == nil {
		return DefaultSuppressionTTL
	}
	return *c.Suppression.TTL
}

// Metrics is YAML metrics:.
type Metrics struct {
	Listen string `mapstructure:"listen"` // host:port of /metrics, /healthz, /readyz; "off" disables
}

// WithDefaults fills every key left out with SPEC §4's value.
func (c Config) WithDefaults() Config {
	c.NATS = c.NATS.WithDefaults()
	c.Redis = c.Redis.WithDefaults()
	if c.Workers == 0 {
		c.Workers = 32
	}
	if c.Tenants.Lanes == 0 {
		c.Tenants.Lanes = queue.DefaultFairLanes
	}
	if c.Metrics.Listen == "" {
		c.Metrics.Listen = "127.0.0.1:9464"
	}
	if c.DedupTTL == 0 {
		c.DedupTTL = 24 * time.Hour
	}
	c.Retry = c.Retry.WithDefaults()
	c.Tracing = c.Tracing.WithDefaults()
	for ch, cc := range c.UserLimits {
		if cc.Own() {
			cc.Rule = cc.Rule.WithDefaults()
		}
		for _, r := range []**userlimit.Rule{&cc.Transactional, &cc.Marketing} {
			if *r != nil {
				d := (**r).WithDefaults()
				*r = &d
			}
		}
		c.UserLimits[ch] = cc
	}
	for i := range c.Providers {
		c.Providers[i] = c.Providers[i].WithDefaults()
	}
	if c.Gateway != nil {
		g := c.Gateway.WithDefaults()
		c.Gateway = &g
	}
	return c
}
