package dispatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/userlimit"
)

// admission is the answer of the round trip before a send: the ledger's
// claim, the per-user cap's decision, and the send slot when it was
// reserved speculatively.
type admission struct {
	claim      ledger.Claim
	suppressed bool               // the recipient is on the suppression list
	cap        userlimit.Result   // when the channel has a cap
	slot       *leaky.Reservation // nil: not reserved yet (no speculation)
	slotAt     time.Time          // when the slot is, on this process's clock (fixed when the reply came)
	limits     *limits.Set        // the set the decisions were made on
}

// admit asks the ledger, the per-user cap and (when it pays) the provider's
// queue at once: one pipelined round trip on Redis (limits.Set.Admit). A
// slot reserved for a job that then is not sent (a duplicate, a denial) is
// given back with cancelSlot where it can be, and otherwise left empty: the
// contract is never exceeded, at worst one send slot goes unused. A script
// missing from the server's cache (after a restart or failover) loads the
// scripts and tries once more.
func (pl *pipeline) admit(ctx context.Context, jb *job, rule userlimit.Rule, capped bool) (admission, error) {
	var adm admission
	t0 := pl.now()
	err := pl.withBackend(ctx, jb, func(l *limits.Set) error {
		ask := limits.Ask{ID: jb.key, Owner: jb.owner, Lease: pl.lease(jb), Channel: jb.j.Channel, ToHash: jb.toHash,
			Capped: capped, CapKey: jb.capKey, Rule: rule}
		if pl.speculate(jb.channel, capped) {
			ask.Reserve, ask.Provider, ask.Contract, ask.Cost = true, jb.provider, pl.reserveContract(l, jb.pcfg), jb.cost
		}
		for attempt := 0; ; attempt++ {
			got, err := l.Admit(ctx, ask)
			replied := pl.now()
			adm = admission{claim: got.Claim, suppressed: got.Suppressed, cap: got.Cap, slot: got.Slot, limits: l}
			if got.Slot != nil {
				adm.slotAt = pl.be.clock.slotTime(replied, got.Slot.Slot, got.Slot.Delay)
			}
			if err == nil {
				return nil
			}
			pl.cancelSlot(ctx, jb, adm)
			adm = admission{}
			if attempt == 0 && limits.NotLoaded(err) {
				if lerr := l.Load(ctx); lerr != nil {
					return lerr
				}
				continue
			}
			return err
		}
	})
	pl.trace("admit", t0)
	return adm, err
}

// capTolerance is how far a job's send slot may lie from the instant its
// per-user cap admission stands at before the admission is moved to the
// slot. The cap counts sends by those instants, so at the provider it holds
// to within this, plus a send's lateness and the network.
const capTolerance = 20 * time.Millisecond

// capAtSlot makes the job's per-user cap admission stand at its send slot
// r: a job admitted now but sent from a provider's queue seconds later (or
// after a pause, or on a slot taken again) must be counted when it is sent,
// or a user could get twice the cap in one window at the provider. Within
// capTolerance nothing is asked. Otherwise the cap decides the job again
// for the slot (its admission moves there, one more pipelined round trip,
// only for jobs that wait anyway). A denial there (res.Allowed false) is
// the caller's to act on: give the slot back, then capDenied.
func (pl *pipeline) capAtSlot(ctx context.Context, jb *job, l *limits.Set, r leaky.Reservation) (res userlimit.Result, err error) {
	if !jb.capped || r.Slot == 0 {
		return userlimit.Result{Allowed: true}, nil
	}
	if off := time.Duration(r.Slot-jb.capAt) * time.Microsecond; off >= -capTolerance && off <= capTolerance {
		return userlimit.Result{Allowed: true}, nil
	}
	res, err = l.AllowAt(ctx, jb.capKey, jb.key, jb.rule, time.UnixMicro(r.Slot))
	if err != nil {
		return res, err
	}
	if !res.Allowed && jb.rule.Mode == userlimit.Shadow {
		pl.shadowDenied(jb)
		return userlimit.Result{Allowed: true}, nil
	}
	pl.noteCap(jb.j.Channel, res.Allowed)
	if res.Allowed {
		jb.capAt = res.At.UnixMicro()
	}
	return res, nil
}

// shadowDenied counts the denial of jb by a cap in shadow mode (the metric
// decision shadow_deny; `notifier top --shadow` once the job is sent: its
// count rides on the settler's pipeline with the sent record, no round trip
// of its own) and lets the job go on as if allowed. The denied job is not
// in the cap's state (a denial never is), so the state stays the one the
// enforced cap would have; and the job is not asked about again (at its
// slot), so each job counts at most once: the jobs the cap would have
// refused at their first ask.
func (pl *pipeline) shadowDenied(jb *job) {
	jb.capped, jb.shadowDenied = false, true
	pl.noteCap(jb.j.Channel, true) // it is sent: reserving its slot with the admission pays
	pl.m.LimitDecisions.WithLabelValues(LayerUser, DecisionShadowDeny).Inc()
}

// capDenied acts on a per-user cap's denial of jb: defer it (on_exceed:
// defer) or suppress it. It returns the job's end: endAgain, endDefer or
// endSuppressed (or a stop's), never the zero end: the job is out of the
// pipeline.
func (pl *pipeline) capDenied(ctx context.Context, jb *job, res userlimit.Result, l *limits.Set) end {
	pl.m.LimitDecisions.WithLabelValues(LayerUser, "deny").Inc()
	pl.recordDenial(ctx, jb, l)
	if digesting(jb) {
		return pl.digestHold(ctx, jb, res)
	}
	if jb.rule.OnExceed == userlimit.Defer {
		pl.m.Deferrals.WithLabelValues(LayerUser, "defer").Inc()
		return pl.deferJob(ctx, jb, res.RetryAfter+pl.jitter(res.RetryAfter/10+10*time.Millisecond), ledger.DeferUserLimit)
	}
	return suppressed(ledger.ReasonUserLimit,
		fmt.Sprintf("over the %s cap of %d per %s", jb.j.Channel, jb.rule.Limit, jb.rule.Window))
}

// recordDenial counts a cap denial for `notifier top` (shared limits only:
// local ones have no Redis to count in).
func (pl *pipeline) recordDenial(ctx context.Context, jb *job, l *limits.Set) {
	if pl.o.Denials == nil || l == nil || !l.Shared() {
		return
	}
	if err := pl.o.Denials.Record(ctx, jb.j.Channel, jb.j.UserID); err != nil {
		jb.debug("count cap denial", "err", err)
	}
}

// cancelSlot gives back a speculative reservation the job will not use.
func (pl *pipeline) cancelSlot(ctx context.Context, jb *job, adm admission) {
	if adm.slot == nil || !adm.slot.OK || adm.limits == nil {
		return
	}
	pl.giveBack(ctx, jb, adm.limits, *adm.slot)
}

// speculate says whether to reserve the send slot in the admission round
// trip: yes unless the channel's cap has lately denied often enough that
// the slots given back (or, when a later reservation followed, left empty)
// would cost throughput, or reservations are held after a switch of limit
// sets.
func (pl *pipeline) speculate(channel string, capped bool) bool {
	if pl.now().UnixNano() < pl.be.notBefore.Load() {
		return false
	}
	if !capped {
		return true
	}
	return pl.denials.rate(channel) < speculateBelow
}

// speculateBelow is the recent denial rate of a channel's cap under which
// the admission reserves the slot at once.
const speculateBelow = 0.05

// noteCap records a cap decision for speculate.
func (pl *pipeline) noteCap(channel string, allowed bool) {
	pl.denials.note(channel, !allowed)
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
