package dispatch

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/fleet"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/testenv"
)

// TestRedisDownLocalMode: with redis.on_failure: local, two dispatchers keep
// sending while Redis is down, each at half of every contract (the live
// instances they last saw), and go back to the shared state when it returns.
// No window of 1 s − jitterBudget with more arrivals than the contract
// (429s included), nothing lost, nothing sent twice.
func TestRedisDownLocalMode(t *testing.T) {
	measures(t)
	b := setup(t, setupOpts{contract: 100, rate: 100, maxQueueDelay: time.Second})
	ids := b.publishN("loc", "sms", 900, 200)
	var procs []*proc
	for i := 0; i < 2; i++ {
		rdb := b.redis.Client()
		hb := fleet.NewHeartbeat(rdb, b.prefix, "inst-"+string(rune('a'+i)), func() fleet.InstanceInfo { return fleet.InstanceInfo{} }, nil)
		hb.Interval = 200 * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = hb.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		procs = append(procs, b.start(func(o *Options) {
			o.Workers = 16
			o.Fallback = func() (*limits.Set, error) { return limits.Memory(limits.Config{DedupTTL: time.Hour}, hb.Live()) }
		}))
	}
	testenv.WaitFor(t, 30*time.Second, "200 jobs sent on shared limits", func() bool { return len(b.fake.AcceptedIDs()) >= 200 })
	b.redis.Stop()
	before := len(b.fake.AcceptedIDs())
	testenv.WaitFor(t, 30*time.Second, "both processes on local limits", func() bool {
		return procs[0].d.LimitsName() == "local" && procs[1].d.LimitsName() == "local"
	})
	testenv.WaitFor(t, 30*time.Second, "200 more sent while Redis is down", func() bool { return len(b.fake.AcceptedIDs()) >= before+200 })
	during := len(b.fake.AcceptedIDs()) - before
	b.redis.Start()
	testenv.WaitFor(t, 30*time.Second, "both back on shared limits", func() bool {
		return procs[0].d.LimitsName() == "redis" && procs[1].d.LimitsName() == "redis"
	})
	testenv.WaitFor(t, 60*time.Second, "all 900 sent", func() bool { return len(b.fake.AcceptedIDs()) >= 900 })
	testenv.WaitFor(t, 10*time.Second, "job stream empty", func() bool { return b.remaining() == 0 })
	b.acceptedOnce(ids)
	// The arrival window is the promise; 429s are bounded, not forbidden
	// (arrivalsPaced says why).
	most := arrivalsPaced(t, "sms-gw", b.fake, 100)
	if n := b.fake.Count(http.StatusTooManyRequests); n > max429s(900) {
		t.Errorf("provider answered 429 %d times for 900 jobs, more than %d", n, max429s(900))
	}
	t.Logf("%d sent on local limits while Redis was down; most arrivals in any 1 s − %s window %d",
		during, jitterBudget.Round(100*time.Microsecond), most)
}

// TestCircuitBreakerStopsCalling: a provider that fails every request
// (connection hangs past the timeout) is not called for a while after
// breakerTrip failures, and is probed again; jobs are not dead-lettered for
// it while the breaker is open.
func TestCircuitBreakerStopsCalling(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	b.fake.FailFor(time.Hour, http.StatusBadGateway)
	b.publishN("cb", "push", 40, 40)
	p := b.start(func(o *Options) {
		o.Retry = RetryConfig{MaxAttempts: 1000, BaseDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond}
	})
	testenv.WaitFor(t, 20*time.Second, "the breaker opened", func() bool {
		return p.count(p.d.m.Deferrals.WithLabelValues(LayerProvider, "circuit_open")) > 0
	})
	// Calls let through before the breaker opened may still be on their
	// way (a worker descheduled between the breaker's yes and its request,
	// on a loaded machine): the count is taken once no request has come
	// for settle, at most 1 s after the breaker opened.
	const settle = 200 * time.Millisecond
	opened := time.Now()
	calls := len(b.fake.Requests())
	for quiet := time.Now(); time.Since(quiet) < settle && time.Since(opened) < time.Second; time.Sleep(10 * time.Millisecond) {
		if n := len(b.fake.Requests()); n != calls {
			calls, quiet = n, time.Now()
		}
	}
	time.Sleep(breakerOpen/2 - time.Since(opened)) // an interval in which an open breaker must not call
	if extra := len(b.fake.Requests()) - calls; extra > 1 {
		t.Fatalf("%d calls to a provider whose breaker is open (one probe at most)", extra)
	}
	b.fake.Reset()
	testenv.WaitFor(t, 30*time.Second, "all 40 sent once the provider answers", func() bool { return len(b.fake.AcceptedIDs()) >= 40 })
	if len(b.deadLetters()) != 0 {
		t.Fatalf("jobs were dead-lettered while the breaker was open")
	}
}

// TestMetricsAreSpecs: every metric of SPEC §8 is exported with its labels,
// and the registry passes the Prometheus lint.
func TestMetricsAreSpecs(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.Jobs.WithLabelValues("sms", "p", OutcomeSent).Inc()
	m.Deferrals.WithLabelValues(LayerUser, "defer").Inc()
	m.QueueLatency.WithLabelValues("p").Observe(0.1)
	m.JobLatency.WithLabelValues("sms", "p").Observe(0.1)
	m.QueueDepth.WithLabelValues("p").Set(3)
	m.LimitDecisions.WithLabelValues(LayerUser, "allow").Inc()
	m.ProviderRequests.WithLabelValues("p", "2xx").Inc()
	m.ProviderSeconds.WithLabelValues("p").Observe(0.01)
	m.ProviderPaused.WithLabelValues("p", fleet.PauseRateLimited).Set(0)
	want := map[string][]string{
		"notifier_jobs_total":               {"channel", "outcome", "provider"},
		"notifier_deferrals_total":          {"layer", "reason"},
		"notifier_queue_latency_seconds":    {"provider"},
		"notifier_job_latency_seconds":      {"channel", "provider"},
		"notifier_leaky_queue_depth":        {"provider"},
		"notifier_limit_decisions_total":    {"decision", "layer"},
		"notifier_provider_requests_total":  {"provider", "status"},
		"notifier_provider_request_seconds": {"provider"},
		"notifier_provider_paused":          {"provider", "reason"},
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, f := range fams {
		var labels []string
		for _, lp := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, lp.GetName())
		}
		sort.Strings(labels)
		got[f.GetName()] = labels
	}
	for name, labels := range want {
		if strings.Join(got[name], ",") != strings.Join(labels, ",") {
			t.Errorf("%s labels = %v, want %v", name, got[name], labels)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// stopOnSend is a registry whose providers stop Redis from inside the k-th
// accepted send: that job's "sent" record then meets a Redis that is down.
type stopOnSend struct {
	Registry
	k    int64
	n    atomic.Int64
	stop func()
}

func (r *stopOnSend) wrap(p providers.Provider, c providers.Config, ok bool) (providers.Provider, providers.Config, bool) {
	if !ok {
		return p, c, ok
	}
	return &stopOnSendProvider{Provider: p, r: r}, c, ok
}

func (r *stopOnSend) Get(name string) (providers.Provider, providers.Config, bool) {
	return r.wrap(r.Registry.Get(name))
}

func (r *stopOnSend) Default(channel string) (providers.Provider, providers.Config, bool) {
	return r.wrap(r.Registry.Default(channel))
}

type stopOnSendProvider struct {
	providers.Provider
	r *stopOnSend
}

func (p *stopOnSendProvider) Send(ctx context.Context, m *providers.Message) error {
	err := p.Provider.Send(ctx, m)
	if err == nil && p.r.n.Add(1) == p.r.k {
		p.r.stop()
	}
	return err
}

// TestSentJobsKeptAliveWhileRedisIsDown: Redis goes down between a send and
// its "sent" record, for several times ack_wait, and comes back empty. The
// settler keeps the sent jobs waiting for their record alive with
// InProgress, so JetStream does not redeliver them meanwhile; once Redis is
// back they are recorded and acknowledged: no job is sent twice, and none
// even comes back as a duplicate.
func TestSentJobsKeptAliveWhileRedisIsDown(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{ackWait: time.Second})
	ids := b.publishN("alive", "sms", 40, 40)
	stopped := make(chan struct{})
	// A client that gives up on a Redis that is down within a fraction of
	// ack_wait (as go-redis's defaults do within a fraction of the default
	// 30 s), so that what is measured is the settler's retrying.
	opts := b.redis.Options()
	opts.MaxRetries, opts.DialerRetries, opts.DialTimeout, opts.ReadTimeout = -1, 1, 100*time.Millisecond, 200*time.Millisecond
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	p := b.start(func(o *Options) {
		o.Workers = 4
		o.Limits = redisLimits(t, rdb, limits.Config{Prefix: b.prefix, DedupTTL: time.Hour})
		o.Providers = &stopOnSend{Registry: o.Providers, k: 10, stop: func() { b.redis.Stop(); close(stopped) }}
	})
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Redis was not stopped by the 10th send")
	}
	time.Sleep(4 * time.Second) // four ack waits
	b.redis.Start()
	testenv.WaitFor(t, 60*time.Second, "all 40 sent", func() bool { return len(b.fake.AcceptedIDs()) >= 40 })
	testenv.WaitFor(t, 10*time.Second, "job stream empty", func() bool { return b.remaining() == 0 })
	time.Sleep(1500 * time.Millisecond) // a redelivered copy would have had time to be sent again
	b.acceptedOnce(ids)
	// Nothing was redelivered: a redelivered copy of a sent job would have
	// been sent again, or found the job sent (a duplicate outcome).
	if n := p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeDuplicate)); n != 0 {
		t.Errorf("%v redelivered copies of sent jobs (duplicate outcomes), want 0", n)
	}
	if n := p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeSent)); n != 40 {
		t.Errorf("sent counted %v, want 40", n)
	}
}

// TestFallbackThatFailsHolds: under redis.on_failure: local, a fallback
// that cannot be built leaves the process holding, as without one, and
// says why.
func TestFallbackThatFailsHolds(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	p := b.start(func(o *Options) {
		o.Fallback = func() (*limits.Set, error) { return nil, errors.New("no local limits today") }
	})
	testenv.WaitFor(t, 10*time.Second, "the dispatcher ready", func() bool { return p.d.Ready() == nil })
	b.redis.Stop()
	testenv.WaitFor(t, 10*time.Second, "the process holding", func() bool { return p.d.LimitsName() == "holding" })
	testenv.WaitFor(t, 5*time.Second, "the fallback's error logged", func() bool {
		return strings.Contains(b.logs.String(), "no local limits today")
	})
	b.redis.Start()
	testenv.WaitFor(t, 30*time.Second, "back on Redis", func() bool { return p.d.LimitsName() == "redis" })
}
