package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/userlimit"
)

// admitted takes the job through its admission: the fleet bucket
// (waitGlobal), a digest's check, then the round trip of admit: the
// ledger's claim, held for while another delivery of the job holds its
// lease; the suppression list; the attempts left; and the per-user cap
// (capAdmission). It returns the admission, with its speculative slot when
// one was reserved, or else the job's end, with that slot given back.
func (pl *pipeline) admitted(ctx context.Context, jb *job) (admission, end) {
	// The fleet bucket first: it protects the workers and what is behind
	// them, so it counts every job taken, including those the checks below
	// then suppress.
	if err := pl.waitGlobal(ctx, jb); err != nil {
		return admission{}, stopped(err)
	}
	jb.rule, jb.capped, jb.capKey = jb.live.caps.CapFor(jb.j.Channel, jb.category, jb.j.UserID)
	if jb.digesting() {
		e, ended, err := pl.digestCheck(ctx, jb)
		if err != nil {
			return admission{}, stopped(err)
		}
		if ended {
			return admission{}, e
		}
	}
	// One round trip: the ledger (already sent? then take the send lease),
	// the per-user cap, and, speculatively, the slot in the provider's
	// queue.
	var adm admission
	for {
		var err error
		adm, err = pl.admit(ctx, jb, jb.rule, jb.capped)
		if err != nil {
			return admission{}, stopped(err)
		}
		c := adm.claim
		if c.Status == ledger.Claimed {
			jb.claimed, jb.claimAt = true, pl.now()
			break
		}
		adm.cancel(ctx, jb)
		if c.Status == ledger.AlreadySent {
			if seq, differs := pl.noteDuplicate(ctx, jb, adm.limits); differs {
				return admission{}, dead(ledger.ReasonDuplicateID, fmt.Sprintf("job id %s was already sent (stream sequence %d) with other content: a job id is unique within its tenant; this message is not sent", jb.j.ID, seq))
			}
			return admission{}, end{kind: endDuplicate}
		}
		pl.m.Deferrals.WithLabelValues(LayerLedger, "busy").Inc()
		if err := pl.hold(ctx, jb, min(c.BusyFor, time.Second)); err != nil {
			return admission{}, stopped(err)
		}
	}
	if adm.suppressed {
		adm.cancel(ctx, jb)
		return admission{}, pl.suppressedRecipient(ctx, jb, adm.limits)
	}
	if adm.claim.Attempts >= pl.o.Retry.MaxAttempts {
		adm.cancel(ctx, jb)
		return admission{}, dead(ledger.ReasonMaxAttempts, fmt.Sprintf("%d transient provider failures", adm.claim.Attempts))
	}
	return adm, pl.capAdmission(ctx, jb, adm)
}

// waitGlobal takes a token from the fleet bucket, heart-beating while the
// bucket is empty. It fails only on a stop.
func (pl *pipeline) waitGlobal(ctx context.Context, jb *job) error {
	start := pl.now()
	err := pl.be.with(ctx, jb, func(l *limits.Set) error {
		g := l.Bucket()
		if g == nil {
			return nil
		}
		if g.TakeLeased() {
			return nil // a token of the lease at hand: no wait, no timer
		}
		for {
			wctx, cancel := context.WithTimeout(ctx, pl.o.AckWait/3)
			err := g.Wait(wctx)
			cancel()
			if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
				return limits.Shared(err) // the fleet bucket: every job's
			}
			pl.keepAlive(jb)
		}
	})
	pl.trace("global", start)
	if err != nil {
		return err
	}
	l := pl.be.currentLimits()
	if l == nil {
		return nil
	}
	g, sb := l.Buckets()
	if g != nil {
		if pl.since(start) > 5*time.Millisecond {
			pl.m.LimitDecisions.WithLabelValues(LayerGlobal, "deny").Inc()
			pl.m.Deferrals.WithLabelValues(LayerGlobal, "empty").Inc()
		} else {
			pl.m.LimitDecisions.WithLabelValues(LayerGlobal, "allow").Inc()
		}
	}
	if sb != nil {
		pl.askShadowGlobal(ctx, jb, sb)
	}
	return nil
}

// askShadowGlobal asks the fleet bucket's shadow (global.shadow_rate) for
// a token, never waiting: a job that finds it empty is counted (decision
// shadow_deny) and goes on. Its round trips are the shadow bucket's
// leases, not one per job (globallimit.Bucket.TryTake).
func (pl *pipeline) askShadowGlobal(ctx context.Context, jb *job, sb *globallimit.Bucket) {
	ok, err := sb.TryTake(ctx)
	switch {
	case err != nil:
		jb.debug("ask the fleet bucket's shadow", "err", err)
	case !ok:
		pl.m.LimitDecisions.WithLabelValues(LayerGlobal, DecisionShadowDeny).Inc()
	}
}

// admission is the answer of the round trip before a send: the ledger's
// claim, the per-user cap's decision, and the send slot when it was
// reserved speculatively.
type admission struct {
	claim      ledger.Claim
	suppressed bool              // the recipient is on the suppression list
	cap        userlimit.Result  // when the channel has a cap
	slot       leaky.Reservation // when reserved
	reserved   bool              // false: not reserved yet (no speculation), or given up
	slotAt     time.Time         // when the slot is, on this process's clock (fixed when the reply came)
	limits     *limits.Set       // the set the decisions were made on
}

// admit asks the ledger, the per-user cap and (when it pays) the provider's
// queue at once: one pipelined round trip on Redis (limits.Set.Admit). A
// slot reserved for a job that then is not sent (a duplicate, a denial) is
// given back with admission.cancel where it can be, and otherwise left empty: the
// contract is never exceeded, at worst one send slot goes unused. A script
// missing from the server's cache (after a restart or failover) loads the
// scripts and tries once more.
func (pl *pipeline) admit(ctx context.Context, jb *job, rule userlimit.Rule, capped bool) (admission, error) {
	var adm admission
	t0 := pl.now()
	err := pl.be.with(ctx, jb, func(l *limits.Set) error {
		ask := limits.Ask{ID: jb.key, Owner: jb.owner, Lease: pl.lease(jb), Channel: jb.j.Channel, ToHash: jb.toHash,
			Capped: capped, CapKey: jb.capKey, Rule: rule}
		if pl.speculate(jb.channel, capped) {
			ask.Reserve, ask.Provider, ask.Contract, ask.Cost = true, jb.provider, pl.reserveContract(l, jb.pcfg), jb.cost
		}
		for attempt := 0; ; attempt++ {
			got, err := l.Admit(ctx, ask)
			replied := pl.now()
			adm = admission{claim: got.Claim, suppressed: got.Suppressed, cap: got.Cap, slot: got.Slot, reserved: got.Reserved, limits: l}
			if got.Reserved {
				adm.slotAt = pl.be.clock.slotTime(replied, got.Slot.Slot, got.Slot.Delay)
			}
			if err == nil {
				return nil
			}
			adm.cancel(ctx, jb)
			adm = admission{}
			if attempt == 0 && limits.NotLoaded(err) {
				if lerr := l.Load(ctx); lerr != nil {
					return lerr
				}
				continue
			}
			if !ask.Alone && limits.Refused(err) {
				// The batch's jobs share script runs: asked alone, a
				// refusal is this job's own, and another's is not.
				ask.Alone = true
				continue
			}
			return err
		}
	})
	pl.trace("admit", t0)
	return adm, err
}

// noteDuplicate tells a job whose id was already sent: a redelivery of
// the message that was sent (logged at debug), or another message given
// the same id (differs, with the stream sequence of the one sent: it is
// dead-lettered as duplicate_id). Neither names the content. On limits
// without Redis there is no sent record to compare with: a redelivery.
func (pl *pipeline) noteDuplicate(ctx context.Context, jb *job, l *limits.Set) (sentSeq uint64, differs bool) {
	if l == nil {
		jb.debug("job already sent: not sent again")
		return 0, false
	}
	seq, sum, ok, err := l.SentFrom(ctx, jb.key)
	switch {
	case err != nil || !ok:
		jb.debug("job already sent: not sent again")
	case sum != jb.contentSum() && seq != jb.dl.StreamSeq:
		return seq, true
	default:
		jb.debug("job already sent: not sent again", "sent_seq", seq)
	}
	return seq, false
}

// cancel gives back a speculative reservation the job will not use.
func (adm admission) cancel(ctx context.Context, jb *job) {
	if !adm.reserved || !adm.slot.OK || adm.limits == nil {
		return
	}
	jb.giveBack(ctx, adm.limits, adm.slot)
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
