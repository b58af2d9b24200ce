package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// clusterWorld is the scale-out set-up: a three-node JetStream cluster with
// the job streams at three replicas, a three-master Redis Cluster for every
// limit, and a fake provider enforcing a contract.
type clusterWorld struct {
	t     *testing.T
	nats  *testenv.NATSClusterServer
	redis *testenv.RedisClusterServer
	fake  *testenv.Fake
	qcfg  queue.Config
	pcfgs []providers.Config
	js    jetstream.JetStream
	logs  *localenv.Buffer
	slots slotLog // the slot of every send of the world's dispatchers
}

func setupCluster(t *testing.T, contract int) *clusterWorld {
	t.Helper()
	return setupClusterOn(t, contract, testenv.RedisCluster(t))
}

// setupClusterOn is setupCluster on the given Redis Cluster.
func setupClusterOn(t *testing.T, contract int, rc *testenv.RedisClusterServer) *clusterWorld {
	t.Helper()
	w := &clusterWorld{
		t:     t,
		nats:  testenv.NATSCluster(t, 3),
		redis: rc,
		fake:  testenv.FakeProvider(t, testenv.WithContract(contract)),
		logs:  &localenv.Buffer{},
	}
	w.qcfg = queue.Config{URL: w.nats.URLs(), AckWait: 4 * time.Second, Replicas: 3}.WithDefaults()
	w.pcfgs = []providers.Config{providers.Config{
		Name: "sms-gw", Channel: "sms", Default: true, Kind: "webhook", URL: w.fake.URL(),
		Rate: float64(contract), MaxQueueDelay: time.Second, Timeout: 2 * time.Second,
	}.WithDefaults()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(w.nats.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if err := queue.EnsureStreams(ctx, js, w.qcfg, 3); err != nil {
		t.Fatalf("ensure R3 streams: %v", err)
	}
	w.js = js
	return w
}

// publishN publishes n sms jobs for users users and returns their ids.
func (w *clusterWorld) publishN(prefix string, n, users int) []string {
	w.t.Helper()
	ctx := context.Background()
	batch := queue.NewPublisher(w.js).NewBatch(256, 30*time.Second)
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		if err := batch.Publish(ctx, newJob(ids[i], "sms", fmt.Sprintf("u%d", i%users)), false); err != nil {
			w.t.Fatalf("publish: %v", err)
		}
	}
	if _, err := batch.Wait(ctx); err != nil {
		w.t.Fatalf("publish batch: %v", err)
	}
	return ids
}

// start runs a dispatcher as a separate process would: its own NATS
// connection, made to node first (then the others, for reconnects), and its
// own Redis Cluster client, with the limit set notifier run builds.
func (w *clusterWorld) start(node, workers int) *proc {
	w.t.Helper()
	urls := []string{w.nats.Node(node).URL()}
	for i := 0; i < w.nats.Size(); i++ {
		if i != node {
			urls = append(urls, w.nats.Node(i).URL())
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		w.t.Fatalf("connect to node %d: %v", node, err)
	}
	w.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		w.t.Fatal(err)
	}
	lim := redisLimits(w.t, w.redis.Client(), limits.Config{Prefix: "cluster:", DedupTTL: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	cons, err := queue.NewConsumer(cctx, js, w.qcfg, queue.ConsumerConfig{})
	if err != nil {
		cancel()
		w.t.Fatalf("consumer: %v", err)
	}
	reg, err := providers.NewRegistry(w.pcfgs, providers.Options{Version: "test"})
	if err != nil {
		cancel()
		w.t.Fatalf("registry: %v", err)
	}
	preg := prometheus.NewRegistry()
	d, err := New(Options{
		Workers:     workers,
		AckWait:     w.qcfg.AckWait,
		Retry:       RetryConfig{MaxAttempts: 3, BaseDelay: 50 * time.Millisecond, MaxDelay: 200 * time.Millisecond},
		FetchWait:   200 * time.Millisecond,
		StopTimeout: 3 * time.Second,
		Instance:    fmt.Sprintf("node%d", node),
		Source:      cons,
		Router:      cons.Router(),
		DeadLetters: queue.NewPublisher(js),
		Providers:   reg,
		Limits:      lim,
		Metrics:     NewMetrics(preg),
		Logger:      slog.New(slog.NewJSONHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		cancel()
		w.t.Fatalf("new dispatcher: %v", err)
	}
	d.pipe.sentSlot = w.slots.add
	p := &proc{d: d, reg: preg, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- d.Run(ctx) }()
	w.t.Cleanup(func() { p.stop(w.t) })
	return p
}

// streamLeader is the index of the node leading the job stream.
func (w *clusterWorld) streamLeader() int {
	w.t.Helper()
	info := streamInfo(w.t, w.js, w.qcfg.Stream)
	if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		w.t.Fatalf("job stream cluster info %+v, want a leader and two replicas", info.Cluster)
	}
	return w.nats.NodeIndex(info.Cluster.Leader)
}

// remaining is how many jobs are still in the job stream (-1 while the
// stream cannot answer, during an election).
func (w *clusterWorld) remaining() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := w.js.Stream(ctx, w.qcfg.Stream)
	if err != nil {
		return -1
	}
	info, err := s.Info(ctx)
	if err != nil {
		return -1
	}
	return int64(info.State.Msgs)
}

// TestClusterKillNATSNode is the scale-out test: the job stream at three
// replicas on a three-node JetStream cluster, every limit on a three-master
// Redis Cluster, three dispatchers each connected to a different node, a
// 1,000-job backlog on a 100/s contract. The node leading the job stream is
// shut down a third of the way through. Every job is sent exactly once
// (nothing lost, no duplicate at the provider), no window of 1 s −
// jitterBudget holds more than the contract's arrivals (429s included), and
// the provider answers 429 at most max429s times.
func TestClusterKillNATSNode(t *testing.T) {
	measures(t)
	const contract, jobs = 100, 1000
	w := setupCluster(t, contract)
	ids := w.publishN("scale", jobs, 300)
	var procs []*proc
	for node := 0; node < 3; node++ {
		procs = append(procs, w.start(node, 16))
	}
	testenv.WaitFor(t, 60*time.Second, "a third of the jobs sent", func() bool { return len(w.fake.AcceptedIDs()) >= jobs/3 })
	leader := w.streamLeader()
	killedAt := len(w.fake.AcceptedIDs())
	w.nats.Node(leader).Stop()
	t.Logf("stopped node n%d (the job stream's leader) after %d sends", leader, killedAt)

	testenv.WaitFor(t, 120*time.Second, "every job sent", func() bool { return len(w.fake.AcceptedIDs()) >= jobs })
	testenv.WaitFor(t, 30*time.Second, "job stream empty", func() bool { return w.remaining() == 0 })

	(&bundle{t: t, fake: w.fake}).acceptedOnce(ids)
	if d := w.fake.Duplicates(); len(d) > 0 {
		t.Errorf("the provider accepted %d jobs twice, e.g. %v", len(d), head(d))
	}
	// The arrival window is the promise; 429s are bounded, not forbidden
	// (arrivalsPaced says why).
	most := arrivalsPaced(t, "sms-gw", w.fake, contract)
	slotsPaced(t, &w.slots, "sms-gw", contract)
	if n := w.fake.Count(http.StatusTooManyRequests); n > max429s(jobs) {
		t.Errorf("the provider answered 429 %d times for %d jobs, more than %d:\n%s", n, jobs, max429s(jobs), explain429s(w.fake, contract))
	} else if n > 0 {
		t.Logf("the provider answered 429 %d times:\n%s", n, explain429s(w.fake, contract))
	}
	var sent, dup, late float64
	for _, p := range procs {
		sent += p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeSent))
		dup += p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeDuplicate))
		late += p.count(p.d.m.Deferrals.WithLabelValues(LayerLeaky, "late"))
	}
	if int(sent) != jobs {
		t.Errorf("outcome sent counted %v times, want %d", sent, jobs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s, err := w.js.Stream(ctx, w.qcfg.DeadStream); err != nil {
		t.Errorf("dead stream: %v", err)
	} else if info, err := s.Info(ctx); err != nil {
		t.Errorf("dead stream info: %v", err)
	} else if info.State.Msgs != 0 {
		t.Errorf("dead stream holds %d jobs, want none", info.State.Msgs)
	}
	t.Logf("%d jobs sent once each through a node failure; %v redeliveries of sent jobs acknowledged as duplicates; "+
		"most arrivals in a 1 s − %s window %d; the queue ran at %.1f slots/s; %v slots retaken after a late wake",
		jobs, dup, jitterBudget.Round(100*time.Microsecond), most, sustainedRate(w.fake, late), late)
}

// TestClusterTenantsThroughALeaderLoss: 4,000 tenants, one job each, on
// the R3 cluster (four times the consumers a stream allows by default;
// TestTenantsAtScale takes 10,000 on one node) — half published through a Publisher (straight to their
// fair lanes), half on their own subjects (moved by the routers) — and
// three dispatchers, one per node. The node leading the job stream is
// shut down a third of the way through. Every job is sent exactly once,
// none is dead-lettered, and the job stream keeps at most the configured
// bound of consumers (each a Raft group of its own here): 4,000 tenants
// cost the cluster no more Raft groups than one.
func TestClusterTenantsThroughALeaderLoss(t *testing.T) {
	measuresAlone(t)
	const jobs = 4_000
	w := setupCluster(t, 0)
	w.pcfgs[0].Rate = 5000
	ctx := context.Background()
	batch := queue.NewPublisher(w.js).NewBatch(512, 30*time.Second)
	ids := make([]string, jobs)
	for i := range jobs {
		j := newJob(fmt.Sprintf("t-%d", i), "sms", "u")
		ids[i] = j.ID
		tenant := fmt.Sprintf("tenant-%d", i)
		if i%2 == 0 {
			j.Tenant = tenant
			if err := batch.Publish(ctx, j, false); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := j.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := batch.PublishRaw(ctx, queue.KeyFor("sms", tenant, false, "").Subject(), data, queue.MsgID(tenant, j.ID)); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := batch.Wait(ctx); err != nil || res.Stored != jobs {
		t.Fatalf("published %+v, %v", res, err)
	}
	for node := range 3 {
		w.start(node, 32)
	}
	testenv.WaitFor(t, 120*time.Second, "a third of the jobs sent", func() bool { return len(w.fake.AcceptedIDs()) >= jobs/3 })
	leader := w.streamLeader()
	w.nats.Node(leader).Stop()
	t.Logf("stopped node n%d (the job stream's leader) after %d sends", leader, len(w.fake.AcceptedIDs()))
	testenv.WaitFor(t, 180*time.Second, "every job sent", func() bool { return len(w.fake.AcceptedIDs()) >= jobs })
	testenv.WaitFor(t, 30*time.Second, "job stream empty", func() bool { return w.remaining() == 0 })
	(&bundle{t: t, fake: w.fake}).acceptedOnce(ids)
	if d := w.fake.Duplicates(); len(d) > 0 {
		t.Errorf("the provider accepted %d jobs twice, e.g. %v", len(d), head(d))
	}
	info := streamInfo(t, w.js, w.qcfg.Stream)
	if bound := queue.Consumers(queue.DefaultFairLanes); info.State.Consumers > bound {
		t.Errorf("the job stream holds %d consumers, more than the bound %d", info.State.Consumers, bound)
	}
	if n := streamInfo(t, w.js, w.qcfg.DeadStream).State.Msgs; n != 0 {
		t.Errorf("dead stream holds %d jobs, want none", n)
	}
	t.Logf("%d tenants on R3 through a leader loss: every job sent once, %d consumers on the job stream", jobs, info.State.Consumers)
}

// explain429s says, for each request the fake refused over its contract,
// how the contract+1 arrivals up to it were bunched: a window of 1 s holds
// contract+1 paced sends only when the oldest of them arrived late by more
// than the pacing headroom (about 10 ms).
func explain429s(f *testenv.Fake, contract int) string {
	reqs := f.Requests()
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].At.Before(reqs[j].At) })
	var b strings.Builder
	start := time.Time{}
	if len(reqs) > 0 {
		start = reqs[0].At
	}
	var accepted []time.Time
	for _, r := range reqs {
		if r.Status == http.StatusTooManyRequests && len(accepted) >= contract {
			oldest := accepted[len(accepted)-contract]
			fmt.Fprintf(&b, "  429 at +%s: the %d accepted before it span %s (paced they would span %s); previous accepted %s before\n",
				r.At.Sub(start).Round(time.Millisecond), contract, r.At.Sub(oldest).Round(100*time.Microsecond),
				time.Duration(float64(contract)*float64(time.Second)/(0.99*float64(contract))).Round(100*time.Microsecond),
				r.At.Sub(accepted[len(accepted)-1]).Round(100*time.Microsecond))
		}
		if r.Status == http.StatusOK {
			accepted = append(accepted, r.At)
		}
	}
	return b.String()
}

// TestRedisClusterFailoverResumesSending: the master holding the
// provider's queue is killed (SIGKILL) a third of the way through a
// backlog, on a Redis Cluster with a replica of each master and a
// cluster-node-timeout of 1 s. Sending resumes within the failover time
// (kill to promotion, measured here) plus max_queue_delay (the promoted
// replica's queue starts cold) plus a second of the backend monitor's
// interval and scheduling; every job is sent once, within the contract.
// Before the health check read the slot map anew, the processes took a
// ping of another master for a recovery and kept dialling the dead
// master's address until go-redis's own reload a minute later: no send
// for about 55 s.
func TestRedisClusterFailoverResumesSending(t *testing.T) {
	measures(t)
	const contract, jobs = 100, 900
	w := setupClusterOn(t, contract, testenv.RedisClusterWithReplicas(t))
	ids := w.publishN("fo", jobs, 300)
	var procs []*proc
	for node := 0; node < 2; node++ {
		procs = append(procs, w.start(node, 16))
	}
	testenv.WaitFor(t, 60*time.Second, "a third of the jobs sent", func() bool { return len(w.fake.AcceptedIDs()) >= jobs/3 })
	const queueKey = "{cluster:p:sms-gw}"
	old, err := w.redis.MasterOf(queueKey)
	if err != nil {
		t.Fatal(err)
	}
	killedAt, sentBefore := time.Now(), len(w.fake.AcceptedIDs())
	old.Stop()
	if _, err := w.redis.WaitForFailover(queueKey, old, 30*time.Second); err != nil {
		t.Fatalf("failover: %v", err)
	}
	failover := time.Since(killedAt)
	testenv.WaitFor(t, 120*time.Second, "every job sent", func() bool { return len(w.fake.AcceptedIDs()) >= jobs })
	testenv.WaitFor(t, 30*time.Second, "job stream empty", func() bool { return w.remaining() == 0 })

	// The longest silence at the provider after the kill.
	var at []time.Time
	for _, r := range w.fake.Accepted() {
		if r.At.After(killedAt) {
			at = append(at, r.At)
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	gap, prev := time.Duration(0), killedAt
	for _, a := range at {
		gap, prev = max(gap, a.Sub(prev)), a
	}
	bound := failover + w.pcfgs[0].MaxQueueDelay + time.Second + time.Second
	t.Logf("queue master killed after %d sends; replica promoted %s later; longest silence at the provider %s (bound %s)",
		sentBefore, failover.Round(10*time.Millisecond), gap.Round(10*time.Millisecond), bound.Round(10*time.Millisecond))
	if gap > bound {
		t.Errorf("no send for %s after the queue's master died, want at most the failover %s + max_queue_delay %s + 2 s",
			gap.Round(10*time.Millisecond), failover.Round(10*time.Millisecond), w.pcfgs[0].MaxQueueDelay)
	}
	(&bundle{t: t, fake: w.fake}).acceptedOnce(ids)
	if d := w.fake.Duplicates(); len(d) > 0 {
		t.Errorf("the provider accepted %d jobs twice, e.g. %v", len(d), head(d))
	}
	arrivalsPaced(t, "sms-gw", w.fake, contract)
	if n := w.fake.Count(http.StatusTooManyRequests); n > max429s(jobs) {
		t.Errorf("the provider answered 429 %d times for %d jobs, more than %d:\n%s", n, jobs, max429s(jobs), explain429s(w.fake, contract))
	}
	var sent float64
	for _, p := range procs {
		sent += p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeSent))
	}
	if int(sent) != jobs {
		t.Errorf("outcome sent counted %v times, want %d", sent, jobs)
	}
}
