package queue

import (
	"context"
	"hash/fnv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Fair lanes (SPEC §3; ARCHITECTURE.md, "Tenants at platform scale").
//
// The named tenants' jobs (every tenant but the default one) do not get a
// queue each: a queue is a durable consumer, and the server's consumers
// per stream (1,000 by default, a Raft group each in a cluster) would cap
// the number of tenants. They share a fixed number of fair lanes per
// channel and lane kind, notify.jobs.<channel>.f.<n>[.<lane>], n from 0 to
// the configured count − 1, with the tenant in the Notifier-Tenant header
// (and the job's own tenant field). Each tenant has two of the lanes, its
// pair (shuffle sharding: LanePair), and each of its jobs goes to the one
// of the two holding fewer jobs. A tenant that floods fills its own two
// lanes; another tenant shares both of them only with probability
// 2/(n(n−1)) (1 in 105 with the default 15 lanes), and otherwise publishes
// past the flood on its other lane. The dispatcher then shares the lanes
// between tenants by weight (weighted fair queueing on each lane's head).
const (
	// DefaultFairLanes is tenants.lanes' default: with the default
	// tenant's 4 queues per channel and the router, 3 × 4 × (15 + 1) + 1 =
	// 193 consumers on the job stream, whatever the number of tenants.
	DefaultFairLanes = 15
	// MaxFairLanes is the most fair lanes per channel and lane kind.
	MaxFairLanes = 64
	// laneViewEvery is how stale a publisher's view of the lanes' depths
	// may grow before its next tenant's job reads them again.
	laneViewEvery = 250 * time.Millisecond
	// laneViewTimeout bounds one read of the lanes' depths.
	laneViewTimeout = time.Second
)

// LanePair is the two fair lanes, of n, that tenant's jobs for channel go
// to: a stable hash (FNV-1a of channel, a zero byte and tenant) picks the
// first, and a second hash of the same value one of the others. With one
// lane both are 0. Every publisher and the router compute the same pair.
func LanePair(channel, tenant string, n int) (a, b int) {
	if n <= 1 {
		return 0, 0
	}
	h := fnv.New64a()
	h.Write([]byte(channel))
	h.Write([]byte{0})
	h.Write([]byte(tenant))
	s := h.Sum64()
	a = int(s % uint64(n))
	b = (a + 1 + int((s/uint64(n))%uint64(n-1))) % n
	return a, b
}

// Lanes places tenants' jobs on fair lanes: each on the one of its
// tenant's pair that holds fewer jobs, as the last read of the lanes'
// depths says, counting the jobs placed since. The view is a hint: a read
// that fails keeps the last one, and without any a tenant's jobs alternate
// between its two lanes. It is read in the background (one read at a time,
// each bounded by laneViewTimeout), never on a publish's path. It is safe
// for concurrent use.
type Lanes struct {
	n    int
	read func(context.Context) (map[string]uint64, error) // the lanes' depths; nil: none

	mu      sync.Mutex
	depth   map[string]int64 // by fair lane subject
	readAt  time.Time        // when the view was read, or a read last failed
	reading bool             // a read is under way
}

// NewLanes returns a placement over n fair lanes (clamped to 1 to
// MaxFairLanes) that reads the lanes' depths with read (nil: only the jobs
// it placed itself count) when its view is older than 250 ms, or is told
// them with Observe.
func NewLanes(n int, read func(context.Context) (map[string]uint64, error)) *Lanes {
	return &Lanes{n: min(max(n, 1), MaxFairLanes), read: read, depth: map[string]int64{}}
}

// StreamLanes returns a placement over n fair lanes that reads their
// depths from the stream holding the job subjects (one STREAM.INFO with a
// subject filter: its size is the number of lanes, whatever the number of
// tenants).
func StreamLanes(js jetstream.JetStream, n int) *Lanes {
	var (
		mu     sync.Mutex
		stream jetstream.Stream
	)
	return NewLanes(n, func(ctx context.Context) (map[string]uint64, error) {
		mu.Lock()
		s := stream
		mu.Unlock()
		if s == nil {
			name, err := js.StreamNameBySubject(ctx, Key{Channel: Channels[0], Fair: true}.Subject())
			if err != nil {
				return nil, err
			}
			if s, err = js.Stream(ctx, name); err != nil {
				return nil, err
			}
			mu.Lock()
			stream = s
			mu.Unlock()
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(fairLanesFilter))
		if err != nil {
			return nil, err
		}
		return info.State.Subjects, nil
	})
}

// Observe replaces the view with depths read elsewhere (the consumer's
// look at the queues), by fair lane subject.
func (l *Lanes) Observe(depths map[string]uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.observeLocked(depths)
}

func (l *Lanes) observeLocked(depths map[string]uint64) {
	clear(l.depth)
	for s, n := range depths {
		l.depth[s] = int64(n)
	}
	l.readAt = time.Now()
}

// Place returns the fair lane a job of k's tenant, channel and lane goes
// to (k names a tenant: k.Tenant is set); a key of the default tenant is
// returned as it is. It never waits: it places by the current view, and
// when that is older than 250 ms starts a read of the lanes' depths in the
// background for the jobs after it (ctx is not used: the read has a
// context of its own, so a request that ends does not end it).
func (l *Lanes) Place(_ context.Context, k Key) Key {
	if k.Tenant == "" || k.Fair {
		return k
	}
	a, b := LanePair(k.Channel, k.Tenant, l.n)
	ka := Key{Channel: k.Channel, High: k.High, Category: k.Category, Fair: true, Index: a}
	kb := ka
	kb.Index = b
	sa, sb := ka.Subject(), kb.Subject()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refreshLocked()
	if l.depth[sb] < l.depth[sa] {
		ka, sa = kb, sb
	}
	l.depth[sa]++
	return ka
}

// refreshLocked starts a read of the lanes' depths when the view is stale
// and no read is under way; l.mu is held.
func (l *Lanes) refreshLocked() {
	if l.read == nil || l.reading || time.Since(l.readAt) < laneViewEvery {
		return
	}
	l.reading = true
	go l.refresh()
}

// refresh reads the lanes' depths, within laneViewTimeout, into the view.
// A failed read keeps the last view and is tried again after
// laneViewEvery, not by every job meanwhile (the view is a hint).
func (l *Lanes) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), laneViewTimeout)
	depths, err := l.read(ctx)
	cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reading = false
	if err != nil {
		l.readAt = time.Now()
		return
	}
	l.observeLocked(depths)
}
