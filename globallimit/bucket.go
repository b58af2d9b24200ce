package globallimit

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/notifier/notifier/internal/sleep"
)

// DefaultLeaseTTL is how long leased tokens stay usable by default.
const DefaultLeaseTTL = time.Second

// minSleep guards against a Store that answers "none, wait 0": Wait never
// polls faster than this.
const minSleep = time.Millisecond

// LeaseSize is the default number of tokens a Bucket takes per Store call
// for cfg: max(1, min(⌊Rate × 10 ms⌋, ⌊Burst / 50⌋)). With P processes the
// fleet then admits at most P·L tokens more than the bucket's Burst +
// Rate·t in any window of length t, which is at most P × 2 % of Burst and
// P × 10 ms worth of Rate.
func LeaseSize(cfg Config) int {
	l := min(math.Floor(cfg.Rate/100), float64(cfg.Burst/50))
	if !(l >= 1) { // also NaN
		return 1
	}
	return int(l)
}

// Option configures a Bucket (New) or a Store (NewMemory, NewRedis). Each
// option says what it applies to; the others ignore it.
type Option func(*options)

type options struct {
	lease    int // 0: LeaseSize(cfg)
	leaseTTL time.Duration
	now      func() time.Time // nil: the default clock
	sleep    func(ctx context.Context, d time.Duration) error
	window   time.Duration // TakeAll's clamp
}

func buildOptions(opts []Option) options {
	o := options{leaseTTL: DefaultLeaseTTL, sleep: sleep.For, window: MaxRefill}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithLeaseSize fixes the number of tokens a Bucket takes per Store call
// (n >= 1) instead of LeaseSize(cfg). The fleet's over-admission bound is
// P·n.
func WithLeaseSize(n int) Option {
	return func(o *options) {
		if n >= 1 {
			o.lease = n
		}
	}
}

// WithLeaseTTL sets how long a Bucket's leased tokens stay usable (default
// 1 s). It does not change the over-admission bound (a process holds at
// most one lease); it bounds how long a quiet process keeps tokens from the
// fleet.
func WithLeaseTTL(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.leaseTTL = d
		}
	}
}

// WithNow sets the clock; nil keeps the default. A Bucket expires its
// leases on it and a MemoryStore refills on it (default time.Now). A
// RedisStore sends it to its script as the now argument instead of reading
// the Redis TIME: for tests only (a fake clock, step-by-step comparison
// with MemoryStore), since with it a fleet no longer shares one clock.
func WithNow(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// WithWindow sets the furthest a TakeAll bucket's state may be ahead of
// now (default MaxRefill; at most luapre.MaxTTL): a rate slower than its
// burst per d is taken as that, and no key is written with an expiry past
// d (+1 s). A MemoryStore or a RedisStore reads it; Take ignores it (its
// Config is held to MaxRefill).
func WithWindow(d time.Duration) Option {
	return func(o *options) {
		if d >= time.Microsecond {
			o.window = d
		}
	}
}

// WithSleeper sets how a Bucket's Wait sleeps until the store's next token
// is due (default: a timer). sleep must return early with an error when
// ctx ends.
func WithSleeper(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(o *options) {
		if sleep != nil {
			o.sleep = sleep
		}
	}
}

// Bucket is what the dispatcher holds: one per process, in front of the
// fleet's Store. Wait blocks until a token is available; tokens are leased
// from the Store in small batches (see the package doc). A Bucket is safe
// for concurrent use and starts no goroutine; the zero value is not usable,
// call New.
type Bucket struct {
	store    Store
	lease    int // 0: LeaseSize(cfg)
	leaseTTL time.Duration
	now      func() time.Time
	sleep    func(ctx context.Context, d time.Duration) error

	mu      sync.Mutex
	cfg     Config
	tokens  int       // leased tokens on hand
	expires time.Time // when they expire
	// emptyUntil is when the Store said the next token is due (TryTake
	// only: it does not ask before then).
	emptyUntil time.Time
	refill     *refill // the Store call in flight, nil when none
	wake       func()  // cuts the refiller's sleep short (SetConfig); nil when none
}

// refill is one waiter's turn at the Store; the other waiters wait for done.
type refill struct {
	done chan struct{}
	err  error // the Store's error, shared with every waiter of this refill
}

// New returns a process's bucket in front of store.
func New(store Store, cfg Config, opts ...Option) *Bucket {
	o := buildOptions(opts)
	now := o.now
	if now == nil {
		now = time.Now
	}
	return &Bucket{store: store, cfg: cfg, lease: o.lease, leaseTTL: o.leaseTTL, now: now, sleep: o.sleep}
}

// SetConfig replaces the configuration (hot reload), safe concurrently with
// Wait. Leased tokens are dropped and a Wait sleeping towards the next
// token under the old rate asks the Store again at once.
func (b *Bucket) SetConfig(cfg Config) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cfg == b.cfg {
		return
	}
	b.cfg = cfg
	b.tokens = 0
	b.emptyUntil = time.Time{}
	if b.wake != nil {
		b.wake()
	}
}

// Wait blocks until the process may take one job, or ctx ends (it then
// returns ctx.Err()). A Store error (Redis unreachable, invalid
// configuration) is returned to every waiter of the failed call.
func (b *Bucket) Wait(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		b.mu.Lock()
		if b.takeLeasedLocked(b.now()) {
			b.mu.Unlock()
			return nil
		}
		if r := b.refill; r != nil {
			b.mu.Unlock()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-r.done:
			}
			if r.err != nil {
				return r.err
			}
			continue
		}
		r := &refill{done: make(chan struct{})}
		b.refill = r
		b.mu.Unlock()
		return b.fill(ctx, r)
	}
}

// TakeLeased takes a token of the lease this process holds, if one is
// left and unexpired, and never waits or calls the store: the path of
// almost every job (one store call leases LeaseSize tokens). False means
// only that no leased token was at hand: Wait or TryTake then asks.
func (b *Bucket) TakeLeased() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.takeLeasedLocked(b.now())
}

// takeLeasedLocked takes a token of the lease at now, or, when none is
// left or the lease has expired, drops what is left of it (an expired
// lease's tokens are never used). b.mu is held.
func (b *Bucket) takeLeasedLocked(now time.Time) bool {
	if b.tokens > 0 && now.Before(b.expires) {
		b.tokens--
		return true
	}
	b.tokens = 0
	return false
}

// TryTake takes a token when one is on hand or the Store grants one now,
// and otherwise says false at once: it never waits for a token. It is how
// a shadow bucket is asked (Config.ShadowRate): the jobs it finds empty are
// the traffic over its rate. When the Store says the next token is due in
// d, TryTake says false until a whole lease is due (d plus the time of the
// lease's other tokens) without asking it again, so an empty bucket costs
// one Store call per lease, as a full one does, never one per job.
// Concurrent callers share one Store call: those arriving while it is in
// flight wait for its answer.
func (b *Bucket) TryTake(ctx context.Context) (bool, error) {
	for {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		b.mu.Lock()
		now := b.now()
		if b.takeLeasedLocked(now) {
			b.mu.Unlock()
			return true, nil
		}
		if now.Before(b.emptyUntil) {
			b.mu.Unlock()
			return false, nil
		}
		if r := b.refill; r != nil {
			b.mu.Unlock()
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-r.done:
			}
			if r.err != nil {
				return false, r.err
			}
			continue
		}
		r := &refill{done: make(chan struct{})}
		b.refill = r
		cfg, n := b.cfg, b.lease
		if n == 0 {
			n = LeaseSize(cfg)
		}
		b.mu.Unlock()

		granted, wait, err := b.store.Take(ctx, cfg, n)
		b.mu.Lock()
		b.refill = nil
		switch {
		case err != nil:
			if ctx.Err() == nil {
				r.err = err // a Store failure, not our caller giving up: share it
			}
		case granted > 0:
			b.tokens, b.expires = granted-1, b.now().Add(b.leaseTTL)
		default:
			// Ask again when a whole lease is due, not the next token: an
			// empty bucket costs one Store call per lease, as a full one.
			b.emptyUntil = b.now().Add(wait + time.Duration(float64(n-1)/cfg.Rate*float64(time.Second)))
		}
		b.mu.Unlock()
		close(r.done)
		if err != nil {
			return false, err
		}
		return granted > 0, nil
	}
}

// fill is the refiller's turn: take a lease from the Store, sleeping as the
// Store says until at least one token comes; keep one for the caller and
// leave the rest to the other waiters. It returns nil when the caller has
// its token.
func (b *Bucket) fill(ctx context.Context, r *refill) (err error) {
	defer func() {
		b.mu.Lock()
		b.refill, b.wake = nil, nil
		if err != nil && ctx.Err() == nil {
			r.err = err // a Store failure, not our caller giving up: share it
		}
		b.mu.Unlock()
		close(r.done)
	}()
	for {
		b.mu.Lock()
		cfg, n := b.cfg, b.lease
		if n == 0 {
			n = LeaseSize(cfg)
		}
		b.mu.Unlock()

		granted, wait, err := b.store.Take(ctx, cfg, n)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if granted > 0 {
			b.mu.Lock()
			b.tokens = granted - 1
			b.expires = b.now().Add(b.leaseTTL)
			b.mu.Unlock()
			return nil
		}

		sctx, cancel := context.WithCancel(ctx)
		b.mu.Lock()
		b.wake = cancel
		b.mu.Unlock()
		_ = b.sleep(sctx, max(wait, minSleep))
		cancel()
		b.mu.Lock()
		b.wake = nil
		b.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
