package dispatch

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/ledger"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/suppress"
	"github.com/notifier/notifier/userlimit"
)

// job is one delivery on its way through the pipeline, owned by one worker.
type job struct {
	dl       *queue.Delivery
	j        *queue.Job
	owner    string // ledger lease owner token of this delivery
	key      string // the job's ledger key: its id within its tenant (queue.MsgID)
	toHash   string // suppress.Hash of its recipient, when a suppression list is kept
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
	probe    bool // its next send is the probe of a provider paused for its credentials
	claimAt  time.Time
	category queue.Category // transactional or marketing (limits.Caps.CategoryOf)
	rule     userlimit.Rule // the job's per-user cap (its category's or its channel's), when capped
	capped   bool
	capKey   userlimit.Key // what the cap counts the job under
	// shadowDenied: a cap in shadow mode would have refused the job
	// (counted for notifier top --shadow with its sent record).
	shadowDenied bool
	capAt        int64    // µs on the limit backend's clock: where the job's cap admission stands
	tried        []string // providers this delivery failed over from
	// res is the reservation of the slot the job is at (waitSlot's), on
	// resL, until it is sent or given up.
	res  *leaky.Reservation
	resL *limits.Set
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
// deferral), or released on a stop. The pipeline (process) decides the end;
// conclude acts on it.
func (d *Dispatcher) handle(ctx, sendCtx context.Context, dl *queue.Delivery) {
	span := d.startJobSpan(dl)
	ctx, sendCtx = trace.ContextWithSpan(ctx, span), trace.ContextWithSpan(sendCtx, span)
	jb := &job{dl: dl, lastBeat: d.now(), channel: "invalid", provider: "unknown", base: d.log}
	e := d.process(ctx, sendCtx, jb)
	for e.kind == endAgain {
		jb = &job{dl: dl, lastBeat: jb.lastBeat, channel: jb.channel, provider: jb.provider, base: d.log}
		e = d.process(ctx, sendCtx, jb)
	}
	d.conclude(ctx, sendCtx, jb, e)
	endJobSpan(span, jb, e)
}

// process takes a job through the pipeline, from its decoding to the
// provider's answer, and returns its end, never the zero end. endAgain asks
// for the job to go through again, as if it had just been delivered (after
// a short deferral held in the worker).
func (d *Dispatcher) process(ctx, sendCtx context.Context, jb *job) end {
	dl := jb.dl
	if queue.ChannelOf(dl.Subject) != "" && queue.IsChannel(queue.ChannelOf(dl.Subject)) {
		jb.channel = queue.ChannelOf(dl.Subject)
	}
	j, err := queue.DecodeDelivery(dl)
	if err != nil {
		return dead(ledger.ReasonInvalid, err.Error())
	}
	jb.j = j
	jb.key = queue.MsgID(dl.Tenant, j.ID)
	jb.channel = j.Channel
	jb.live = d.live.Load()
	if jb.category, err = jb.live.caps.CategoryOf(j, dl.Lane); err != nil {
		return dead(ledger.ReasonInvalid, err.Error())
	}
	if dl.Header.Get(ledger.HeaderReplayed) != "" && dl.NumDelivered == 1 {
		d.m.Replays.WithLabelValues(j.Channel).Inc()
	}

	if j.Provider != "" {
		jb.prov, jb.pcfg, _ = jb.live.providers.Get(j.Provider)
		if jb.prov != nil && jb.pcfg.Channel != j.Channel {
			return dead(ledger.ReasonUnknownProvider,
				fmt.Sprintf("provider %q serves channel %s, not %s", j.Provider, jb.pcfg.Channel, j.Channel))
		}
	} else {
		jb.prov, jb.pcfg, _ = jb.live.providers.Default(j.Channel)
	}
	if jb.prov == nil {
		detail := fmt.Sprintf("no default provider for channel %s", j.Channel)
		if j.Provider != "" {
			detail = fmt.Sprintf("no provider named %q in the configuration", text.OneLine(j.Provider, 64))
		}
		return dead(ledger.ReasonUnknownProvider, detail)
	}
	jb.provider = jb.pcfg.Name
	jb.lg = nil // a logger built before now lacks the job and the provider
	jb.msg = &providers.Message{
		ID: j.ID, Key: jb.key, UserID: j.UserID, Channel: j.Channel, To: j.To, Body: j.Body, Title: j.Title,
		Data: j.Data, Provider: j.Provider, ExpiresAt: timePtr(j.ExpiresAt), CreatedAt: timePtr(j.CreatedAt),
	}
	jb.cost = jb.pcfg.Cost(jb.msg)
	jb.owner = ledger.OwnerToken(d.o.Instance, d.seq.Add(1))
	if d.o.SuppressTTL > 0 {
		jb.toHash = suppress.Hash(j.Channel, j.To)
	}

	if d.expired(j) {
		return suppressed(ledger.ReasonExpired, "expires_at "+j.ExpiresAt.UTC().Format(time.RFC3339)+" passed before sending")
	}

	// The fleet bucket first: it protects the workers and what is behind
	// them, so it counts every job taken, including those the checks below
	// then suppress.
	if err := d.waitGlobal(ctx, jb); err != nil {
		return stopped(err)
	}

	// One round trip: the ledger (already sent? then take the send lease),
	// the per-user cap, and, speculatively, the slot in the provider's
	// queue.
	jb.rule, jb.capped, jb.capKey = jb.live.caps.CapFor(j.Channel, jb.category, j.UserID)
	if digesting(jb) {
		e, ended, err := d.digestCheck(ctx, jb)
		if err != nil {
			return stopped(err)
		}
		if ended {
			return e
		}
	}
	var adm admission
	for {
		var err error
		adm, err = d.admit(ctx, jb, jb.rule, jb.capped)
		if err != nil {
			return stopped(err)
		}
		c := adm.claim
		if c.Status == ledger.Claimed {
			jb.claimed, jb.claimAt = true, d.now()
			break
		}
		d.cancelSlot(ctx, jb, adm)
		if c.Status == ledger.AlreadySent {
			if seq, differs := d.noteDuplicate(ctx, jb, adm.limits); differs {
				return dead(ledger.ReasonDuplicateID, fmt.Sprintf("job id %s was already sent (stream sequence %d) with other content: a job id is unique within its tenant; this message is not sent", jb.j.ID, seq))
			}
			return end{kind: endDuplicate}
		}
		d.m.Deferrals.WithLabelValues(LayerLedger, "busy").Inc()
		if err := d.hold(ctx, jb, min(c.BusyFor, time.Second)); err != nil {
			return stopped(err)
		}
	}
	if adm.suppressed {
		d.cancelSlot(ctx, jb, adm)
		return d.suppressedRecipient(ctx, jb, adm.limits)
	}
	if adm.claim.Attempts >= d.o.Retry.MaxAttempts {
		d.cancelSlot(ctx, jb, adm)
		return dead(ledger.ReasonMaxAttempts, fmt.Sprintf("%d transient provider failures", adm.claim.Attempts))
	}
	if jb.capped {
		switch {
		case adm.cap.Allowed && digesting(jb):
			d.noteCap(j.Channel, true)
			jb.capAt = adm.cap.At.UnixMicro()
			d.m.LimitDecisions.WithLabelValues(LayerUser, "allow").Inc()
			if e, ended := d.digestTake(ctx, jb); ended {
				d.cancelSlot(ctx, jb, adm)
				return e
			}
		case adm.cap.Allowed:
			d.noteCap(j.Channel, true)
			jb.capAt = adm.cap.At.UnixMicro()
			d.m.LimitDecisions.WithLabelValues(LayerUser, "allow").Inc()
		case jb.rule.Mode == userlimit.Shadow:
			d.m.LimitDecisions.WithLabelValues(LayerUser, "allow").Inc() // it passes; shadowDenied counts what it would not have
			d.shadowDenied(jb)
		default:
			d.noteCap(j.Channel, false)
			d.cancelSlot(ctx, jb, adm)
			return d.capDenied(ctx, jb, adm.cap, adm.limits)
		}
	}

	// The provider's queue and the send.
	first := adm
	for {
		if jb.live.breakers[jb.provider].open() {
			d.cancelSlot(ctx, jb, first)
			first.slot = nil
			if d.failover(jb, FailoverCircuitOpen) {
				continue
			}
			d.m.Deferrals.WithLabelValues(LayerProvider, "circuit_open").Inc()
			// Back to JetStream until the breaker lets a probe through:
			// a failing provider holds no worker (its channel gets no
			// budget meanwhile, so no more of its jobs are taken).
			return end{kind: endDefer, delay: breakerOpen + d.jitter(breakerOpen/5), reason: ledger.DeferCircuitOpen}
		}
		if e := d.waitSlot(ctx, jb, first); e.ended() {
			return e
		}
		first.slot = nil
		if e := d.send(ctx, sendCtx, jb); e.ended() {
			return e
		}
		// A late wake-up, a 429 or an open breaker: take a new slot.
	}
}

// lease is how long a ledger claim lasts: the longest the job can sit in
// the leaky queue, plus the send, plus a margin. Longer waits re-claim.
func (d *Dispatcher) lease(jb *job) time.Duration {
	return jb.pcfg.MaxQueueDelay + jb.pcfg.Timeout + d.o.AckWait
}

func (d *Dispatcher) expired(j *queue.Job) bool {
	return !j.ExpiresAt.IsZero() && !d.now().Before(j.ExpiresAt)
}

// trace reports a step's duration to the steptrace hook of Run's context.
func (d *Dispatcher) trace(step string, start time.Time) {
	if d.stepTrace != nil {
		d.stepTrace(step, d.since(start))
	}
}

// jitter is a random duration in [0, d).
func (d *Dispatcher) jitter(dur time.Duration) time.Duration {
	if dur <= 0 {
		return 0
	}
	return time.Duration(d.o.Rand() * float64(dur))
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// contentSum identifies a message's bytes in the ledger's sent record (never
// the content itself).
func contentSum(data []byte) string {
	h := fnv.New64a()
	h.Write(data)
	return strconv.FormatUint(h.Sum64(), 16)
}

// noteDuplicate tells a job whose id was already sent: a redelivery of
// the message that was sent (logged at debug), or another message given
// the same id (differs, with the stream sequence of the one sent: it is
// dead-lettered as duplicate_id). Neither names the content. On limits
// without Redis there is no sent record to compare with: a redelivery.
func (d *Dispatcher) noteDuplicate(ctx context.Context, jb *job, l *limits.Set) (sentSeq uint64, differs bool) {
	if l == nil {
		jb.debug("job already sent: not sent again")
		return 0, false
	}
	seq, sum, ok, err := l.SentFrom(ctx, jb.key)
	switch {
	case err != nil || !ok:
		jb.debug("job already sent: not sent again")
	case sum != contentSum(jb.dl.Data) && seq != jb.dl.StreamSeq:
		return seq, true
	default:
		jb.debug("job already sent: not sent again", "sent_seq", seq)
	}
	return seq, false
}
