package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/semaphore"

	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// The package's tests that start servers run in parallel in two kinds,
// each holding a place of its own kind while it runs: those that measure
// pacing, a rate, a share or a cap's windows from arrivals at a fake
// provider (measures, two places) and those that mostly wait, on a
// breaker, a pause or an ack_wait, and use little CPU (waits, three
// places). So at most two measure at once, beside at most three that
// wait: near the load each test's tolerance was set for on two cores,
// where running the measuring tests one after another, then the others
// three at a time, took eight minutes. The few that need the machine to
// themselves run last (measuresAlone: aloneAtOnce at a time), when the
// package's other tests are done and, as a rule, the other packages make test runs
// beside this one (-p 2) too. The tests without servers call t.Parallel
// alone. -parallel does not bound them (TestMain lifts it): a test waiting
// for its place holds one of -parallel's, which would keep a test of the
// other kind from starting.
// aloneAtOnce is how many tests that measure alone run at once: one. Two
// at a time without -race (the last 82 s of the measure step became 42 s)
// held their ratios beside a burner in two runs, but a third put
// TestSmallTenantsBehindABlast's provider at 333/s of 500 and its small
// tenants' p95 at 5.1 s of the 3 s it promises: a bound on absolute
// latency needs the machine as the test was sized for.
const aloneAtOnce = 1

var (
	measuring = semaphore.NewWeighted(measuringPlaces)
	waiting   = semaphore.NewWeighted(3)
	alone     = semaphore.NewWeighted(aloneAtOnce)
	// others counts the tests under way or still to run that do not
	// measure alone. Each adds itself before t.Parallel, while the
	// package's tests are still being started one after another, so it
	// is whole before any parallel test goes on.
	others sync.WaitGroup
)

// measures runs t in parallel as a test that measures, holding one of
// measuring's two places until it ends. A test whose subtests run in
// parallel calls group, and each subtest measures (or waits).
func measures(t *testing.T) {
	t.Helper()
	skipUnlessMeasuring(t)
	hold(t, false, place{measuring, 1})
}

// waits runs t in parallel as a test that mostly waits, holding one of
// waiting's three places until it ends.
func waits(t *testing.T) {
	t.Helper()
	if testsToRun(t) == "only" {
		t.Skip("waits: NOTIFIER_TEST_MEASURES=only runs the tests that measure alone; this one runs under -race (make race)")
	}
	hold(t, false, place{waiting, 1})
}

// testsToRun is NOTIFIER_TEST_MEASURES, which says which of the package's
// tests that start servers run:
//
//   - "" (the default): under -race every one but those that measure;
//     without -race every one.
//   - "only": those that measure (measures, measuresAlone) alone: make
//     measure, the second step of make test, without -race.
//   - "all": every one, also those that measure under -race: make mutate,
//     one mutation at a time on an otherwise idle machine.
//
// A test that measures pacing, a rate, a share or a latency against a
// reference needs the CPU it measures with: under -race, beside the other
// tests and packages of make test, the race detector's own functions took
// 52 % of such a test's CPU and its references ran at 29–43 % of the
// contract (95.8–98.5 % alone), so make test measures without -race, while
// -race covers the same code paths through the package's other tests.
// Any other value fails the test: a misspelt one would otherwise leave the
// measuring tests unrun without a word.
func testsToRun(t *testing.T) string {
	t.Helper()
	v, err := testenv.TestsToRun()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// skipUnlessMeasuring skips a test that measures under -race, unless
// NOTIFIER_TEST_MEASURES=all.
func skipUnlessMeasuring(t *testing.T) {
	t.Helper()
	if testsToRun(t) == "" && raceDetector {
		t.Skip("measures: make test runs it without -race (make measure); NOTIFIER_TEST_MEASURES=all runs it under -race too")
	}
}

// group runs t in parallel as the parent of subtests that run in parallel
// (each calling measures or waits); it holds no place, which its subtests
// would wait behind.
func group(t *testing.T) {
	t.Helper()
	others.Add(1)
	t.Cleanup(others.Done)
	t.Parallel()
}

// measuresAlone runs t in parallel as a test that measures with the
// machine as much to itself as make test gives: once every other test of
// the package has ended, holding every place of both kinds. For the tests
// that keep a core busy, and those that hold a rate near what the machine
// gives (push at 250/s, over a second or two) to a reference taken
// earlier in the test, which any test starting or ending between the two
// would skew: beside other tests and a CPU burner they measured 0.58–0.87
// of their reference.
// Every other test has ended by then (hold waits for others), so the
// only tests beside one are the others that measure alone: aloneAtOnce of
// them.
func measuresAlone(t *testing.T) {
	t.Helper()
	skipUnlessMeasuring(t)
	hold(t, true, place{alone, 1})
}

// place is n places of a kind.
type place struct {
	of *semaphore.Weighted
	n  int64
}

// hold runs t in parallel once it has every place asked for, in order
// (and, when last, once the package's other tests have ended), given back
// when it ends; a failing test's log says how long it waited and ran.
func hold(t *testing.T, last bool, places ...place) {
	t.Helper()
	if !last {
		others.Add(1)
		t.Cleanup(others.Done)
	}
	t.Parallel()
	asked := time.Now()
	if last {
		others.Wait()
	}
	for i, p := range places {
		if err := p.of.Acquire(t.Context(), p.n); err != nil {
			for _, q := range places[:i] {
				q.of.Release(q.n)
			}
			t.Fatalf("wait for a place to run: %v", err)
		}
	}
	got := time.Now()
	t.Cleanup(func() {
		for _, p := range places {
			p.of.Release(p.n)
		}
		t.Logf("waited %s for its place, then ran %s", got.Sub(asked).Round(time.Millisecond), time.Since(got).Round(time.Millisecond))
	})
}

// bundle is one test's world: real NATS, real Redis, a fake provider.
type bundle struct {
	t      *testing.T
	nats   *testenv.NATSServer
	redis  *testenv.RedisServer
	fake   *testenv.Fake
	qcfg   queue.Config
	pcfgs  []providers.Config
	prefix string
	pub    *queue.Publisher
	js     jetstream.JetStream
	logs   *localenv.Buffer
	getenv func(string) string
	slots  slotLog // the slot of every send of the test's dispatchers
}

type setupOpts struct {
	contract      int     // the fake provider's own contract (0: none)
	rate          float64 // configured contract
	maxQueueDelay time.Duration
	ackWait       time.Duration
	extra         []providers.Config  // more providers (their channel's default must stay unique)
	getenv        func(string) string // provider secrets (default: os.Getenv)
}

// setup starts the servers and the streams for one test.
func setup(t *testing.T, so setupOpts) *bundle {
	t.Helper()
	if so.rate == 0 {
		so.rate = 1000
	}
	if so.maxQueueDelay == 0 {
		so.maxQueueDelay = 2 * time.Second
	}
	if so.ackWait == 0 {
		so.ackWait = 5 * time.Second
	}
	b := &bundle{t: t, nats: testenv.NATS(t), redis: testenv.Redis(t), logs: &localenv.Buffer{}, prefix: "t:", getenv: so.getenv}
	var fopts []testenv.FakeOption
	if so.contract > 0 {
		fopts = append(fopts, testenv.WithContract(so.contract))
	}
	b.fake = testenv.FakeProvider(t, fopts...)
	b.qcfg = queue.Config{URL: b.nats.URL(), AckWait: so.ackWait}.WithDefaults()
	b.pcfgs = append([]providers.Config{{
		Name: "sms-gw", Channel: "sms", Default: true, Kind: "webhook", URL: b.fake.URL(),
		Rate: so.rate, MaxQueueDelay: so.maxQueueDelay, Timeout: 2 * time.Second,
	}, {
		Name: "push-gw", Channel: "push", Default: true, Kind: "webhook", URL: b.fake.URL(),
		Rate: so.rate, MaxQueueDelay: so.maxQueueDelay, Timeout: 2 * time.Second,
	}, {
		Name: "email-gw", Channel: "email", Default: true, Kind: "webhook", URL: b.fake.URL(),
		Rate: so.rate, MaxQueueDelay: so.maxQueueDelay, Timeout: 2 * time.Second,
	}}, so.extra...)
	for i := range b.pcfgs {
		b.pcfgs[i] = b.pcfgs[i].WithDefaults()
	}
	ctx := context.Background()
	nc := b.nats.Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := queue.EnsureStreams(ctx, js, b.qcfg, 1); err != nil {
		t.Fatalf("ensure streams: %v", err)
	}
	b.js, b.pub = js, queue.NewPublisher(js)
	return b
}

// proc is one dispatcher "process": its own NATS and Redis connections.
type proc struct {
	d      *Dispatcher
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

// start runs a dispatcher like a separate process would, with mutate
// applied to its options.
func (b *bundle) start(mutate func(*Options)) *proc {
	b.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	nc := b.nats.Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		b.t.Fatal(err)
	}
	cons, err := queue.NewConsumer(ctx, js, b.qcfg, queue.ConsumerConfig{})
	if err != nil {
		b.t.Fatalf("consumer: %v", err)
	}
	reg, err := providers.NewRegistry(b.pcfgs, providers.Options{Version: "test", Getenv: b.getenv})
	if err != nil {
		b.t.Fatalf("registry: %v", err)
	}
	rdb := b.redis.Client()
	lim := redisLimits(b.t, rdb, limits.Config{Prefix: b.prefix, DedupTTL: time.Hour})
	preg := prometheus.NewRegistry()
	o := Options{
		Workers:     8,
		AckWait:     b.qcfg.AckWait,
		Retry:       RetryConfig{MaxAttempts: 3, BaseDelay: 50 * time.Millisecond, MaxDelay: 200 * time.Millisecond},
		FetchWait:   200 * time.Millisecond,
		StopTimeout: 3 * time.Second,
		Source:      cons,
		Router:      cons.Router(),
		Jobs:        queue.NewPublisher(js, queue.WithLanes(cons.Lanes())),
		DeadLetters: queue.NewPublisher(js),
		Providers:   reg,
		Limits:      lim,
		Metrics:     NewMetrics(preg),
		Logger:      slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mutate != nil {
		mutate(&o)
	}
	d, err := New(o)
	if err != nil {
		b.t.Fatalf("new dispatcher: %v", err)
	}
	d.pipe.sentSlot = b.slots.add
	p := &proc{d: d, reg: preg, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- d.Run(ctx) }()
	b.t.Cleanup(func() { p.stop(b.t) })
	return p
}

// stop cancels the dispatcher and waits for Run to return.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.cancel()
	select {
	case err, ok := <-p.done:
		if ok && err != nil {
			t.Errorf("dispatcher Run: %v", err)
		}
		if ok {
			close(p.done) // a second stop finds it closed
		}
	case <-time.After(30 * time.Second):
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("dispatcher did not stop within 30s; the goroutines:\n%s", buf)
	}
}

// count is a counter or gauge value of p's registry.
func (p *proc) count(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

// newJob makes a valid job of channel for user with id.
func newJob(id, channel, user string) *queue.Job {
	to := map[string]string{"sms": "+447700900123", "push": "fcmtoken-" + strings.Repeat("a", 40), "email": "someone@example.com"}[channel]
	return &queue.Job{ID: id, UserID: user, Channel: channel, To: to, Body: "your code is 123456"}
}

// publish publishes jobs on the normal lane.
func (b *bundle) publish(jobs ...*queue.Job) {
	b.t.Helper()
	ctx := context.Background()
	for _, j := range jobs {
		if _, err := b.pub.Publish(ctx, j, false); err != nil {
			b.t.Fatalf("publish %s: %v", j.ID, err)
		}
	}
}

// publishN publishes n jobs of channel, ids prefix-0..n-1, users cycling
// over users.
func (b *bundle) publishN(prefix, channel string, n, users int) []string {
	b.t.Helper()
	batch := b.pub.NewBatch(256, 10*time.Second)
	ids := make([]string, n)
	ctx := context.Background()
	for i := 0; i < n; i++ {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		if err := batch.Publish(ctx, newJob(ids[i], channel, fmt.Sprintf("u%d", i%users)), false); err != nil {
			b.t.Fatalf("publish: %v", err)
		}
	}
	if _, err := batch.Wait(ctx); err != nil {
		b.t.Fatalf("publish batch: %v", err)
	}
	return ids
}

// deadLetters reads every message of the dead stream: subject, reason,
// detail, body.
type deadLetter struct {
	Subject, Reason, Detail string
	Data                    []byte
}

func (b *bundle) deadLetters() []deadLetter {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.js.Stream(ctx, b.qcfg.DeadStream)
	if err != nil {
		b.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	var out []deadLetter
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		out = append(out, deadLetter{Subject: m.Subject, Reason: m.Header.Get(queue.HeaderReason), Detail: m.Header.Get(queue.HeaderDetail), Data: m.Data})
	}
	return out
}

// streamInfo is stream's info now, read through js; the test fails if it
// cannot be read.
func streamInfo(t testing.TB, js jetstream.JetStream, stream string) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	return info
}

// remaining is how many jobs are still in the job stream.
func (b *bundle) remaining() uint64 {
	b.t.Helper()
	return streamInfo(b.t, b.js, b.qcfg.Stream).State.Msgs
}

// acceptedOnce asserts that the fake accepted exactly ids, each once.
func (b *bundle) acceptedOnce(ids []string) {
	b.t.Helper()
	got := map[string]int{}
	for _, id := range b.fake.AcceptedIDs() {
		got[id]++
	}
	var missing, dups []string
	for _, id := range ids {
		switch got[id] {
		case 0:
			missing = append(missing, id)
		case 1:
		default:
			dups = append(dups, id)
		}
	}
	if len(missing) > 0 || len(dups) > 0 || len(got) != len(ids) {
		b.t.Fatalf("accepted %d distinct of %d: missing %d (e.g. %v), sent twice %d (e.g. %v)",
			len(got), len(ids), len(missing), head(missing), len(dups), head(dups))
	}
}

func head(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}

// redisLimits is RedisLimits, failing the test on an error.
func redisLimits(t testing.TB, rdb redis.UniversalClient, c limits.Config) *limits.Set {
	t.Helper()
	l, err := limits.Redis(rdb, c)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// memoryLimits is MemoryLimits, failing the test on an error.
func memoryLimits(t testing.TB, c limits.Config, divisor int) *limits.Set {
	t.Helper()
	l, err := limits.Memory(c, divisor)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// leakyRedis is leaky.NewRedis, failing the test on an error.
func leakyRedis(t testing.TB, rdb redis.Scripter, prefix string, opts ...leaky.Option) *leaky.Redis {
	t.Helper()
	q, err := leaky.NewRedis(rdb, prefix, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return q
}
