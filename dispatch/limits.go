package dispatch

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/userlimit"
)

// LimitsConfig is what the limit sets are built from.
type LimitsConfig struct {
	Prefix   string              // Redis key prefix (redis.key_prefix)
	DedupTTL time.Duration       // how long the ledger remembers a job
	Global   *globallimit.Config // nil: no fleet bucket
	MaxCost  int                 // the largest leaky cost a job can take (SMS segments); default 1
}

// RedisLimits is the fleet's shared limit set on Redis (standalone or
// Cluster).
func RedisLimits(rdb redis.UniversalClient, c LimitsConfig) *Limits {
	l := &Limits{
		Name:   "redis",
		Ledger: NewRedisLedger(rdb, c.Prefix, c.DedupTTL),
		Users:  userlimit.NewRedis(rdb, c.Prefix),
		Leaky:  leaky.NewRedis(rdb, c.Prefix, leaky.WithMaxCost(max(1, c.MaxCost))),
		Ping:   func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
	}
	if c.Global != nil {
		l.Global = globallimit.New(globallimit.NewRedis(rdb, c.Prefix), *c.Global)
	}
	return l
}

// MemoryLimits is an in-process limit set: the demo's, and the fallback of
// redis.on_failure: local, where divisor is the number of live instances
// last seen, so that each process takes its share of every contract and of
// the fleet bucket.
func MemoryLimits(c LimitsConfig, divisor int) *Limits {
	divisor = max(1, divisor)
	l := &Limits{
		Name:        "local",
		Ledger:      NewMemoryLedger(nil, c.DedupTTL),
		Users:       userlimit.NewMemory(nil),
		Leaky:       leaky.NewMemory(nil),
		RateDivisor: divisor,
	}
	if c.Global != nil {
		g := *c.Global
		g.Rate /= float64(divisor)
		g.Burst = max(1, g.Burst/divisor)
		l.Global = globallimit.New(globallimit.NewMemory(nil), g)
	}
	return l
}
