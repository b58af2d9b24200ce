package limits

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/userlimit"
)

// Ask is what one job's admission asks of a set, all at once: the ledger's
// claim of the job, and when set the suppression list, the per-user cap
// (for now) and a speculative reservation of the send slot.
type Ask struct {
	ID, Owner string        // the job's ledger id and this delivery's lease owner
	Lease     time.Duration // how long the claim holds the job
	// Channel and ToHash: the recipient's hash on the suppression list
	// (suppress.Hash); ToHash "" asks nothing.
	Channel, ToHash string
	// Cap asks the per-user cap for now (Capped false: no cap).
	Capped bool
	CapKey userlimit.Key
	Rule   userlimit.Rule
	// Reserve reserves the send slot in Provider's queue under Contract
	// for Cost units.
	Reserve  bool
	Provider string
	Contract leaky.Contract
	Cost     int
	// Alone sends the request in a pipeline of its own, whose script runs
	// hold no other job: how a request Refused in a shared batch is asked
	// again, so that a refusal is known to be this job's.
	Alone bool
}

// Admission is the answer to an Ask. On an error, Slot may still hold a
// reservation made before the error was seen: the caller gives it back.
type Admission struct {
	Claim      ledger.Claim
	Suppressed bool             // the recipient is on the suppression list
	Cap        userlimit.Result // when Capped
	// Slot is the reservation when Reserved (Reserve was asked and it was
	// made; Slot.OK says whether a slot was given).
	Slot     leaky.Reservation
	Reserved bool
}

// Admit answers a: on Redis in one pipeline shared with the other
// workers' requests of the moment (one script run per kind of decision
// for all of them); in memory one decision after another, stopping at the
// first that ends the job (a claim not granted, a suppressed recipient, a
// cap denial). A script missing from the server's cache (a restart, a
// failover) is an error that NotLoaded recognizes: Load, then ask again.
func (l *Set) Admit(ctx context.Context, a Ask) (Admission, error) {
	if l.redis == nil {
		return l.admitInOrder(ctx, a)
	}
	r := l.redis
	var (
		adm Admission
		cc  *ledger.ClaimCmd
		sc  *redis.IntCmd
		dc  *userlimit.Decision
		rc  *leaky.ReserveCmd
	)
	queue := func(bt *pipeBatch) {
		cc = bt.claim(r.ledger, a.ID, a.Owner, a.Lease)
		if a.ToHash != "" {
			sc = r.suppress.HasCmd(ctx, bt.pipe, a.Channel, a.ToHash)
		}
		if a.Capped {
			dc = bt.allow(r.users, a.CapKey, a.ID, a.Rule, time.Time{})
		}
		if a.Reserve {
			rc = bt.reserve(r.leaky, a.Provider, a.Contract, a.Cost)
		}
	}
	// Called directly (not through a func value), so that the closure and
	// what it captures stay on the stack: 6 allocations a job otherwise.
	if a.Alone {
		r.batch.doAlone(ctx, queue)
	} else {
		r.batch.do(ctx, queue)
	}
	var errs []error
	var err error
	if adm.Claim, err = cc.Result(); err != nil {
		errs = append(errs, err)
	}
	if sc != nil {
		if n, err := sc.Result(); err != nil {
			errs = append(errs, err)
		} else {
			adm.Suppressed = n == 1
		}
	}
	if dc != nil {
		if adm.Cap, err = dc.Result(); err != nil {
			errs = append(errs, err)
		}
	}
	if rc != nil {
		if res, err := rc.Result(); err != nil {
			errs = append(errs, Shared(err))
		} else {
			adm.Slot, adm.Reserved = res, true
		}
	}
	return adm, errors.Join(errs...)
}

// admitInOrder is Admit on backends that cannot pipeline (in memory: no
// round trips to save).
func (l *Set) admitInOrder(ctx context.Context, a Ask) (Admission, error) {
	var adm Admission
	var err error
	if adm.Claim, err = l.Ledger.Claim(ctx, a.ID, a.Owner, a.Lease); err != nil {
		return Admission{}, err
	}
	if adm.Claim.Status != ledger.Claimed {
		return adm, nil
	}
	if a.ToHash != "" && l.Suppress != nil {
		if adm.Suppressed, err = l.Suppress.Has(ctx, a.Channel, a.ToHash); err != nil || adm.Suppressed {
			return adm, err
		}
	}
	if a.Capped {
		if adm.Cap, err = l.Users.Allow(ctx, a.CapKey, a.ID, a.Rule); err != nil {
			return Admission{}, err
		}
		if !adm.Cap.Allowed {
			return adm, nil
		}
	}
	if a.Reserve {
		r, err := l.Leaky.Reserve(ctx, a.Provider, a.Contract, a.Cost)
		if err != nil {
			return Admission{}, err
		}
		adm.Slot, adm.Reserved = r, true
	}
	return adm, nil
}

// AllowAt asks the per-user cap for job id at the instant at
// (userlimit.Limiter.AllowAt): on Redis in the workers' shared pipeline,
// loading the scripts and asking once more when the server lost them.
func (l *Set) AllowAt(ctx context.Context, key userlimit.Key, id string, rule userlimit.Rule, at time.Time) (userlimit.Result, error) {
	return inBatch(ctx, l, func(bt *pipeBatch) result[userlimit.Result] { return bt.allow(l.redis.users, key, id, rule, at) },
		func() (userlimit.Result, error) { return l.Users.AllowAt(ctx, key, id, rule, at) })
}

// Reserve takes cost units' send slot in provider's queue under c
// (leaky.Queue.Reserve): on Redis in the workers' shared pipeline, so that
// a job that must take a new slot (it woke too late for its first, which
// on a busy machine is one job in ten) costs a share of a batch rather
// than a round trip of its own; the scripts loaded and the slot asked once
// more when the server lost them.
func (l *Set) Reserve(ctx context.Context, provider string, c leaky.Contract, cost int) (leaky.Reservation, error) {
	r, err := inBatch(ctx, l, func(bt *pipeBatch) result[leaky.Reservation] { return bt.reserve(l.redis.leaky, provider, c, cost) },
		func() (leaky.Reservation, error) { return l.Leaky.Reserve(ctx, provider, c, cost) })
	return r, Shared(err) // the provider's queue: every job's
}

// result is a command queued in a batch, its answer read once the batch
// is back.
type result[T any] interface{ Result() (T, error) }

// inBatch queues one request in the workers' shared pipeline and returns
// its answer; when the server lost the scripts (a restart, a failover) it
// loads them and asks once more alone. In memory it asks alone.
func inBatch[T any](ctx context.Context, l *Set, queue func(bt *pipeBatch) result[T], alone func() (T, error)) (T, error) {
	if l.redis == nil {
		return alone()
	}
	var cmd result[T]
	l.redis.batch.do(ctx, func(bt *pipeBatch) { cmd = queue(bt) })
	res, err := cmd.Result()
	if err != nil && NotLoaded(err) {
		if lerr := l.redis.load(ctx); lerr != nil {
			return res, lerr
		}
		res, err = alone()
	}
	return res, err
}

// Sent is a job the provider accepted, for RecordSent.
type Sent struct {
	ID, Owner string
	// Seq and Sum are the message's stream sequence and a digest of its
	// bytes (0 and "": not known), which tell a later message of the same
	// id apart (SentFrom).
	Seq uint64
	Sum string
	// ShadowDenied: a cap in shadow mode would have refused the job, on
	// Channel for User; counted with the record (Redis only).
	ShadowDenied  bool
	Channel, User string
}

// ShadowCounter counts a job a cap in shadow mode would have refused, in
// a pipeline (Denials, for `notifier top --shadow`).
type ShadowCounter interface {
	QueueShadow(ctx context.Context, pipe redis.Pipeliner, channel, user string)
}

// RecordSent records jobs sent in the ledger: on Redis all of them in the
// workers' shared pipeline (one script run for every record of a batch,
// ledger.SentGroup), loading the script and writing them once more when
// the server lost it, counting in shadow (when not nil) those a cap
// in shadow mode would have refused, once each; in memory one by one. A
// count lost with a failed pipeline is not written again, so the caller
// clears ShadowDenied once this returns: `top --shadow` may miss one,
// never count one twice.
func (l *Set) RecordSent(ctx context.Context, jobs []Sent, shadow ShadowCounter) error {
	if l.redis == nil {
		var err error
		for _, j := range jobs {
			err = errors.Join(err, l.Ledger.Sent(ctx, j.ID, j.Owner))
		}
		return err
	}
	err := l.recordSent(ctx, jobs, shadow)
	if err != nil && NotLoaded(err) {
		// The server lost the script (a restart, a failover): load it and
		// write the records again (they are idempotent; the shadow counts
		// went with the first pipeline, or were lost with it).
		if lerr := l.redis.load(ctx); lerr != nil {
			return errors.Join(err, lerr)
		}
		err = l.recordSent(ctx, jobs, nil)
	}
	return err
}

// recordSent writes the records of jobs in the workers' shared pipeline,
// one script run per group (per cluster slot).
func (l *Set) recordSent(ctx context.Context, jobs []Sent, shadow ShadowCounter) error {
	// The groups the records went to, each once (on a Redis Cluster as
	// many as the jobs' slots: a set, not a search of a list per job).
	groups := map[*ledger.SentGroup]struct{}{}
	l.redis.batch.do(ctx, func(bt *pipeBatch) {
		for _, j := range jobs {
			groups[bt.sent(l.redis.ledger, j.ID, j.Seq, j.Sum)] = struct{}{}
			if j.ShadowDenied && shadow != nil {
				shadow.QueueShadow(ctx, bt.pipe, j.Channel, j.User)
			}
		}
	})
	var errs []error
	for g := range groups {
		if err := g.Err(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SentFrom reads which message of job id was sent (Sent's Seq and Sum); ok
// is false when the set keeps none (in memory) or the record holds none.
func (l *Set) SentFrom(ctx context.Context, id string) (seq uint64, sum string, ok bool, err error) {
	if l.redis == nil {
		return 0, "", false, nil
	}
	return l.redis.ledger.SentFrom(ctx, id)
}

// Shared says whether the set is the fleet's, in Redis: its ledger is then
// every process's (so an ack need not wait for the server), and it keeps
// what only Redis keeps (the sent message's sequence, the denials' top).
func (l *Set) Shared() bool { return l.redis != nil }

// Load puts every script of a Redis set in the servers' script caches,
// which a pipeline needs (a NOSCRIPT inside a pipeline does not fall back
// to EVAL). A memory set has none.
func (l *Set) Load(ctx context.Context) error {
	if l.redis == nil {
		return nil
	}
	return l.redis.load(ctx)
}

// NotLoaded says whether err is a script missing from a server's cache.
func NotLoaded(err error) bool {
	return errors.Is(err, ledger.ErrNotLoaded) || errors.Is(err, userlimit.ErrNotLoaded) || (err != nil && isNoScript(err))
}

// isNoScript reports a NOSCRIPT reply that a backend did not wrap.
func isNoScript(err error) bool { return strings.Contains(err.Error(), "NOSCRIPT") }

// Refused says whether err is Redis refusing a request's own data rather
// than the backend failing: a limit script's check of an argument ("ERR
// argument ... out of range"), a stored record it cannot read ("ERR ledger
// record ... is malformed"), or a key of another type where a script keeps
// its own (WRONGTYPE: a key written by something else). The server
// answered, so switching to local limits or holding every job would not
// help, and asking again with the same data is refused again. An error
// joined from several (errors.Join) is Refused only when each is; one
// about a key every job shares (Shared) never is.
func Refused(err error) bool {
	switch e := err.(type) {
	case nil, sharedKeyError:
		return false
	case redis.Error:
		msg := e.Error()
		return strings.HasPrefix(msg, "ERR argument ") || strings.HasPrefix(msg, "ERR ledger record ") || strings.HasPrefix(msg, "WRONGTYPE ")
	case interface{ Unwrap() []error }:
		errs := e.Unwrap()
		for _, x := range errs {
			if !Refused(x) {
				return false
			}
		}
		return len(errs) > 0
	case interface{ Unwrap() error }:
		return Refused(e.Unwrap())
	}
	return false
}

// sharedKeyError is an error about a key every job shares (Shared).
type sharedKeyError struct{ err error }

func (e sharedKeyError) Error() string { return e.err.Error() }
func (e sharedKeyError) Unwrap() error { return e.err }

// Shared marks err (nil stays nil) as the answer about a key every job
// shares, a provider's queue or the fleet bucket: never Refused. A key of
// another type there, or a contract's argument refused, fails every job
// alike, which is the backend failing for the fleet (it holds, or goes on
// local limits), not one job's data.
func Shared(err error) error {
	if err == nil {
		return nil
	}
	return sharedKeyError{err}
}
