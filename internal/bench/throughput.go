package bench

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/notifier/notifier/dispatch"
	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/internal/stats"
	"github.com/notifier/notifier/internal/steptrace"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/userlimit"
)

// Throughput set-up: limits wide open means no per-user cap, no fleet
// bucket and a contract far above anything reached (leaky slots 2 µs
// apart); the every-layer pass adds a cap and a bucket that never deny.
const (
	sinkProvider = "bench-sink"
	sinkRate     = 1e6
	// floorStream is the bare JetStream pass's stream: the job stream's
	// settings under another name and subjects.
	floorStream  = "NOTIFY_BENCH_FLOOR"
	floorSubject = "bench.floor.sms"
)

// benchUserRule is the every-layer pass's per-user cap: the default
// algorithm (exact, idempotent sliding log) at its largest limit, which the
// bench never reaches (it spreads jobs over --users users).
var benchUserRule = userlimit.Rule{Limit: userlimit.MaxSlidingLogLimit, Window: time.Hour, Algorithm: userlimit.SlidingLog, OnExceed: userlimit.Drop}

// benchGlobalConfig is the every-layer pass's fleet bucket: far above the
// rate reached, so it never denies; a process leases
// globallimit.LeaseSize of it (100 tokens) per Redis call.
var benchGlobalConfig = globallimit.Config{Rate: 100_000, Burst: 5_000}

// PassResult is one throughput pass's figures.
type PassResult struct {
	Name              string         `json:"name"`
	Jobs              int            `json:"jobs"`
	Seconds           float64        `json:"seconds"`
	JobsPerSecond     float64        `json:"jobs_per_second"`
	RatioToFloor      float64        `json:"ratio_to_floor"`
	CPUSecondsPer1000 float64        `json:"cpu_seconds_per_1000_jobs"`
	AllocsPerJob      float64        `json:"allocs_per_job"`
	Redis             *passRedis     `json:"redis,omitempty"`
	Deferrals         map[string]int `json:"deferrals,omitempty"`
	Outcomes          map[string]int `json:"outcomes,omitempty"`
	stepDurations     map[string][]time.Duration
}

// passRedis is what a dispatcher pass cost Redis, per sent job.
type passRedis struct {
	RoundTripsPerJob  float64        `json:"round_trips_per_job"`
	CommandsPerJob    float64        `json:"commands_per_job"`
	CPUSecondsPer1000 float64        `json:"cpu_seconds_per_1000_jobs"`
	TopCommands       []CommandCount `json:"top_commands"`
}

// meter takes the process's and the servers' counters before and after a
// timed pass.
type meter struct {
	cpu     time.Duration
	mallocs uint64
	trips   int64
	redis   redisStats
}

func (w *benchWorld) readMeter(ctx context.Context, withRedis bool) (meter, error) {
	var m meter
	if withRedis {
		st, err := w.redis.stats(ctx)
		if err != nil {
			return m, err
		}
		m.redis = st
		m.trips = w.trips.Count()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.mallocs = ms.Mallocs
	m.cpu, _ = processCPU()
	return m, nil
}

// result turns two meter readings around n jobs done in took into figures.
func (w *benchWorld) result(ctx context.Context, name string, before meter, n int, took time.Duration, withRedis bool) (PassResult, error) {
	after, err := w.readMeter(ctx, withRedis)
	if err != nil {
		return PassResult{}, err
	}
	r := PassResult{
		Name:              name,
		Jobs:              n,
		Seconds:           took.Seconds(),
		JobsPerSecond:     float64(n) / took.Seconds(),
		CPUSecondsPer1000: (after.cpu - before.cpu).Seconds() * 1000 / float64(n),
		AllocsPerJob:      float64(after.mallocs-before.mallocs) / float64(n),
	}
	if withRedis {
		total, byCmd, cpu := after.redis.diff(before.redis)
		for i := range byCmd {
			byCmd[i].PerJob = float64(byCmd[i].Calls) / float64(n)
		}
		if len(byCmd) > 10 {
			byCmd = byCmd[:10]
		}
		r.Redis = &passRedis{
			RoundTripsPerJob:  float64(after.trips-before.trips) / float64(n),
			CommandsPerJob:    float64(total) / float64(n),
			CPUSecondsPer1000: cpu * 1000 / float64(n),
			TopCommands:       byCmd,
		}
	}
	return r, nil
}

// warmupJobs is how many jobs each pass runs before it is timed: enough to
// open every connection, load every script and start the provider queue
// (a new queue starts max_queue_delay ahead).
func warmupJobs(n int) int { return max(100, min(1000, n/20)) }

// publishJobs publishes n generated jobs on subject (the job subject when
// empty), their ids unique to the run and to tag, showing progress.
func (w *benchWorld) publishJobs(ctx context.Context, tag string, n int, subject string) error {
	pub := queue.NewPublisher(w.js)
	batch := pub.NewBatch(512, 0)
	var done atomic.Int64
	w.prog.set("publishing", n, func() int { return int(done.Load()) })
	now := time.Now().UTC()
	for i := range n {
		j := &queue.Job{
			ID:        fmt.Sprintf("%s-%s-%d", w.run, tag, i),
			UserID:    fmt.Sprintf("user-%d", i%w.f.Users),
			Channel:   "sms",
			To:        fmt.Sprintf("+1555%07d", i%w.f.Users),
			Body:      fmt.Sprintf("bench message %d", i),
			CreatedAt: now,
		}
		if w.tenants > 0 {
			tenant := fmt.Sprintf("tenant-%d", i%w.tenants)
			if w.f.TenantSubjects { // raw, no tenant field: the subject says it
				data, err := j.Marshal()
				if err != nil {
					return err
				}
				if err := batch.PublishRaw(ctx, queue.KeyFor("sms", tenant, false, "").Subject(), data, queue.MsgID(tenant, j.ID)); err != nil {
					return err
				}
			} else {
				j.Tenant = tenant
				if err := batch.Publish(ctx, j, false); err != nil {
					return err
				}
			}
			done.Add(1)
			continue
		}
		data, err := j.Marshal()
		if err != nil {
			return err
		}
		subj := subject
		if subj == "" {
			subj = queue.JobSubject("sms", false)
		}
		if err := batch.PublishRaw(ctx, subj, data, j.MsgID()); err != nil {
			return err
		}
		done.Add(1)
	}
	res, err := batch.Wait(ctx)
	if err != nil {
		return err
	}
	if res.Err != nil || res.Stored != n {
		return fmt.Errorf("publish %s jobs: %d of %d stored (%d duplicates, %d failed): %v", tag, res.Stored, n, res.Duplicates, res.Failed+res.Pending, res.Err)
	}
	return nil
}

// scratchStream creates a stream of the bench's own with the job stream's
// settings on subjects, and returns the function that deletes it.
func (w *benchWorld) scratchStream(ctx context.Context, name, subjects, description string) (drop func(), err error) {
	sc := queue.JobStreamConfig(w.qcfg, w.nats.replicas)
	sc.Name, sc.Subjects, sc.Description = name, []string{subjects}, description
	if _, err := w.js.CreateOrUpdateStream(ctx, sc); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", name, err)
	}
	return func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = w.js.DeleteStream(dctx, name)
	}, nil
}

// floorPass moves n messages through a bare JetStream pull-consume-and-ack
// loop: a stream with the job stream's settings, a durable pull consumer
// with the lanes' settings, and --workers goroutines that each acknowledge
// a message with a double ack (waiting for the server's confirmation, as a
// dispatcher does), fed by one loop that pulls as many messages as there
// are free workers, as a dispatcher's fetch loop does.
func (w *benchWorld) floorPass(ctx context.Context, tag string, n int) (PassResult, error) {
	drop, err := w.scratchStream(ctx, floorStream, "bench.floor.*", "notifier bench: the bare JetStream floor")
	if err != nil {
		return PassResult{}, err
	}
	defer drop()
	cons, err := w.js.CreateOrUpdateConsumer(ctx, floorStream, jetstream.ConsumerConfig{
		Durable:       "bench-floor",
		FilterSubject: floorSubject,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.qcfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: queue.DefaultMaxAckPending,
	})
	if err != nil {
		return PassResult{}, fmt.Errorf("create the floor's consumer: %w", err)
	}
	warm := warmupJobs(n)
	if err := w.publishJobs(ctx, "floor-warmup-"+tag, warm, floorSubject); err != nil {
		return PassResult{}, err
	}
	if _, err := w.consumeFloor(ctx, cons, "bare JetStream: warming up", warm); err != nil {
		return PassResult{}, err
	}
	if err := w.publishJobs(ctx, "floor-"+tag, n, floorSubject); err != nil {
		return PassResult{}, err
	}
	before, err := w.readMeter(ctx, false)
	if err != nil {
		return PassResult{}, err
	}
	took, err := w.consumeFloor(ctx, cons, "bare JetStream: pull + ack", n)
	if err != nil {
		return PassResult{}, err
	}
	r, err := w.result(ctx, "bare JetStream pull + ack", before, n, took, false)
	r.RatioToFloor = 1
	return r, err
}

// consumeFloor pulls and double-acks n messages and returns how long it
// took from the first pull to the last confirmation.
func (w *benchWorld) consumeFloor(ctx context.Context, cons jetstream.Consumer, phase string, n int) (time.Duration, error) {
	var acked, failed atomic.Int64
	w.prog.set(phase, n, func() int { return int(acked.Load()) })
	workers := w.f.Workers
	slots := make(chan struct{}, workers)
	for range workers {
		slots <- struct{}{}
	}
	msgs := make(chan jetstream.Msg, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range msgs {
				actx, cancel := context.WithTimeout(ctx, 10*time.Second)
				if err := m.DoubleAck(actx); err != nil {
					failed.Add(1)
				} else {
					acked.Add(1)
				}
				cancel()
				slots <- struct{}{}
			}
		}()
	}
	start := time.Now()
	var pullErr error
	lastMove := start
	for got := 0; got < n && pullErr == nil; {
		<-slots
		free := 1
	count:
		for free < min(workers, n-got) {
			select {
			case <-slots:
				free++
			default:
				break count
			}
		}
		batch, err := cons.Fetch(free, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			pullErr = fmt.Errorf("pull from %s after %d of %d messages: %w", floorStream, got, n, err)
			break
		}
		k := 0
		for m := range batch.Messages() {
			msgs <- m
			k++
		}
		for ; k < free; free-- {
			slots <- struct{}{}
		}
		got += k
		switch {
		case k > 0:
			lastMove = time.Now()
		case time.Since(lastMove) > 30*time.Second:
			pullErr = fmt.Errorf("pull from %s: %d of %d messages, none for 30s (last error: %v)", floorStream, got, n, batch.Error())
		case ctx.Err() != nil:
			pullErr = ctx.Err()
		}
	}
	close(msgs)
	wg.Wait()
	took := time.Since(start)
	if pullErr != nil {
		return 0, pullErr
	}
	if f := failed.Load(); f > 0 {
		return 0, fmt.Errorf("the floor: %d of %d double acks failed", f, n)
	}
	return took, nil
}

// tracer collects Options.Trace's step durations while it is on. Safe for
// concurrent use.
type tracer struct {
	on    atomic.Bool
	mu    sync.Mutex
	steps map[string][]time.Duration
}

func newTracer() *tracer { return &tracer{steps: map[string][]time.Duration{}} }

func (t *tracer) record(step string, took time.Duration) {
	if !t.on.Load() {
		return
	}
	t.mu.Lock()
	t.steps[step] = append(t.steps[step], took)
	t.mu.Unlock()
}

// inProcessSink is the throughput passes' provider: it accepts every job at
// once, in this process, so that the figures are the dispatcher's own cost
// (the HTTP path to a provider that enforces a contract is what the pacing
// section measures). Safe for concurrent use.
type inProcessSink struct {
	name string
	sent atomic.Int64
}

func (s *inProcessSink) Name() string { return s.name }

func (s *inProcessSink) Send(context.Context, *providers.Message) error {
	s.sent.Add(1)
	return nil
}

// sinkRegistry is the throughput passes' one provider.
type sinkRegistry struct {
	cfg providers.Config
	p   providers.Provider
}

func (r sinkRegistry) Get(name string) (providers.Provider, providers.Config, bool) {
	if name != r.cfg.Name {
		return nil, providers.Config{}, false
	}
	return r.p, r.cfg, true
}

func (r sinkRegistry) Default(channel string) (providers.Provider, providers.Config, bool) {
	if channel != r.cfg.Channel {
		return nil, providers.Config{}, false
	}
	return r.p, r.cfg, true
}

func (r sinkRegistry) All() []providers.Config { return []providers.Config{r.cfg} }

// passKind is which limits a dispatcher pass runs with.
type passKind int

const (
	passOpen   passKind = iota // limits wide open
	passLayers                 // every layer on, configured never to deny
	passShadow                 // every layer on, with shadow limits that deny (--shadow)
)

// benchShadowRule is the --shadow pass's per-user cap: in shadow mode, half
// of each user's share of a pass, so that about half of the jobs are
// shadow-denied (counted, sent anyway).
func benchShadowRule(f *Config) userlimit.Rule {
	r := benchUserRule
	r.Limit, r.Mode = max(1, f.Jobs/f.Users/2), userlimit.Shadow
	return r
}

// benchShadowRate is the --shadow pass's fleet shadow_rate: far under the
// rate reached, so that most jobs find the shadow bucket empty.
const benchShadowRate = 500

// benchShadowLimits describes the --shadow pass.
func benchShadowLimits(f *Config) string {
	r := benchShadowRule(f)
	return fmt.Sprintf("every layer on, the per-user cap in shadow mode at %d per %s (about half of each user's jobs shadow-denied) and a fleet shadow_rate of %d/s: counted, never enforced",
		r.Limit, inspect.FormatDuration(r.Window), benchShadowRate)
}

// dispatchPass runs n jobs through a dispatcher on the bench's NATS and
// Redis and an in-process sink, after a warm-up, and measures it. kind
// turns on the per-user cap and the fleet bucket (configured never to
// deny), and for passShadow shadow limits that deny.
func (w *benchWorld) dispatchPass(ctx context.Context, tag, name string, kind passKind, n int) (PassResult, error) {
	lcfg := limits.Config{Prefix: w.prefix, DedupTTL: time.Hour}
	var users map[string]userlimit.Rule
	layers := kind != passOpen
	if layers {
		g := benchGlobalConfig
		lcfg.Global = &g
		users = map[string]userlimit.Rule{"sms": benchUserRule}
	}
	if kind == passShadow {
		lcfg.Global.ShadowRate = benchShadowRate
		users = map[string]userlimit.Rule{"sms": benchShadowRule(w.f)}
	}
	limits, err := limits.Redis(w.rdb, lcfg)
	if err != nil {
		return PassResult{}, err
	}
	reg := sinkRegistry{cfg: w.sink, p: &inProcessSink{name: w.sink.Name}}
	cons, err := queue.NewConsumer(ctx, w.js, w.qcfg, queue.ConsumerConfig{})
	if err != nil {
		return PassResult{}, err
	}
	defer cons.Close() // its kept pull inboxes: the connection serves the next pass
	// Only the every-layer pass is traced (the latency section is its): the
	// wide-open pass measures the dispatcher as it runs in production.
	tr := newTracer()
	var trace steptrace.Func
	if layers {
		trace = tr.record
	}
	run := func(phase string, jobs int, measure bool) (PassResult, error) {
		m := dispatch.NewMetrics(prometheus.NewRegistry())
		d, err := dispatch.New(dispatch.Options{
			Workers:     w.f.Workers,
			AckWait:     w.qcfg.AckWait,
			UserLimits:  users,
			FetchWait:   200 * time.Millisecond,
			Source:      cons,
			Router:      cons.Router(),
			DeadLetters: queue.NewPublisher(w.js),
			Providers:   reg,
			Limits:      limits,
			Metrics:     m,
			Logger:      slog.New(slog.DiscardHandler),
		})
		if err != nil {
			return PassResult{}, err
		}
		outcome := func(o string) int {
			return int(counterValue(m.Jobs.WithLabelValues("sms", sinkProvider, o)))
		}
		ended := func() int {
			return outcome(dispatch.OutcomeSent) + outcome(dispatch.OutcomeDead) + outcome(dispatch.OutcomeSuppressed) + outcome(dispatch.OutcomeDuplicate)
		}
		w.prog.set(phase, jobs, ended)
		var before meter
		if measure {
			if before, err = w.readMeter(ctx, true); err != nil {
				return PassResult{}, err
			}
			tr.on.Store(true)
		}
		dctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- d.Run(steptrace.With(dctx, trace)) }()
		werr := waitForJobs(ctx, jobs, ended)
		took := time.Since(start)
		tr.on.Store(false)
		var r PassResult
		if werr == nil && measure {
			r, werr = w.result(ctx, name, before, jobs, took, true)
		}
		stop()
		if err := <-done; err != nil && werr == nil {
			werr = err
		}
		if werr != nil {
			return PassResult{}, fmt.Errorf("%s: %w", phase, werr)
		}
		if sent := outcome(dispatch.OutcomeSent); sent != jobs {
			return PassResult{}, fmt.Errorf("%s: %d of %d jobs sent (dead %d, suppressed %d, duplicate %d)", phase, sent, jobs,
				outcome(dispatch.OutcomeDead), outcome(dispatch.OutcomeSuppressed), outcome(dispatch.OutcomeDuplicate))
		}
		if measure {
			r.Deferrals = map[string]int{}
			for k, v := range deferrals(m) {
				r.Deferrals[k] = int(v)
			}
			r.Outcomes = map[string]int{dispatch.OutcomeSent: jobs}
		}
		return r, nil
	}
	warm := warmupJobs(n)
	if err := w.publishJobs(ctx, tag+"-warmup", warm, ""); err != nil {
		return PassResult{}, err
	}
	if _, err := run(name+": warming up", warm, false); err != nil {
		return PassResult{}, err
	}
	if err := w.publishJobs(ctx, tag, n, ""); err != nil {
		return PassResult{}, err
	}
	r, err := run(name, n, true)
	if err != nil {
		return PassResult{}, err
	}
	r.stepDurations = tr.steps
	return r, nil
}

// mergeSteps adds a pass's step durations to those of the passes before.
func mergeSteps(into, from map[string][]time.Duration) map[string][]time.Duration {
	if into == nil {
		into = map[string][]time.Duration{}
	}
	for k, v := range from {
		into[k] = append(into[k], v...)
	}
	return into
}

// waitForJobs waits until done reports n, failing when nothing moves for a
// minute.
func waitForJobs(ctx context.Context, n int, done func() int) error {
	last, lastMove := -1, time.Now()
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		got := done()
		if got >= n {
			return nil
		}
		if got != last {
			last, lastMove = got, time.Now()
		}
		if time.Since(lastMove) > time.Minute {
			return fmt.Errorf("stalled: %d of %d jobs done, none for a minute", got, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// counterValue reads a counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// deferrals reads notifier_deferrals_total by layer/reason.
func deferrals(m *dispatch.Metrics) map[string]float64 {
	out := map[string]float64{}
	ch := make(chan prometheus.Metric, 64)
	go func() { m.Deferrals.Collect(ch); close(ch) }()
	for metric := range ch {
		var d dto.Metric
		if metric.Write(&d) != nil {
			continue
		}
		var layer, reason string
		for _, lp := range d.GetLabel() {
			switch lp.GetName() {
			case "layer":
				layer = lp.GetValue()
			case "reason":
				reason = lp.GetValue()
			}
		}
		if v := d.GetCounter().GetValue(); v > 0 {
			out[layer+"/"+reason] += v
		}
	}
	return out
}

// StepLatency is one step's duration per job: p50 and p99 over the timed
// pass.
type StepLatency struct {
	Step  string  `json:"step"`
	What  string  `json:"what"`
	Count int     `json:"count"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// stepWhat says what each Options.Trace step times.
var stepWhat = map[string]string{
	"admit":       "admission: ledger claim + per-user cap (+ send slot), one round trip",
	"ledger":      "ledger claim (already sent? then the send lease)",
	"user":        "per-user cap",
	"global":      "fleet bucket (a leased token, or a Redis call for a new lease)",
	"leaky":       "leaky bucket reservation (the call, not the wait for the slot)",
	"provider":    "provider call (an in-process sink: no network)",
	"ledger_sent": "ledger: record sent",
}

var stepOrder = []string{"admit", "ledger", "user", "global", "leaky", "provider", "ledger_sent"}

// latencies summarises step durations in the documented order, then any
// step the dispatcher reports that the bench does not know.
func latencies(steps map[string][]time.Duration) []StepLatency {
	names := append([]string(nil), stepOrder...)
	var extra []string
	for s := range steps {
		if _, ok := stepWhat[s]; !ok {
			extra = append(extra, s)
		}
	}
	sort.Strings(extra)
	names = append(names, extra...)
	var out []StepLatency
	for _, s := range names {
		ds := steps[s]
		if len(ds) == 0 {
			continue
		}
		sorted := append([]time.Duration(nil), ds...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		what := stepWhat[s]
		if what == "" {
			what = s
		}
		out = append(out, StepLatency{Step: s, What: what, Count: len(sorted),
			P50Ms: ms(stats.Percentile(sorted, 0.50)), P99Ms: ms(stats.Percentile(sorted, 0.99))})
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
