package dispatch

import (
	"context"
	"time"

	"github.com/notifier/notifier/queue"
)

// Reasons in Notifier-Reason (SPEC §6).
const (
	ReasonInvalid         = "invalid"
	ReasonUnknownProvider = "unknown_provider"
	ReasonRejected        = "rejected"
	ReasonMaxAttempts     = "max_attempts"
	ReasonUserLimit       = "user_limit"
	ReasonExpired         = "expired"
)

// retryLater hands a failed job back to JetStream to come again after wait.
func (d *Dispatcher) retryLater(jb *job, wait time.Duration) error {
	if err := jb.dl.NakWithDelay(wait); err != nil {
		jb.log().Warn("schedule retry", "err", err)
	}
	return errHandled
}

// release gives up the job's ledger lease without counting anything.
func (d *Dispatcher) release(ctx context.Context, jb *job) {
	if !jb.claimed {
		return
	}
	jb.claimed = false
	l := d.currentLimits()
	if l == nil {
		return // the lease expires by itself
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := l.Ledger.Release(rctx, jb.j.ID, jb.owner); err != nil {
		jb.debug("release ledger lease", "err", err)
	}
}

// finish dead-letters or suppresses a job, then acknowledges it. The dead
// letter is written before the ack, so a job is never lost: a crash between
// the two leaves it to be redelivered, and the dead-letter stream drops the
// second copy (its id derives from the job's stream sequence).
func (d *Dispatcher) finish(ctx context.Context, jb *job, o queue.Outcome, reason, detail string) error {
	if jb.j != nil {
		d.release(ctx, jb)
	}
	for {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := d.o.DeadLetters.DeadLetter(pctx, jb.dl, o, reason, detail)
		cancel()
		if err == nil {
			break
		}
		jb.log().Warn("write dead letter; holding the job", "reason", reason, "err", err)
		if herr := d.hold(ctx, jb, time.Second); herr != nil {
			return herr
		}
	}
	outcome := OutcomeDead
	if o == queue.Suppressed {
		outcome = OutcomeSuppressed
	}
	jb.log().Info("job not sent", "outcome", outcome, "reason", reason, "detail", detail)
	return d.ackResult(ctx, jb, outcome)
}

// ack acknowledges a job with an outcome.
func (d *Dispatcher) ack(ctx context.Context, jb *job, outcome string) error {
	d.release(ctx, jb)
	return d.ackResult(ctx, jb, outcome)
}

// ackResult acknowledges the delivery and counts the outcome. A failed ack
// is logged, not retried: the job comes back after ack_wait and the ledger
// (or the dead-letter stream's dedup) makes the second pass a no-op. On the
// shared limits the ack does not wait for the server's confirmation (one
// round trip less per job): a lost ack only brings the job back to a ledger
// that already knows it. On local limits the ledger is this process's own,
// so the ack waits.
func (d *Dispatcher) ackResult(ctx context.Context, jb *job, outcome string) error {
	var err error
	if l := d.currentLimits(); l != nil && l.redis != nil {
		err = jb.dl.AckNoWait()
	} else {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err = jb.dl.Ack(actx)
		cancel()
	}
	if err != nil {
		jb.log().Warn("acknowledge job", "outcome", outcome, "err", err)
	}
	d.m.Jobs.WithLabelValues(jb.channel, jb.provider, outcome).Inc()
	now := time.Now()
	d.activity.add(rollKey{channel: jb.channel, outcome: outcome}, now)
	if outcome == OutcomeSent {
		d.activity.add(rollKey{provider: jb.provider}, now)
		jb.debug("job sent")
	}
	return nil
}
