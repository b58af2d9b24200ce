package leaky

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Contract is a provider's rate contract, built by the dispatcher from the
// provider's configuration.
type Contract struct {
	Rate          float64       // units per second, fleet-wide (> 0)
	MaxQueueDelay time.Duration // the queue's bound as time: depth = Rate × MaxQueueDelay (>= 0)
	// Headroom, when > 0, replaces the queue's (WithHeadroom) for this
	// provider: the fraction under Rate it paces, in [0, 0.5). With
	// headroom h, any 1 s window of arrivals holds at most Rate units while
	// the arrivals lag their slots by less than h/(1−h) seconds (the jitter
	// budget).
	Headroom float64
	// ColdStart, when not nil, is how far ahead of now a reservation that
	// finds no trusted state (a provider's first start, a Redis wiped or
	// failed over) starts the queue, in place of the safe default,
	// max_queue_delay plus one interval at the largest cost (see the
	// package doc). It is for a caller that knows no slot handed out before
	// lies later than now + *ColdStart: 0 on a first start. It is clamped
	// to [0, that default]. Only reservations read it; Memory ignores it
	// (it starts a provider at now).
	ColdStart *time.Duration
}

// HeadroomFor is the headroom that gives a jitter budget b: arrivals may
// lag their slots by up to b without any 1 s window holding more than the
// contract (h/(1−h) = b in seconds).
func HeadroomFor(b time.Duration) float64 {
	s := b.Seconds()
	return s / (1 + s)
}

// Reservation is the answer of Reserve.
type Reservation struct {
	OK         bool          // false: the queue is full
	Delay      time.Duration // OK: wait this long, then send
	RetryAfter time.Duration // !OK: try again after this long

	// Slot is the reserved send time in microseconds since the Unix epoch on
	// the backend's clock (the Redis TIME for Redis); 0 when !OK. It is for
	// tests and tracing: act on Delay, since a worker's clock is not the
	// backend's.
	Slot int64

	seq int64 // the state's write counter after this reservation, for Cancel
}

// Queue is a provider's leaky bucket as a virtual queue. Implementations
// are safe for concurrent use.
type Queue interface {
	// Reserve takes the next send slot for cost units (cost >= 1).
	Reserve(ctx context.Context, provider string, c Contract, cost int) (Reservation, error)
	// Cancel gives back an unused reservation (a job that will not be sent
	// after all) when no later reservation or pause followed it, so that
	// two sends can never come closer than the contract. Otherwise, and for
	// a reservation that was not OK, it does nothing. r and cost must be
	// those of the Reserve call.
	Cancel(ctx context.Context, provider string, c Contract, r Reservation, cost int) error
	// Pause pushes every later slot past now+d (tat = max(tat, now+d)) and
	// records the pause end, so that a job already holding an earlier slot
	// can see it with PausedFor before it sends. d <= 0 does nothing.
	Pause(ctx context.Context, provider string, d time.Duration) error
	// Resume lifts the provider's pause before its end (an operator's
	// `notifier resume`) and returns what was left of it. The queue's
	// later slots start at most c's max_queue_delay (plus one interval)
	// from now, after every slot granted before: the contract holds, and
	// sends resume within max_queue_delay.
	Resume(ctx context.Context, provider string, c Contract) (time.Duration, error)
	// PausedFor is how long the provider's pause still lasts; 0 when no
	// pause is in force.
	PausedFor(ctx context.Context, provider string) (time.Duration, error)
	// Depth is the number of units queued now: max(0, tat − now) / interval.
	Depth(ctx context.Context, provider string, c Contract) (float64, error)
}

// Default option values.
const (
	DefaultHeadroom = 0.01           // pace 1 % under the contract
	DefaultMaxCost  = 1              // the cold start leaves room for one unit
	DefaultIdleTTL  = 24 * time.Hour // state outlives its drained queue by this
)

// Option configures a Memory or Redis queue.
type Option func(*options)

type options struct {
	headroom float64
	maxCost  int
	idleTTL  time.Duration
	now      func() time.Time
	noGuard  bool
}

func buildOptions(opts []Option) options {
	o := options{headroom: DefaultHeadroom, maxCost: DefaultMaxCost, idleTTL: DefaultIdleTTL}
	for _, opt := range opts {
		opt(&o)
	}
	if !(o.headroom >= 0 && o.headroom < 0.5) {
		panic(fmt.Sprintf("leaky: headroom must be in [0, 0.5), got %v", o.headroom))
	}
	if o.maxCost < 1 {
		panic(fmt.Sprintf("leaky: max cost must be at least 1, got %d", o.maxCost))
	}
	if o.idleTTL < 0 {
		panic(fmt.Sprintf("leaky: idle TTL must not be negative, got %s", o.idleTTL))
	}
	return o
}

// WithHeadroom paces the fraction h under the contract: the interval per
// unit is 1/(rate·(1−h)). Default 0.01 (1 %), which absorbs the ~±1 ms
// jitter of Go timers at contracts up to several hundred per second. It
// panics unless 0 <= h < 0.5.
func WithHeadroom(h float64) Option { return func(o *options) { o.headroom = h } }

// WithMaxCost is the largest cost a single reservation takes (SMS segments
// per message). A cold start leaves room for one such reservation after the
// last slot a lost state may have handed out. Default 1. It panics when n < 1.
func WithMaxCost(n int) Option { return func(o *options) { o.maxCost = n } }

// WithIdleTTL is how long the Redis state outlives its drained queue (plus
// max_queue_delay) before it expires. A provider whose state expired starts
// cold (see the package doc), so keep it longer than the usual gap between
// a provider's sends. Default 24 h; 0 expires the state as soon as it no
// longer matters for pacing. Memory ignores it.
func WithIdleTTL(d time.Duration) Option { return func(o *options) { o.idleTTL = d } }

// WithoutFailoverGuard drops the Redis backend's failover guard (the run_id
// check, see the package doc), saving one INFO call per reserve and cancel.
// Only for a Redis that cannot come back with an old state: no replicas, no
// Sentinel or Cluster failover, no RDB or AOF persistence. A missing state
// still starts cold. Memory ignores it.
func WithoutFailoverGuard() Option { return func(o *options) { o.noGuard = true } }

// WithNow replaces the backend's clock. Memory reads it instead of its now
// argument; Redis sends it to its scripts as the optional now argument
// instead of reading the Redis TIME. For tests only (step-by-step
// comparison of the backends): with it, a fleet no longer shares one clock.
func WithNow(now func() time.Time) Option { return func(o *options) { o.now = now } }

// plan is a validated request in integer microseconds, computed once in Go
// so that the Memory and Redis backends do exactly the same arithmetic.
type plan struct {
	inc  int64 // µs the reservation adds to tat: ⌈cost × interval⌉
	mqd  int64 // max queue delay, µs
	cold int64 // µs a stateless queue starts ahead of now: mqd + ⌈maxCost × interval⌉
	// start is cold as a reservation uses it: the contract's ColdStart,
	// clamped to [0, cold], when it has one.
	start int64
}

// headroomOf is c's headroom: its own, else the queue's.
func (o *options) headroomOf(c Contract) float64 {
	if c.Headroom > 0 {
		return c.Headroom
	}
	return o.headroom
}

// effRate is the pacing rate in units per second, headroom taken off.
func effRate(c Contract, headroom float64) float64 { return c.Rate * (1 - headroom) }

// costMicros is ⌈cost / rate⌉ in µs (at least 1; at most maxLuaMicros,
// never an int64 overflow).
func costMicros(cost int, rate float64) int64 {
	us := math.Ceil(float64(cost) * 1e6 / rate)
	switch {
	case us < 1:
		return 1
	case !(us <= maxLuaMicros): // NaN too
		return maxLuaMicros
	}
	return int64(us)
}

// MinRate is the slowest contract a queue paces: one unit a day. Slower,
// a unit's interval in integer microseconds (times a message's cost) would
// leave the range a Lua number holds exactly.
const MinRate = 1.0 / 86400

// maxLuaMicros bounds every µs value passed to the scripts: 2^53, the
// largest integer a Lua number holds exactly.
const maxLuaMicros = 1 << 53

func (c Contract) validate() error {
	switch {
	case math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("rate must be a finite number, got %v", c.Rate)
	case c.Rate <= 0:
		return fmt.Errorf("rate must be greater than 0, got %v", c.Rate)
	case c.Rate < MinRate:
		return fmt.Errorf("rate must be at least %g (one a day), got %v", MinRate, c.Rate)
	case c.MaxQueueDelay < 0:
		return fmt.Errorf("max queue delay must not be negative, got %s", c.MaxQueueDelay)
	case !(c.Headroom >= 0 && c.Headroom < 0.5):
		return fmt.Errorf("headroom must be in [0, 0.5), got %v", c.Headroom)
	case c.MaxQueueDelay.Microseconds() > maxLuaMicros/4:
		return fmt.Errorf("max queue delay %s is too long to keep in microseconds", c.MaxQueueDelay)
	}
	return nil
}

func (o *options) plan(c Contract, cost int) (plan, error) {
	if err := c.validate(); err != nil {
		return plan{}, err
	}
	if cost < 1 {
		return plan{}, fmt.Errorf("cost must be at least 1, got %d", cost)
	}
	r := effRate(c, o.headroomOf(c))
	mqd := c.MaxQueueDelay.Microseconds()
	inc, most := costMicros(cost, r), costMicros(o.maxCost, r)
	if inc > maxLuaMicros/4 || most > maxLuaMicros/4 {
		return plan{}, fmt.Errorf("cost %d (at most %d) at %v/s: a send interval of %d µs is too long to keep in microseconds", cost, o.maxCost, c.Rate, max(inc, most))
	}
	p := plan{inc: inc, mqd: mqd, cold: mqd + most, start: mqd + most}
	if c.ColdStart != nil {
		p.start = min(max(c.ColdStart.Microseconds(), 0), p.cold)
	}
	return p, nil
}

// depthUnits converts a queue length in µs into units.
func depthUnits(queuedMicros int64, c Contract, headroom float64) float64 {
	if queuedMicros <= 0 {
		return 0
	}
	return float64(queuedMicros) * effRate(c, headroom) / 1e6
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
