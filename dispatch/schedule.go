package dispatch

import (
	"context"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/notifier/notifier/internal/sleep"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/queue"
)

// fetcher is the fetch loop's part of a dispatcher: it decides which queues
// to pull from and how many jobs (each channel's budget, the lanes, the
// tenants by weight) and hands the jobs to the workers, never more than
// workers are free. It owns the count of jobs held per channel that the
// budgets are measured against.
type fetcher struct {
	*core
	be       *backendSwitch
	probes   *probes       // the pipeline's: a provider due for a probe is fetched for
	inFlight *atomic.Int64 // the dispatcher's jobs in its workers

	busy inflight // jobs held, per channel: against the channels' budgets (and per channel + marketingSuffix: the marketing ones)
	// marketing holds the deliveries counted as marketing in busy, to
	// uncount them whatever the configuration says by then.
	marketing sync.Map                      // *queue.Delivery → struct{}
	seen      atomic.Pointer[[]queue.Queue] // the queues holding jobs, as the fetch loop last read them
	lat       latencies                     // providers' send times: the budgets cover them
}

// done uncounts a job of dl's a worker has finished with.
func (f *fetcher) done(dl *queue.Delivery) {
	f.busy.add(dl.Channel, -1)
	if _, ok := f.marketing.LoadAndDelete(dl); ok {
		f.busy.add(dl.Channel+marketingSuffix, -1)
	}
}

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
	v, ok := l.m.Load(provider)
	if !ok {
		v, _ = l.m.LoadOrStore(provider, new(atomic.Int64)) // once per provider: not a new counter per send
	}
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
func (f *fetcher) budget(ch string, live *liveConfig, l *limits.Set, peers int) int {
	var rate float64
	var lat time.Duration
	configured, probe := false, false
	for _, p := range live.providers.All() {
		if p.Channel != ch {
			continue
		}
		configured = true
		if b := live.breakers[p.Name]; b != nil && b.open() {
			continue
		}
		if l != nil && l.Pauses != nil && l.Pauses.PausedFor(p.Name) > 0 {
			probe = probe || f.probes.isArmed(p.Name, f.now())
			continue
		}
		rate += p.Rate
		lat = max(lat, f.lat.get(p.Name))
	}
	if !configured {
		return strayBudget
	}
	if rate == 0 && probe {
		return 1 // the probe's job
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
//
// Tenants share a channel by weight (fairQueue, one per channel over every
// lane kind: a tenant's priority jobs count in its share). A queue is a
// lane of the default tenant or a fair lane shared by the tenants hashed
// onto it, so the scheduler knows a queue's next tenant only once its job
// comes: it guesses it (head), charges the guess when it picks the queue,
// and moves the charge to the tenant whose job came (settle).
type scheduler struct {
	queues  []queue.Queue
	readAt  time.Time
	short   map[string]bool          // subjects that delivered less than asked since the last read
	fair    map[string]*fairQueue    // per channel
	heads   map[string]laneHead      // per subject: what its last deliveries said of its next tenant
	charged map[string][]string      // per subject: the tenants this plan charged for its jobs, in order
	storedT map[string]uint64        // per channel: transactional jobs stored (the priority lane's too)
	mcap    map[string]int           // per channel: marketing jobs it may still take in this plan (-1: no cap)
	weights func(string) float64     // a tenant's weight
	budgets map[string]int           // per channel, for this plan
	free    map[string]int           // per channel: budget left
	order   []string                 // channels in the order seen
	byCh    map[string][]queue.Queue // channel → its queues with jobs not yet asked for
	want    map[string]int           // this plan's jobs per subject
	wants   []queue.Want             // this plan
	done    map[string]bool          // channels with nothing more to take in this plan
	got     map[string]int           // deliveries per subject of the last pull
	// sweep are the default tenant's queues whose last deliveries mixed in
	// jobs naming a tenant: the router empties them to the fair lanes, at
	// sweepBatch a plan beside the workers' jobs.
	sweep map[string]bool
	// named is moveNamed's scratch map, kept to be reused.
	named map[string]bool
	// freshOf is each queue's freshTenant guess.
	freshOf map[string]string
}

// sweepBatch is how many jobs a plan pulls from a queue being swept, on
// top of what its budget lets the workers take.
const sweepBatch = 128

// laneHead is what a queue's last deliveries say of its next tenant: the
// tenants of its latest headMemory deliveries, the latest first. A queue
// never delivered from is of a tenant not seen yet.
type laneHead struct {
	recent [headMemory]string
	n      int
}

// headMemory is how many of a queue's latest deliveries its guess weighs.
const headMemory = 8

// saw notes a delivery of tenant t.
func (h *laneHead) saw(t string) {
	copy(h.recent[1:], h.recent[:headMemory-1])
	h.recent[0] = t
	h.n = min(h.n+1, headMemory)
}

// distinct reports whether the i-th latest delivery's tenant is not that
// of a later one (each tenant is counted at its latest delivery).
func (h *laneHead) distinct(i int) bool { return !slices.Contains(h.recent[:i], h.recent[i]) }

// freshTenant stands for a queue's unknown next tenant: one who starts at
// V, with weight 1. It is no tenant name (they hold no NUL).
func freshTenant(subject string) string { return "\x00" + subject }

// laneKind is a lane as the scheduler takes it: the priority lane and the
// transactional lanes before the marketing ones, whatever the tenant.
type laneKind int

const (
	kindHigh laneKind = iota
	kindTransactional
	kindMarketing
)

// kindOf is the kind of queue k's lane under caps: the priority lane, or
// its jobs' category (a category's lane's, or the channel's for the
// normal lane).
func kindOf(caps limits.Caps, k queue.Key) laneKind {
	switch {
	case k.High:
		return kindHigh
	case caps.LaneCategory(k.Channel, k.Category) == queue.Marketing:
		return kindMarketing
	}
	return kindTransactional
}

func newScheduler(weights func(string) float64) *scheduler {
	return &scheduler{short: map[string]bool{}, fair: map[string]*fairQueue{}, weights: weights,
		heads: map[string]laneHead{}, charged: map[string][]string{},
		storedT: map[string]uint64{}, mcap: map[string]int{},
		budgets: map[string]int{}, free: map[string]int{}, byCh: map[string][]queue.Queue{},
		want: map[string]int{}, done: map[string]bool{}, got: map[string]int{}, sweep: map[string]bool{}, named: map[string]bool{}, freshOf: map[string]string{}}
}

// plan chooses up to free jobs to pull: per channel up to what its budget
// leaves, the tenants by weight (the priority lane first within a
// tenant's share), transactional lanes before marketing ones. It returns
// nothing when every channel with jobs waiting is at its budget.
func (f *fetcher) plan(s *scheduler, free int) []queue.Want {
	live := f.live.Load()
	l := f.be.currentLimits()
	peers := f.peers()
	clear(s.budgets)
	clear(s.free)
	clear(s.want)
	clear(s.done)
	clear(s.storedT)
	clear(s.mcap)
	clear(s.charged)
	s.order, s.wants = s.order[:0], s.wants[:0]
	for ch, qs := range s.byCh {
		s.byCh[ch] = qs[:0]
	}
	for _, q := range s.queues {
		ch := q.Key.Channel
		if _, ok := s.budgets[ch]; !ok {
			s.budgets[ch] = f.budget(ch, live, l, peers)
			s.free[ch] = max(0, s.budgets[ch]-f.busy.get(ch))
			s.order = append(s.order, ch)
		}
		if kindOf(live.caps, q.Key) != kindMarketing {
			s.storedT[ch] += q.Stored
		}
		if !s.short[q.Subject] {
			s.byCh[ch] = append(s.byCh[ch], q)
		}
	}
	for _, ch := range s.order {
		s.mcap[ch] = f.marketingRoom(live, ch, s.budgets[ch], s.storedT[ch], peers)
	}
	// Free workers short of the budgets are shared between the channels
	// one at a time, each to the channel furthest below its budget (the
	// largest share of its budget left): with too few workers for every
	// budget, each channel holds about the same fraction of its own. A
	// channel whose queues hold no more is skipped.
	for free > 0 {
		best, bestLeft := "", -1.0
		for _, ch := range s.order {
			if s.done[ch] || s.free[ch] == 0 {
				continue
			}
			if left := float64(s.free[ch]) / float64(s.budgets[ch]); left > bestLeft {
				best, bestLeft = ch, left
			}
		}
		if best == "" {
			break
		}
		subject, n, ok := s.next(best, live.caps, min(pickChunk, s.free[best], free))
		if !ok {
			s.done[best] = true
			continue
		}
		if s.want[subject] == 0 {
			s.wants = append(s.wants, queue.Want{Subject: subject})
		}
		s.want[subject] += n
		s.free[best] -= n
		free -= n
	}
	// The queues being swept: what the router moves takes no worker.
	for _, q := range s.queues {
		if !s.sweep[q.Subject] || uint64(s.want[q.Subject]) >= q.Stored {
			continue
		}
		if s.want[q.Subject] == 0 {
			s.wants = append(s.wants, queue.Want{Subject: q.Subject})
		}
		s.want[q.Subject] += int(min(uint64(sweepBatch), q.Stored-uint64(s.want[q.Subject])))
	}
	for i := range s.wants {
		s.wants[i].N = s.want[s.wants[i].Subject]
	}
	return s.wants
}

// pickChunk is the most jobs a pick takes from one queue: a pull request
// per queue and plan costs more than the jobs in it (the server's work for
// each request, an inbox), so a pick takes as many jobs from its queue as
// it can before another queue's tenant would be due (up to pickChunk):
// the order of the weighted fair queueing is kept, and a tenant alone (or
// far behind its share) is served a chunk per request.
const pickChunk = 8

// next picks the queue of channel ch to take up to most more jobs from:
// among its queues with jobs not yet asked for, the one whose (guessed)
// next tenant would finish first under weighted fair queueing, ties to the
// priority lane, then to the order of the queues; the marketing lanes only
// when no other lane has a job and the channel's marketing room lasts
// (mcap). It takes as many as the queue holds beyond what is asked of it,
// up to most, charging the guess for each, and returns how many.
func (s *scheduler) next(ch string, caps limits.Caps, most int) (string, int, bool) {
	fq := s.fair[ch]
	if fq == nil {
		fq = newFairQueue()
		s.fair[ch] = fq
	}
	for _, marketing := range []bool{false, true} {
		if marketing && s.mcap[ch] == 0 {
			break
		}
		best, bestTenant, bestTag, bestKind := -1, "", 0.0, kindMarketing
		next := math.Inf(1) // the smallest tag of another tenant: when the pick's tenant stops being due
		for i, q := range s.byCh[ch] {
			if uint64(s.want[q.Subject]) >= q.Stored {
				continue
			}
			kind := kindOf(caps, q.Key)
			if (kind == kindMarketing) != marketing {
				continue
			}
			t := s.guess(fq, q)
			tag := fq.tag(t, s.weight(t))
			switch {
			case best < 0 || tag < bestTag || tag == bestTag && kind < bestKind:
				if best >= 0 && t != bestTenant {
					next = min(next, bestTag)
				}
				best, bestTenant, bestTag, bestKind = i, t, tag, kind
			case t != bestTenant:
				next = min(next, tag)
			}
		}
		if best < 0 {
			continue
		}
		q := s.byCh[ch][best]
		w := s.weight(bestTenant)
		// Jobs while the tenant stays due: its k-th takes the tag
		// bestTag + (k−1)/w, at most the next tenant's. A tenant not seen
		// yet stands for as many tenants as jobs, each due at once.
		fresh := isFresh(bestTenant)
		due := most
		if !math.IsInf(next, 1) && !fresh {
			due = min(most, 1+int((next-bestTag)*w+1e-9))
		}
		n := int(min(uint64(due), q.Stored-uint64(s.want[q.Subject])))
		if marketing && s.mcap[ch] > 0 {
			n = min(n, s.mcap[ch])
			s.mcap[ch] -= n
		}
		if fresh {
			fq.chargeEach(bestTenant, w, n)
		} else {
			fq.charge(bestTenant, w, n)
		}
		for range n {
			s.charged[q.Subject] = append(s.charged[q.Subject], bestTenant)
		}
		return q.Subject, n, true
	}
	return "", 0, false
}

// guess is queue q's next tenant as far as known: a tenant's own queue's;
// a queue never delivered from is the default tenant's (its own queues) or
// a tenant's not seen yet (a fair lane); a queue whose latest deliveries
// were of many tenants (half of them distinct or more: a lane of small
// tenants) is a tenant not seen yet, each job another; else, of its latest
// tenants, the one whose pick would finish last (a queue shared by a heavy
// tenant and a light one is taken as the heavy one's until both are due,
// so that the weights can steer the other queues).
func (s *scheduler) guess(fq *fairQueue, q queue.Queue) string {
	if q.Key.Tenant != "" {
		return q.Key.Tenant
	}
	h := s.heads[q.Subject]
	if h.n == 0 && !q.Key.Fair {
		return ""
	}
	distinct := 0
	for i := range h.n {
		if h.distinct(i) {
			distinct++
		}
	}
	if h.n == 0 || 2*distinct >= headMemory {
		return s.fresh(q.Subject)
	}
	best, bestTag := "", math.Inf(-1)
	for i, t := range h.recent[:h.n] {
		if !h.distinct(i) {
			continue
		}
		if tag := fq.peek(t, s.weight(t)); tag > bestTag {
			best, bestTag = t, tag
		}
	}
	return best
}

// fresh is the freshTenant guess of a queue's subject, made once.
func (s *scheduler) fresh(subject string) string {
	f, ok := s.freshOf[subject]
	if !ok {
		f = freshTenant(subject)
		s.freshOf[subject] = f
	}
	return f
}

// weight is a tenant's weight; a fresh guess weighs 1.
func (s *scheduler) weight(t string) float64 {
	if isFresh(t) {
		return 1
	}
	return s.weights(t)
}

// isFresh reports whether t is a freshTenant guess.
func isFresh(t string) bool { return len(t) > 0 && t[0] == 0 }

// settle moves each pick's charge from its guess to the tenant whose job
// came, and learns the queues' heads from what they delivered.
func (s *scheduler) settle(dls []*queue.Delivery) {
	for _, dl := range dls {
		guesses := s.charged[dl.Subject]
		if len(guesses) == 0 {
			continue // a long-poll's delivery: charged below
		}
		guess := guesses[0]
		s.charged[dl.Subject] = guesses[1:]
		if fq := s.fair[dl.Channel]; fq != nil {
			fq.transfer(guess, s.weight(guess), dl.Tenant, s.weight(dl.Tenant))
		}
		s.learn(dl)
	}
	// Guesses charged for jobs that did not come are given back.
	for subject, guesses := range s.charged {
		k, _ := queue.ParseJobSubject(subject)
		if fq := s.fair[k.Channel]; fq != nil {
			for _, g := range guesses {
				fq.refund(g, s.weight(g))
			}
		}
	}
	clear(s.charged)
}

// polled charges the tenants of deliveries a long-poll brought (no plan
// picked them) and learns their queues' heads.
func (s *scheduler) polled(dls []*queue.Delivery) {
	for _, dl := range dls {
		fq := s.fair[dl.Channel]
		if fq == nil {
			fq = newFairQueue()
			s.fair[dl.Channel] = fq
		}
		fq.charge(dl.Tenant, s.weight(dl.Tenant), 1)
		s.learn(dl)
	}
}

// learn notes dl's tenant as the latest of its queue's.
func (s *scheduler) learn(dl *queue.Delivery) {
	h := s.heads[dl.Subject]
	h.saw(dl.Tenant)
	s.heads[dl.Subject] = h
}

// marketingRoom is how many more marketing jobs this process may take for
// channel ch (of budget jobs at once): -1 (no bound) unless a provider of
// the channel reserves a share for transactional jobs and some wait (more
// are stored than the fleet holds, as this process's count times peers
// estimates it); then what marketingCap leaves above the marketing jobs
// held.
func (f *fetcher) marketingRoom(live *liveConfig, ch string, budget int, storedT uint64, peers int) int {
	share := reserve(live, ch)
	if share <= 0 {
		return -1
	}
	heldM := f.busy.get(ch + marketingSuffix)
	heldT := f.busy.get(ch) - heldM
	if storedT <= uint64(max(0, heldT)*peers) {
		return -1 // no transactional job waits: marketing takes everything
	}
	return max(0, marketingCap(budget, share)-heldM)
}

// isMarketing reports whether dl's jobs count as marketing in the
// channel's budget (its lane's category under the live configuration).
func (f *fetcher) isMarketing(dl *queue.Delivery) bool {
	return f.live.Load().caps.LaneCategory(dl.Channel, dl.Lane) == queue.Marketing
}

// tenantLabel is how tenant shows in metrics and status: its name when
// tenants.weights names it, "default" for the default tenant (""), else
// "other" (a label never takes an unbounded set of values).
func (f *fetcher) tenantLabel(tenant string) string {
	switch _, named := f.live.Load().weights[tenant]; {
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
func (f *fetcher) queuedByTenant() map[string]map[string]uint64 {
	out := map[string]map[string]uint64{}
	qs := f.seen.Load()
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
		label := f.tenantLabel(q.Key.Tenant)
		if q.Key.Fair {
			label = "other" // a fair lane is shared: the named tenants' jobs there are counted with the others'
		}
		m[label] += q.Stored
	}
	return out
}

// weight is a tenant's weight from the configuration (default 1).
func (f *fetcher) weight(tenant string) float64 {
	if w, ok := f.live.Load().weights[tenant]; ok && w > 0 {
		return w
	}
	return 1
}

// peers is how many processes of the fleet are live (Options.Peers, else
// 1): each holds its share of a channel's budget.
func (f *fetcher) peers() int {
	if f.o.Peers != nil {
		return max(1, f.o.Peers())
	}
	return 1
}

// pollable are the queues to long-poll when a plan finds nothing to pull:
// of every channel with budget left, as many of its known queues as the
// budget allows (one job each), the default tenant's of configured
// channels always among them; not a channel's marketing lanes while the
// last plan left it no marketing room.
func (f *fetcher) pollable(s *scheduler) []string {
	live := f.live.Load()
	l := f.be.currentLimits()
	peers := f.peers()
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
			n = max(0, f.budget(ch, live, l, peers)-f.busy.get(ch))
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

// moveNamed hands the router the deliveries of the default tenant's
// queues whose job names a tenant in its JSON (a publisher that put the
// tenant in the job and published on the plain subject): on its tenant's
// fair lane it is served in that tenant's share, not in the default
// tenant's order. A queue that delivered such a job is swept (see
// scheduler.sweep) until it delivers none: the router takes every job the
// plan pulled from it, the extra sweepBatch included, as the plan counted
// them (they take no worker), and only then is the sweep updated from what
// this pull found. It returns the deliveries to hand to workers. Without a
// router every delivery is handed on; such a job is still that tenant's
// (counted, labelled).
func (f *fetcher) moveNamed(ctx context.Context, s *scheduler, dls []*queue.Delivery) []*queue.Delivery {
	if f.o.Router == nil {
		return dls
	}
	// The default tenant's queues this pull delivered from: true for those
	// that delivered a job naming a (valid) tenant.
	named := s.named
	clear(named)
	anyNamed := false
	for _, dl := range dls {
		if !dl.Fair && queue.TenantOf(dl.Subject) == "" {
			n := dl.Tenant != "" && queue.ValidTenant(dl.Tenant)
			named[dl.Subject] = named[dl.Subject] || n
			anyNamed = anyNamed || n
		}
	}
	rest := dls
	if anyNamed || len(s.sweep) > 0 {
		var moved int
		var err error
		rest, moved, err = f.o.Router.Move(ctx, dls, s.sweep)
		f.m.Routed.Add(float64(moved))
		if err != nil && ctx.Err() == nil {
			f.log.Warn("move jobs naming their tenant to its fair lane", "err", err)
		}
	}
	for subject, n := range named {
		if n {
			s.sweep[subject] = true
		} else {
			delete(s.sweep, subject)
		}
	}
	return rest
}

// fetchLoop pulls jobs for free workers and hands them out, until ctx
// ends: it reads which queues hold jobs, plans what to pull within the
// channels' budgets, pulls it in one round trip, and long-polls when the
// plan is empty.
func (f *fetcher) fetchLoop(ctx context.Context, jobs chan<- *queue.Delivery, slots chan struct{}) error {
	s := newScheduler(f.weight)
	backoff := 100 * time.Millisecond
	free := 0
	failed := func(err error) bool {
		if ctx.Err() != nil {
			return true
		}
		f.log.Warn("fetch jobs", "err", err, "retry_in", backoff.String())
		if sleep.For(ctx, backoff) != nil {
			return true
		}
		backoff = min(backoff*2, 5*time.Second)
		return false
	}
	hand := func(dls []*queue.Delivery) {
		for _, dl := range dls {
			free--
			f.busy.add(dl.Channel, 1)
			if f.isMarketing(dl) {
				f.marketing.Store(dl, struct{}{})
				f.busy.add(dl.Channel+marketingSuffix, 1)
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
		for free < f.o.Workers {
			select {
			case <-slots:
				free++
			default:
				break count
			}
		}
		// With the backend down and no fallback, take no jobs: they wait
		// in JetStream.
		if err := f.be.waitForBackend(ctx); err != nil {
			return nil
		}
		if f.since(s.readAt) >= refreshEvery {
			qs, err := f.o.Source.Queues(ctx)
			if err != nil {
				if failed(err) {
					return nil
				}
				continue
			}
			s.queues, s.readAt = qs, f.now()
			clear(s.short)
			f.seen.Store(&qs)
		}
		if wants := f.plan(s, free); len(wants) > 0 {
			dls, err := f.o.Source.FetchFrom(ctx, wants)
			got := s.got
			clear(got)
			for _, dl := range dls {
				got[dl.Subject]++
			}
			dls = f.moveNamed(ctx, s, dls)
			s.settle(dls)
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
		subjects := f.pollable(s)
		wait := idlePoll
		if f.inFlight.Load() > 0 || len(s.queues) > 0 {
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
		dls, err := f.o.Source.Poll(ctx, subjects, free, min(wait, f.o.FetchWait))
		dls = f.moveNamed(ctx, s, dls)
		s.polled(dls)
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
