package dispatch

import (
	"context"
	"errors"
	"time"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/internal/sleep"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/ledger"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/userlimit"
)

// waitGlobal takes a token from the fleet bucket, heart-beating while the
// bucket is empty. It fails only on a stop.
func (d *Dispatcher) waitGlobal(ctx context.Context, jb *job) error {
	start := d.now()
	err := d.withBackend(ctx, jb, func(l *limits.Set) error {
		g := l.Bucket()
		if g == nil {
			return nil
		}
		for {
			wctx, cancel := context.WithTimeout(ctx, d.o.AckWait/3)
			err := g.Wait(wctx)
			cancel()
			if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			d.keepAlive(jb)
		}
	})
	d.trace("global", start)
	if err != nil {
		return err
	}
	l := d.currentLimits()
	if l == nil {
		return nil
	}
	g, sb := l.Buckets()
	if g != nil {
		if d.since(start) > 5*time.Millisecond {
			d.m.LimitDecisions.WithLabelValues(LayerGlobal, "deny").Inc()
			d.m.Deferrals.WithLabelValues(LayerGlobal, "empty").Inc()
		} else {
			d.m.LimitDecisions.WithLabelValues(LayerGlobal, "allow").Inc()
		}
	}
	if sb != nil {
		d.askShadowGlobal(ctx, jb, sb)
	}
	return nil
}

// askShadowGlobal asks the fleet bucket's shadow (global.shadow_rate) for
// a token, never waiting: a job that finds it empty is counted (decision
// shadow_deny) and goes on. Its round trips are the shadow bucket's
// leases, not one per job (globallimit.Bucket.TryTake).
func (d *Dispatcher) askShadowGlobal(ctx context.Context, jb *job, sb *globallimit.Bucket) {
	ok, err := sb.TryTake(ctx)
	switch {
	case err != nil:
		jb.debug("ask the fleet bucket's shadow", "err", err)
	case !ok:
		d.m.LimitDecisions.WithLabelValues(LayerGlobal, DecisionShadowDeny).Inc()
	}
}

// waitSlot reserves the job's send slot in the provider's leaky queue and
// sleeps until it, then makes sure no pause began meanwhile.
// first, when its slot is not nil, is a reservation already made by the
// admission round trip. It returns no end (the zero end) when the job is at
// its slot, ready to send; otherwise the job's end (a cap's denial, a lease
// lost meanwhile, a stop).
func (d *Dispatcher) waitSlot(ctx context.Context, jb *job, first admission) end {
	queued := d.now()
	for {
		// The fleet's probe of a provider paused for its credentials goes
		// now, past the pause and the queue: one request.
		if d.probes.take(jb.provider, d.now()) {
			if first.slot != nil {
				d.giveBack(ctx, jb, first.limits, *first.slot)
			}
			jb.probe, jb.slotAt, jb.slot = true, d.now(), 0
			return end{}
		}
		// A provider paused for long (as this process knows, without a
		// round trip when the pause watcher runs): back to JetStream now,
		// rather than hold a slot (and the worker) until the pause ends.
		if e, paused := d.longPause(ctx, jb); paused {
			if first.slot != nil {
				d.giveBack(ctx, jb, first.limits, *first.slot)
				first.slot = nil
			}
			return e
		}
		var r leaky.Reservation
		var l *limits.Set
		if first.slot != nil {
			r, l = *first.slot, first.limits
			jb.slotAt = first.slotAt
			first.slot = nil
		} else {
			if wait := d.until(time.Unix(0, d.notBefore.Load())); wait > 0 {
				d.m.Deferrals.WithLabelValues(LayerLeaky, "switch").Inc()
				if err := d.hold(ctx, jb, wait); err != nil {
					return stopped(err)
				}
			}
			t0 := d.now()
			err := d.withBackend(ctx, jb, func(cur *limits.Set) (err error) {
				l = cur
				r, err = cur.Leaky.Reserve(ctx, jb.provider, d.reserveContract(cur, jb.pcfg), jb.cost)
				return err
			})
			d.trace("leaky", t0)
			if err != nil {
				return stopped(err)
			}
			jb.slotAt = d.clock.slotTime(d.now(), r.Slot, r.Delay)
		}
		if at, late := d.pastDeadline(jb, r); late {
			if r.OK {
				d.giveBack(ctx, jb, l, r)
			}
			if e, done := d.tooLate(jb, at); done {
				return e
			}
			continue // failed over: a slot at the fallback
		}
		if !r.OK && r.Quota >= 0 {
			// A quota is spent until its next window: the fallback takes
			// the job, or it waits in JetStream (never dropped).
			d.m.LimitDecisions.WithLabelValues(LayerLeaky, "deny").Inc()
			if d.failover(jb, FailoverQuota) {
				continue
			}
			d.m.Deferrals.WithLabelValues(LayerLeaky, "quota").Inc()
			wait := min(r.RetryAfter, maxQuotaWait)
			return end{kind: endDefer, delay: wait + d.jitter(min(wait/10, 5*time.Second)), reason: ledger.DeferQuota}
		}
		if !r.OK {
			d.m.LimitDecisions.WithLabelValues(LayerLeaky, "deny").Inc()
			d.m.Deferrals.WithLabelValues(LayerLeaky, "full").Inc()
			// The queue holds max_queue_delay of work: waking a little
			// late costs no throughput, and spreads the workers' retries.
			if r.Paused > holdPause {
				// A long pause this process may not have heard of yet (its
				// pause watcher learns of one a message after the backend),
				// told by the refusal itself: the job goes back, as at the
				// loop's top, rather than hold the worker through it (a
				// probe may lift it long before; two jobs once slept
				// through the resume, TestRefusedSenderIsProbedAndResumed).
				d.m.Deferrals.WithLabelValues(LayerProvider, "paused").Inc()
				return pausedEnd(d, r.Paused)
			}
			wait := max(r.RetryAfter, jb.pcfg.MaxQueueDelay/20)
			if err := d.hold(ctx, jb, wait+d.jitter(wait)); err != nil {
				return stopped(err)
			}
			continue
		}
		d.m.LimitDecisions.WithLabelValues(LayerLeaky, "allow").Inc()
		d.noteSlot(jb)
		// The per-user cap counts the job at its send slot.
		var capRes userlimit.Result
		if err := d.withBackend(ctx, jb, func(cur *limits.Set) (err error) {
			capRes, err = d.capAtSlot(ctx, jb, cur, r)
			return err
		}); err != nil {
			d.giveBack(ctx, jb, l, r)
			return stopped(err)
		}
		if !capRes.Allowed {
			d.giveBack(ctx, jb, l, r)
			return d.capDenied(ctx, jb, capRes, l)
		}
		d.noteSlotWait(ctx, jb, l)
		// Wake a little before the slot for the round trips below, so that
		// they do not make the send late.
		if err := d.hold(ctx, jb, d.until(jb.slotAt)-preSlot); err != nil {
			d.giveBack(ctx, jb, l, r)
			return stopped(err)
		}
		// A 429 seen by any worker after this slot was reserved pauses
		// the provider; a slot inside the pause must not be used.
		var paused time.Duration
		if err := d.withBackend(ctx, jb, func(cur *limits.Set) (err error) {
			paused, err = cur.PausedFor(ctx, jb.provider)
			return err
		}); err != nil {
			return stopped(err)
		}
		if paused > 0 {
			d.m.Deferrals.WithLabelValues(LayerProvider, "paused").Inc()
			d.quotaGiveUp(ctx, jb, l, r)
			if paused > holdPause {
				return pausedEnd(d, paused)
			}
			if err := d.hold(ctx, jb, paused); err != nil {
				return stopped(err)
			}
			continue
		}
		if e := d.renewClaim(ctx, jb); e.ended() {
			return e
		}
		if err := d.hold(ctx, jb, d.until(jb.slotAt)); err != nil {
			return stopped(err)
		}
		d.m.QueueLatency.WithLabelValues(jb.provider).Observe(d.since(queued).Seconds())
		jb.slot = r.Slot
		jb.res, jb.resL = &r, l
		return end{}
	}
}

// noteSlotWait notes in the ledger a job's wait for a send slot more than
// slotNote away (for `notifier explain --job`): one round trip, paid only
// by a job that has long to wait anyway.
func (d *Dispatcher) noteSlotWait(ctx context.Context, jb *job, l *limits.Set) {
	wait := d.until(jb.slotAt)
	if wait <= slotNote || l == nil || !jb.claimed {
		return
	}
	jb.debug("job waits for its send slot", "for", wait.String())
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := l.Ledger.Waiting(nctx, jb.key, jb.owner, ledger.WaitSlot, wait); err != nil {
		jb.debug("note the wait for a send slot", "err", err)
	}
}

// slotNote is the shortest wait for a send slot noted in the ledger.
const slotNote = time.Second

// maxQuotaWait is the longest a job whose provider's quota is spent waits
// in JetStream before it is looked at again (a reload may raise the quota,
// or add a fallback).
const maxQuotaWait = 5 * time.Minute

// holdPause is the longest provider pause a job waits out in its worker;
// a longer one hands it back to JetStream.
const holdPause = time.Second

// longPause reports whether the job's provider is paused for longer than
// holdPause, as this process knows (its pause watcher, else the backend),
// and the end that hands the job back until the pause ends.
func (d *Dispatcher) longPause(ctx context.Context, jb *job) (end, bool) {
	l := d.currentLimits()
	if l == nil {
		return end{}, false
	}
	paused, err := l.PausedFor(ctx, jb.provider)
	if err != nil || paused <= holdPause {
		return end{}, false // a failing backend shows on the reservation
	}
	d.m.Deferrals.WithLabelValues(LayerProvider, "paused").Inc()
	return pausedEnd(d, paused), true
}

// pausedEnd hands a job back to JetStream while its provider is paused,
// holding no worker that another provider's jobs need. Its channel gets no
// budget meanwhile, so neither it nor more of its jobs are taken. It comes
// back at the pause's end, or within handBackMax when the pause is longer:
// a pause lifted early (`notifier resume`, a reload after a credentials
// pause) then holds its jobs back no longer than that.
func pausedEnd(d *Dispatcher, paused time.Duration) end {
	wait := min(paused, handBackMax)
	return end{kind: endDefer, delay: wait + d.jitter(min(wait/10, time.Second)), reason: ledger.DeferProviderPaused}
}

// handBackMax is the longest a job handed back for a pause waits in
// JetStream before it is looked at again.
const handBackMax = 10 * time.Second

// giveBack cancels a reservation the job will not use (see leaky.Queue's
// Cancel: only when no later one followed it).
func (d *Dispatcher) giveBack(ctx context.Context, jb *job, l *limits.Set, r leaky.Reservation) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := l.Leaky.Cancel(cctx, jb.provider, l.ContractOf(jb.pcfg), r, jb.cost); err != nil {
		jb.debug("give back an unused send slot", "err", err)
	}
}

// quotaGiveUp gives up a slot the job will not use although later slots
// followed it (a pause found at the slot, a late wake-up, an open
// breaker): under a contract with quotas its units go back to the quota's
// window (leaky.Queue.Cancel), so unused slots do not eat a quota. Plain
// contracts skip the round trip: nothing would change.
func (d *Dispatcher) quotaGiveUp(ctx context.Context, jb *job, l *limits.Set, r leaky.Reservation) {
	if len(jb.pcfg.Quotas) == 0 || l == nil {
		return
	}
	d.giveBack(ctx, jb, l, r)
}

// abandonSlot gives up the slot the job is at (see quotaGiveUp).
func (d *Dispatcher) abandonSlot(ctx context.Context, jb *job) {
	if jb.res == nil {
		return
	}
	r, l := *jb.res, jb.resL
	jb.res, jb.resL = nil, nil
	d.quotaGiveUp(ctx, jb, l, r)
}

// preSlot is how long before its send slot a worker wakes to check for a
// pause and renew its lease.
const preSlot = 3 * time.Millisecond

// renewClaim extends the ledger lease before a send when the job has waited
// long enough for it to run short. It returns no end (the zero end) when the
// job still holds the lease; otherwise the job's end: a duplicate (another
// delivery sent it meanwhile), stepping aside (another delivery holds the
// lease now), or a stop.
func (d *Dispatcher) renewClaim(ctx context.Context, jb *job) end {
	if d.since(jb.claimAt) < d.lease(jb)/2 {
		return end{}
	}
	var c ledger.Claim
	if err := d.withBackend(ctx, jb, func(l *limits.Set) (err error) {
		c, err = l.Ledger.Claim(ctx, jb.key, jb.owner, d.lease(jb))
		return err
	}); err != nil {
		return stopped(err)
	}
	switch c.Status {
	case ledger.AlreadySent:
		jb.claimed = false
		return end{kind: endDuplicate}
	case ledger.Busy:
		// Our lease ran out and another delivery of this job took it:
		// that one sends; this copy steps aside.
		jb.claimed = false
		jb.log().Info("job leased to another worker meanwhile; releasing this delivery")
		return end{kind: endStepAside, delay: c.BusyFor + time.Second}
	}
	jb.claimAt = d.now()
	return end{}
}

// deferJob puts a job off for wait without using an attempt: held in the
// worker when short (then endAgain: the ledger and the cap are asked anew),
// handed back to JetStream when long (endDefer). why (a Defer* word) says
// what put it off; the ledger notes it as it gives up the lease.
func (d *Dispatcher) deferJob(ctx context.Context, jb *job, wait time.Duration, why string) end {
	e := end{kind: endDefer, delay: wait, reason: why}
	d.releaseAt(ctx, jb, e)
	if wait <= d.o.MaxHold {
		jb.debug("job held", "why", why, "for", wait.String())
		if err := d.hold(ctx, jb, wait); err != nil {
			return stopped(err)
		}
		return end{kind: endAgain}
	}
	return e
}

// hold keeps a job in its worker for dur, heart-beating it with InProgress
// so JetStream does not redeliver it. It returns ctx.Err() on a stop.
func (d *Dispatcher) hold(ctx context.Context, jb *job, dur time.Duration) error {
	deadline := d.now().Add(dur)
	beat := d.o.AckWait / 3
	for {
		d.keepAlive(jb)
		left := d.until(deadline)
		if left <= 0 {
			return ctx.Err()
		}
		if err := sleep.For(ctx, min(left, beat)); err != nil {
			return err
		}
	}
}

// keepAlive sends InProgress when a third of ack_wait has passed since the
// last one.
func (d *Dispatcher) keepAlive(jb *job) {
	if d.since(jb.lastBeat) < d.o.AckWait/3 {
		return
	}
	if err := jb.dl.InProgress(); err != nil {
		jb.debug("heartbeat job", "err", err)
	}
	jb.lastBeat = d.now()
}
