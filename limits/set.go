package limits

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits/digest"
	"github.com/notifier/notifier/limits/fleet"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/limits/suppress"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/userlimit"
)

// Config is what the limit sets are built from.
type Config struct {
	Prefix   string              // Redis key prefix (redis.key_prefix)
	DedupTTL time.Duration       // how long the ledger remembers a job
	Global   *globallimit.Config // nil: no fleet bucket
	MaxCost  int                 // the largest leaky cost a job can take (SMS segments); default 1
	// Headroom is how far under each contract the queues pace (default
	// leaky.DefaultHeadroom, 1.5 %). Sends may then arrive up to h/(1−h)
	// seconds later than their slots without two of them ever landing in
	// one second over the contract: Options.LateTolerance of that for a
	// worker waking late, the rest for the network and the provider's own
	// clock.
	Headroom float64
}

func (c Config) headroom() float64 {
	if c.Headroom <= 0 {
		return leaky.DefaultHeadroom
	}
	return c.Headroom
}

// HeadroomOf is the headroom the limit sets built from c pace contract ct
// with: its own (a provider's jitter_budget, see Contract), else c's.
func (c Config) HeadroomOf(ct leaky.Contract) float64 {
	if ct.Headroom > 0 {
		return ct.Headroom
	}
	return c.headroom()
}

// Redis is the fleet's shared limit set on Redis (standalone or
// Cluster). A sent job needs two exchanges with it, the admission before
// the send and the ledger's "sent" after it, each riding on a pipeline
// shared with the process's other workers (pipeBatcher); its providers'
// pauses are heard through pub/sub (Set.Watch). It returns an error
// when c is out of range (its Headroom).
func Redis(rdb redis.UniversalClient, c Config) (*Set, error) {
	q, err := leaky.NewRedis(rdb, c.Prefix, leaky.WithMaxCost(max(1, c.MaxCost)), leaky.WithHeadroom(c.headroom()))
	if err != nil {
		return nil, fmt.Errorf("redis limits: %w", err)
	}
	rs := &redisSet{
		ledger:   ledger.NewRedis(rdb, c.Prefix, c.DedupTTL),
		users:    userlimit.NewRedis(rdb, c.Prefix),
		leaky:    q,
		suppress: suppress.NewRedis(rdb, c.Prefix),
		batch:    newPipeBatcher(rdb),
	}
	pauses := leaky.NewPauseWatcher(nil)
	l := &Set{
		Name:     "redis",
		Ledger:   rs.ledger,
		Users:    rs.users,
		Leaky:    rs.leaky,
		Suppress: rs.suppress,
		Digests:  digest.NewRedis(rdb, c.Prefix),
		Pauses:   pauses,
		Reasons:  fleet.RedisPauseReasons(rdb, c.Prefix),
		Ping:     func(ctx context.Context) error { return Health(ctx, rdb) },
		redis:    rs,
	}
	l.Watch = func(ctx context.Context, providers []string) error {
		return pauses.Run(ctx, rdb, rs.leaky, providers)
	}
	store := globallimit.NewRedis(rdb, c.Prefix)
	l.newGlobal = func(cfg globallimit.Config) Waiter { return globallimit.New(store, cfg) }
	shadowStore := globallimit.NewRedis(rdb, c.Prefix+"shadow:")
	l.newShadow = func(cfg globallimit.Config, lease int) *globallimit.Bucket {
		return globallimit.New(shadowStore, cfg, globallimit.WithLeaseSize(lease))
	}
	l.SetGlobal(c.Global)
	return l, nil
}

// Health says whether every operation the limits run can reach its
// server. A standalone server (or Sentinel's current master) answers a
// PING. A Redis Cluster is healthy only when every master of its slot map
// answers, the map read anew first: a ping to any one node would answer
// while the master of a provider's queue is dead, and a client whose map
// is stale keeps dialling a master a failover has replaced (go-redis
// reloads it by itself only every ClusterStateReloadInterval, or on a
// MOVED). The reload is what lets the limits follow a failover as soon as
// the cluster has promoted a replica.
func Health(ctx context.Context, rdb redis.UniversalClient) error {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return rdb.Ping(ctx).Err()
	}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		if err := c.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("cluster master %s: %w", c.Options().Addr, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis cluster: %w", err)
	}
	return nil
}

// Bucket is the fleet bucket in use, nil when there is none.
func (l *Set) Bucket() Waiter {
	l.gmu.Lock()
	defer l.gmu.Unlock()
	return l.Global
}

// Buckets are the fleet bucket and its shadow in use (nil: none), read
// together: one lock per job for both.
func (l *Set) Buckets() (Waiter, *globallimit.Bucket) {
	l.gmu.Lock()
	defer l.gmu.Unlock()
	return l.Global, l.shadow
}

// SetGlobal configures the fleet bucket: off (nil), on, or a new rate and
// burst for the bucket in place (waiters keep their turn); and its shadow
// (global.shadow_rate) likewise.
func (l *Set) SetGlobal(cfg *globallimit.Config) {
	l.gmu.Lock()
	defer l.gmu.Unlock()
	l.setShadow(cfg)
	if cfg != nil && cfg.ShadowRate != 0 {
		enforced := *cfg
		enforced.ShadowRate = 0 // the bucket's own configuration: a new shadow rate does not reset it
		cfg = &enforced
	}
	switch {
	case cfg == nil:
		l.Global = nil
	case l.Global != nil && l.globalCfg != nil:
		if b, ok := l.Global.(interface{ SetConfig(globallimit.Config) }); ok {
			g := *cfg
			if l.RateDivisor > 1 {
				g.Rate /= float64(l.RateDivisor)
				g.Burst = max(1, g.Burst/l.RateDivisor)
			}
			b.SetConfig(g)
		}
	case l.newGlobal != nil:
		l.Global = l.newGlobal(*cfg)
	}
	l.globalCfg = cfg
}

// setShadow configures the shadow bucket from the fleet bucket's
// configuration, under gmu: a new one for a new configuration (a shadow
// only counts: the leased tokens it drops cost nothing).
//
// It leases the shadow's tokens in the enforced bucket's lease size when
// that is larger: a shadow rate far under the enforced one would otherwise
// cost a round trip every few jobs. Its count may then be off by that
// many tokens per process in a window, as the enforced bucket's admission
// is.
func (l *Set) setShadow(cfg *globallimit.Config) {
	var sc globallimit.Config
	on := false
	if cfg != nil {
		sc, on = cfg.Shadow()
	}
	if !on || l.newShadow == nil {
		l.shadow, l.shadowCfg = nil, globallimit.Config{}
		return
	}
	enforced := *cfg
	enforced.ShadowRate = 0
	lease := max(globallimit.LeaseSize(enforced), globallimit.LeaseSize(sc))
	if l.RateDivisor > 1 {
		sc.Rate /= float64(l.RateDivisor)
		sc.Burst = max(1, sc.Burst/l.RateDivisor)
	}
	if l.shadow != nil && l.shadowCfg == *cfg {
		return
	}
	l.shadow, l.shadowCfg = l.newShadow(sc, lease), *cfg
}

// redisSet is the Redis backends of a limit set, typed, for pipelining.
type redisSet struct {
	ledger   *ledger.Redis
	users    *userlimit.Redis
	leaky    *leaky.Redis
	suppress *suppress.Redis
	batch    *pipeBatcher // the admissions and sent records of all workers, pipelined together
}

// load puts every script in the servers' script caches, which a pipeline
// needs (a NOSCRIPT inside a pipeline does not fall back to EVAL).
func (r *redisSet) load(ctx context.Context) error {
	if err := r.ledger.Load(ctx); err != nil {
		return err
	}
	if err := r.users.Load(ctx); err != nil {
		return fmt.Errorf("load user limit scripts: %w", err)
	}
	if err := r.leaky.Load(ctx); err != nil {
		return fmt.Errorf("load leaky bucket scripts: %w", err)
	}
	return nil
}

// Memory is an in-process limit set: the demo's, and the fallback of
// redis.on_failure: local, where divisor is the number of live instances
// last seen, so that each process takes its share of every contract and of
// the fleet bucket. It returns an error when c is out of range (its
// Headroom).
func Memory(c Config, divisor int) (*Set, error) {
	q, err := leaky.NewMemory(leaky.WithMaxCost(max(1, c.MaxCost)), leaky.WithHeadroom(c.headroom()))
	if err != nil {
		return nil, fmt.Errorf("local limits: %w", err)
	}
	divisor = max(1, divisor)
	l := &Set{
		Name:        "local",
		Ledger:      ledger.NewMemory(c.DedupTTL),
		Users:       userlimit.NewMemory(),
		Leaky:       q,
		Suppress:    suppress.NewMemory(nil),
		Digests:     digest.NewMemory(nil),
		Reasons:     fleet.MemoryPauseReasons(nil),
		RateDivisor: divisor,
	}
	store := globallimit.NewMemory()
	l.newGlobal = func(g globallimit.Config) Waiter {
		g.Rate /= float64(divisor)
		g.Burst = max(1, g.Burst/divisor)
		return globallimit.New(store, g)
	}
	shadowStore := globallimit.NewMemory()
	l.newShadow = func(g globallimit.Config, _ int) *globallimit.Bucket { return globallimit.New(shadowStore, g) } // divided by setShadow; no round trips to save
	l.SetGlobal(c.Global)
	return l, nil
}

// Waiter is the fleet bucket: globallimit.Bucket. TakeLeased is the path
// of almost every job (a token of the lease at hand, no wait, no timer);
// Wait, the rest.
type Waiter interface {
	TakeLeased() bool
	Wait(ctx context.Context) error
}

// Set is one set of limit backends the pipeline runs on: Redis-backed
// for the fleet, or in-memory (the demo, and redis.on_failure: local).
type Set struct {
	Name   string // "redis" or "local", for logs and readiness
	Ledger ledger.Ledger
	Users  userlimit.Limiter
	Global Waiter // nil: no fleet bucket
	Leaky  leaky.Queue
	// Suppress is the list of dead recipients (nil: none kept).
	Suppress suppress.Store
	// Digests holds the jobs of caps with on_exceed: digest.
	Digests digest.Store
	// RateDivisor divides every provider contract (local mode: the live
	// instances last seen, so the fleet stays within each contract). 0 or 1:
	// the contract as configured.
	RateDivisor int
	// Ping checks that the backend is reachable (nil: always).
	Ping func(ctx context.Context) error
	// Pauses is this process's view of the providers' 429 pauses, kept by
	// Watch; nil: ask Leaky.PausedFor (a round trip) before each send.
	Pauses *leaky.PauseWatcher
	// Watch feeds Pauses until ctx ends; the dispatcher runs it.
	Watch func(ctx context.Context, providers []string) error
	// Reasons records which pauses are for a provider's credentials (nil:
	// every pause is a rate limit's, and a refused sender pauses like one).
	Reasons fleet.PauseReasons

	redis *redisSet // set by Redis: decisions can be pipelined

	gmu       sync.Mutex                      // guards Global and shadow on a reload
	globalCfg *globallimit.Config             // what Global was set up with
	newGlobal func(globallimit.Config) Waiter // builds a bucket on this set's store
	// shadow is the fleet bucket's shadow (global.shadow_rate), nil when
	// there is none; newShadow builds it on this set's shadow store.
	shadow    *globallimit.Bucket
	shadowCfg globallimit.Config // the fleet configuration shadow was built for
	newShadow func(cfg globallimit.Config, lease int) *globallimit.Bucket
}

// PauseReason is why provider is paused: fleet.PauseCredentials or
// fleet.PauseRateLimited.
func (l *Set) PauseReason(ctx context.Context, provider string) string {
	if l.Reasons == nil {
		return fleet.PauseRateLimited
	}
	r, err := l.Reasons.Reason(ctx, provider)
	if err != nil {
		return fleet.PauseRateLimited
	}
	return r
}

// PausedFor is how long provider's pause still lasts.
func (l *Set) PausedFor(ctx context.Context, provider string) (time.Duration, error) {
	if l.Pauses != nil {
		return l.Pauses.PausedFor(provider), nil
	}
	return l.Leaky.PausedFor(ctx, provider)
}

// Contract is provider p's contract as its leaky queue paces it: its
// rate and max_queue_delay, and the headroom of its jitter_budget (none:
// the queue's default). Everything that reads a provider's queue (the
// dispatcher, `notifier status`) builds it here.
func Contract(p providers.Config) leaky.Contract {
	c := leaky.Contract{Rate: p.Rate, MaxQueueDelay: p.MaxQueueDelay}
	if p.JitterBudget > 0 {
		c.Headroom = leaky.HeadroomFor(p.JitterBudget)
	}
	if p.Adaptive != nil {
		a := p.Adaptive.WithDefaults(p.Rate) // normally filled already: no copy of the whole config per job
		c.Adaptive = &leaky.Adaptive{MinRate: a.MinRate, Decrease: a.Decrease, IncreasePerS: a.IncreasePerS, Quiet: a.Quiet}
	}
	if len(p.Quotas) > 0 {
		c.Quotas = make([]leaky.Quota, len(p.Quotas))
		for i, q := range p.Quotas {
			c.Quotas[i] = leaky.Quota{Limit: q.Limit, Per: q.Per}
		}
	}
	return c
}

// ContractOf is p's contract on l: on local limits each rate, and each
// quota, divided among the live instances.
func (l *Set) ContractOf(p providers.Config) leaky.Contract {
	c := Contract(p)
	if n := l.RateDivisor; n > 1 {
		c.Rate /= float64(n)
		if a := c.Adaptive; a != nil {
			a.MinRate, a.IncreasePerS = a.MinRate/float64(n), a.IncreasePerS/float64(n)
		}
		for i := range c.Quotas {
			c.Quotas[i].Limit = max(1, c.Quotas[i].Limit/int64(n))
		}
	}
	return c
}
