package leaky

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/notifier/notifier/internal/luapre"
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
	// Adaptive, when set, paces at an effective rate between MinRate and
	// Rate that drops on Backoff to just under where the provider
	// throttled, holds there and probes above it (see Adaptive).
	Adaptive *Adaptive
	// Quotas are exact, fleet-wide counts per window beside Rate: at most
	// Limit units are given slots in each window of length Per, windows
	// aligned to the Unix epoch on the backend's clock (a 24h quota is a
	// UTC day; 1m, a clock minute). At most MaxQuotas.
	Quotas []Quota
}

// Adaptive makes a contract's rate adaptive, fleet-wide, so that it holds
// a provider's real limit when it is below Rate. Each Backoff that starts a
// pause dates the rate the throttled sends were paced at, e, and remembers
// a target just under it (e × AdaptiveKeep); met while the rate climbed,
// the fleet resumes at the target at once, else (a rate held: the limit
// fell) it drops to e × Decrease and climbs back by IncreasePerS a second,
// from Quiet on, up to the target. It holds the target until Quiet +
// AdaptiveHold after the backoff, then probes above it, climbing ever
// faster, up to Rate; a limit that rose is found so, and one that did not
// answers the probe with a 429, which returns the fleet to the target.
// Never below MinRate. The effective rate is kept to a millionth of a unit
// per second (see the package doc).
//
// AIMD, which this replaces, sawed between Decrease and 100 % of the limit:
// 43 of a real 60/s behind a 100/s contract with Decrease 0.7, where this
// holds 57.
type Adaptive struct {
	MinRate      float64       // floor of the effective rate, units/s; 0 < MinRate <= Rate
	Decrease     float64       // factor on a Backoff met at a rate held (the limit fell), in (0, 1)
	IncreasePerS float64       // units/s the rate climbs per second, back to the target and in a probe's first second, > 0
	Quiet        time.Duration // the climb starts this long after the last backoff, >= 0
}

// Quota is a count of units per window, beside a contract's rate.
type Quota struct {
	Limit int64         // units per window, >= 1
	Per   time.Duration // window length, >= 1s, a whole number of seconds
}

// Shape is what Queue.Shape reads of a provider's shaping state.
type Shape struct {
	// EffectiveRate is the rate the queue paces at now, units/s, before
	// the headroom: Rate unless the contract is adaptive and backed off.
	EffectiveRate float64
	// Target is, for an adaptive contract that backed off, the rate it
	// returns to and holds before probing above: just under where the
	// provider's limit was met (units/s); 0 when it has not backed off.
	Target float64
	// Quotas are the contract's quotas, in its order.
	Quotas []QuotaState
}

// QuotaState is one quota's window: the one the latest slots count in,
// the current window or, when its units are spent and slots already went
// on to the next, that one.
type QuotaState struct {
	Limit, Used int64
	Per         time.Duration
	ResetsIn    time.Duration // when the window ends, from now on the backend's clock
}

// HeadroomFor is the headroom that gives a jitter budget b: arrivals may
// lag their slots by up to b without any 1 s window holding more than the
// contract (h/(1−h) = b in seconds).
func HeadroomFor(b time.Duration) float64 {
	s := b.Seconds()
	return s / (1 + s)
}

// JitterFor is the jitter budget a headroom h gives, the inverse of
// HeadroomFor: h/(1−h) seconds.
func JitterFor(h float64) time.Duration {
	return time.Duration(h / (1 - h) * float64(time.Second))
}

// Reservation is the answer of Reserve.
type Reservation struct {
	OK         bool          // false: the queue is full
	Delay      time.Duration // OK: wait this long, then send
	RetryAfter time.Duration // !OK: try again after this long
	// Paused is, when !OK, the provider's pause (Pause, Backoff) still to
	// run at the call, 0 when none: a queue refused because of a pause says
	// so in the same round trip.
	Paused time.Duration

	// Quota is, when !OK, the index in Contract.Quotas of the quota whose
	// window is spent (RetryAfter then runs to when the next window's
	// first slot comes within MaxQueueDelay); -1 otherwise.
	Quota int

	// Slot is the reserved send time in microseconds since the Unix epoch on
	// the backend's clock (the Redis TIME for Redis); 0 when !OK. It is for
	// tests and tracing: act on Delay, since a worker's clock is not the
	// backend's.
	Slot int64

	seq int64 // the state's write counter after this reservation, for Cancel
	// shaped is, for a reservation under a shaped contract (adaptive or
	// with quotas), what Cancel needs; nil otherwise. A pointer, so that
	// a Reservation stays small enough to be returned in registers.
	shaped *shapedRes
}

// shapedRes is what Cancel needs of a shaped reservation.
type shapedRes struct {
	inc  int64 // µs the reservation added to tat, at the effective rate
	cost int   // its units
}

// Queue is a provider's leaky bucket as a virtual queue. Implementations
// are safe for concurrent use.
type Queue interface {
	// Reserve takes the next send slot for cost units (cost >= 1).
	Reserve(ctx context.Context, provider string, c Contract, cost int) (Reservation, error)
	// Cancel gives back an unused reservation (a job that will not be sent
	// after all) when no later reservation or pause followed it, so that
	// two sends can never come closer than the contract; its units then go
	// back to the quota windows they counted in. When something followed,
	// the slot stays taken, but its units still leave each quota window
	// that is the slot's own and still the current one, so slots nobody
	// used do not eat a quota. For a reservation that was not OK it does
	// nothing. r and cost must be those of the Reserve call, and each
	// reservation is cancelled at most once.
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
	// Backoff is Pause (the provider answered 429 or an explicit throttle)
	// that also, for a contract with Adaptive, sets the effective rate from
	// the rate the throttled sends were paced at (see Adaptive and the
	// package doc) — once per pause: only when no pause was in force at the
	// call, so that the many workers that met the same 429 set it once. It
	// reports whether the rate is now lower than it was (false when it
	// already is at MinRate, though the quiet then restarts). d <= 0 does
	// nothing, as for Pause.
	Backoff(ctx context.Context, provider string, c Contract, d time.Duration) (lowered bool, err error)
	// Shape reads, without changing anything, the provider's effective rate
	// (Rate when not adaptive) and, for each quota, the window's units used,
	// its limit and when it ends (backend clock → as a duration from now).
	Shape(ctx context.Context, provider string, c Contract) (Shape, error)
}

// Default option values.
const (
	// DefaultHeadroom paces 1.5 % under each contract: a 100/s contract
	// sends one unit every 10.153 ms, which leaves 15.2 ms (JitterFor) for
	// the jitter of a send's arrival (5 ms of it for a late worker, the
	// dispatcher's LateTolerance). 1 % left too little on a busy 2-core
	// machine, where the HTTP path alone jitters by up to 9 ms. It is the
	// dispatcher's default too (limits.Config).
	DefaultHeadroom = 0.015
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

// buildOptions applies opts to the defaults and returns every problem of
// the result, joined.
func buildOptions(opts []Option) (options, error) {
	o := options{headroom: DefaultHeadroom, maxCost: DefaultMaxCost, idleTTL: DefaultIdleTTL}
	for _, opt := range opts {
		opt(&o)
	}
	var errs []error
	if !(o.headroom >= 0 && o.headroom < 0.5) { // NaN too
		errs = append(errs, fmt.Errorf("headroom must be in [0, 0.5), got %v", o.headroom))
	}
	if o.maxCost < 1 {
		errs = append(errs, fmt.Errorf("max cost must be at least 1, got %d", o.maxCost))
	}
	switch {
	case o.idleTTL < 0:
		errs = append(errs, fmt.Errorf("idle TTL must not be negative, got %s", o.idleTTL))
	case o.idleTTL > luapre.MaxTTL:
		errs = append(errs, fmt.Errorf("idle TTL must be at most %d days (luapre.MaxTTL: no script writes a longer expiry), got %s", int(luapre.MaxTTL.Hours()/24), o.idleTTL))
	}
	return o, errors.Join(errs...)
}

// WithHeadroom paces the fraction h under the contract: the interval per
// unit is 1/(rate·(1−h)). Default DefaultHeadroom (1.5 %), which absorbs
// the jitter of Go timers and of the send path (see DefaultHeadroom).
// NewMemory and NewRedis return an error unless 0 <= h < 0.5.
func WithHeadroom(h float64) Option { return func(o *options) { o.headroom = h } }

// WithMaxCost is the largest cost a single reservation takes (SMS segments
// per message). A cold start leaves room for one such reservation after the
// last slot a lost state may have handed out. Default 1. NewMemory and
// NewRedis return an error when n < 1.
func WithMaxCost(n int) Option { return func(o *options) { o.maxCost = n } }

// WithIdleTTL is how long the Redis state outlives its drained queue (plus
// max_queue_delay) before it expires. A provider whose state expired starts
// cold (see the package doc), so keep it longer than the usual gap between
// a provider's sends. Default 24 h; 0 expires the state as soon as it no
// longer matters for pacing. NewMemory and NewRedis return an error when
// d < 0 or d > luapre.MaxTTL (735 days); Memory otherwise ignores it.
func WithIdleTTL(d time.Duration) Option { return func(o *options) { o.idleTTL = d } }

// WithoutFailoverGuard drops the Redis backend's failover guard (the run_id
// check, see the package doc), saving one INFO call per reserve and cancel.
// Only for a Redis that cannot come back with an old state: no replicas, no
// Sentinel or Cluster failover, no RDB or AOF persistence. A missing state
// still starts cold. Memory ignores it.
func WithoutFailoverGuard() Option { return func(o *options) { o.noGuard = true } }

// WithNow sets the backend's clock; nil keeps its own. Memory reads it
// (default time.Now). Redis sends it to its scripts as their optional now
// argument instead of reading the Redis TIME: for tests only (a fake clock,
// step-by-step comparison of the backends), since with it a fleet no longer
// shares one clock.
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
func (o *options) headroomOf(c *Contract) float64 {
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

func (c *Contract) validate() error {
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
	if c.Adaptive == nil && len(c.Quotas) == 0 {
		return nil
	}
	return c.validateShape()
}

// validateShape validates c's Adaptive and Quotas (off the plain path).
func (c *Contract) validateShape() error {
	if a := c.Adaptive; a != nil {
		switch {
		case c.Rate > MaxAdaptiveRate:
			return fmt.Errorf("rate of an adaptive contract must be at most %g, got %v", float64(MaxAdaptiveRate), c.Rate)
		case !(a.MinRate > 0 && a.MinRate <= c.Rate): // NaN too
			return fmt.Errorf("adaptive min rate must be in (0, rate %v], got %v", c.Rate, a.MinRate)
		case a.MinRate < MinRate:
			return fmt.Errorf("adaptive min rate must be at least %g (one a day), got %v", MinRate, a.MinRate)
		case !(a.Decrease > 0 && a.Decrease < 1):
			return fmt.Errorf("adaptive decrease must be in (0, 1), got %v", a.Decrease)
		case !(a.IncreasePerS > 0 && a.IncreasePerS <= MaxIncreasePerS):
			return fmt.Errorf("adaptive increase per second must be in (0, %g], got %v", float64(MaxIncreasePerS), a.IncreasePerS)
		case a.Quiet < 0:
			return fmt.Errorf("adaptive quiet must not be negative, got %s", a.Quiet)
		case a.Quiet.Microseconds() > maxLuaMicros/4:
			return fmt.Errorf("adaptive quiet %s is too long to keep in microseconds", a.Quiet)
		}
	}
	if len(c.Quotas) > MaxQuotas {
		return fmt.Errorf("at most %d quotas, got %d", MaxQuotas, len(c.Quotas))
	}
	for i, q := range c.Quotas {
		switch {
		case q.Limit < 1:
			return fmt.Errorf("quotas[%d]: limit must be at least 1, got %d", i, q.Limit)
		case q.Limit > maxLuaMicros/4:
			return fmt.Errorf("quotas[%d]: limit must be at most %d, got %d", i, int64(maxLuaMicros/4), q.Limit)
		case q.Per < time.Second || q.Per%time.Second != 0:
			return fmt.Errorf("quotas[%d]: per must be a whole number of seconds, at least 1s, got %s", i, q.Per)
		case q.Per > MaxQuotaPer:
			return fmt.Errorf("quotas[%d]: per must be at most %s, got %s", i, MaxQuotaPer, q.Per)
		}
	}
	return nil
}

// Limits of shaped contracts, so that every value the scripts compute
// stays an integer below 2^53 (see the package doc).
const (
	MaxQuotas       = 4                    // quotas per contract
	MaxQuotaPer     = 366 * 24 * time.Hour // longest quota window
	MaxAdaptiveRate = 10_000_000           // units/s: above 1e6/s the interval is 1 µs anyway
	MaxIncreasePerS = 9000                 // units/s per second
	MaxAdaptiveCost = 8000                 // units per reservation under an adaptive contract
)

// plan validates a request of cost units under c, and returns its plan and,
// for a shaped contract (Adaptive or Quotas), its shape; nil for a plain
// one (the scripts' fast path). The plan stays four words, kept in
// registers on the hot path.
func (o *options) plan(c *Contract, cost int) (plan, *shapePlan, error) {
	if err := c.validate(); err != nil {
		return plan{}, nil, err
	}
	if cost < 1 {
		return plan{}, nil, fmt.Errorf("cost must be at least 1, got %d", cost)
	}
	h := o.headroomOf(c)
	r := c.Rate * (1 - h)
	mqd := c.MaxQueueDelay.Microseconds()
	inc, most := costMicros(cost, r), costMicros(o.maxCost, r)
	if inc > maxLuaMicros/4 || most > maxLuaMicros/4 {
		return plan{}, nil, fmt.Errorf("cost %d (at most %d) at %v/s: a send interval of %d µs is too long to keep in microseconds", cost, o.maxCost, c.Rate, max(inc, most))
	}
	p := plan{inc: inc, mqd: mqd, cold: mqd + most, start: mqd + most}
	if c.ColdStart != nil {
		p.start = min(max(c.ColdStart.Microseconds(), 0), p.cold)
	}
	if c.Adaptive == nil && len(c.Quotas) == 0 {
		return p, nil, nil
	}
	sp, err := newShapePlan(c, h, cost)
	if err != nil {
		return plan{}, nil, err
	}
	return p, sp, nil
}

// depthUnits converts a queue length in µs into units.
func depthUnits(queuedMicros int64, c Contract, headroom float64) float64 {
	if queuedMicros <= 0 {
		return 0
	}
	return float64(queuedMicros) * effRate(c, headroom) / 1e6
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
