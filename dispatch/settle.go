package dispatch

import (
	"context"
	"time"

	"github.com/notifier/notifier/internal/sleep"
	"github.com/notifier/notifier/limits"
)

// settle records a sent job in the ledger and then acknowledges it. On
// the shared limits the worker hands the job to the settler (settleLoop)
// and is free for the next job at once: the record and the ack, which no
// longer decide anything, leave the worker's path, and the settler records
// every job handed to it meanwhile in one round trip. On local limits the
// worker does both itself (the ack there waits for the server).
func (pl *pipeline) settle(ctx context.Context, jb *job) {
	if l := pl.be.currentLimits(); l != nil && l.Shared() && pl.settleQ != nil {
		pl.settleQ <- jb
		return
	}
	pl.recordSent(ctx, []*job{jb}, nil)
	pl.ackResult(ctx, jb, OutcomeSent)
}

// ackResult acknowledges the delivery and counts the outcome. A failed ack
// is logged, not retried: the job comes back after ack_wait and the ledger
// (or the dead-letter stream's dedup) makes the second pass a no-op. On the
// shared limits the ack does not wait for the server's confirmation (one
// round trip less per job): a lost ack only brings the job back to a ledger
// that already knows it. On local limits the ledger is this process's own,
// so the ack waits.
func (pl *pipeline) ackResult(ctx context.Context, jb *job, outcome string) {
	var err error
	if l := pl.be.currentLimits(); l != nil && l.Shared() {
		err = jb.dl.AckNoWait()
	} else {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err = jb.dl.Ack(actx)
		cancel()
	}
	if err != nil {
		jb.log().Warn("acknowledge job", "outcome", outcome, "err", err)
	}
	pl.m.Jobs.WithLabelValues(jb.channel, jb.provider, outcome).Inc()
	now := pl.now()
	pl.activity.add(rollKey{channel: jb.channel, outcome: outcome}, now)
	if outcome == OutcomeSent {
		tenant := pl.fetch.tenantLabel(jb.dl.Tenant)
		pl.activity.add(rollKey{provider: jb.provider, tenant: tenant}, now)
		pl.m.TenantSent.WithLabelValues(jb.provider, tenant).Inc()
		jb.debug("job sent")
	}
}

// settleLoop is the settler: it records and acknowledges the sent jobs
// handed to it, as many at a time as have come in, until q is closed and
// empty.
func (pl *pipeline) settleLoop(ctx context.Context, q <-chan *job) {
	var batch []*job
	for jb := range q {
		batch = takeQueued(append(batch[:0], jb), q)
		batch = pl.recordSent(ctx, batch, q)
		for _, jb := range batch {
			pl.ackResult(ctx, jb, OutcomeSent)
		}
	}
}

// takeQueued appends the jobs waiting in q now to batch, without waiting.
func takeQueued(batch []*job, q <-chan *job) []*job {
	for {
		select {
		case jb, ok := <-q:
			if !ok {
				return batch
			}
			batch = append(batch, jb)
		default:
			return batch
		}
	}
}

// recordSentAlone writes the sent records of jobs one by one, after Redis
// refused a record of their batch (limits.Refused: a key written by
// something else where a record was): not the backend failing, and the
// records of one script run fail together, so each is written alone and
// only the one refused is lost. Every job is acknowledged, that one too:
// it was sent, and a redelivery's claim of its refused record is refused
// in turn (handed back, never sent again).
func (pl *pipeline) recordSentAlone(ctx context.Context, l *limits.Set, jobs []*job, sent []limits.Sent) {
	for i, jb := range jobs {
		if err := l.RecordSent(ctx, sent[i:i+1], nil); err != nil {
			jb.log().Error("record sent job in the ledger; acknowledging anyway", "err", err)
		}
		jb.claimed = false
	}
}

// recordSent writes "sent" to the ledger for jobs the provider accepted
// (one round trip on Redis, however many), retrying briefly: the ack that
// follows removes each job from JetStream, so the record only matters if
// that ack is lost too. A retry writes every record again (they are
// idempotent), with the jobs queued for the settler meanwhile (q, nil for
// none) taken in, and every job waiting for its record is kept alive with
// InProgress, so that none is redelivered, and sent again, while Redis is
// away. It returns the jobs it recorded, which the caller acknowledges.
func (pl *pipeline) recordSent(ctx context.Context, jobs []*job, q <-chan *job) []*job {
	for attempt := 0; ; attempt++ {
		l := pl.be.currentLimits()
		if l == nil {
			l = pl.o.Limits
		}
		t0 := pl.now()
		sent := make([]limits.Sent, len(jobs))
		for i, jb := range jobs {
			sent[i] = limits.Sent{ID: jb.key, Owner: jb.owner, ShadowDenied: jb.shadowDenied, Channel: jb.j.Channel, User: jb.j.UserID}
			if jb.dl != nil {
				sent[i].Seq, sent[i].Sum = jb.dl.StreamSeq, jb.contentSum()
			}
		}
		var shadow limits.ShadowCounter
		if pl.o.Denials != nil {
			shadow = pl.o.Denials
		}
		err := l.RecordSent(ctx, sent, shadow)
		if l.Shared() && shadow != nil {
			for _, jb := range jobs {
				jb.shadowDenied = false // counted once, in this pipeline, whatever it answered
			}
		}
		for range jobs {
			pl.trace("ledger_sent", t0)
		}
		if err == nil {
			for _, jb := range jobs {
				jb.claimed = false
			}
			return jobs
		}
		if limits.Refused(err) {
			pl.recordSentAlone(ctx, l, jobs, sent)
			return jobs
		}
		if attempt >= 20 || ctx.Err() != nil {
			for _, jb := range jobs {
				jb.log().Error("record sent job in the ledger; acknowledging anyway", "err", err)
			}
			return jobs
		}
		pl.be.backendFailed(l, err)
		if q != nil {
			jobs = takeQueued(jobs, q)
		}
		wait := time.Duration(attempt+1) * 100 * time.Millisecond
		for deadline := pl.now().Add(wait); ; {
			for _, jb := range jobs {
				pl.keepAlive(jb)
			}
			left := pl.until(deadline)
			if left <= 0 || sleep.For(ctx, min(left, pl.o.AckWait/3)) != nil {
				break
			}
		}
	}
}
