package dispatch

import (
	"context"
	"time"

	"github.com/notifier/notifier/internal/sleep"
	"github.com/notifier/notifier/limits"
	"github.com/redis/go-redis/v9"
)

// settle records a sent job in the ledger and then acknowledges it. On
// the shared limits the worker hands the job to the settler (settleLoop)
// and is free for the next job at once: the record and the ack, which no
// longer decide anything, leave the worker's path, and the settler records
// every job handed to it meanwhile in one round trip. On local limits the
// worker does both itself (the ack there waits for the server).
func (d *Dispatcher) settle(ctx context.Context, jb *job) {
	if l := d.currentLimits(); l != nil && l.Shared() && d.settleQ != nil {
		d.settleQ <- jb
		return
	}
	d.recordSent(ctx, []*job{jb}, nil)
	_ = d.ackResult(ctx, jb, OutcomeSent)
}

// settleLoop is the settler: it records and acknowledges the sent jobs
// handed to it, as many at a time as have come in, until q is closed and
// empty.
func (d *Dispatcher) settleLoop(ctx context.Context, q <-chan *job) {
	var batch []*job
	for jb := range q {
		batch = takeQueued(append(batch[:0], jb), q)
		batch = d.recordSent(ctx, batch, q)
		for _, jb := range batch {
			_ = d.ackResult(ctx, jb, OutcomeSent)
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

// recordSent writes "sent" to the ledger for jobs the provider accepted
// (one round trip on Redis, however many), retrying briefly: the ack that
// follows removes each job from JetStream, so the record only matters if
// that ack is lost too. A retry writes every record again (they are
// idempotent), with the jobs queued for the settler meanwhile (q, nil for
// none) taken in, and every job waiting for its record is kept alive with
// InProgress, so that none is redelivered, and sent again, while Redis is
// away. It returns the jobs it recorded, which the caller acknowledges.
func (d *Dispatcher) recordSent(ctx context.Context, jobs []*job, q <-chan *job) []*job {
	for attempt := 0; ; attempt++ {
		l := d.currentLimits()
		if l == nil {
			l = d.o.Limits
		}
		t0 := d.now()
		sent := make([]limits.Sent, len(jobs))
		for i, jb := range jobs {
			sent[i] = limits.Sent{ID: jb.key, Owner: jb.owner, ShadowDenied: jb.shadowDenied, Channel: jb.j.Channel, User: jb.j.UserID}
			if jb.dl != nil {
				sent[i].Seq, sent[i].Sum = jb.dl.StreamSeq, contentSum(jb.dl.Data)
			}
		}
		var shadow limits.ShadowCounter
		if d.o.Denials != nil {
			shadow = shadowCounts{d.o.Denials}
		}
		err := l.RecordSent(ctx, sent, shadow)
		if l.Shared() && shadow != nil {
			for _, jb := range jobs {
				jb.shadowDenied = false // counted once, in this pipeline, whatever it answered
			}
		}
		for range jobs {
			d.trace("ledger_sent", t0)
		}
		if err == nil {
			for _, jb := range jobs {
				jb.claimed = false
			}
			return jobs
		}
		if attempt >= 20 || ctx.Err() != nil {
			for _, jb := range jobs {
				jb.log().Error("record sent job in the ledger; acknowledging anyway", "err", err)
			}
			return jobs
		}
		d.backendFailed(l, err)
		if q != nil {
			jobs = takeQueued(jobs, q)
		}
		wait := time.Duration(attempt+1) * 100 * time.Millisecond
		for deadline := d.now().Add(wait); ; {
			for _, jb := range jobs {
				d.keepAlive(jb)
			}
			left := d.until(deadline)
			if left <= 0 || sleep.For(ctx, min(left, d.o.AckWait/3)) != nil {
				break
			}
		}
	}
}

// shadowCounts counts the jobs a cap in shadow mode would have refused in
// Denials, with their sent records (limits.ShadowCounter).
type shadowCounts struct{ d *Denials }

func (s shadowCounts) QueueShadow(ctx context.Context, pipe redis.Pipeliner, channel, user string) {
	s.d.recordShadowCmd(ctx, pipe, channel, user)
}
