package dispatch

import (
	"context"
	"time"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/ledger"
)

// reserve reserves the job's send slot in its provider's queue, on the
// limits in use (waiting for a backend that is away). A function of its
// own, so that the closure's variables escape only on this path, not for
// every job that waitSlot takes through.
func (pl *pipeline) reserve(ctx context.Context, jb *job) (leaky.Reservation, *limits.Set, error) {
	var (
		r leaky.Reservation
		l *limits.Set
	)
	t0 := pl.now()
	err := pl.be.with(ctx, jb, func(cur *limits.Set) (err error) {
		l = cur
		r, err = cur.Reserve(ctx, jb.provider, pl.reserveContract(cur, jb.pcfg), jb.cost)
		return err
	})
	pl.trace("leaky", t0)
	return r, l, err
}

// waitSlot reserves the job's send slot in the provider's leaky queue and
// sleeps until it, then makes sure no pause began meanwhile.
// first, when its slot is not nil, is a reservation already made by the
// admission round trip. It returns no end (the zero end) when the job is at
// its slot, ready to send; otherwise the job's end (a cap's denial, a lease
// lost meanwhile, a stop).
func (pl *pipeline) waitSlot(ctx context.Context, jb *job, first admission) end {
	queued := pl.now()
	for {
		// The fleet's probe of a provider paused for its credentials goes
		// now, past the pause and the queue: one request.
		if pl.probes.take(jb.provider, pl.now()) {
			if first.reserved {
				jb.giveBack(ctx, first.limits, first.slot)
			}
			jb.probe, jb.slotAt, jb.slot = true, pl.now(), 0
			return end{}
		}
		// A provider paused for long (as this process knows, without a
		// round trip when the pause watcher runs): back to JetStream now,
		// rather than hold a slot (and the worker) until the pause ends.
		if e, paused := pl.longPause(ctx, jb); paused {
			if first.reserved {
				jb.giveBack(ctx, first.limits, first.slot)
				first.reserved = false
			}
			return e
		}
		var r leaky.Reservation
		var l *limits.Set
		if first.reserved {
			r, l = first.slot, first.limits
			jb.slotAt = first.slotAt
			first.reserved = false
		} else {
			if wait := pl.until(time.Unix(0, pl.be.notBefore.Load())); wait > 0 {
				pl.m.Deferrals.WithLabelValues(LayerLeaky, "switch").Inc()
				if err := pl.hold(ctx, jb, wait); err != nil {
					return stopped(err)
				}
			}
			var err error
			if r, l, err = pl.reserve(ctx, jb); err != nil {
				return stopped(err)
			}
			jb.slotAt = pl.be.clock.slotTime(pl.now(), r.Slot, r.Delay)
		}
		if at, late := pl.pastDeadline(jb, r); late {
			if r.OK {
				jb.giveBack(ctx, l, r)
			}
			if e, done := pl.tooLate(jb, at); done {
				return e
			}
			continue // failed over: a slot at the fallback
		}
		if !r.OK && r.Quota >= 0 {
			// A quota is spent until its next window: the fallback takes
			// the job, or it waits in JetStream (never dropped).
			pl.m.LimitDecisions.WithLabelValues(LayerLeaky, "deny").Inc()
			if pl.failover(jb, FailoverQuota) {
				continue
			}
			pl.m.Deferrals.WithLabelValues(LayerLeaky, "quota").Inc()
			wait := min(r.RetryAfter, maxQuotaWait)
			return end{kind: endDefer, delay: wait + pl.jitter(min(wait/10, 5*time.Second)), reason: ledger.DeferQuota}
		}
		if !r.OK {
			pl.m.LimitDecisions.WithLabelValues(LayerLeaky, "deny").Inc()
			pl.m.Deferrals.WithLabelValues(LayerLeaky, "full").Inc()
			// The queue holds max_queue_delay of work: waking a little
			// late costs no throughput, and spreads the workers' retries.
			if r.Paused > holdPause {
				// A long pause this process may not have heard of yet (its
				// pause watcher learns of one a message after the backend),
				// told by the refusal itself: the job goes back, as at the
				// loop's top, rather than hold the worker through it (a
				// probe may lift it long before; two jobs once slept
				// through the resume, TestRefusedSenderIsProbedAndResumed).
				pl.m.Deferrals.WithLabelValues(LayerProvider, "paused").Inc()
				return pausedEnd(pl, jb, r.Paused)
			}
			wait := max(r.RetryAfter, jb.pcfg.MaxQueueDelay/20)
			if err := pl.hold(ctx, jb, wait+pl.jitter(wait)); err != nil {
				return stopped(err)
			}
			continue
		}
		pl.m.LimitDecisions.WithLabelValues(LayerLeaky, "allow").Inc()
		pl.noteSlot(jb)
		// The per-user cap counts the job at its send slot.
		if e := pl.capSlot(ctx, jb, l, r); e.ended() {
			return e
		}
		pl.noteSlotWait(ctx, jb, l)
		// Wake a little before the slot for the round trips below, so that
		// they do not make the send late.
		if err := pl.hold(ctx, jb, pl.until(jb.slotAt)-preSlot); err != nil {
			jb.giveBack(ctx, l, r)
			return stopped(err)
		}
		// A 429 seen by any worker after this slot was reserved pauses
		// the provider; a slot inside the pause must not be used.
		var paused time.Duration
		if err := pl.be.with(ctx, jb, func(cur *limits.Set) (err error) {
			paused, err = cur.PausedFor(ctx, jb.provider)
			return err
		}); err != nil {
			return stopped(err)
		}
		if paused > 0 {
			pl.m.Deferrals.WithLabelValues(LayerProvider, "paused").Inc()
			jb.quotaGiveUp(ctx, l, r)
			if paused > holdPause {
				return pausedEnd(pl, jb, paused)
			}
			if err := pl.hold(ctx, jb, paused); err != nil {
				return stopped(err)
			}
			continue
		}
		if e := pl.renewClaim(ctx, jb); e.ended() {
			return e
		}
		if err := pl.hold(ctx, jb, pl.until(jb.slotAt)); err != nil {
			return stopped(err)
		}
		pl.m.QueueLatency.WithLabelValues(jb.provider).Observe(pl.since(queued).Seconds())
		jb.slot = r.Slot
		jb.res, jb.resL = r, l
		return end{}
	}
}

// noteSlotWait notes in the ledger a job's wait for a send slot more than
// slotNote away (for `notifier explain --job`): one round trip, paid only
// by a job that has long to wait anyway.
func (pl *pipeline) noteSlotWait(ctx context.Context, jb *job, l *limits.Set) {
	wait := pl.until(jb.slotAt)
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
func (pl *pipeline) longPause(ctx context.Context, jb *job) (end, bool) {
	l := pl.be.currentLimits()
	if l == nil {
		return end{}, false
	}
	paused, err := l.PausedFor(ctx, jb.provider)
	if err != nil || paused <= holdPause {
		return end{}, false // a failing backend shows on the reservation
	}
	pl.m.Deferrals.WithLabelValues(LayerProvider, "paused").Inc()
	return pausedEnd(pl, jb, paused), true
}

// pausedEnd hands a job back to JetStream while its provider is paused,
// holding no worker that another provider's jobs need. Its channel gets no
// budget meanwhile, so neither it nor more of its jobs are taken. It comes
// back at the pause's end, or within handBackMax when the pause is longer:
// a pause lifted early (`notifier resume`, a reload after a credentials
// pause) then holds its jobs back no longer than that. Nor longer than the
// provider's probe_interval, how often a probe may lift a refused sender's
// pause: a probe that succeeds has its provider's jobs back within one
// interval, not handBackMax later.
func pausedEnd(pl *pipeline, jb *job, paused time.Duration) end {
	wait := min(paused, handBackMax, probeInterval(jb.pcfg))
	return end{kind: endDefer, delay: wait + pl.jitter(min(wait/10, time.Second)), reason: ledger.DeferProviderPaused}
}

// handBackMax is the longest a job handed back for a pause waits in
// JetStream before it is looked at again.
const handBackMax = 10 * time.Second

// giveBack cancels a reservation the job will not use (see leaky.Queue's
// Cancel: only when no later one followed it).
func (jb *job) giveBack(ctx context.Context, l *limits.Set, r leaky.Reservation) {
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
func (jb *job) quotaGiveUp(ctx context.Context, l *limits.Set, r leaky.Reservation) {
	if len(jb.pcfg.Quotas) == 0 || l == nil {
		return
	}
	jb.giveBack(ctx, l, r)
}

// abandonSlot gives up the slot the job is at (see quotaGiveUp).
func (jb *job) abandonSlot(ctx context.Context) {
	if jb.resL == nil {
		return
	}
	r, l := jb.res, jb.resL
	jb.res, jb.resL = leaky.Reservation{}, nil
	jb.quotaGiveUp(ctx, l, r)
}

// preSlot is how long before its send slot a worker wakes to check for a
// pause and renew its lease.
const preSlot = 3 * time.Millisecond

// renewClaim extends the ledger lease before a send when the job has waited
// long enough for it to run short. It returns no end (the zero end) when the
// job still holds the lease; otherwise the job's end: a duplicate (another
// delivery sent it meanwhile), stepping aside (another delivery holds the
// lease now), or a stop.
func (pl *pipeline) renewClaim(ctx context.Context, jb *job) end {
	if pl.since(jb.claimAt) < pl.lease(jb)/2 {
		return end{}
	}
	var c ledger.Claim
	if err := pl.be.with(ctx, jb, func(l *limits.Set) (err error) {
		c, err = l.Ledger.Claim(ctx, jb.key, jb.owner, pl.lease(jb))
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
	jb.claimAt = pl.now()
	return end{}
}

// pastDeadline reports whether the job has an expires_at before its
// earliest slot with reservation r.
func (pl *pipeline) pastDeadline(jb *job, r leaky.Reservation) (time.Time, bool) {
	if jb.j == nil || jb.j.ExpiresAt.IsZero() {
		return time.Time{}, false
	}
	at := pl.earliestSlot(jb, r)
	return at, at.After(jb.j.ExpiresAt)
}

// earliestSlot is when a reservation's job could be sent at the soonest,
// on this process's clock: its slot when it got one, else (a full queue)
// the slot the queue would give after RetryAfter.
func (pl *pipeline) earliestSlot(jb *job, r leaky.Reservation) time.Time {
	if r.OK {
		return jb.slotAt
	}
	return pl.now().Add(r.RetryAfter + jb.pcfg.MaxQueueDelay)
}

// tooLate is the end of a job whose earliest send slot at its provider
// lies after its expires_at: it fails over when a fallback can take it
// (no end: the caller takes a slot there), else it is suppressed as
// expired at once rather than waiting for a slot and then found stale.
func (pl *pipeline) tooLate(jb *job, earliest time.Time) (end, bool) {
	if pl.failover(jb, FailoverDeadline) {
		return end{}, false
	}
	return suppressed(ledger.ReasonExpired, "expires_at "+jb.j.ExpiresAt.UTC().Format(time.RFC3339)+
		" lies before the earliest send slot at "+jb.provider+" ("+pl.until(earliest).Round(time.Millisecond).String()+" ahead)"), true
}
