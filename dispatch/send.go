package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/fleet"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/providers"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// send calls the provider once and returns the job's end from its answer:
// sent, dead (refused, or attempts used up), a retry, or a stop. It returns
// no end (the zero end) when the job must take a new slot: it woke too late
// for its slot, the provider's breaker is open, or the provider paused it.
func (pl *pipeline) send(ctx, sendCtx context.Context, jb *job) end {
	if late := pl.since(jb.slotAt); late > pl.o.LateTolerance {
		// Sent now, this job could land in the same second as the sends
		// of the slots after it: take a new slot instead.
		pl.m.Deferrals.WithLabelValues(LayerLeaky, "late").Inc()
		jb.debug("woke after the send slot; taking a new one", "late", late.String())
		jb.abandonSlot(ctx)
		return end{}
	}
	done, ok := jb.live.breakers[jb.provider].allow()
	if !ok {
		jb.abandonSlot(ctx)
		// The provider failed every recent call: do not call it; the job
		// waits (no attempt used) and takes a new slot after the probe.
		pl.m.Deferrals.WithLabelValues(LayerProvider, "circuit_open").Inc()
		if err := pl.hold(ctx, jb, breakerOpen/5+pl.jitter(breakerOpen/5)); err != nil {
			return stopped(err)
		}
		return end{}
	}
	jb.res, jb.resL = leaky.Reservation{}, nil // used: the request goes out
	if pl.sentSlot != nil {
		pl.sentSlot(jb.provider, jb.j.ID, jb.slot, jb.cost)
	}
	rctx, cancel := context.WithTimeout(sendCtx, jb.pcfg.Timeout)
	rctx, span := pl.startSendSpan(rctx, jb)
	jb.budgeted = false
	rctx = providers.WithBudgetReporter(rctx, jb)
	start := pl.now()
	serr := jb.prov.Send(rctx, jb.msg)
	cancel()
	endSendSpan(span, serr)
	pl.trace("provider", start)
	pl.m.ProviderSeconds.WithLabelValues(jb.provider).Observe(pl.since(start).Seconds())
	pl.fetch.lat.observe(jb.provider, pl.since(start))
	rl := rateLimited(serr)
	switch {
	case rl != nil:
		pl.m.ProviderRequests.WithLabelValues(jb.provider, "429").Inc()
	default:
		pl.m.ProviderRequests.WithLabelValues(jb.provider, providers.StatusClass(serr)).Inc()
	}
	done(serr)
	if jb.budgeted && jb.budget.Spent() && rl == nil {
		pl.budgetSpent(ctx, jb, jb.budget)
	}
	return pl.answer(ctx, jb, serr, rl)
}

// rateLimited is err as a provider's 429, nil when it is none (a
// function of its own, so that a send that succeeded allocates nothing
// for the question).
func rateLimited(err error) *providers.RateLimitedError {
	if err == nil {
		return nil
	}
	var rl *providers.RateLimitedError
	if errors.As(err, &rl) {
		return rl
	}
	return nil
}

// budgetSpent pauses the provider fleet-wide until its allowance resets,
// as its answer's rate-limit headers said (remaining 0): the fleet waits
// before it meets a 429, not after. The job at hand is unaffected (it was
// answered). A failing backend only loses the pause: the provider's 429s
// would still pause it.
func (pl *pipeline) budgetSpent(ctx context.Context, jb *job, b providers.Budget) {
	pause := min(b.Reset, maxPause(jb.pcfg))
	l := pl.be.currentLimits()
	if l == nil {
		return
	}
	pl.m.Deferrals.WithLabelValues(LayerProvider, "budget_spent").Inc()
	jb.log().Info("provider says its allowance is spent; pausing it fleet-wide until it resets", "pause", pause.String())
	if l.Pauses != nil {
		l.Pauses.Note(jb.provider, pause)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := l.Leaky.Pause(pctx, jb.provider, pause); err != nil {
		jb.log().Warn("pause a provider whose allowance is spent", "err", err)
		return
	}
	pl.setPaused(jb.provider, fleet.PauseRateLimited)
}

// answer acts on the provider's answer serr to a send (rl: serr as a 429)
// and returns the job's end, or no end when the provider is paused and the
// job must take a new slot.
func (pl *pipeline) answer(ctx context.Context, jb *job, serr error, rl *providers.RateLimitedError) end {
	if jb.probe {
		jb.probe = false
		switch {
		case serr == nil:
			pl.probeSucceeded(ctx, jb)
		case errors.Is(serr, providers.ErrSender):
			pl.m.Probes.WithLabelValues(jb.provider, "refused").Inc()
			jb.log().Warn("probe: the provider still refuses the sender; it stays paused", "detail", detailOf(serr))
		default:
			pl.m.Probes.WithLabelValues(jb.provider, "failed").Inc()
		}
	}
	switch {
	case serr == nil:
		pl.observeLatency(jb)
		return end{kind: endSent}

	case rl != nil && rl.Scope == providers.ScopeRecipient:
		// One recipient got too many (an APNs or FCM device token): this
		// job waits alone, the provider goes on for everyone else. Its
		// wait grows with its deliveries, as a retry's does, and is at
		// least what the provider asked; no attempt is used.
		wait := rl.RetryAfter
		if !rl.Explicit && wait <= 0 {
			wait = providers.DefaultRetryAfter
		}
		wait = min(max(wait, pl.o.Retry.Backoff(int(jb.dl.NumDelivered), pl.o.Rand)), maxPause(jb.pcfg))
		pl.m.Deferrals.WithLabelValues(LayerProvider, "recipient_throttled").Inc()
		jb.log().Info("provider throttled this recipient; deferring the job alone", "for", wait.String(), "detail", rl.Detail)
		return end{kind: endDefer, delay: wait + pl.jitter(wait/10), reason: ledger.DeferRecipientThrottled}

	case rl != nil:
		pause := rl.RetryAfter
		if !rl.Explicit {
			// No Retry-After: the provider's client backs off, doubling over
			// a run of such answers (providers.RateLimitedError), and the
			// fleet's instances spread their returns over as much again.
			if pause <= 0 {
				pause = providers.DefaultRetryAfter
			}
			pause += pl.jitter(pause)
		}
		var asked time.Duration
		if max := maxPause(jb.pcfg); pause > max {
			asked, pause = pause, max // one odd Retry-After does not stop the channel for long
		}
		pl.m.Deferrals.WithLabelValues(LayerProvider, "rate_limited").Inc()
		if asked > 0 {
			jb.log().Warn("provider rate limited; pausing it fleet-wide for max_pause, less than it asked", "pause", pause.String(), "asked", asked.String(), "detail", rl.Detail)
		} else {
			jb.log().Warn("provider rate limited; pausing it fleet-wide", "pause", pause.String(), "detail", rl.Detail)
		}
		var lowered bool
		if err := pl.be.with(ctx, jb, func(l *limits.Set) (err error) {
			if l.Pauses != nil {
				l.Pauses.Note(jb.provider, pause) // at once, before the announcement comes back
			}
			// A pause, and for an adaptive contract a lower rate after it
			// (once per pause, fleet-wide).
			lowered, err = l.Leaky.Backoff(ctx, jb.provider, l.ContractOf(jb.pcfg), pause)
			return err
		}); err != nil {
			return stopped(err)
		}
		if lowered {
			jb.log().Info("adaptive contract: the fleet's rate for the provider lowered", "decrease", jb.pcfg.Adaptive.Decrease)
		}
		pl.setPaused(jb.provider, fleet.PauseRateLimited)
		return end{}

	case errors.Is(serr, providers.ErrSender):
		return pl.senderRefused(ctx, jb, serr)

	case errors.Is(serr, providers.ErrRecipientGone):
		// The provider says the recipient is gone for good: this job is
		// dead, and the next ones to it are not sent (the suppression list).
		jb.log().Info("provider refused the recipient as gone", "detail", detailOf(serr))
		return dead(ledger.ReasonRejected, pl.listGone(ctx, jb, detailOf(serr)))

	case errors.Is(serr, providers.ErrPermanent):
		jb.log().Info("provider refused job", "detail", detailOf(serr))
		return dead(ledger.ReasonRejected, detailOf(serr))

	default: // transient: 5xx, 408, timeout, connection error
		var pe *providers.Error
		errors.As(serr, &pe)
		if pe != nil && pe.Ambiguous {
			// The provider may have accepted it: a retry may deliver the
			// message twice.
			pl.m.Ambiguous.WithLabelValues(jb.provider).Inc()
			if !jb.pcfg.RetriesOnTimeout() {
				jb.log().Warn("provider did not answer a request it received whole; not retrying it (retry_on_timeout: false)", "detail", detailOf(serr))
				return dead(ledger.ReasonAmbiguous, "no answer to a request the provider received whole (it may have been delivered): "+detailOf(serr))
			}
		}
		var attempts int
		if err := pl.be.with(ctx, jb, func(l *limits.Set) (err error) {
			attempts, err = l.Ledger.Failed(ctx, jb.key, jb.owner, providers.StatusClass(serr))
			return err
		}); err != nil {
			return stopped(err)
		}
		jb.claimed = false
		if attempts >= pl.o.Retry.MaxAttempts {
			jb.log().Warn("provider failed; attempts used up", "attempts", attempts, "detail", detailOf(serr))
			return dead(ledger.ReasonMaxAttempts,
				fmt.Sprintf("%d transient provider failures; last: %s", attempts, detailOf(serr)))
		}
		backoff := pl.o.Retry.Backoff(attempts, pl.o.Rand)
		if pe != nil && pe.RetryAfter > backoff {
			// The provider said when to come back: a 503's Retry-After, or
			// its own guidance (APNs: 15 minutes after a 5xx). The job waits
			// in JetStream, at most an hour, and no longer than it is worth
			// sending (past its expires_at it is suppressed when it comes
			// back).
			backoff = min(pe.RetryAfter, maxRetryAfter)
			if !jb.j.ExpiresAt.IsZero() {
				backoff = max(pl.o.Retry.Backoff(attempts, pl.o.Rand), min(backoff, pl.until(jb.j.ExpiresAt)))
			}
		}
		pl.m.Deferrals.WithLabelValues(LayerProvider, "retry").Inc()
		jb.log().Info("provider failed; retrying later", "attempts", attempts, "backoff", backoff.String(), "detail", detailOf(serr))
		return end{kind: endRetry, delay: backoff}
	}
}

// senderRefused pauses the provider fleet-wide for max_pause after it
// refused the sender (credentials, account, sender id): no job is at fault
// and none can be sent, so none is dead-lettered; this one takes a new slot
// and, the pause being long, goes back to JetStream. After the pause one
// send probes again; a reload or `notifier resume` lifts it at once.
func (pl *pipeline) senderRefused(ctx context.Context, jb *job, serr error) end {
	pause := maxPause(jb.pcfg)
	pl.m.Deferrals.WithLabelValues(LayerProvider, "credentials").Inc()
	jb.log().Error("provider refused the sender (credentials, account or sender id); pausing it fleet-wide, jobs kept in JetStream until a reload, notifier resume, or a probe after the pause",
		"pause", pause.String(), "detail", detailOf(serr))
	if err := pl.be.with(ctx, jb, func(l *limits.Set) error {
		if l.Reasons != nil {
			if err := l.Reasons.SetCredentials(ctx, jb.provider, pause); err != nil {
				return err
			}
		}
		if l.Pauses != nil {
			l.Pauses.Note(jb.provider, pause)
		}
		return l.Leaky.Pause(ctx, jb.provider, pause)
	}); err != nil {
		return stopped(err)
	}
	pl.setPaused(jb.provider, fleet.PauseCredentials)
	return end{}
}

// maxPause is the longest pause a provider's answer may set (max_pause).
// maxRetryAfter caps the wait a provider asks of one job after a transient
// failure.
const maxRetryAfter = time.Hour

func maxPause(c providers.Config) time.Duration {
	if c.MaxPause > 0 {
		return c.MaxPause
	}
	return providers.DefaultMaxPause
}

// detailOf is what a provider's error says, for a log line or a dead
// letter's Notifier-Detail.
func detailOf(err error) string {
	var pe *providers.Error
	if errors.As(err, &pe) && pe.Detail != "" {
		return pe.Detail
	}
	return text.OneLine(err.Error(), 200)
}

// observeLatency records a sent job's latency from its created_at, or from
// its publish when it has none. A created_at after now (a publisher's clock
// ahead, or a made-up time) would record a negative latency (2099 gave
// −2.27e9 s): the publish time stands in for it, and the job is counted in
// notifier_job_created_at_ignored_total.
func (pl *pipeline) observeLatency(jb *job) {
	now := pl.now()
	from := jb.dl.Published
	if c := jb.j.CreatedAt; !c.IsZero() {
		if c.After(now) {
			pl.m.CreatedAtIgnored.WithLabelValues(jb.channel).Inc()
			jb.debug("created_at is after now; latency measured from the publish", "ahead", c.Sub(now).String())
		} else {
			from = c
		}
	}
	if from.IsZero() || from.After(now) {
		return
	}
	pl.m.JobLatency.WithLabelValues(jb.channel, jb.provider).Observe(now.Sub(from).Seconds())
}

// startSendSpan starts the span of one provider call under the job's span
// (in ctx).
func (pl *pipeline) startSendSpan(ctx context.Context, jb *job) (context.Context, trace.Span) {
	if pl.tracer == nil {
		return ctx, trace.SpanFromContext(ctx) // the job's, which records nothing
	}
	return pl.tracer.Start(ctx, "notifier.send",
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("notifier.provider", jb.provider)))
}

// endSendSpan records the provider's answer (its class, never its text,
// which may quote the recipient) and ends the span.
func endSendSpan(span trace.Span, serr error) {
	if serr != nil && span.IsRecording() {
		span.SetAttributes(attribute.String("notifier.answer", providers.StatusClass(serr)))
		span.SetStatus(codes.Error, providers.StatusClass(serr))
	}
	span.End()
}
