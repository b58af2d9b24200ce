package dispatch

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/userlimit"
)

// admission is the answer of the round trip before a send: the ledger's
// claim, the per-user cap's decision, and the send slot when it was
// reserved speculatively.
type admission struct {
	claim  Claim
	cap    userlimit.Result   // when the channel has a cap
	slot   *leaky.Reservation // nil: not reserved yet (no speculation)
	slotAt time.Time          // when the slot is, on this process's clock (fixed when the reply came)
	limits *Limits            // the set the decisions were made on
}

// admit asks the ledger, the per-user cap and (when it pays) the provider's
// queue at once: one pipelined round trip on Redis. A slot reserved for a
// job that then is not sent (a duplicate, a denial) is given back with
// cancelSlot where it can be, and otherwise left empty: the contract is
// never exceeded, at worst one send slot goes unused.
func (d *Dispatcher) admit(ctx context.Context, jb *job, rule userlimit.Rule, capped bool) (admission, error) {
	var adm admission
	t0 := time.Now()
	err := d.withBackend(ctx, jb, func(l *Limits) error {
		reserve := d.speculate(jb.channel, capped)
		var err error
		if l.redis != nil {
			adm, err = d.admitPipelined(ctx, jb, l, rule, capped, reserve)
		} else {
			adm, err = d.admitInOrder(ctx, jb, l, rule, capped, reserve)
		}
		return err
	})
	d.trace("admit", t0)
	return adm, err
}

// admitPipelined sends the three decisions in one pipeline, shared with
// the other workers' requests of the moment (pipeBatcher). A script
// missing from the server's cache (after a restart or failover) loads the
// scripts and tries once more.
func (d *Dispatcher) admitPipelined(ctx context.Context, jb *job, l *Limits, rule userlimit.Rule, capped, reserve bool) (admission, error) {
	j := jb.j
	for attempt := 0; ; attempt++ {
		adm := admission{limits: l}
		var (
			cc *ClaimCmd
			dc *userlimit.Decision
			rc *leaky.ReserveCmd
		)
		lease, contract := d.lease(jb), l.contract(jb.pcfg)
		l.redis.batch.do(ctx, func(bt *pipeBatch) {
			cc = bt.claim(l.redis.ledger, j.ID, jb.owner, lease)
			if capped {
				dc = bt.allow(l.redis.users, userlimit.Key{Channel: j.Channel, User: j.UserID}, j.ID, rule)
			}
			if reserve {
				rc = bt.reserve(l.redis.leaky, jb.provider, contract, jb.cost)
			}
		})
		replied := time.Now()
		var errs []error
		var err error
		if adm.claim, err = cc.Result(); err != nil {
			errs = append(errs, err)
		}
		if dc != nil {
			if adm.cap, err = dc.Result(); err != nil {
				errs = append(errs, err)
			}
		}
		if rc != nil {
			r, err := rc.Result()
			if err != nil {
				errs = append(errs, err)
			} else {
				adm.slot, adm.slotAt = &r, d.clock.slotTime(replied, r.Slot, r.Delay)
			}
		}
		if len(errs) == 0 {
			return adm, nil
		}
		d.cancelSlot(ctx, jb, adm)
		err = errors.Join(errs...)
		if attempt == 0 && notLoaded(err) {
			if lerr := l.redis.load(ctx); lerr != nil {
				return admission{}, lerr
			}
			continue
		}
		return admission{}, err
	}
}

func notLoaded(err error) bool {
	return errors.Is(err, ErrNotLoaded) || errors.Is(err, userlimit.ErrNotLoaded) || (err != nil && isNoScript(err))
}

// admitInOrder is admit on backends that cannot pipeline (in memory: no
// round trips to save).
func (d *Dispatcher) admitInOrder(ctx context.Context, jb *job, l *Limits, rule userlimit.Rule, capped, reserve bool) (admission, error) {
	j := jb.j
	adm := admission{limits: l}
	var err error
	if adm.claim, err = l.Ledger.Claim(ctx, j.ID, jb.owner, d.lease(jb)); err != nil {
		return admission{}, err
	}
	if adm.claim.Status != Claimed {
		return adm, nil
	}
	if capped {
		if adm.cap, err = l.Users.Allow(ctx, userlimit.Key{Channel: j.Channel, User: j.UserID}, j.ID, rule); err != nil {
			return admission{}, err
		}
		if !adm.cap.Allowed {
			return adm, nil
		}
	}
	if reserve {
		r, err := l.Leaky.Reserve(ctx, jb.provider, l.contract(jb.pcfg), jb.cost)
		if err != nil {
			return admission{}, err
		}
		adm.slot, adm.slotAt = &r, d.clock.slotTime(time.Now(), r.Slot, r.Delay)
	}
	return adm, nil
}

// cancelSlot gives back a speculative reservation the job will not use.
func (d *Dispatcher) cancelSlot(ctx context.Context, jb *job, adm admission) {
	if adm.slot == nil || !adm.slot.OK || adm.limits == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	l := adm.limits
	if err := l.Leaky.Cancel(cctx, jb.provider, l.contract(jb.pcfg), *adm.slot, jb.cost); err != nil {
		jb.debug("give back an unused send slot", "err", err)
	}
}

// speculate says whether to reserve the send slot in the admission round
// trip: yes unless the channel's cap has lately denied often enough that
// the slots given back (or, when a later reservation followed, left empty)
// would cost throughput, or reservations are held after a switch of limit
// sets.
func (d *Dispatcher) speculate(channel string, capped bool) bool {
	if time.Now().UnixNano() < d.notBefore.Load() {
		return false
	}
	if !capped {
		return true
	}
	return d.denials.rate(channel) < speculateBelow
}

// speculateBelow is the recent denial rate of a channel's cap under which
// the admission reserves the slot at once.
const speculateBelow = 0.05

// noteCap records a cap decision for speculate.
func (d *Dispatcher) noteCap(channel string, allowed bool) {
	d.denials.note(channel, !allowed)
}

// denialRates keeps, per channel, an exponentially weighted rate of cap
// denials over roughly the last hundred decisions.
type denialRates struct {
	mu sync.Mutex
	r  map[string]float64
}

func (dr *denialRates) note(channel string, denied bool) {
	x := 0.0
	if denied {
		x = 1
	}
	dr.mu.Lock()
	defer dr.mu.Unlock()
	if dr.r == nil {
		dr.r = map[string]float64{}
	}
	dr.r[channel] = 0.99*dr.r[channel] + 0.01*x
}

func (dr *denialRates) rate(channel string) float64 {
	dr.mu.Lock()
	defer dr.mu.Unlock()
	return dr.r[channel]
}

// isNoScript reports a NOSCRIPT reply that a backend did not wrap.
func isNoScript(err error) bool { return strings.Contains(err.Error(), "NOSCRIPT") }
