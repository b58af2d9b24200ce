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

// The per-user cap's part of a job's way: its decision in the admission
// (capAdmission), again at the send slot (capSlot, capAtSlot), a denial's
// end (capDenied), shadow mode's count, and the denial rates that decide
// whether the admission reserves the slot at once (speculate).

// capAdmission acts on the per-user cap's decision in the admission adm:
// an allowed job goes on (a digesting one is taken into its digest, which
// may end it), a denial by a cap in shadow mode is counted and goes on, a
// denial ends the job (capDenied), with adm's slot given back. It returns
// no end (the zero end) when the job goes on to its send slot.
func (pl *pipeline) capAdmission(ctx context.Context, jb *job, adm admission) end {
	if !jb.capped {
		return end{}
	}
	switch {
	case adm.cap.Allowed && jb.digesting():
		pl.noteCap(jb.j.Channel, true)
		jb.capAt = adm.cap.At.UnixMicro()
		pl.m.LimitDecisions.WithLabelValues(LayerUser, "allow").Inc()
		if e, ended := pl.digestTake(ctx, jb); ended {
			adm.cancel(ctx, jb)
			return e
		}
	case adm.cap.Allowed:
		pl.noteCap(jb.j.Channel, true)
		jb.capAt = adm.cap.At.UnixMicro()
		pl.m.LimitDecisions.WithLabelValues(LayerUser, "allow").Inc()
	case jb.rule.Mode == userlimit.Shadow:
		pl.m.LimitDecisions.WithLabelValues(LayerUser, "allow").Inc() // it passes; shadowDenied counts what it would not have
		pl.shadowDenied(jb)
	default:
		pl.noteCap(jb.j.Channel, false)
		adm.cancel(ctx, jb)
		return pl.capDenied(ctx, jb, adm.cap, adm.limits)
	}
	return end{}
}

// capSlot counts the job under its per-user cap at its send slot r,
// reserved on l (capAtSlot). It returns no end (the zero end) when the job
// may be sent at r; otherwise, with the slot given back, the job's end: the
// cap's denial (capDenied) or a stop.
func (pl *pipeline) capSlot(ctx context.Context, jb *job, l *limits.Set, r leaky.Reservation) end {
	var res userlimit.Result
	if err := pl.be.with(ctx, jb, func(cur *limits.Set) (err error) {
		res, err = pl.capAtSlot(ctx, jb, cur, r)
		return err
	}); err != nil {
		jb.giveBack(ctx, l, r)
		return stopped(err)
	}
	if !res.Allowed {
		jb.giveBack(ctx, l, r)
		return pl.capDenied(ctx, jb, res, l)
	}
	return end{}
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
	if jb.digesting() {
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
