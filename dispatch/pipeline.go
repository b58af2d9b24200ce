package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/userlimit"
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

// errHandled ends a job that already reached its end (acknowledged, or
// handed back to JetStream with a delay): nothing more to do.
var errHandled = errors.New("job handled")

// errAgain sends a job held through a short deferral back to the top of the
// pipeline, as if it had just been delivered.
var errAgain = errors.New("process the job again")

// job is one delivery on its way through the pipeline, owned by one worker.
type job struct {
	dl       *queue.Delivery
	j        *queue.Job
	owner    string // ledger lease owner token of this delivery
	channel  string // metric label: a valid channel or "invalid"
	provider string // metric label: a configured provider or "unknown"
	prov     providers.Provider
	pcfg     providers.Config
	msg      *providers.Message
	cost     int
	lastBeat time.Time // last InProgress (or the fetch)
	base     *slog.Logger
	lg       *slog.Logger // built from base on the first line logged
	slotAt   time.Time    // when the reserved send slot is, on this process's clock
	slot     int64        // the reserved send slot on the limit backend's clock, µs (leaky.Reservation.Slot)
	live     *liveConfig
	claimed  bool // holds a ledger lease
	claimAt  time.Time
	rule     userlimit.Rule // the channel's per-user cap, when capped
	capped   bool
	capAt    int64 // µs on the limit backend's clock: where the job's cap admission stands
}

// log is the job's logger: its delivery, id, channel and provider as far as
// known. It is built on the first line logged, so a job that logs nothing
// (a send, at the default level) does not pay for it.
func (jb *job) log() *slog.Logger {
	if jb.lg == nil {
		args := []any{"seq", jb.dl.StreamSeq, "delivery", jb.dl.NumDelivered}
		if jb.j != nil {
			args = append(args, "job", jb.j.ID, "channel", jb.j.Channel)
		}
		if jb.prov != nil {
			args = append(args, "provider", jb.provider)
		}
		jb.lg = jb.base.With(args...)
	}
	return jb.lg
}

// debug logs at debug level, building nothing when that level is off.
func (jb *job) debug(msg string, args ...any) {
	if jb.base.Enabled(context.Background(), slog.LevelDebug) {
		jb.log().Debug(msg, args...)
	}
}

// handle takes one delivery to exactly one end: acknowledged (sent,
// duplicate, suppressed, dead), handed back with a delay (retry, long
// deferral), or released on a stop.
func (d *Dispatcher) handle(ctx, sendCtx context.Context, dl *queue.Delivery) {
	jb := &job{dl: dl, lastBeat: time.Now(), channel: "invalid", provider: "unknown", base: d.log}
	err := d.process(ctx, sendCtx, jb)
	for errors.Is(err, errAgain) {
		jb = &job{dl: dl, lastBeat: jb.lastBeat, channel: jb.channel, provider: jb.provider, base: d.log}
		err = d.process(ctx, sendCtx, jb)
	}
	if err == nil || errors.Is(err, errHandled) {
		return
	}
	// Only a stop gets here: give the job back at once, for another process.
	if jb.claimed {
		if l := d.currentLimits(); l != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = l.Ledger.Release(rctx, jb.j.ID, jb.owner)
			cancel()
		}
	}
	if nerr := dl.Nak(); nerr != nil {
		jb.log().Warn("release job on stop", "err", nerr)
	}
	jb.debug("job released", "cause", err)
}

func (d *Dispatcher) process(ctx, sendCtx context.Context, jb *job) error {
	dl := jb.dl
	if queue.ChannelOf(dl.Subject) != "" && queue.IsChannel(queue.ChannelOf(dl.Subject)) {
		jb.channel = queue.ChannelOf(dl.Subject)
	}
	j, err := queue.Decode(dl.Subject, dl.Data)
	if err != nil {
		return d.finish(ctx, jb, queue.Dead, ReasonInvalid, err.Error())
	}
	jb.j = j
	jb.channel = j.Channel
	jb.live = d.live.Load()
	if dl.Header.Get(HeaderReplayed) != "" && dl.NumDelivered == 1 {
		d.m.Replays.WithLabelValues(j.Channel).Inc()
	}

	if j.Provider != "" {
		jb.prov, jb.pcfg, _ = jb.live.providers.Get(j.Provider)
		if jb.prov != nil && jb.pcfg.Channel != j.Channel {
			return d.finish(ctx, jb, queue.Dead, ReasonUnknownProvider,
				fmt.Sprintf("provider %q serves channel %s, not %s", j.Provider, jb.pcfg.Channel, j.Channel))
		}
	} else {
		jb.prov, jb.pcfg, _ = jb.live.providers.Default(j.Channel)
	}
	if jb.prov == nil {
		detail := fmt.Sprintf("no default provider for channel %s", j.Channel)
		if j.Provider != "" {
			detail = fmt.Sprintf("no provider named %q in the configuration", truncate(j.Provider, 64))
		}
		return d.finish(ctx, jb, queue.Dead, ReasonUnknownProvider, detail)
	}
	jb.provider = jb.pcfg.Name
	jb.lg = nil // a logger built before now lacks the job and the provider
	jb.msg = &providers.Message{
		ID: j.ID, UserID: j.UserID, Channel: j.Channel, To: j.To, Body: j.Body, Title: j.Title,
		Data: j.Data, Provider: j.Provider, ExpiresAt: timePtr(j.ExpiresAt), CreatedAt: timePtr(j.CreatedAt),
	}
	jb.cost = jb.pcfg.Cost(jb.msg)
	jb.owner = ownerToken(d.o.Instance, d.seq.Add(1))

	if d.expired(j) {
		return d.finish(ctx, jb, queue.Suppressed, ReasonExpired, "expires_at "+j.ExpiresAt.UTC().Format(time.RFC3339)+" passed before sending")
	}

	// The fleet bucket first: it protects the workers and what is behind
	// them, so it counts every job taken, including those the checks below
	// then suppress.
	if err := d.waitGlobal(ctx, jb); err != nil {
		return err
	}

	// One round trip: the ledger (already sent? then take the send lease),
	// the per-user cap, and, speculatively, the slot in the provider's
	// queue.
	jb.rule, jb.capped = jb.live.userLimits[j.Channel]
	var adm admission
	for {
		var err error
		adm, err = d.admit(ctx, jb, jb.rule, jb.capped)
		if err != nil {
			return err
		}
		c := adm.claim
		if c.Status == Claimed {
			jb.claimed, jb.claimAt = true, time.Now()
			break
		}
		d.cancelSlot(ctx, jb, adm)
		if c.Status == AlreadySent {
			return d.ack(ctx, jb, OutcomeDuplicate)
		}
		d.m.Deferrals.WithLabelValues(LayerLedger, "busy").Inc()
		if err := d.hold(ctx, jb, min(c.BusyFor, time.Second)); err != nil {
			return err
		}
	}
	if adm.claim.Attempts >= d.o.Retry.MaxAttempts {
		d.cancelSlot(ctx, jb, adm)
		return d.finish(ctx, jb, queue.Dead, ReasonMaxAttempts,
			fmt.Sprintf("%d transient provider failures", adm.claim.Attempts))
	}
	if jb.capped {
		d.noteCap(j.Channel, adm.cap.Allowed)
		if !adm.cap.Allowed {
			d.cancelSlot(ctx, jb, adm)
			return d.capDenied(ctx, jb, adm.cap, adm.limits)
		}
		jb.capAt = adm.cap.At.UnixMicro()
		d.m.LimitDecisions.WithLabelValues(LayerUser, "allow").Inc()
	}

	// The provider's queue and the send.
	first := adm
	for {
		if jb.live.breakers[jb.provider].open() {
			d.cancelSlot(ctx, jb, first)
			first.slot = nil
			d.m.Deferrals.WithLabelValues(LayerProvider, "circuit_open").Inc()
			if err := d.hold(ctx, jb, breakerOpen/5+d.jitter(breakerOpen/5)); err != nil {
				return err
			}
			continue
		}
		if err := d.waitSlot(ctx, jb, first); err != nil {
			return err
		}
		first.slot = nil
		done, err := d.send(ctx, sendCtx, jb)
		if done || err != nil {
			return err
		}
		// A 429 or an open breaker: the provider is paused; take a new slot.
	}
}

// lease is how long a ledger claim lasts: the longest the job can sit in
// the leaky queue, plus the send, plus a margin. Longer waits re-claim.
func (d *Dispatcher) lease(jb *job) time.Duration {
	return jb.pcfg.MaxQueueDelay + jb.pcfg.Timeout + d.o.AckWait
}

func (d *Dispatcher) expired(j *queue.Job) bool {
	return !j.ExpiresAt.IsZero() && !d.o.Now().Before(j.ExpiresAt)
}

// waitGlobal takes a token from the fleet bucket, heart-beating while the
// bucket is empty.
func (d *Dispatcher) waitGlobal(ctx context.Context, jb *job) error {
	start := time.Now()
	err := d.withBackend(ctx, jb, func(l *Limits) error {
		g := l.global()
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
	if l := d.currentLimits(); l != nil && l.global() != nil {
		if time.Since(start) > 5*time.Millisecond {
			d.m.LimitDecisions.WithLabelValues(LayerGlobal, "deny").Inc()
			d.m.Deferrals.WithLabelValues(LayerGlobal, "empty").Inc()
		} else {
			d.m.LimitDecisions.WithLabelValues(LayerGlobal, "allow").Inc()
		}
	}
	return nil
}

// waitSlot reserves the job's send slot in the provider's leaky queue and
// sleeps until it, then makes sure no pause began meanwhile.
// first, when its slot is not nil, is a reservation already made by the
// admission round trip.
func (d *Dispatcher) waitSlot(ctx context.Context, jb *job, first admission) error {
	queued := time.Now()
	for {
		var r leaky.Reservation
		var l *Limits
		if first.slot != nil {
			r, l = *first.slot, first.limits
			jb.slotAt = first.slotAt
			first.slot = nil
		} else {
			if wait := time.Until(time.Unix(0, d.notBefore.Load())); wait > 0 {
				d.m.Deferrals.WithLabelValues(LayerLeaky, "switch").Inc()
				if err := d.hold(ctx, jb, wait); err != nil {
					return err
				}
			}
			t0 := time.Now()
			err := d.withBackend(ctx, jb, func(cur *Limits) (err error) {
				l = cur
				r, err = cur.Leaky.Reserve(ctx, jb.provider, cur.contract(jb.pcfg), jb.cost)
				return err
			})
			d.trace("leaky", t0)
			if err != nil {
				return err
			}
			jb.slotAt = d.clock.slotTime(time.Now(), r.Slot, r.Delay)
		}
		if !r.OK {
			d.m.LimitDecisions.WithLabelValues(LayerLeaky, "deny").Inc()
			d.m.Deferrals.WithLabelValues(LayerLeaky, "full").Inc()
			// The queue holds max_queue_delay of work: waking a little
			// late costs no throughput, and spreads the workers' retries.
			wait := max(r.RetryAfter, jb.pcfg.MaxQueueDelay/20)
			if err := d.hold(ctx, jb, wait+d.jitter(wait)); err != nil {
				return err
			}
			continue
		}
		d.m.LimitDecisions.WithLabelValues(LayerLeaky, "allow").Inc()
		// The per-user cap counts the job at its send slot.
		var capRes userlimit.Result
		if err := d.withBackend(ctx, jb, func(cur *Limits) (err error) {
			capRes, err = d.capAtSlot(ctx, jb, cur, r)
			return err
		}); err != nil {
			d.giveBack(ctx, jb, l, r)
			return err
		}
		if !capRes.Allowed {
			d.giveBack(ctx, jb, l, r)
			return d.capDenied(ctx, jb, capRes, l)
		}
		// Wake a little before the slot for the round trips below, so that
		// they do not make the send late.
		if err := d.hold(ctx, jb, time.Until(jb.slotAt)-preSlot); err != nil {
			d.giveBack(ctx, jb, l, r)
			return err
		}
		// A 429 seen by any worker after this slot was reserved pauses
		// the provider; a slot inside the pause must not be used.
		var paused time.Duration
		if err := d.withBackend(ctx, jb, func(cur *Limits) (err error) {
			paused, err = cur.pausedFor(ctx, jb.provider)
			return err
		}); err != nil {
			return err
		}
		if paused > 0 {
			d.m.Deferrals.WithLabelValues(LayerProvider, "paused").Inc()
			if err := d.hold(ctx, jb, paused); err != nil {
				return err
			}
			continue
		}
		if err := d.renewClaim(ctx, jb); err != nil {
			return err
		}
		if err := d.hold(ctx, jb, time.Until(jb.slotAt)); err != nil {
			return err
		}
		d.m.QueueLatency.WithLabelValues(jb.provider).Observe(time.Since(queued).Seconds())
		jb.slot = r.Slot
		return nil
	}
}

// giveBack cancels a reservation the job will not use (see leaky.Queue's
// Cancel: only when no later one followed it).
func (d *Dispatcher) giveBack(ctx context.Context, jb *job, l *Limits, r leaky.Reservation) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := l.Leaky.Cancel(cctx, jb.provider, l.contract(jb.pcfg), r, jb.cost); err != nil {
		jb.debug("give back an unused send slot", "err", err)
	}
}

// preSlot is how long before its send slot a worker wakes to check for a
// pause and renew its lease.
const preSlot = 3 * time.Millisecond

// renewClaim extends the ledger lease before a send when the job has waited
// long enough for it to run short.
func (d *Dispatcher) renewClaim(ctx context.Context, jb *job) error {
	if time.Since(jb.claimAt) < d.lease(jb)/2 {
		return nil
	}
	var c Claim
	if err := d.withBackend(ctx, jb, func(l *Limits) (err error) {
		c, err = l.Ledger.Claim(ctx, jb.j.ID, jb.owner, d.lease(jb))
		return err
	}); err != nil {
		return err
	}
	switch c.Status {
	case AlreadySent:
		jb.claimed = false
		_ = d.ackResult(ctx, jb, OutcomeDuplicate)
		return errHandled
	case Busy:
		// Our lease ran out and another delivery of this job took it:
		// that one sends; this copy steps aside.
		jb.claimed = false
		jb.log().Info("job leased to another worker meanwhile; releasing this delivery")
		if err := jb.dl.NakWithDelay(c.BusyFor + time.Second); err != nil {
			jb.log().Warn("release job", "err", err)
		}
		return errHandled
	}
	jb.claimAt = time.Now()
	return nil
}

// send calls the provider once and acts on the answer. done is false when
// the job must take a new slot (the provider paused it).
func (d *Dispatcher) send(ctx, sendCtx context.Context, jb *job) (finished bool, err error) {
	if late := time.Since(jb.slotAt); late > d.o.LateTolerance {
		// Sent now, this job could land in the same second as the sends
		// of the slots after it: take a new slot instead.
		d.m.Deferrals.WithLabelValues(LayerLeaky, "late").Inc()
		jb.debug("woke after the send slot; taking a new one", "late", late)
		return false, nil
	}
	done, ok := jb.live.breakers[jb.provider].allow()
	if !ok {
		// The provider failed every recent call: do not call it; the job
		// waits (no attempt used) and takes a new slot after the probe.
		d.m.Deferrals.WithLabelValues(LayerProvider, "circuit_open").Inc()
		return false, d.hold(ctx, jb, breakerOpen/5+d.jitter(breakerOpen/5))
	}
	if d.sentSlot != nil {
		d.sentSlot(jb.provider, jb.slot, jb.cost)
	}
	rctx, cancel := context.WithTimeout(sendCtx, jb.pcfg.Timeout)
	start := time.Now()
	serr := jb.prov.Send(rctx, jb.msg)
	cancel()
	d.trace("provider", start)
	d.m.ProviderSeconds.WithLabelValues(jb.provider).Observe(time.Since(start).Seconds())
	var rl *providers.RateLimitedError
	switch {
	case errors.As(serr, &rl):
		d.m.ProviderRequests.WithLabelValues(jb.provider, "429").Inc()
	default:
		d.m.ProviderRequests.WithLabelValues(jb.provider, providers.StatusClass(serr)).Inc()
	}
	done(serr)

	switch {
	case serr == nil:
		if !jb.j.CreatedAt.IsZero() || !jb.dl.Published.IsZero() {
			from := jb.dl.Published
			if !jb.j.CreatedAt.IsZero() {
				from = jb.j.CreatedAt
			}
			d.m.JobLatency.WithLabelValues(jb.channel, jb.provider).Observe(time.Since(from).Seconds())
		}
		d.settle(sendCtx, jb)
		return true, nil

	case rl != nil:
		pause := rl.RetryAfter
		if !rl.Explicit {
			pause = providers.DefaultRetryAfter + d.jitter(providers.DefaultRetryAfter)
		}
		d.m.Deferrals.WithLabelValues(LayerProvider, "rate_limited").Inc()
		jb.log().Warn("provider rate limited; pausing it fleet-wide", "pause", pause, "detail", rl.Detail)
		if err := d.withBackend(ctx, jb, func(l *Limits) error {
			if l.Pauses != nil {
				l.Pauses.Note(jb.provider, pause) // at once, before the announcement comes back
			}
			return l.Leaky.Pause(ctx, jb.provider, pause)
		}); err != nil {
			return true, err
		}
		d.m.ProviderPaused.WithLabelValues(jb.provider).Set(1)
		return false, nil

	case errors.Is(serr, providers.ErrPermanent):
		jb.log().Info("provider refused job", "detail", detailOf(serr))
		d.release(ctx, jb)
		return true, d.finish(ctx, jb, queue.Dead, ReasonRejected, detailOf(serr))

	default: // transient: 5xx, 408, timeout, connection error
		var attempts int
		if err := d.withBackend(ctx, jb, func(l *Limits) (err error) {
			attempts, err = l.Ledger.Failed(ctx, jb.j.ID, jb.owner)
			return err
		}); err != nil {
			return true, err
		}
		jb.claimed = false
		if attempts >= d.o.Retry.MaxAttempts {
			jb.log().Warn("provider failed; attempts used up", "attempts", attempts, "detail", detailOf(serr))
			return true, d.finish(ctx, jb, queue.Dead, ReasonMaxAttempts,
				fmt.Sprintf("%d transient provider failures; last: %s", attempts, detailOf(serr)))
		}
		backoff := d.o.Retry.Backoff(attempts, d.o.Rand)
		d.m.Deferrals.WithLabelValues(LayerProvider, "retry").Inc()
		jb.log().Info("provider failed; retrying later", "attempts", attempts, "backoff", backoff, "detail", detailOf(serr))
		return true, d.retryLater(jb, backoff)
	}
}

// settle records a sent job in the ledger and then acknowledges it. On
// the shared limits the worker hands the job to the settler (settleLoop)
// and is free for the next job at once: the record and the ack, which no
// longer decide anything, leave the worker's path, and the settler records
// every job handed to it meanwhile in one round trip. On local limits the
// worker does both itself (the ack there waits for the server).
func (d *Dispatcher) settle(ctx context.Context, jb *job) {
	if l := d.currentLimits(); l != nil && l.redis != nil && d.settleQ != nil {
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
		t0 := time.Now()
		var err error
		if l.redis != nil {
			err = l.redis.sent(ctx, jobs)
		} else {
			for _, jb := range jobs {
				err = errors.Join(err, l.Ledger.Sent(ctx, jb.j.ID, jb.owner))
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
		for deadline := time.Now().Add(wait); ; {
			for _, jb := range jobs {
				d.keepAlive(jb)
			}
			left := time.Until(deadline)
			if left <= 0 || sleep(ctx, min(left, d.o.AckWait/3)) != nil {
				break
			}
		}
	}
}

// deferJob puts a job off for wait without using an attempt: held in the
// worker when short, handed back to JetStream when long.
func (d *Dispatcher) deferJob(ctx context.Context, jb *job, wait time.Duration, why string) error {
	d.release(ctx, jb)
	if wait <= d.o.MaxHold {
		if err := d.hold(ctx, jb, wait); err != nil {
			return err
		}
		return errAgain // the ledger and the cap are asked anew
	}
	jb.debug("job deferred", "why", why, "for", wait)
	if err := jb.dl.NakWithDelay(wait); err != nil {
		jb.log().Warn("defer job", "err", err)
	}
	return errHandled
}

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

// hold keeps a job in its worker for dur, heart-beating it with InProgress
// so JetStream does not redeliver it. It returns ctx.Err() on a stop.
func (d *Dispatcher) hold(ctx context.Context, jb *job, dur time.Duration) error {
	deadline := time.Now().Add(dur)
	beat := d.o.AckWait / 3
	for {
		d.keepAlive(jb)
		left := time.Until(deadline)
		if left <= 0 {
			return ctx.Err()
		}
		if err := sleep(ctx, min(left, beat)); err != nil {
			return err
		}
	}
}

// keepAlive sends InProgress when a third of ack_wait has passed since the
// last one.
func (d *Dispatcher) keepAlive(jb *job) {
	if time.Since(jb.lastBeat) < d.o.AckWait/3 {
		return
	}
	if err := jb.dl.InProgress(); err != nil {
		jb.debug("heartbeat job", "err", err)
	}
	jb.lastBeat = time.Now()
}

// recordDenial counts a cap denial for `notifier top` (shared limits only:
// local ones have no Redis to count in).
func (d *Dispatcher) recordDenial(ctx context.Context, jb *job, l *Limits) {
	if d.o.Denials == nil || l == nil || l.redis == nil {
		return
	}
	if err := d.o.Denials.Record(ctx, jb.j.Channel, jb.j.UserID); err != nil {
		jb.debug("count cap denial", "err", err)
	}
}

// trace reports a step's duration to Options.Trace.
func (d *Dispatcher) trace(step string, start time.Time) {
	if d.o.Trace != nil {
		d.o.Trace(step, time.Since(start))
	}
}

// jitter is a random duration in [0, d).
func (d *Dispatcher) jitter(dur time.Duration) time.Duration {
	if dur <= 0 {
		return 0
	}
	return time.Duration(d.o.Rand() * float64(dur))
}

func detailOf(err error) string {
	var pe *providers.Error
	if errors.As(err, &pe) && pe.Detail != "" {
		return pe.Detail
	}
	return truncate(err.Error(), 200)
}

func truncate(s string, n int) string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\r", " "), "\n", " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
