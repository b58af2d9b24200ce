package dispatch

import (
	"github.com/notifier/notifier/limits/fleet"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are SPEC §8's metrics. Labels are bounded (channel, provider,
// outcome, layer, reason, decision, status class, tenant as named in the
// configuration); no label ever carries a
// user id, an address or message text. Safe for concurrent use.
type Metrics struct {
	Jobs             *prometheus.CounterVec   // channel, provider, outcome
	Deferrals        *prometheus.CounterVec   // layer, reason
	QueueLatency     *prometheus.HistogramVec // provider
	JobLatency       *prometheus.HistogramVec // channel, provider
	QueueDepth       *prometheus.GaugeVec     // provider
	LimitDecisions   *prometheus.CounterVec   // layer, decision
	ProviderRequests *prometheus.CounterVec   // provider, status
	ProviderSeconds  *prometheus.HistogramVec // provider
	ProviderPaused   *prometheus.GaugeVec     // provider, reason
	InFlight         prometheus.Gauge         // jobs held by this process's workers
	Contract         *prometheus.GaugeVec     // provider: the configured contract, units per second
	MaxQueueDelay    *prometheus.GaugeVec     // provider: the configured max_queue_delay, seconds
	Ready            prometheus.Gauge         // 1 while the process takes jobs (its /readyz)
	Replays          *prometheus.CounterVec   // channel: replayed dead letters taken by this process
	Routed           prometheus.Counter       // jobs this process's router moved to fair lanes
	Suppressions     *prometheus.CounterVec   // channel: recipients this process put on the suppression list
	Digests          *prometheus.CounterVec   // channel: digest jobs this process published
	Probes           *prometheus.CounterVec   // provider, result: probes of providers paused for their credentials
	// Tenants: the tenant label is a tenant named in tenants.weights,
	// "default" for jobs without one, or "other": never unbounded.
	TenantSent   *prometheus.CounterVec // provider, tenant: jobs sent
	TenantQueued *prometheus.GaugeVec   // channel, tenant: jobs in the stream (waiting or under way), as this process last looked
	// CreatedAtIgnored counts sent jobs whose created_at was after the
	// send: their latency is measured from the publish instead.
	CreatedAtIgnored *prometheus.CounterVec // channel
	// Ambiguous counts requests whose outcome is unknown: written whole to
	// the provider, no answer back (a timeout, a lost connection). The
	// provider may have accepted them; a retry may deliver twice.
	Ambiguous *prometheus.CounterVec // provider
	// Deliveries counts the delivery reports providers call back with
	// (Twilio status callbacks), by the provider's status.
	Deliveries *prometheus.CounterVec // provider, status
	// Failovers counts jobs a provider handed to its fallback, by why:
	// circuit_open, quota, deadline.
	Failovers *prometheus.CounterVec // from, to, reason
	// EffectiveRate is the rate the fleet paces a provider at now: its
	// contract, or less while an adaptive contract has backed off.
	EffectiveRate *prometheus.GaugeVec // provider
}

// Outcomes (SPEC §6).
const (
	OutcomeSent       = "sent"
	OutcomeDuplicate  = "duplicate"
	OutcomeSuppressed = "suppressed"
	OutcomeDead       = "dead"
)

// Layers, as used in the layer label.
const (
	LayerUser     = "user"
	LayerGlobal   = "global"
	LayerLeaky    = "leaky"
	LayerProvider = "provider"
	LayerLedger   = "ledger"
)

// DecisionShadowDeny is the decision of notifier_limit_decisions_total for a
// limit in shadow mode that would have refused a job it let through.
const DecisionShadowDeny = "shadow_deny"

// NewMetrics registers the metrics with reg (never the global registry).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	latency := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	// Queue waits are bounded by max_queue_delay (seconds): finer buckets there.
	queueWait := []float64{.005, .01, .025, .05, .1, .2, .3, .5, .75, 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10, 15, 20, 30, 60}
	m := &Metrics{
		Jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifier_jobs_total", Help: "Jobs by final outcome (sent, duplicate, suppressed, dead).",
		}, []string{"channel", "provider", "outcome"}),
		Deferrals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifier_deferrals_total", Help: "Transient deferrals and retries, by layer and reason.",
		}, []string{"layer", "reason"}),
		QueueLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "notifier_queue_latency_seconds", Help: "A send's wait in its provider's leaky queue, once per slot a job reaches: from the first attempt to reserve to the slot, a full queue's hold and a short pause included (max_queue_delay bounds only a granted reservation's wait).", Buckets: queueWait,
		}, []string{"provider"}),
		JobLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "notifier_job_latency_seconds", Help: "Time from publish to provider acceptance.", Buckets: latency,
		}, []string{"channel", "provider"}),
		QueueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "notifier_leaky_queue_depth", Help: "Units queued in the provider's leaky bucket now (fleet-wide).",
		}, []string{"provider"}),
		LimitDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifier_limit_decisions_total", Help: "Allow/deny decisions per limit layer.",
		}, []string{"layer", "decision"}),
		ProviderRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifier_provider_requests_total", Help: "Provider calls by HTTP status class (2xx, 4xx, 429, 5xx) or error.",
		}, []string{"provider", "status"}),
		ProviderSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "notifier_provider_request_seconds", Help: "Provider call duration.", Buckets: latency,
		}, []string{"provider"}),
		ProviderPaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "notifier_provider_paused", Help: "1 while a provider's fleet-wide pause is in force, by reason: rate_limited (a 429) or credentials (the provider refused the sender).",
		}, []string{"provider", "reason"}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "notifier_jobs_in_flight", Help: "Jobs held by this process's workers now.",
		}),
		Contract: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "notifier_provider_contract", Help: "The provider's configured contract, in units (messages or segments) per second, fleet-wide.",
		}, []string{"provider"}),
		MaxQueueDelay: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "notifier_provider_max_queue_delay_seconds", Help: "The provider's configured max_queue_delay: the bound of notifier_queue_latency_seconds.",
		}, []string{"provider"}),
		Ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "notifier_ready", Help: "1 while this process takes jobs (what /readyz says), else 0.",
		}),
		Replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifier_replays_total", Help: "Replayed dead letters (notifier dead replay) taken by this process.",
		}, []string{"channel"}),
		Suppressions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifier_suppressions_total", Help: "Recipients this process put on the suppression list, a provider having refused them as gone (unregistered, unsubscribed, no such number or mailbox).",
		}, []string{"channel"}),
		Probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifier_provider_probes_total", Help: "Probes of a provider paused for refusing the sender (one job let through per probe_interval, fleet-wide), by result: sent (accepted: the provider resumed fleet-wide), refused (the sender still refused), failed (another failure).",
		}, []string{"provider", "result"}),
		Digests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifier_digests_total", Help: "Digest jobs published (user_limits with on_exceed: digest): each stands for the user's jobs its cap held, which end suppressed (reason digested).",
		}, []string{"channel"}),
		Routed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "notifier_routed_total", Help: "Jobs published on a tenant's own subject (notify.jobs.<channel>.t.<tenant>) that this process moved to the tenant's fair lane.",
		}),
		TenantSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifier_tenant_sent_total", Help: "Jobs sent, by provider and tenant (a tenant named in tenants.weights, default, or other).",
		}, []string{"provider", "tenant"}),
		TenantQueued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "notifier_tenant_queued", Help: "Jobs in the job stream (waiting, under way or retrying), by channel and tenant: default (the default tenant's subjects) or other (the fair lanes, shared by every other tenant, named or not).",
		}, []string{"channel", "tenant"}),
		CreatedAtIgnored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifier_job_created_at_ignored_total", Help: "Sent jobs whose created_at lay after the send (a publisher's clock ahead): their latency is measured from the publish.",
		}, []string{"channel"}),
		Ambiguous: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifier_provider_ambiguous_total", Help: "Provider requests whose outcome is unknown: the request was written whole and no answer came back (timeout, connection lost); the provider may have accepted it.",
		}, []string{"provider"}),
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifier_deliveries_total", Help: "Delivery reports called back by providers (Twilio status callbacks), by the provider's status: delivered, undelivered, failed, sent, ...",
		}, []string{"provider", "status"}),
		Failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifier_failovers_total", Help: "Jobs a provider handed to its fallback (providers[].fallback), by why: circuit_open, quota (a quota spent), deadline (no slot before expires_at).",
		}, []string{"from", "to", "reason"}),
		EffectiveRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "notifier_provider_effective_rate", Help: "The rate the fleet paces each provider at now, units per second: its contract, or less while an adaptive contract has backed off after throttling.",
		}, []string{"provider"}),
	}
	reg.MustRegister(m.Failovers, m.EffectiveRate, m.Ambiguous, m.Deliveries, m.CreatedAtIgnored, m.Jobs, m.Deferrals, m.QueueLatency, m.JobLatency, m.QueueDepth,
		m.LimitDecisions, m.ProviderRequests, m.ProviderSeconds, m.ProviderPaused, m.InFlight,
		m.Contract, m.MaxQueueDelay, m.Ready, m.Replays, m.Routed, m.Suppressions, m.Digests, m.Probes, m.TenantSent, m.TenantQueued)
	return m
}

// setPaused sets notifier_provider_paused of provider: 1 for reason, 0 for
// the others ("": not paused).
func (c *core) setPaused(provider, reason string) {
	for _, r := range fleet.AllPauseReasons() {
		v := 0.0
		if r == reason {
			v = 1
		}
		c.m.ProviderPaused.WithLabelValues(provider, r).Set(v)
	}
}
