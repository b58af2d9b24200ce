package dispatch

import (
	"context"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/notifier/notifier/queue"
)

// Scheduling between queues (see ARCHITECTURE.md, "Isolation and
// fairness"). The job stream holds one queue per channel, tenant and lane.
// The fetch loop gives each channel an in-flight budget, the jobs this
// process may hold for it at once, sized to keep its providers' queues
// about holdHorizon deep; it never pulls a job for a channel whose budget
// is spent, so one channel's backlog cannot take the workers another
// needs. A channel whose providers are all paused or have their breakers
// open gets no budget: its jobs wait in JetStream. Inside a channel's
// budget the priority lane goes first, then the transactional lanes, then
// the marketing ones (held to marketingCap while transactional jobs wait,
// when a provider reserves a share: reserve.transactional); in each, the
// tenants share by weight (fairQueue).
const (
	// holdHorizon is how far ahead of now the jobs held for a channel
	// reach in its providers' queues: enough to ride out a slow fetch or
	// Redis reply, short enough that a job published now (another
	// tenant's, a priority one) is not behind much.
	holdHorizon = 250 * time.Millisecond
	// refreshEvery bounds how stale the list of queues holding jobs is
	// while there is work (a new tenant's queue is seen within it).
	refreshEvery = 100 * time.Millisecond
	// busyPoll is the longest long-poll while jobs are held: the loop
	// comes back to refill the budgets of jobs finished meanwhile.
	busyPoll = 50 * time.Millisecond
	// idlePoll is the longest long-poll of an idle process, after which it
	// looks for new queues again.
	idlePoll = 250 * time.Millisecond
	// strayBudget is the budget of a channel with no provider configured
	// (its jobs are dead-lettered at once).
	strayBudget = 2
)

// inflight counts the jobs this process holds, per channel.
type inflight struct {
	mu sync.Mutex
	n  map[string]int
}

func (f *inflight) add(ch string, d int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[string]int{}
	}
	f.n[ch] += d
}

func (f *inflight) get(ch string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[ch]
}

// latencies keeps a moving average of each provider's send time.
type latencies struct{ m sync.Map } // provider → *atomic.Int64 (ns)

func (l *latencies) observe(provider string, d time.Duration) {
	v, _ := l.m.LoadOrStore(provider, new(atomic.Int64))
	a := v.(*atomic.Int64)
	old := a.Load()
	if old == 0 {
		a.Store(int64(d))
		return
	}
	a.Store(old + (int64(d)-old)/8)
}

func (l *latencies) get(provider string) time.Duration {
	if v, ok := l.m.Load(provider); ok {
		return time.Duration(v.(*atomic.Int64).Load())
	}
	return 0
}

// budget is how many jobs of channel ch this process may hold at once:
// its open providers' rate (jobs per second, the sum of those not paused
// and without an open breaker) times the horizon plus their send time,
// divided between the fleet's live processes, plus one. 0 when every
// provider of the channel is paused or failing: its jobs stay in
// JetStream, holding no worker.
func (d *Dispatcher) budget(ch string, live *liveConfig, l *Limits, peers int) int {
	var rate float64
	var lat time.Duration
	configured := false
	for _, p := range live.providers.All() {
		if p.Channel != ch {
			continue
		}
		configured = true
		if b := live.breakers[p.Name]; b != nil && b.open() {
			continue
		}
		if l != nil && l.Pauses != nil && l.Pauses.PausedFor(p.Name) > 0 {
			continue
		}
		rate += p.Rate
		lat = max(lat, d.lat.get(p.Name))
	}
	if !configured {
		return strayBudget
	}
	if rate == 0 {
		return 0
	}
	// Not capped at the workers: when they are too few for the budgets,
	// each channel gets about the same share of its own budget, so the
	// budgets' ratio (the rates') is how the workers are shared, and every
	// channel's queue is about equally deep in time.
	n := rate * (holdHorizon + lat).Seconds() / float64(peers)
	return int(math.Min(math.Ceil(n), 1e9)) + 1
}

// scheduler is the fetch loop's state. Its maps are kept from one plan to
// the next (cleared, not made again): a plan runs for every few jobs.
type scheduler struct {
	queues  []queue.Queue
	readAt  time.Time
	short   map[string]bool          // subjects that delivered less than asked since the last read
	fair    map[laneID]*fairQueue    // per channel and lane
	storedT map[string]uint64        // per channel: transactional jobs stored (the priority lane's too)
	mcap    map[string]int           // per channel: marketing jobs it may still take in this plan (-1: no cap)
	weights func(string) float64     // a tenant's weight
	budgets map[string]int           // per channel, for this plan
	free    map[string]int           // per channel: budget left
	order   []string                 // channels in the order seen
	byKey   map[laneID][]queue.Queue // channel and lane → its tenants' queues
	want    map[string]int           // this plan's jobs per subject
	wants   []queue.Want             // this plan
	done    map[string]bool          // channels with nothing more to take in this plan
	got     map[string]int           // deliveries per subject of the last pull
}

// laneID is one lane of one channel.
type laneID struct {
	ch   string
	kind laneKind
}

// laneKind is a lane as the scheduler takes it: in this order.
type laneKind int

const (
	kindHigh laneKind = iota
	kindTransactional
	kindMarketing
)

var laneKinds = []laneKind{kindHigh, kindTransactional, kindMarketing}

// kindOf is the kind of queue k's lane under caps: the priority lane, or
// its jobs' category (a category's lane's, or the channel's for the
// normal lane).
func kindOf(caps Caps, k queue.Key) laneKind {
	switch {
	case k.High:
		return kindHigh
	case caps.laneCategory(k.Channel, k.Category) == queue.Marketing:
		return kindMarketing
	}
	return kindTransactional
}

func newScheduler(weights func(string) float64) *scheduler {
	return &scheduler{short: map[string]bool{}, fair: map[laneID]*fairQueue{}, weights: weights,
		storedT: map[string]uint64{}, mcap: map[string]int{},
		budgets: map[string]int{}, free: map[string]int{}, byKey: map[laneID][]queue.Queue{},
		want: map[string]int{}, done: map[string]bool{}, got: map[string]int{}}
}

// plan chooses up to free jobs to pull: per channel up to what its budget
// leaves, the priority lane first, then the tenants by weight. It returns
// nothing when every channel with jobs waiting is at its budget.
func (d *Dispatcher) plan(s *scheduler, free int) []queue.Want {
	live := d.live.Load()
	l := d.currentLimits()
	peers := d.peers()
	clear(s.budgets)
	clear(s.free)
	clear(s.want)
	clear(s.done)
	clear(s.storedT)
	clear(s.mcap)
	s.order, s.wants = s.order[:0], s.wants[:0]
	for k, qs := range s.byKey {
		s.byKey[k] = qs[:0]
	}
	for _, q := range s.queues {
		ch := q.Key.Channel
		if _, ok := s.budgets[ch]; !ok {
			s.budgets[ch] = d.budget(ch, live, l, peers)
			s.free[ch] = max(0, s.budgets[ch]-d.busy.get(ch))
			s.order = append(s.order, ch)
		}
		kind := kindOf(live.caps, q.Key)
		if kind != kindMarketing {
			s.storedT[ch] += q.Stored
		}
		if s.short[q.Subject] {
			continue
		}
		k := laneID{ch, kind}
		s.byKey[k] = append(s.byKey[k], q)
	}
	for _, ch := range s.order {
		s.mcap[ch] = d.marketingRoom(live, ch, s.budgets[ch], s.storedT[ch], peers)
	}
	want := s.want
	add := func(subject string) {
		if want[subject] == 0 {
			s.wants = append(s.wants, queue.Want{Subject: subject})
		}
		want[subject]++
	}
	// Free workers short of the budgets are shared between the channels
	// one at a time, each to the channel furthest below its budget (the
	// largest share of its budget left): with too few workers for every
	// budget, each channel holds about the same fraction of its own. A
	// channel whose queues hold no more is skipped.
	done := s.done
	for free > 0 {
		best, bestLeft := "", -1.0
		for _, ch := range s.order {
			if done[ch] || s.free[ch] == 0 {
				continue
			}
			if left := float64(s.free[ch]) / float64(s.budgets[ch]); left > bestLeft {
				best, bestLeft = ch, left
			}
		}
		if best == "" {
			break
		}
		q, ok := s.next(best, want)
		if !ok {
			done[best] = true
			continue
		}
		add(q)
		s.free[best]--
		free--
	}
	for i := range s.wants {
		s.wants[i].N = want[s.wants[i].Subject]
	}
	return s.wants
}

// next picks the queue of channel ch to take one more job from: the
// priority lanes first, then the transactional lanes, then the marketing
// ones while the channel's marketing room lasts (mcap), tenants by weight
// in each. A queue is not asked for more than it holds.
func (s *scheduler) next(ch string, want map[string]int) (string, bool) {
	for _, kind := range laneKinds {
		k := laneID{ch, kind}
		qs := s.byKey[k]
		switch {
		case len(qs) == 0:
			continue
		case kind == kindMarketing && s.mcap[ch] == 0:
			continue
		case len(qs) == 1: // one tenant: nothing to share (the usual case)
			delete(s.fair, k) // when others come, all start even: no credit for this time
			if uint64(want[qs[0].Subject]) < qs[0].Stored {
				return s.took(k, qs[0].Subject), true
			}
			continue
		}
		var waiting []string
		subj := map[string]string{}
		for _, q := range qs {
			if uint64(want[q.Subject]) < q.Stored {
				waiting = append(waiting, q.Key.Tenant)
				subj[q.Key.Tenant] = q.Subject
			}
		}
		if len(waiting) == 0 {
			continue
		}
		fq := s.fair[k]
		if fq == nil {
			fq = newFairQueue()
			s.fair[k] = fq
		}
		return s.took(k, subj[fq.pick(waiting, s.weights)]), true
	}
	return "", false
}

// took counts a job of lane k picked from subject against the channel's
// marketing room, and returns subject.
func (s *scheduler) took(k laneID, subject string) string {
	if k.kind == kindMarketing && s.mcap[k.ch] > 0 {
		s.mcap[k.ch]--
	}
	return subject
}

// marketingRoom is how many more marketing jobs this process may take for
// channel ch (of budget jobs at once): -1 (no bound) unless a provider of
// the channel reserves a share for transactional jobs and some wait (more
// are stored than the fleet holds, as this process's count times peers
// estimates it); then what marketingCap leaves above the marketing jobs
// held.
func (d *Dispatcher) marketingRoom(live *liveConfig, ch string, budget int, storedT uint64, peers int) int {
	share := reserve(live, ch)
	if share <= 0 {
		return -1
	}
	heldM := d.busy.get(ch + marketingSuffix)
	heldT := d.busy.get(ch) - heldM
	if storedT <= uint64(max(0, heldT)*peers) {
		return -1 // no transactional job waits: marketing takes everything
	}
	return max(0, marketingCap(budget, share)-heldM)
}

// isMarketing reports whether dl's jobs count as marketing in the
// channel's budget (its lane's category under the live configuration).
func (d *Dispatcher) isMarketing(dl *queue.Delivery) bool {
	return d.live.Load().caps.laneCategory(dl.Channel, dl.Lane) == queue.Marketing
}

// tenantLabel is how tenant shows in metrics and status: its name when
// tenants.weights names it, "default" for the default tenant (""), else
// "other" (a label never takes an unbounded set of values).
func (d *Dispatcher) tenantLabel(tenant string) string {
	switch _, named := d.live.Load().weights[tenant]; {
	case tenant == "":
		return "default"
	case named:
		return tenant
	default:
		return "other"
	}
}

// queuedByTenant is the jobs in the stream per channel and tenant label,
// from the fetch loop's last look.
func (d *Dispatcher) queuedByTenant() map[string]map[string]uint64 {
	out := map[string]map[string]uint64{}
	qs := d.seen.Load()
	if qs == nil {
		return out
	}
	for _, q := range *qs {
		if q.Stray {
			continue
		}
		m := out[q.Key.Channel]
		if m == nil {
			m = map[string]uint64{}
			out[q.Key.Channel] = m
		}
		m[d.tenantLabel(q.Key.Tenant)] += q.Stored
	}
	return out
}

// weight is a tenant's weight from the configuration (default 1).
func (d *Dispatcher) weight(tenant string) float64 {
	if w, ok := d.live.Load().weights[tenant]; ok && w > 0 {
		return w
	}
	return 1
}

// peers is how many processes of the fleet are live (Options.Peers, else
// 1): each holds its share of a channel's budget.
func (d *Dispatcher) peers() int {
	if d.o.Peers != nil {
		return max(1, d.o.Peers())
	}
	return 1
}

// pollable are the queues to long-poll when a plan finds nothing to pull:
// of every channel with budget left, as many of its known queues as the
// budget allows (one job each), the default tenant's of configured
// channels always among them; not a channel's marketing lanes while the
// last plan left it no marketing room.
func (d *Dispatcher) pollable(s *scheduler) []string {
	live := d.live.Load()
	l := d.currentLimits()
	peers := d.peers()
	left := map[string]int{}
	var out []string
	seen := map[string]bool{}
	consider := func(ch, subject string) {
		if seen[subject] {
			return
		}
		if k, ok := queue.ParseJobSubject(subject); ok && s.mcap[ch] == 0 && kindOf(live.caps, k) == kindMarketing {
			return // no marketing room while transactional jobs wait
		}
		n, ok := left[ch]
		if !ok {
			n = max(0, d.budget(ch, live, l, peers)-d.busy.get(ch))
		}
		if n == 0 {
			left[ch] = 0
			return
		}
		left[ch] = n - 1
		seen[subject] = true
		out = append(out, subject)
	}
	channels := map[string]bool{}
	for _, p := range live.providers.All() {
		channels[p.Channel] = true
	}
	var configured []string
	for _, ch := range queue.Channels {
		if channels[ch] {
			configured = append(configured, ch)
		}
	}
	for _, subject := range queue.DefaultQueues(configured...) {
		consider(queue.ChannelOf(subject), subject)
	}
	for _, q := range s.queues {
		consider(q.Key.Channel, q.Subject)
	}
	return out
}

// fetchLoop pulls jobs for free workers and hands them out, until ctx
// ends: it reads which queues hold jobs, plans what to pull within the
// channels' budgets, pulls it in one round trip, and long-polls when the
// plan is empty.
func (d *Dispatcher) fetchLoop(ctx context.Context, jobs chan<- *queue.Delivery, slots chan struct{}) error {
	s := newScheduler(d.weight)
	backoff := 100 * time.Millisecond
	free := 0
	failed := func(err error) bool {
		if ctx.Err() != nil {
			return true
		}
		d.log.Warn("fetch jobs", "err", err, "retry_in", backoff.String())
		if sleep(ctx, backoff) != nil {
			return true
		}
		backoff = min(backoff*2, 5*time.Second)
		return false
	}
	hand := func(dls []*queue.Delivery) {
		for _, dl := range dls {
			free--
			d.busy.add(dl.Channel, 1)
			if d.isMarketing(dl) {
				d.marketing.Store(dl, struct{}{})
				d.busy.add(dl.Channel+marketingSuffix, 1)
			}
			jobs <- dl
		}
	}
	for {
		if free == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-slots:
				free++
			}
		}
		// Workers finishing together free their slots microseconds
		// apart: yield once so that those already runnable do, and one
		// pull serves them all.
		runtime.Gosched()
	count:
		for free < d.o.Workers {
			select {
			case <-slots:
				free++
			default:
				break count
			}
		}
		// With the backend down and no fallback, take no jobs: they wait
		// in JetStream.
		if err := d.waitForBackend(ctx); err != nil {
			return nil
		}
		if d.since(s.readAt) >= refreshEvery {
			qs, err := d.o.Source.Queues(ctx)
			if err != nil {
				if failed(err) {
					return nil
				}
				continue
			}
			s.queues, s.readAt = qs, d.now()
			clear(s.short)
			d.seen.Store(&qs)
		}
		if wants := d.plan(s, free); len(wants) > 0 {
			dls, err := d.o.Source.FetchFrom(ctx, wants)
			got := s.got
			clear(got)
			for _, dl := range dls {
				got[dl.Subject]++
			}
			for _, w := range wants {
				if got[w.Subject] < w.N {
					s.short[w.Subject] = true
				}
			}
			hand(dls)
			if err != nil {
				if failed(err) {
					return nil
				}
				continue
			}
			backoff = 100 * time.Millisecond
			continue
		}
		// Nothing to pull now: long-poll the queues with budget left, and
		// come back soon if jobs are held (their budgets free up as they
		// finish) or to look for new queues.
		subjects := d.pollable(s)
		wait := idlePoll
		if d.inFlight.Load() > 0 || len(s.queues) > 0 {
			wait = busyPoll
		}
		if len(subjects) == 0 {
			// Every channel with jobs is at its budget: wait for a worker
			// to finish, or for the next look.
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-slots:
				free++
			case <-t.C:
			}
			t.Stop()
			continue
		}
		dls, err := d.o.Source.Poll(ctx, subjects, free, min(wait, d.o.FetchWait))
		hand(dls)
		if len(dls) > 0 {
			s.readAt = time.Time{} // something came: look at the queues again
		}
		if err != nil {
			if failed(err) {
				return nil
			}
			continue
		}
		backoff = 100 * time.Millisecond
	}
}
