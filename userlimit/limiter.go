package userlimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/notifier/notifier/internal/text"
)

// Key names whose sends a Rule counts: one user on one channel.
type Key struct {
	Channel string
	User    string
}

// Result is one decision.
type Result struct {
	// Allowed reports whether the job may be sent now.
	Allowed bool
	// Remaining is how many more jobs this key may send now, after this one.
	Remaining int
	// RetryAfter is, when denied, how long until a job would be allowed if
	// nothing else is admitted meanwhile (what on_exceed: defer waits). It is
	// 0 when allowed.
	RetryAfter time.Duration
	// At is, when allowed, the instant the job's admission stands at: the
	// instant decided for, or, for a job admitted before and decided again
	// for now, the instant of that admission. Zero when denied.
	At time.Time
}

// Limiter decides whether one job of a key may be sent under a rule.
//
// A decision is for an instant: Allow decides for now, AllowAt for a given
// instant, the time the job will really be sent (the dispatcher passes its
// send slot, which may lie seconds ahead in a provider's queue). The cap
// counts admissions by those instants, so it holds where the user feels it,
// at the provider: a job admitted now and sent later is counted when it is
// sent. Instants may be decided in any order; every algorithm keeps its
// bound over the instants admitted (see the package documentation).
//
// jobID makes a decision idempotent: the same job id decided again for now
// within its window (a JetStream redelivery) is allowed again without
// counting twice, where its admission stands (Result.At). Decided with
// AllowAt for another instant, its admission moves there: withdrawn from
// where it stood and decided anew, so it still counts once, at the instant
// it is sent; a job denied there holds no admission at all. A denied
// decision counts nothing. An invalid rule or an empty job id is an error,
// never a panic; an instant before now is taken as now, and one more than
// MaxAhead after now is an error.
type Limiter interface {
	Allow(ctx context.Context, key Key, jobID string, rule Rule) (Result, error)
	AllowAt(ctx context.Context, key Key, jobID string, rule Rule, at time.Time) (Result, error)
}

var (
	_ Limiter = (*Memory)(nil)
	_ Limiter = (*Redis)(nil)
)

// Option configures a Memory or Redis limiter.
type Option func(*options)

type options struct {
	now func() time.Time // nil: the backend's own clock
}

func buildOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithNow sets the limiter's clock; nil keeps its own. Memory reads it
// (default time.Now; only its Unix microseconds matter). Redis sends it to
// its scripts as their optional now argument instead of reading the
// server's TIME: for tests only (a fake clock, step-by-step comparison of
// the backends), since with it the processes no longer share one clock.
func WithNow(now func() time.Time) Option { return func(o *options) { o.now = now } }

// ErrNotLoaded is wrapped by a Decision's error when Redis did not have the
// script cached (NOSCRIPT), which inside a pipeline has no EVAL fallback:
// call Redis.Load and decide again. A restart, a failover or SCRIPT FLUSH
// empties the cache.
var ErrNotLoaded = errors.New("script not loaded on the server (call Load)")

// errZeroInstant refuses AllowAt for the zero time.
var errZeroInstant = errors.New("instant is the zero time")

// errTooFarAhead refuses AllowAt for an instant more than MaxAhead after
// now (the Redis scripts refuse it too).
var errTooFarAhead = fmt.Errorf("instant is more than %s ahead of now", text.Duration(MaxAhead))

// errEmptyJobID is returned for an empty job id, which would make every
// decision of the key look like a redelivery of the same job.
var errEmptyJobID = errors.New("job id is empty")

// prepare applies the rule's defaults and checks the call's arguments.
func prepare(key Key, jobID string, rule Rule) (Rule, error) {
	rule = rule.WithDefaults()
	if err := rule.Validate(); err != nil {
		return rule, wrapDecide(key, rule, err)
	}
	if jobID == "" {
		return rule, wrapDecide(key, rule, errEmptyJobID)
	}
	return rule, nil
}

// wrapDecide prefixes err with the operation. The user id is left out: errors
// end up in logs.
func wrapDecide(key Key, rule Rule, err error) error {
	return fmt.Errorf("decide user limit %s %s: %w", key.Channel, rule.Algorithm, err)
}

// result builds a Result from integer microseconds.
func result(allowed bool, remaining, retryMicros, atMicros int64) Result {
	r := Result{
		Allowed:    allowed,
		Remaining:  int(remaining),
		RetryAfter: time.Duration(retryMicros) * time.Microsecond,
	}
	if allowed {
		r.At = time.UnixMicro(atMicros)
	}
	return r
}
