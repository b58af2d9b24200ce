package dispatch

import (
	"context"
	"time"

	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/queue"
)

// endKind is how a job leaves the pipeline, which decides what becomes of
// its JetStream message (see conclude).
type endKind int

const (
	endNone       endKind = iota // not at an end: the pipeline goes on
	endSent                      // the provider accepted it: record it in the ledger, then Ack (settle)
	endDuplicate                 // the ledger knows it sent: Ack
	endDead                      // dead-letter it (queue.Dead), then Ack
	endSuppressed                // dead-letter it (queue.Suppressed), then Ack
	endRetry                     // a transient provider failure: NakWithDelay(delay), an attempt used
	endDefer                     // a long deferral: NakWithDelay(delay), no attempt used
	endStepAside                 // another delivery of the job holds the lease: NakWithDelay(delay)
	endStop                      // a stop: release the lease and Nak at once, for another process
	endAgain                     // a short deferral was held in the worker: process the job again (handle)
)

// end is the end of a job's way through the pipeline, returned by its
// steps: a step that returns the zero end lets the job go on. conclude acts
// on it.
type end struct {
	kind   endKind
	delay  time.Duration // endRetry, endDefer, endStepAside: when JetStream delivers again
	reason string        // endDead, endSuppressed: Notifier-Reason; endDefer: what put the job off
	detail string        // endDead, endSuppressed: Notifier-Detail
	cause  error         // endStop: the stop's error
}

// ended says whether the job is at an end: the pipeline stops here.
func (e end) ended() bool { return e.kind != endNone }

// dead is a dead-lettered end.
func dead(reason, detail string) end { return end{kind: endDead, reason: reason, detail: detail} }

// suppressed is a suppressed end: dead-lettered as queue.Suppressed.
func suppressed(reason, detail string) end {
	return end{kind: endSuppressed, reason: reason, detail: detail}
}

// stopped is the end on a stop, err being ctx's, or on a request of the
// job's that Redis refused (limits.Refused, which backendSwitch.with
// returns at once): then the job is handed back to JetStream, no attempt
// used, for the retry backoff of its delivery count (conclude: an operator
// may mend the key meanwhile), and every other job goes on.
func stopped(err error) end {
	if limits.Refused(err) {
		return end{kind: endDefer, reason: ledger.DeferRefused}
	}
	return end{kind: endStop, cause: err}
}

// conclude takes a job to its end e: the one place where the JetStream
// message is acknowledged (settled when sent; dead-lettered first when dead
// or suppressed), handed back with a delay, or released on a stop, and
// where the job's outcome is counted. Every end but a send and a stop first
// gives up the job's ledger lease.
func (pl *pipeline) conclude(ctx, sendCtx context.Context, jb *job, e end) {
	if e.kind == endDefer && e.reason == ledger.DeferRefused {
		// Refused (stopped): retried as a transient failure would be,
		// never sooner than the base delay.
		e.delay = max(pl.o.Retry.BaseDelay, pl.o.Retry.Backoff(int(jb.dl.NumDelivered), pl.o.Rand))
	}
	switch e.kind {
	case endSent:
		pl.settle(sendCtx, jb) // records "sent", which ends the lease
		return
	case endStop:
		pl.releaseOnStop(ctx, jb, e.cause)
		return
	}
	pl.releaseAt(ctx, jb, e)
	switch e.kind {
	case endDuplicate:
		pl.ackResult(ctx, jb, OutcomeDuplicate)
	case endDead, endSuppressed:
		pl.finish(ctx, jb, e)
	case endRetry:
		if err := jb.dl.NakWithDelay(e.delay); err != nil {
			jb.log().Warn("schedule retry", "err", err)
		}
	case endDefer:
		jb.debug("job deferred", "why", e.reason, "for", e.delay.String())
		if err := jb.dl.NakWithDelay(e.delay); err != nil {
			jb.log().Warn("defer job", "err", err)
		}
	case endStepAside:
		if err := jb.dl.NakWithDelay(e.delay); err != nil {
			jb.log().Warn("release job", "err", err)
		}
	default:
		panic("dispatch: conclude: a job at no end") // endNone, endAgain: handle's to act on
	}
}

// finish dead-letters or suppresses a job, then acknowledges it. The dead
// letter is written before the ack, so a job is never lost: a crash between
// the two leaves it to be redelivered, and the dead-letter stream drops the
// second copy (its id derives from the job's stream sequence). A stop while
// the dead-letter stream is away releases the job instead.
func (pl *pipeline) finish(ctx context.Context, jb *job, e end) {
	o, outcome := queue.Dead, OutcomeDead
	if e.kind == endSuppressed {
		o, outcome = queue.Suppressed, OutcomeSuppressed
	}
	for {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := pl.o.DeadLetters.DeadLetter(pctx, jb.dl, o, e.reason, e.detail)
		cancel()
		if err == nil {
			break
		}
		jb.log().Warn("write dead letter; holding the job", "reason", e.reason, "err", err)
		if herr := pl.hold(ctx, jb, time.Second); herr != nil {
			pl.releaseOnStop(ctx, jb, herr)
			return
		}
	}
	jb.log().Info("job not sent", "outcome", outcome, "reason", e.reason, "detail", e.detail)
	pl.ackResult(ctx, jb, outcome)
}

// releaseAt gives up the job's ledger lease at its end e without counting
// anything; a dead or suppressed end (its reason, never its detail, which
// may quote a provider) or a deferral (why, and for how long) is noted in
// the record in the same script run, for `notifier explain`. A job that holds no lease has nothing to release
// and nothing is noted: no round trip is added for it.
func (pl *pipeline) releaseAt(ctx context.Context, jb *job, e end) {
	if !jb.claimed {
		return
	}
	jb.claimed = false
	l := pl.be.currentLimits()
	if l == nil {
		return // the lease expires by itself
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	var err error
	switch e.kind {
	case endDead:
		err = l.Ledger.Ended(rctx, jb.key, jb.owner, ledger.EndDead, e.reason)
	case endSuppressed:
		err = l.Ledger.Ended(rctx, jb.key, jb.owner, ledger.EndSuppressed, e.reason)
	case endDefer:
		err = l.Ledger.Deferred(rctx, jb.key, jb.owner, e.reason, e.delay)
	default:
		err = l.Ledger.Release(rctx, jb.key, jb.owner)
	}
	if err != nil {
		jb.debug("release ledger lease", "err", err)
	}
}

// deferJob puts a job off for wait without using an attempt: held in the
// worker when short (then endAgain: the ledger and the cap are asked anew),
// handed back to JetStream when long (endDefer). why (a Defer* word) says
// what put it off; the ledger notes it as it gives up the lease.
func (pl *pipeline) deferJob(ctx context.Context, jb *job, wait time.Duration, why string) end {
	e := end{kind: endDefer, delay: wait, reason: why}
	pl.releaseAt(ctx, jb, e)
	if wait <= pl.o.MaxHold {
		jb.debug("job held", "why", why, "for", wait.String())
		if err := pl.hold(ctx, jb, wait); err != nil {
			return stopped(err)
		}
		return end{kind: endAgain}
	}
	return e
}

// releaseOnStop gives a job back at once on a stop, for another process:
// its ledger lease released (briefly tried), its message Nak'ed without a
// delay. cause is the stop's error.
func (pl *pipeline) releaseOnStop(ctx context.Context, jb *job, cause error) {
	if jb.claimed {
		if l := pl.be.currentLimits(); l != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = l.Ledger.Release(rctx, jb.key, jb.owner)
			cancel()
		}
	}
	if nerr := jb.dl.Nak(); nerr != nil {
		jb.log().Warn("release job on stop", "err", nerr)
	}
	jb.debug("job released", "cause", cause)
}
