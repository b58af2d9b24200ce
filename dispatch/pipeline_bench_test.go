package dispatch

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/internal/roundtrip"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
)

// noopProvider accepts every message at once: the pipeline's cost without a
// provider's.
type noopProvider struct{ sent atomic.Int64 }

func (p *noopProvider) Name() string { return "noop" }

func (p *noopProvider) Send(context.Context, *providers.Message) error {
	p.sent.Add(1)
	return nil
}

// noopRegistry serves the no-op provider as the sms channel's default, on a
// contract far above anything a benchmark reaches.
type noopRegistry struct {
	p   *noopProvider
	cfg providers.Config
}

func newNoopRegistry() *noopRegistry {
	return &noopRegistry{p: &noopProvider{}, cfg: providers.Config{
		Name: "noop", Channel: "sms", Default: true, Kind: "log",
		Rate: 1e6, MaxQueueDelay: 100 * time.Millisecond, Timeout: time.Second,
	}.WithDefaults()}
}

func (r *noopRegistry) Get(name string) (providers.Provider, providers.Config, bool) {
	if name == r.cfg.Name {
		return r.p, r.cfg, true
	}
	return nil, providers.Config{}, false
}

func (r *noopRegistry) Default(channel string) (providers.Provider, providers.Config, bool) {
	if channel == r.cfg.Channel {
		return r.p, r.cfg, true
	}
	return nil, providers.Config{}, false
}

func (r *noopRegistry) All() []providers.Config { return []providers.Config{r.cfg} }

// pipelineWorld is one benchmark's servers and limit set, kept across the
// benchmark's b.N rounds so that each round finds the limit state warm.
type pipelineWorld struct {
	qcfg      queue.Config
	js        jetstream.JetStream
	reg       *noopRegistry
	limits    *limits.Set
	users     map[string]userlimit.Rule
	trips     *roundtrip.Counter // nil for Memory limits
	published int
}

// benchGlobal is a fleet bucket configured far above what a benchmark
// reaches: it never denies, so only its cost shows.
var benchGlobal = globallimit.Config{Rate: 1e6, Burst: 100_000}

// benchUserCap is a per-user cap that never denies: the default (exact,
// idempotent) algorithm at its cost.
var benchUserCap = map[string]userlimit.Rule{"sms": {Limit: userlimit.MaxSlidingLogLimit, Window: time.Hour, Algorithm: userlimit.SlidingLog, OnExceed: userlimit.Drop}}

func newPipelineWorld(b *testing.B, backend string, allLayers bool) *pipelineWorld {
	b.Helper()
	w := &pipelineWorld{reg: newNoopRegistry()}
	url := benchNATS(b)
	w.qcfg = queue.Config{URL: url, AckWait: 30 * time.Second}.WithDefaults()
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	if err := queue.EnsureStreams(b.Context(), js, w.qcfg, 1); err != nil {
		b.Fatal(err)
	}
	w.js = js
	lc := limits.Config{Prefix: "bench:", DedupTTL: time.Hour}
	if allLayers {
		if err := benchUserCap["sms"].Validate(); err != nil {
			b.Fatal(err)
		}
		g := benchGlobal
		lc.Global = &g
		w.users = benchUserCap
	}
	switch backend {
	case "redis":
		rdb := testenv.Redis(b).Client()
		w.trips = &roundtrip.Counter{}
		rdb.AddHook(w.trips)
		w.limits = redisLimits(b, rdb, lc)
	case "memory":
		w.limits = memoryLimits(b, lc, 1)
	default:
		b.Fatalf("backend %q", backend)
	}
	// A first round warms the limit state (a new provider queue starts
	// cold, max_queue_delay ahead), the script cache and the connections.
	w.round(b, 200)
	return w
}

// benchNATS starts an embedded JetStream server with the server's default
// sync (testenv.NATS syncs every write, which would make the benchmark one
// of the disk's fsyncs) and returns its URL.
func benchNATS(b *testing.B) string {
	b.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: b.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		b.Fatal("embedded NATS not ready after 10s")
	}
	b.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv.ClientURL()
}

// round publishes n jobs, then runs a fresh dispatcher until all n are
// sent, and returns how long that took and the Redis round trips it made.
// Only the dispatching is timed.
func (w *pipelineWorld) round(b *testing.B, n int) (time.Duration, int64) {
	b.Helper()
	b.StopTimer()
	ctx := b.Context()
	batch := queue.NewPublisher(w.js).NewBatch(512, 0)
	for i := range n {
		j := newJob(fmt.Sprintf("j-%d", w.published+i), "sms", fmt.Sprintf("u%d", (w.published+i)%1000))
		if err := batch.Publish(ctx, j, false); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := batch.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	w.published += n
	cons, err := queue.NewConsumer(ctx, w.js, w.qcfg, queue.ConsumerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	d, err := New(Options{
		Workers:     32,
		AckWait:     w.qcfg.AckWait,
		UserLimits:  w.users,
		FetchWait:   100 * time.Millisecond,
		Source:      cons,
		DeadLetters: queue.NewPublisher(w.js),
		Providers:   w.reg,
		Limits:      w.limits,
		Metrics:     m,
	})
	if err != nil {
		b.Fatal(err)
	}
	sent := m.Jobs.WithLabelValues("sms", "noop", OutcomeSent)
	var trips0 int64
	if w.trips != nil {
		trips0 = w.trips.Count()
	}
	dctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	b.StartTimer()
	start := time.Now()
	go func() { done <- d.Run(dctx) }()
	deadline := start.Add(time.Minute + time.Duration(n)*time.Millisecond)
	for testutil.ToFloat64(sent) < float64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("%v of %d jobs sent after %s", testutil.ToFloat64(sent), n, time.Since(start))
		}
		time.Sleep(200 * time.Microsecond)
	}
	took := time.Since(start)
	b.StopTimer()
	var trips int64
	if w.trips != nil {
		trips = w.trips.Count() - trips0
	}
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return took, trips
}

// BenchmarkPipeline times jobs through a whole Dispatcher: pulled from an
// embedded JetStream (file store, the server's default sync), through the ledger and the
// limits, to a provider that accepts at once, acknowledged. One op is one
// job; ns/job and jobs/s are the same figure two ways. redis runs on a
// private redis-server with the limits wide open (no per-user cap, no
// fleet bucket: the ledger and the provider queue only); all-layers adds a
// per-user cap and a fleet bucket that never deny, so their cost shows.
// roundtrips/job counts the Redis client's round trips (a pipeline is one)
// while the jobs were dispatched, background calls included. memory is the
// same pipeline on in-process limits.
func BenchmarkPipeline(b *testing.B) {
	for _, v := range []struct {
		name, backend string
		allLayers     bool
	}{
		{"redis", "redis", false},
		{"redis-all-layers", "redis", true},
		{"memory", "memory", false},
		{"memory-all-layers", "memory", true},
	} {
		b.Run(v.name, func(b *testing.B) {
			w := newPipelineWorld(b, v.backend, v.allLayers)
			b.ReportAllocs()
			b.ResetTimer()
			took, trips := w.round(b, b.N)
			b.ReportMetric(float64(took.Nanoseconds())/float64(b.N), "ns/job")
			b.ReportMetric(float64(b.N)/took.Seconds(), "jobs/s")
			if w.trips != nil {
				b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/job")
			}
		})
	}
}
