package dispatch

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/notifier/notifier/internal/sleep"
	"github.com/notifier/notifier/internal/steptrace"
)

// core is what every part of a dispatcher reads: the options, the log, the
// metrics, the part of the configuration a reload may change, and the
// services every step of a job uses alike: the clock, the random jitter,
// the step trace, and holding a job in its worker (heart-beaten). The
// pipeline's steps call these as they call a library, never going back up
// the pipeline's files for them.
type core struct {
	o    Options
	log  *slog.Logger
	m    *Metrics
	live atomic.Pointer[liveConfig] // what a reload may change; each job reads it once
	// stepTrace is from Run's context (the bench), set before any worker
	// starts; nil: none.
	stepTrace steptrace.Func
}

// now reads the dispatcher's clock, Options.Now.
func (c *core) now() time.Time { return c.o.Now() }

// since is the time elapsed since t on the dispatcher's clock.
func (c *core) since(t time.Time) time.Duration { return c.o.Now().Sub(t) }

// until is the time left until t on the dispatcher's clock.
func (c *core) until(t time.Time) time.Duration { return t.Sub(c.o.Now()) }

// jitter is a random duration in [0, d).
func (c *core) jitter(dur time.Duration) time.Duration {
	if dur <= 0 {
		return 0
	}
	return time.Duration(c.o.Rand() * float64(dur))
}

// trace reports a step's duration to the steptrace hook of Run's context.
func (c *core) trace(step string, start time.Time) {
	if c.stepTrace != nil {
		c.stepTrace(step, c.since(start))
	}
}

// lease is how long a ledger claim lasts: the longest the job can sit in
// the leaky queue, plus the send, plus a margin. Longer waits re-claim.
func (c *core) lease(jb *job) time.Duration {
	return jb.pcfg.MaxQueueDelay + jb.pcfg.Timeout + c.o.AckWait
}

// hold keeps a job in its worker for dur, heart-beating it with InProgress
// so JetStream does not redeliver it. It returns ctx.Err() on a stop.
func (c *core) hold(ctx context.Context, jb *job, dur time.Duration) error {
	deadline := c.now().Add(dur)
	beat := c.o.AckWait / 3
	for {
		c.keepAlive(jb)
		left := c.until(deadline)
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
func (c *core) keepAlive(jb *job) {
	if c.since(jb.lastBeat) < c.o.AckWait/3 {
		return
	}
	if err := jb.dl.InProgress(); err != nil {
		jb.debug("heartbeat job", "err", err)
	}
	jb.lastBeat = c.now()
}
