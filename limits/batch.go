package limits

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/userlimit"
)

// pipeBatcher puts the Redis requests of many workers into one pipeline
// (a group commit): a worker adds its commands to the batch that is open
// now and waits for that batch's reply. The first worker of a batch leads
// it: it waits until fewer than maxInFlight pipelines are on their way,
// closes the batch and sends it; the others' commands ride along. Under
// load a batch therefore holds what the workers asked for while the
// pipelines before it were out, and the round trips per job fall with the
// number of workers; an idle dispatcher sends each request at once, as
// before. Nothing waits on a timer, and there is no goroutine to own: the
// leader sends (after yielding once, so that workers woken with it join).
//
// A batch also merges what can be merged: the ledger claims of all its
// jobs go in one script run, their "sent" records in another, their per-user cap decisions in one per
// algorithm (on a Redis Cluster, one per cluster slot: a script's keys must
// share one), and the slot reservations of all its jobs in one provider's
// queue in one more.
// Each request still gets its own answer and error, as in any pipeline: one
// job's failed command does not fail the others. Safe for concurrent use.
type pipeBatcher struct {
	rdb     redis.UniversalClient
	cluster bool          // claims are grouped per cluster slot
	max     int           // requests in one batch at most; a full batch is closed to newcomers
	turn    chan struct{} // a place held by each leader whose pipeline is in flight

	mu   sync.Mutex
	open *pipeBatch // the batch taking requests now, nil when none
}

// pipeBatch is one pipeline being filled. Its methods are called under the
// batcher's lock, by the function given to do.
type pipeBatch struct {
	pipe     redis.Pipeliner
	cluster  bool // group claims per cluster slot
	requests int
	claims   map[uint16]*ledger.ClaimGroup // by cluster slot (all 0 on a single server)
	sents    map[uint16]*ledger.SentGroup  // by cluster slot, as claims
	caps     map[capKey]*userlimit.Group
	reserves map[reserveKey]*leaky.ReserveGroup
	done     chan struct{} // closed once the pipeline's replies are in
}

type capKey struct {
	alg  userlimit.Algorithm
	slot uint16
}

// reserveKey groups reservations of one provider under one contract (a
// reload may give a batch two): the contract's fields by value, its
// quotas in a fixed array (a Contract holds a slice, which no map key can).
type reserveKey struct {
	provider      string
	rate          float64
	maxQueueDelay time.Duration
	headroom      float64
	coldStart     *time.Duration
	adaptive      leaky.Adaptive
	adaptiveOn    bool
	quotas        [leaky.MaxQuotas]leaky.Quota
	nQuotas       int
}

func reserveKeyOf(provider string, c leaky.Contract) reserveKey {
	k := reserveKey{provider: provider, rate: c.Rate, maxQueueDelay: c.MaxQueueDelay, headroom: c.Headroom,
		coldStart: c.ColdStart}
	if c.Adaptive != nil {
		k.adaptive, k.adaptiveOn = *c.Adaptive, true
	}
	k.nQuotas = copy(k.quotas[:], c.Quotas)
	return k
}

// maxBatchRequests bounds one pipeline, so that no batch waits behind an
// unbounded one.
const maxBatchRequests = 128

// maxInFlight is how many pipelines a client has on their way at once. Two
// halve the wait of a batch for the one before it (measured: 3–4 % more
// jobs/s than one, on 2 cores with Redis beside the dispatcher; four were
// slower than two): while one is out, the next goes as soon as it leads.
const maxInFlight = 2

func newPipeBatcher(rdb redis.UniversalClient) *pipeBatcher {
	_, cluster := rdb.(*redis.ClusterClient)
	return &pipeBatcher{rdb: rdb, cluster: cluster, max: maxBatchRequests, turn: make(chan struct{}, maxInFlight)}
}

// do adds fn's commands to the open batch (fn must only queue, and runs
// under the batcher's lock) and returns once they have been executed; each
// command queued then carries its reply or its error. A cancelled ctx does
// not abandon the wait: the commands are on their way to the server, and
// the caller must read what they did (the pipeline is bounded by the
// client's read and write timeouts).
func (b *pipeBatcher) do(ctx context.Context, fn func(bt *pipeBatch)) {
	b.mu.Lock()
	bt, lead := b.open, false
	if bt == nil {
		bt, lead = &pipeBatch{pipe: b.rdb.Pipeline(), cluster: b.cluster, done: make(chan struct{})}, true
		b.open = bt
	}
	fn(bt)
	if bt.requests++; bt.requests >= b.max {
		b.open = nil
	}
	b.mu.Unlock()
	if !lead {
		<-bt.done
		return
	}
	// The workers a fetch just handed jobs to come here within
	// microseconds of each other: yield once, so that those already
	// runnable join this batch before it leaves (measured: 5–9 % more
	// jobs/s; no timer is involved, an idle dispatcher loses nothing).
	runtime.Gosched()
	b.lead(ctx, bt)
}

// doAlone is do in a pipeline of fn's commands alone, which no other
// worker's request joins: a request whose script run the server refused
// (Refused) is asked again this way, so that what was refused is its own
// and no other job's (the jobs of a batch share script runs).
func (b *pipeBatcher) doAlone(ctx context.Context, fn func(bt *pipeBatch)) {
	bt := &pipeBatch{pipe: b.rdb.Pipeline(), cluster: b.cluster, done: make(chan struct{}), requests: 1}
	fn(bt)
	b.lead(ctx, bt)
}

// lead sends batch bt, once fewer than maxInFlight pipelines are out, and
// returns when its replies are in.
func (b *pipeBatcher) lead(ctx context.Context, bt *pipeBatch) {
	b.turn <- struct{}{} // fewer than maxInFlight pipelines are out
	b.mu.Lock()
	if b.open == bt {
		b.open = nil
	}
	b.mu.Unlock()
	// Closed: nothing adds to bt any more.
	ectx := context.WithoutCancel(ctx)
	for _, g := range bt.claims {
		g.Queue(ectx, bt.pipe)
	}
	for _, g := range bt.caps {
		g.Queue(ectx, bt.pipe)
	}
	for _, g := range bt.sents {
		g.Queue(ectx, bt.pipe)
	}
	for _, g := range bt.reserves {
		g.Queue(ectx, bt.pipe)
	}
	_, _ = bt.pipe.Exec(ectx) // each command carries its own error
	<-b.turn
	close(bt.done)
}

// groupOf is the group in *m under k, started with start (and the map
// made) when there is none yet: each kind of request of a batch is
// merged into one group per key (a cluster slot, an algorithm, a
// provider's contract).
func groupOf[K comparable, G any](m *map[K]*G, k K, start func() *G) *G {
	if *m == nil {
		*m = map[K]*G{}
	}
	g := (*m)[k]
	if g == nil {
		g = start()
		(*m)[k] = g
	}
	return g
}

// ledgerSlot is the cluster slot a job's ledger record groups by (0 on a
// single server).
func (bt *pipeBatch) ledgerSlot(l *ledger.Redis, id string) uint16 {
	if !bt.cluster {
		return 0
	}
	return clusterSlot(l.KeyOf(id))
}

// claim adds a ledger claim to the batch's claim group of its slot.
func (bt *pipeBatch) claim(l *ledger.Redis, id, owner string, lease time.Duration) *ledger.ClaimCmd {
	return groupOf(&bt.claims, bt.ledgerSlot(l, id), l.ClaimGroup).Add(id, owner, lease)
}

// sent adds a job's "sent" record to the batch's group of its slot and
// returns that group.
func (bt *pipeBatch) sent(l *ledger.Redis, id string, seq uint64, sum string) *ledger.SentGroup {
	g := groupOf(&bt.sents, bt.ledgerSlot(l, id), l.SentGroup)
	g.Add(id, seq, sum)
	return g
}

// allow adds a per-user cap decision to the batch's group of its
// algorithm and slot: for now when at is zero, else for the instant at
// (userlimit.Limiter.AllowAt).
func (bt *pipeBatch) allow(users *userlimit.Redis, key userlimit.Key, jobID string, rule userlimit.Rule, at time.Time) *userlimit.Decision {
	k := capKey{alg: rule.WithDefaults().Algorithm}
	if bt.cluster {
		k.slot = clusterSlot(users.Tag(key))
	}
	g := groupOf(&bt.caps, k, func() *userlimit.Group { return users.Group(k.alg) })
	if !at.IsZero() {
		return g.AddAt(key, jobID, rule, at)
	}
	return g.Add(key, jobID, rule)
}

// reserve adds a slot reservation to the batch's group of the provider's
// queue.
func (bt *pipeBatch) reserve(q *leaky.Redis, provider string, c leaky.Contract, cost int) *leaky.ReserveCmd {
	g := groupOf(&bt.reserves, reserveKeyOf(provider, c), func() *leaky.ReserveGroup { return q.ReserveGroup(provider, c) })
	return g.Add(cost)
}
