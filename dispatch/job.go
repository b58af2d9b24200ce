package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/limits/suppress"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/userlimit"
)

// pipeline takes each job from its message to its end: decode, the
// provider, the fleet bucket, the admission (ledger claim, suppression,
// per-user cap, send slot), the waits for the slot, the send, and the end
// (settle, defer, dead letter). Its steps follow the job in this order
// through job.go, admit.go, waits.go, send.go, end.go and settle.go.
type pipeline struct {
	*core
	be    *backendSwitch
	fetch *fetcher // the budgets' counts and the providers' latencies

	horizons *horizonKeeper // nil without Options.Horizons
	seq      atomic.Uint64  // deliveries taken: each one's lease owner
	denials  denialRates    // per channel, for speculative reservations
	probes   probes         // probes of providers paused for their credentials
	activity rolling        // recent outcomes and sends, for the fleet heartbeat
	tracer   trace.Tracer
	settleQ  chan *job // sent jobs for the settler; set by Run before any worker starts
	// sentSlot, when set (by tests, before Run), is told the job id, the
	// leaky slot (on the limit backend's clock, µs) and cost of every send
	// just before it is made, so that pacing and caps can be checked on
	// the slots, which no late wake-up moves. It must be safe for
	// concurrent use.
	sentSlot func(provider, id string, slot int64, cost int)
}

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
	msgVal   providers.Message // what msg points to
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
	// resL (not nil while there is one), until it is sent or given up. A
	// value in the job, not a pointer: nothing to allocate per job.
	res  leaky.Reservation
	resL *limits.Set
	// budget is what the provider's latest answer said of its allowance,
	// when budgeted (ReportBudget).
	budget   providers.Budget
	budgeted bool
}

// ReportBudget notes the budget a provider's answer carried
// (providers.BudgetReporter: the job is its send's reporter).
func (jb *job) ReportBudget(b providers.Budget) { jb.budget, jb.budgeted = b, true }

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
func (pl *pipeline) handle(ctx, sendCtx context.Context, dl *queue.Delivery) {
	span := pl.startJobSpan(dl)
	// No span and no span context from the headers: nothing to carry (and
	// two contexts fewer per job).
	if span.IsRecording() || span.SpanContext().IsValid() {
		ctx, sendCtx = trace.ContextWithSpan(ctx, span), trace.ContextWithSpan(sendCtx, span)
	}
	jb := &job{dl: dl, lastBeat: pl.now(), channel: "invalid", provider: "unknown", base: pl.log}
	e := pl.process(ctx, sendCtx, jb)
	for e.kind == endAgain {
		jb = &job{dl: dl, lastBeat: jb.lastBeat, channel: jb.channel, provider: jb.provider, base: pl.log}
		e = pl.process(ctx, sendCtx, jb)
	}
	pl.conclude(ctx, sendCtx, jb, e)
	endJobSpan(span, jb, e)
}

// process takes a job through the pipeline, from its decoding to the
// provider's answer, and returns its end, never the zero end. endAgain asks
// for the job to go through again, as if it had just been delivered (after
// a short deferral held in the worker).
func (pl *pipeline) process(ctx, sendCtx context.Context, jb *job) end {
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
	jb.live = pl.live.Load()
	if jb.category, err = jb.live.caps.CategoryOf(j, dl.Lane); err != nil {
		return dead(ledger.ReasonInvalid, err.Error())
	}
	if dl.Header.Get(ledger.HeaderReplayed) != "" && dl.NumDelivered == 1 {
		pl.m.Replays.WithLabelValues(j.Channel).Inc()
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
	jb.msgVal = providers.Message{Job: *j, Key: jb.key}
	jb.msg = &jb.msgVal       // in the job's own allocation
	jb.msg.Tenant = dl.Tenant // a job on its tenant's subject need not name it; what the provider is sent does
	jb.cost = jb.pcfg.Cost(jb.msg)
	if i, limit, over := jb.pcfg.OverQuota(jb.cost); over {
		// No window of the contract can hold it: its reservation would
		// fail at every try (and read as the backend failing).
		return dead(ledger.ReasonRejected, fmt.Sprintf("%d segments, more than provider %s's quotas[%d] allows in a window (%d): it could never be sent",
			jb.cost, jb.provider, i, limit))
	}
	jb.owner = ledger.OwnerToken(pl.o.Instance, pl.seq.Add(1))
	if pl.o.SuppressTTL > 0 {
		jb.toHash = suppress.Hash(j.Channel, j.To)
	}

	if pl.expired(j) {
		return suppressed(ledger.ReasonExpired, "expires_at "+j.ExpiresAt.UTC().Format(time.RFC3339)+" passed before sending")
	}

	adm, e := pl.admitted(ctx, jb)
	if e.ended() {
		return e
	}

	// The provider's queue and the send.
	first := adm
	for {
		if jb.live.breakers[jb.provider].open() {
			first.cancel(ctx, jb)
			first.reserved = false
			if pl.failover(jb, FailoverCircuitOpen) {
				continue
			}
			pl.m.Deferrals.WithLabelValues(LayerProvider, "circuit_open").Inc()
			// Back to JetStream until the breaker lets a probe through:
			// a failing provider holds no worker (its channel gets no
			// budget meanwhile, so no more of its jobs are taken).
			return end{kind: endDefer, delay: breakerOpen + pl.jitter(breakerOpen/5), reason: ledger.DeferCircuitOpen}
		}
		if e := pl.waitSlot(ctx, jb, first); e.ended() {
			return e
		}
		first.reserved = false
		if e := pl.send(ctx, sendCtx, jb); e.ended() {
			return e
		}
		// A late wake-up, a 429 or an open breaker: take a new slot.
	}
}

func (pl *pipeline) expired(j *queue.Job) bool {
	return !j.ExpiresAt.IsZero() && !pl.now().Before(j.ExpiresAt)
}

// contentSum identifies the job's message bytes in the ledger's sent record
// (never the content itself).
func (jb *job) contentSum() string {
	// FNV-1a, 64 bits (hash/fnv's New64a, without a hasher to allocate).
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for _, c := range jb.dl.Data {
		h = (h ^ uint64(c)) * prime
	}
	return strconv.FormatUint(h, 16)
}
