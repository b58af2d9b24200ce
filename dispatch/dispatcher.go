package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/internal/steptrace"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/fleet"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/userlimit"
)

// Source is where jobs come from: queue.Consumer. Queues lists the queues
// holding jobs (one per channel, tenant and lane); FetchFrom pulls from
// chosen ones at once, without waiting; Poll waits for the first job on
// any of several.
type Source interface {
	Queues(ctx context.Context) ([]queue.Queue, error)
	FetchFrom(ctx context.Context, wants []queue.Want) ([]*queue.Delivery, error)
	Poll(ctx context.Context, subjects []string, max int, wait time.Duration) ([]*queue.Delivery, error)
}

// Router moves jobs to their tenants' fair lanes: queue.Router. Run moves
// those published on tenants' own subjects until ctx ends; Move those of
// dls from the default tenant's queues that name a tenant in their JSON,
// returning the others.
type Router interface {
	Run(ctx context.Context, moved func(n int), report func(error)) error
	Move(ctx context.Context, dls []*queue.Delivery, all map[string]bool) (rest []*queue.Delivery, moved int, err error)
}

// DeadLetterer records a job that is not sent: queue.Publisher.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, d *queue.Delivery, o queue.Outcome, reason, detail string) error
}

// Registry finds providers: providers.Registry.
type Registry interface {
	Get(name string) (providers.Provider, providers.Config, bool)
	Default(channel string) (providers.Provider, providers.Config, bool)
	All() []providers.Config
}

// Options configures a Dispatcher. Zero values take the defaults noted.
type Options struct {
	Workers    int                       // jobs in flight in this process (default 32)
	AckWait    time.Duration             // the consumers' ack_wait (default 30s): heartbeats go at a third of it
	Retry      RetryConfig               // transient failure policy (defaults as RetryConfig.WithDefaults)
	UserLimits map[string]userlimit.Rule // per channel; a channel left out has no cap
	// CategoryLimits are caps of their own for one category's jobs on a
	// channel (user_limits.<channel>.<category>): such a job is capped by
	// its category's rule instead of its channel's, counted apart.
	CategoryLimits map[limits.CategoryCap]userlimit.Rule
	// Categories are the channels' categories (categories.<channel>): the
	// category of a job on a channel's normal lane that names none. A
	// channel left out is transactional.
	Categories  map[string]queue.Category
	MaxHold     time.Duration // longest wait held in a worker; longer ones go back with NakWithDelay (default 10s)
	FetchWait   time.Duration // long-poll of an idle fetch (default 1s)
	StopTimeout time.Duration // how long sends at a provider may finish after a stop (default AckWait)
	// LateTolerance is how late after its slot a send may still leave
	// (default 5ms). A worker that wakes later (a busy machine, a slow
	// Redis reply) takes a new slot instead: sends leave at most this late,
	// and with the leaky bucket's headroom h any window of 1 s then holds
	// at most the contract as long as the whole arrival jitter stays under
	// h/(1−h) s (15.2ms at the default 1.5 %); the rest of that budget is for
	// the network.
	LateTolerance time.Duration
	Instance      string // this process's id, in ledger lease owners (default random)
	// TenantWeights are the tenants' shares of a provider's contract while
	// several have jobs waiting (a tenant left out weighs 1).
	TenantWeights map[string]float64
	// SuppressTTL is how long a recipient a provider refused as gone stays
	// on the suppression list (Limits.Suppress), its jobs suppressed
	// unsent (suppression.ttl); 0 keeps no list.
	SuppressTTL time.Duration
	// Peers, when set, is how many processes of the fleet are live: each
	// holds its share of a channel's in-flight budget (default 1).
	Peers func() int

	Source Source
	// Router, when set, runs beside the fetch loop: every process of a
	// fleet should run one, or the jobs published on tenants' own subjects
	// wait unrouted.
	Router      Router
	DeadLetters DeadLetterer
	// Jobs publishes the jobs the dispatcher makes (digests); required for
	// a cap with on_exceed: digest.
	Jobs      JobPublisher
	Providers Registry
	Limits    *limits.Set // the primary backends (Redis in production)
	// Fallback builds in-memory limits for redis.on_failure: local; nil
	// means hold (take no jobs until the primary backend answers again), as
	// does a Fallback that returns an error.
	Fallback func() (*limits.Set, error)

	Metrics *Metrics
	// Tracer, when set, records a span per job delivery and per provider
	// call, continuing the trace in the job's traceparent header (see
	// trace.go). nil: nothing is recorded; provider calls still carry
	// the job's traceparent.
	Tracer trace.TracerProvider
	// Denials, when set, counts per-user cap denials in Redis for
	// `notifier top` (not while on local limits).
	Denials *limits.Denials
	// Horizons keeps how far ahead the fleet handed out each provider's
	// slots where a Redis wipe cannot lose it (queue.Horizons), so that a
	// first start, or a start after the fleet was idle, does not wait a
	// cold start's max_queue_delay. nil: every queue without a trusted
	// state in Redis starts cold.
	Horizons Horizons
	Logger   *slog.Logger
	// Now is the dispatcher's clock (default time.Now), read for every
	// decision on time (a job's expiry, its send slot, holds, heartbeats,
	// lease renewals) and every measure (traces, latency metrics). Waits
	// sleep on real timers until it says they are over, so a fake clock
	// must move. The limit sets keep their own clocks (on Redis, the
	// server's TIME, which clockSync maps to this one).
	Now  func() time.Time
	Rand func() float64 // default math/rand/v2.Float64 (jitter)
}

func (o Options) withDefaults() Options {
	if o.Workers <= 0 {
		o.Workers = 32
	}
	if o.AckWait <= 0 {
		o.AckWait = 30 * time.Second
	}
	o.Retry = o.Retry.WithDefaults()
	if o.MaxHold <= 0 {
		o.MaxHold = 10 * time.Second
	}
	if o.FetchWait <= 0 {
		o.FetchWait = time.Second
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = o.AckWait
	}
	if o.LateTolerance <= 0 {
		o.LateTolerance = 5 * time.Millisecond
	}
	if o.Instance == "" {
		o.Instance = fmt.Sprintf("i%08x", rand.Uint32())
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	return o
}

// Dispatcher runs the worker pool of one process. Create it with New and
// call Run once.
//
// It is wiring: three parts that each own their state run the work. The
// backend switch (backend.go) keeps the limit set in use (Redis, the local
// fallback, or none while holding) and the limit backend's clock; the
// fetcher (schedule.go) decides which queues to pull from and how much
// (budgets, lanes, tenants by weight); the pipeline (job.go and the files
// after it) takes each job from its message to its end. What they all read
// (the options, the log, the metrics and the live configuration) is their
// shared core.
type Dispatcher struct {
	*core
	be    *backendSwitch
	fetch *fetcher
	pipe  *pipeline

	inFlight atomic.Int64
	ready    atomic.Bool
	stopping atomic.Bool
	wg       sync.WaitGroup // background loops of Run
}

// New checks the options and returns a Dispatcher.
func New(o Options) (*Dispatcher, error) {
	o = o.withDefaults()
	switch {
	case o.Source == nil:
		return nil, errors.New("dispatch: Options.Source is required")
	case o.DeadLetters == nil:
		return nil, errors.New("dispatch: Options.DeadLetters is required")
	case o.Providers == nil:
		return nil, errors.New("dispatch: Options.Providers is required")
	case o.Limits == nil || o.Limits.Ledger == nil || o.Limits.Users == nil || o.Limits.Leaky == nil:
		return nil, errors.New("dispatch: Options.Limits with a ledger.Ledger, Users and Leaky is required")
	case o.Metrics == nil:
		return nil, errors.New("dispatch: Options.Metrics is required")
	}
	caps := limits.Caps{Channels: o.UserLimits, Categories: o.CategoryLimits, Defaults: o.Categories}
	if err := caps.Validate(); err != nil {
		return nil, fmt.Errorf("dispatch: Options: %w", err)
	}
	d := wire(o)
	d.live.Store(d.newLive(caps, o.Providers, o.TenantWeights, nil))
	return d, nil
}

// wire builds a dispatcher's parts on o, checked and with its defaults.
func wire(o Options) *Dispatcher {
	c := &core{o: o, log: o.Logger, m: o.Metrics}
	d := &Dispatcher{core: c}
	d.be = newBackendSwitch(c, &d.wg)
	d.pipe = &pipeline{core: c, be: d.be, tracer: newTracer(o.Tracer)}
	d.fetch = &fetcher{core: c, be: d.be, probes: &d.pipe.probes, inFlight: &d.inFlight}
	d.pipe.fetch = d.fetch
	if o.Horizons != nil {
		d.pipe.horizons = newHorizonKeeper(o.Horizons, o.Instance, o.Now)
	}
	return d
}

// liveConfig is the part of the configuration a reload may change: the
// per-user caps and the providers (contracts, endpoints), with a circuit
// breaker per provider. It is replaced whole, never changed in place.
type liveConfig struct {
	weights   map[string]float64
	caps      limits.Caps
	providers Registry
	breakers  map[string]*breaker
	maxQueue  time.Duration // the longest max_queue_delay of the providers
}

// newLive builds a live configuration, keeping the breakers of providers
// that stay (their state survives a reload), and sets the per-provider
// gauges.
func (d *Dispatcher) newLive(caps limits.Caps, reg Registry, weights map[string]float64, old *liveConfig) *liveConfig {
	lc := &liveConfig{caps: caps, providers: reg, breakers: map[string]*breaker{}, weights: weights}
	for _, p := range reg.All() {
		lc.maxQueue = max(lc.maxQueue, p.MaxQueueDelay)
		if old != nil && old.breakers[p.Name] != nil {
			lc.breakers[p.Name] = old.breakers[p.Name]
		} else {
			lc.breakers[p.Name] = newBreaker(p.Name)
			d.setPaused(p.Name, "")
			d.m.QueueDepth.WithLabelValues(p.Name).Set(0)
		}
		d.m.Contract.WithLabelValues(p.Name).Set(p.Rate)
		d.m.MaxQueueDelay.WithLabelValues(p.Name).Set(p.MaxQueueDelay.Seconds())
	}
	return lc
}

// Reload is the part of the configuration that changes without a restart.
type Reload struct {
	UserLimits     map[string]userlimit.Rule
	CategoryLimits map[limits.CategoryCap]userlimit.Rule
	Categories     map[string]queue.Category
	Providers      Registry            // a new registry (the caller closes the old one once jobs have let go of it)
	Global         *globallimit.Config // nil: no fleet bucket
	// TenantWeights replace Options.TenantWeights.
	TenantWeights map[string]float64
}

// Reload switches to new caps, providers and fleet bucket. Jobs already
// under way finish on the configuration they started with; the next ones
// take the new one. No job is dropped. An invalid cap refuses the whole
// reload. Safe to call while Run runs.
func (d *Dispatcher) Reload(r Reload) error {
	caps := limits.Caps{Channels: r.UserLimits, Categories: r.CategoryLimits, Defaults: r.Categories}
	if err := caps.Validate(); err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	old := d.live.Load()
	d.live.Store(d.newLive(caps, r.Providers, r.TenantWeights, old))
	l := d.be.currentLimits()
	d.o.Limits.SetGlobal(r.Global)
	if l != nil && l != d.o.Limits {
		l.SetGlobal(r.Global) // the local fallback in use
	}
	d.resumeCredentialPauses(l, r.Providers)
	return nil
}

// resumeCredentialPauses lifts, fleet-wide, the pauses of providers that
// refused their credentials: a reload or a start is the operator's word
// that they may be right now. The next send of each probes them (and pauses it again
// if they are still refused).
func (c *core) resumeCredentialPauses(l *limits.Set, reg Registry) {
	if l == nil || l.Reasons == nil || reg == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, p := range reg.All() {
		if l.PauseReason(ctx, p.Name) != fleet.PauseCredentials {
			continue
		}
		if _, err := l.Leaky.Resume(ctx, p.Name, l.ContractOf(p)); err != nil {
			c.log.Warn("resume a provider paused for its credentials", "provider", p.Name, "err", err)
			continue
		}
		if err := l.Reasons.Clear(ctx, p.Name); err != nil {
			c.log.Warn("resume a provider paused for its credentials", "provider", p.Name, "err", err)
		}
		if l.Pauses != nil {
			l.Pauses.Clear(p.Name)
		}
		c.setPaused(p.Name, "")
		c.log.Info("provider paused for its credentials resumed (a reload or a start); its next send probes them", "provider", p.Name)
	}
}

// Ready reports whether the dispatcher is taking jobs: started, not
// stopping, and its limit backend reachable (or a fallback in use).
func (d *Dispatcher) Ready() error {
	switch {
	case d.stopping.Load():
		return errors.New("stopping")
	case !d.ready.Load():
		return errors.New("not started")
	}
	if d.be.currentLimits() == nil {
		return errors.New("limit backend unreachable: holding jobs in JetStream")
	}
	return nil
}

// Providers is the provider registry in use now (the last reload's).
func (d *Dispatcher) Providers() Registry { return d.live.Load().providers }

// InFlight is the number of jobs this process's workers hold now.
func (d *Dispatcher) InFlight() int { return int(d.inFlight.Load()) }

// Run dispatches until ctx is cancelled, then stops softly: no more
// fetching, waiting jobs released to JetStream, sends at a provider allowed
// to finish within StopTimeout. It returns nil after a clean stop.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.stepTrace = steptrace.From(ctx)
	// Sends get their own context: a stop does not cut a request to a
	// provider halfway; only StopTimeout after the stop does.
	sendCtx, cancelSends := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSends()
	stopWatch := context.AfterFunc(ctx, func() {
		d.stopping.Store(true)
		time.AfterFunc(d.o.StopTimeout, cancelSends)
	})
	defer stopWatch()

	bgCtx, cancelBg := context.WithCancel(ctx)
	defer cancelBg()
	d.wg.Add(1)
	go func() { defer d.wg.Done(); d.gaugeLoop(bgCtx) }()
	if h := d.pipe.horizons; h != nil {
		// The fleet's horizons before the first reservation: until read,
		// every queue without a trusted state starts cold.
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		h.refresh(rctx, d.live.Load().providers.All())
		cancel()
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			h.run(bgCtx, func() []providers.Config { return d.live.Load().providers.All() })
		}()
	}
	if r := d.o.Router; r != nil {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			_ = r.Run(bgCtx, func(n int) { d.m.Routed.Add(float64(n)) }, func(err error) { d.log.Warn("route tenants' jobs to their fair lanes", "err", err) })
		}()
	}
	if w := d.o.Limits.Watch; w != nil {
		var names []string
		for _, p := range d.live.Load().providers.All() {
			names = append(names, p.Name)
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			if err := w(bgCtx, names); err != nil {
				d.log.Warn("pause watcher stopped", "err", err)
			}
		}()
	}

	// The settler records and acknowledges sent jobs for the workers
	// (shared limits only); it stops once the workers have and its queue
	// is empty, so every job a worker sent is acknowledged before Run
	// returns.
	d.pipe.settleQ = make(chan *job, d.o.Workers)
	settled := make(chan struct{})
	go func() { defer close(settled); d.pipe.settleLoop(sendCtx, d.pipe.settleQ) }()

	jobs := make(chan *queue.Delivery)
	slots := make(chan struct{}, d.o.Workers)
	for i := 0; i < d.o.Workers; i++ {
		slots <- struct{}{}
	}
	var workers sync.WaitGroup
	for i := 0; i < d.o.Workers; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for dl := range jobs {
				d.inFlight.Add(1)
				d.m.InFlight.Inc()
				d.pipe.handle(ctx, sendCtx, dl)
				d.fetch.done(dl)
				d.m.InFlight.Dec()
				d.inFlight.Add(-1)
				slots <- struct{}{}
			}
		}()
	}

	// A backend unreachable at start is found now, not by the first job's
	// failed operation: until it answers, the process holds (or runs on
	// local limits) and says so, in its log and on /readyz.
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := d.be.ping(pctx); err != nil && ctx.Err() == nil {
		d.be.backendFailed(d.o.Limits, err)
	}
	cancel()
	// A start, like a reload, is the operator's word that the credentials
	// may be right now (a new secret in the environment needs a restart).
	// With the backend away, the monitor does it once it answers.
	if d.be.currentLimits() == d.o.Limits {
		d.resumeCredentialPauses(d.o.Limits, d.live.Load().providers)
		d.be.credsResumed.Store(true)
	}
	d.ready.Store(true)
	err := d.fetch.fetchLoop(ctx, jobs, slots)
	close(jobs)
	workers.Wait()
	close(d.pipe.settleQ)
	<-settled
	cancelBg()
	d.be.stopMonitor()
	d.wg.Wait()
	d.ready.Store(false)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// gaugeLoop refreshes the fleet-wide gauges (queue depth, pause) once a
// second.
func (d *Dispatcher) gaugeLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ready := 0.0
		if d.Ready() == nil {
			ready = 1
		}
		d.m.Ready.Set(ready)
		d.m.TenantQueued.Reset() // a tenant gone from the stream leaves no stale series
		for ch, ts := range d.fetch.queuedByTenant() {
			for t, n := range ts {
				d.m.TenantQueued.WithLabelValues(ch, t).Set(float64(n))
			}
		}
		l := d.be.currentLimits()
		if l == nil {
			continue
		}
		for _, p := range d.live.Load().providers.All() {
			depth, err := l.Leaky.Depth(ctx, p.Name, l.ContractOf(p))
			if err != nil {
				if ctx.Err() == nil {
					// An idle process notices a lost backend here, within
					// a second: it stops fetching (hold) or goes local.
					d.be.backendFailed(l, err)
				}
				break
			}
			d.m.QueueDepth.WithLabelValues(p.Name).Set(depth)
			d.m.EffectiveRate.WithLabelValues(p.Name).Set(d.pipe.effectiveRate(ctx, l, p))
			if paused, err := l.Leaky.PausedFor(ctx, p.Name); err == nil {
				reason := ""
				if paused > 0 {
					reason = l.PauseReason(ctx, p.Name)
				}
				d.setPaused(p.Name, reason)
				if reason == fleet.PauseCredentials && l.Reasons != nil {
					d.pipe.maybeProbe(ctx, l, p.Name, probeInterval(p))
				}
			}
		}
	}
}

// Activity is this process's recent work, per provider and per channel.
func (d *Dispatcher) Activity() (map[string]fleet.ProviderActivity, map[string]fleet.ChannelActivity) {
	now := d.now()
	tenS := d.pipe.activity.sums(now, 10*time.Second)
	minute := d.pipe.activity.sums(now, time.Minute)
	ps := map[string]fleet.ProviderActivity{}
	live := d.live.Load()
	for _, p := range live.providers.All() {
		// A send is counted once, under its tenant: the provider's total
		// is their sum.
		pa := fleet.ProviderActivity{Breaker: live.breakers[p.Name].State()}
		for k, n := range tenS {
			if k.provider == p.Name && n > 0 {
				pa.Sent10s += n
				if pa.Tenants == nil {
					pa.Tenants = map[string]int64{}
				}
				pa.Tenants[k.tenant] = n
			}
		}
		ps[p.Name] = pa
	}
	queued := d.fetch.queuedByTenant()
	cs := map[string]fleet.ChannelActivity{}
	for _, ch := range queue.Channels {
		cs[ch] = fleet.ChannelActivity{
			Sent:       minute[rollKey{channel: ch, outcome: OutcomeSent}],
			Suppressed: minute[rollKey{channel: ch, outcome: OutcomeSuppressed}],
			Dead:       minute[rollKey{channel: ch, outcome: OutcomeDead}],
			Queued:     queued[ch],
		}
	}
	return ps, cs
}
