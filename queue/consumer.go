package queue

import (
	"maps"
	"strconv"

	"context"
	"errors"
	"fmt"
	"golang.org/x/sync/errgroup"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Consumer defaults.
const (
	DefaultConsumerName  = "notifier"
	DefaultMaxAckPending = 1000
)

// drainTimeout bounds the wait for a withdrawn pull request's inbox to
// drain; it only matters when the connection is failing.
const drainTimeout = 5 * time.Second

// ConsumerConfig names the durable queue consumers and bounds them. The
// zero value uses the defaults.
type ConsumerConfig struct {
	// Name is the durable name prefix: each queue's consumer is named
	// <Name>-<channel>-<lane> (the default tenant) or
	// <Name>-<channel>-<lane>-t-<tenant> (see Key). Every process of a fleet
	// must use the same name. Default "notifier".
	Name string
	// MaxAckPending bounds the deliveries of each queue that are out with a
	// worker (or handed back with a delay) and not yet acknowledged,
	// fleet-wide; the server stops delivering past it. Set it above the
	// fleet's total worker count. Default 1000.
	MaxAckPending int
	// FairLanes is the number of fair lanes per channel and lane kind
	// (tenants.lanes, default DefaultFairLanes, at most MaxFairLanes): the
	// consumers on the job stream are 3 channels × 4 lanes × (FairLanes +
	// 1) + 1 (the router's), whatever the number of tenants. Every
	// process and publisher of a fleet should use the same number; jobs
	// on a lane past it are still taken.
	FairLanes int
}

// Consumers is how many durable consumers NewConsumer keeps on the job
// stream with fairLanes fair lanes: the default tenant's 4 lanes and the
// fair lanes of every channel, and the router's.
func Consumers(fairLanes int) int { return len(Channels)*len(laneSuffixes)*(fairLanes+1) + 1 }

// laneSuffixes are a queue's lanes as its subject ends: the normal lane,
// the priority lane and the categories' lanes.
var laneSuffixes = []struct {
	high bool
	cat  Category
}{{true, ""}, {false, ""}, {false, Transactional}, {false, Marketing}}

// WithDefaults fills the zero fields.
func (cc ConsumerConfig) WithDefaults() ConsumerConfig {
	if cc.Name == "" {
		cc.Name = DefaultConsumerName
	}
	if cc.MaxAckPending == 0 {
		cc.MaxAckPending = DefaultMaxAckPending
	}
	if cc.FairLanes == 0 {
		cc.FairLanes = DefaultFairLanes
	}
	return cc
}

// Validate checks the name and the bound (at least 1: JetStream's -1,
// unbounded, is refused on purpose).
func (cc ConsumerConfig) Validate() error {
	var errs []error
	if cc.Name == "" || strings.ContainsAny(cc.Name, ".*>/\\ \t\r\n") {
		errs = append(errs, fmt.Errorf("consumer name %q must be non-empty without . * > / \\ or whitespace", cc.Name))
	}
	if cc.MaxAckPending < 1 {
		errs = append(errs, fmt.Errorf("max_ack_pending: must be at least 1, got %d", cc.MaxAckPending))
	}
	if cc.FairLanes < 1 || cc.FairLanes > MaxFairLanes {
		errs = append(errs, fmt.Errorf("tenants.lanes: must be 1 to %d, got %d", MaxFairLanes, cc.FairLanes))
	}
	return errors.Join(errs...)
}

// The queues created on demand — a stray subject's, or a fair lane past
// FairLanes (left by a fleet configured with more) — are deleted by the
// server once no process has pulled from it for this long (and created
// again when jobs come); at most maxOnDemand exist at once per process.
const (
	strayInactive = 10 * time.Minute
	maxOnDemand   = 64
	// setupParallel is how many consumers NewConsumer creates at once.
	setupParallel = 16
)

// ErrTooManyQueues refuses a queue made on demand past maxOnDemand: its
// jobs wait until one of the others is deleted (inactive 10 minutes).
var ErrTooManyQueues = errors.New("too many stray queues")

// laneConfig is the durable pull consumer of one queue:
//
//   - filtered on exactly the queue's subject, so the queues never overlap
//     (as a work-queue stream requires of its consumers);
//   - explicit acks, with AckWait from Config: a job not acknowledged (nor
//     kept alive with InProgress) within it is redelivered, which is how a
//     crashed worker's jobs come back;
//   - MaxDeliver -1: deferrals (InProgress) and retries (NakWithDelay) must
//     never make the server drop a job; provider failures are counted by the
//     dispatcher's ledger instead;
//   - no BackOff: it only applies to ack-wait expiries (not to naks), and
//     would replace AckWait as the redelivery timer; retries are timed by
//     the dispatcher with NakWithDelay;
//   - MaxAckPending bounded, from ConsumerConfig;
//   - an inactive threshold for the queues made on demand (0: kept).
func laneConfig(name, filter, description string, ackWait time.Duration, maxAckPending int, inactive time.Duration) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:           name,
		Description:       description,
		FilterSubject:     filter,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           ackWait,
		MaxDeliver:        -1,
		MaxAckPending:     maxAckPending,
		ReplayPolicy:      jetstream.ReplayInstantPolicy,
		InactiveThreshold: inactive,
	}
}

// ensureConsumer returns the durable consumer lc on stream, creating it, or
// updating it when its settings drifted. A consumer already as wanted is
// only read: processes starting together do not all rewrite it (which also
// keeps clear of a race in nats-server 2.15's consumer update).
func ensureConsumer(ctx context.Context, js jetstream.JetStream, stream string, lc jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	var cons jetstream.Consumer
	err := retryStart(ctx, "consumer "+lc.Durable, func(ctx context.Context) (err error) {
		cons, err = ensureConsumerOnce(ctx, js, stream, lc)
		return err
	})
	return cons, err
}

func ensureConsumerOnce(ctx context.Context, js jetstream.JetStream, stream string, lc jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if cons, err := apiCall(ctx, func(ctx context.Context) (jetstream.Consumer, error) { return js.Consumer(ctx, stream, lc.Durable) }); err == nil {
		if c := cons.CachedInfo().Config; c.FilterSubject == lc.FilterSubject && c.AckPolicy == lc.AckPolicy &&
			c.AckWait == lc.AckWait && c.MaxDeliver == lc.MaxDeliver && c.MaxAckPending == lc.MaxAckPending &&
			c.DeliverPolicy == lc.DeliverPolicy && c.Description == lc.Description && c.InactiveThreshold == lc.InactiveThreshold {
			return cons, nil
		}
	}
	cons, err := apiCall(ctx, func(ctx context.Context) (jetstream.Consumer, error) {
		return js.CreateOrUpdateConsumer(ctx, stream, lc)
	})
	if err != nil {
		return nil, fmt.Errorf("create or update consumer %s on stream %s: %w", lc.Durable, stream, err)
	}
	return cons, nil
}

// Queue is one queue of the job stream as Queues saw it.
type Queue struct {
	Subject string // the queue's subject: what FetchFrom and Poll take
	Key     Key    // its channel, tenant and lane; for a stray one, the channel token only
	// Stray is a subject of none of the shapes, or of a channel that
	// is not one of Channels: its jobs are invalid, to be dead-lettered.
	Stray bool
	// Stored is how many of its jobs the stream holds: waiting, out with a
	// worker, or handed back with a delay.
	Stored uint64
}

// Consumer pulls jobs from the queues of the job stream: one durable pull
// consumer per channel, tenant and lane, each filtered on exactly its
// subject, so that the jobs of each are reachable without reading any
// other's. It is safe for concurrent use. It holds no resources between
// calls but the consumers it knows: stop using it and close the connection.
type Consumer struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	cfg    Config
	cc     ConsumerConfig
	prefix string // the JetStream API prefix

	place *Lanes // the fair lanes' placement, fed by Queues (the router's and a Publisher's)
	route *lane  // the tenants' own subjects, for the router

	mu       sync.Mutex
	lanes    map[string]*lane // by subject
	defaults []*lane          // the queues made at start: the default tenant's and the fair lanes
	onDemand int              // queues made since, alive as far as this process knows

	inboxMu sync.Mutex
	inboxes []*pullInbox // pull inboxes kept between fetches (pull.go)
	closed  bool         // Close was called: no inbox is kept any more
}

// NewConsumer creates or updates the durable queue consumers on the job
// stream (which EnsureStreams must have created): the default tenant's four
// lanes of every channel and the router's over every tenant's own
// subjects, and returns a Consumer pulling from them and from the fair
// lanes, whose consumers it makes when their first job is seen (Consumers
// says how many there are at most: creating them all at once costs a
// second of file-store writes). All processes share the durables, so each
// job is out with one worker at a time. Safe to call from many processes
// at once. A stream or account whose consumer limit leaves no room for
// them all fails the start, with an error that says how many are needed
// and what to change.
//
// Consumers of earlier versions that overlap these (a work-queue stream
// refuses overlapping filters) are deleted: the two lane consumers
// (<Name>-high on notify.jobs.*.high, <Name>-normal on notify.jobs.*), and
// one per tenant (<Name>-<channel>-<lane>-t-<tenant>). Their jobs stay in
// the stream and are taken from the new consumers. A process of an earlier
// version still running then fails its pulls: stop the old fleet before
// starting this one.
func NewConsumer(ctx context.Context, js jetstream.JetStream, cfg Config, cc ConsumerConfig) (*Consumer, error) {
	cfg = cfg.WithDefaults()
	cc = cc.WithDefaults()
	if err := cc.Validate(); err != nil {
		return nil, fmt.Errorf("consumer configuration: %w", err)
	}
	var stream jetstream.Stream
	err := retryStart(ctx, "stream "+cfg.Stream, func(ctx context.Context) (err error) {
		stream, err = apiCall(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, cfg.Stream) })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("job stream %s: %w", cfg.Stream, err)
	}
	c := &Consumer{nc: js.Conn(), js: js, stream: stream, cfg: cfg, cc: cc, prefix: apiPrefix(js), lanes: map[string]*lane{},
		place: NewLanes(cc.FairLanes, nil)}
	have, err := c.deleteLegacy(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.checkRoom(ctx, have); err != nil {
		return nil, err
	}
	var keys []Key
	for _, ls := range laneSuffixes {
		for _, ch := range Channels {
			keys = append(keys, Key{Channel: ch, High: ls.high, Category: ls.cat})
		}
	}
	made := make([]*lane, len(keys))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(setupParallel)
	for i, k := range keys {
		g.Go(func() (err error) {
			made[i], err = c.newLane(gctx, k.Subject(), true)
			return err
		})
	}
	g.Go(func() (err error) {
		lc := laneConfig(cc.Name+"-route", routeFilter, "notifier router: tenants' own subjects to fair lanes", cfg.AckWait, cc.MaxAckPending, 0)
		cons, err := ensureConsumer(gctx, js, cfg.Stream, lc)
		if err != nil {
			return err
		}
		c.route = &lane{name: lc.Durable, subject: routeFilter, next: c.prefix + "CONSUMER.MSG.NEXT." + cfg.Stream + "." + lc.Durable, cons: cons}
		return nil
	})
	if err := g.Wait(); err != nil {
		return nil, c.roomError(err)
	}
	for _, l := range made {
		c.lanes[l.subject] = l
	}
	c.defaults = made
	return c, nil
}

// roomError says what to do when the server refused a consumer past its
// limit; any other error is returned as it is.
func (c *Consumer) roomError(err error) error {
	if !isMaxConsumers(err) {
		return err
	}
	return fmt.Errorf("%w: notifier keeps up to %d consumers on stream %s (tenants.lanes %d: 3 channels × 4 lanes × (%d + 1) + 1); "+
		"raise the stream's or the account's consumer limit, or lower tenants.lanes", err, Consumers(c.cc.FairLanes), c.cfg.Stream, c.cc.FairLanes, c.cc.FairLanes)
}

// checkRoom refuses a start on a stream or account whose consumer limit
// leaves no room for every consumer this configuration may make (the fair
// lanes' are made when their first job comes: found now, not then); have
// of them exist already.
func (c *Consumer) checkRoom(ctx context.Context, have int) error {
	need := Consumers(c.cc.FairLanes) - have
	if need <= 0 {
		return nil
	}
	info, err := apiCall(ctx, func(ctx context.Context) (*jetstream.StreamInfo, error) { return c.stream.Info(ctx) })
	if err != nil {
		return fmt.Errorf("job stream %s: %w", c.cfg.Stream, err)
	}
	if limit := info.Config.MaxConsumers; limit > 0 && limit-info.State.Consumers < need {
		return c.roomError(fmt.Errorf("stream %s allows %d consumers and has %d, %d more are needed: %w",
			c.cfg.Stream, limit, info.State.Consumers, need, jetstream.ErrMaximumConsumersLimit))
	}
	acct, err := apiCall(ctx, func(ctx context.Context) (*jetstream.AccountInfo, error) { return c.js.AccountInfo(ctx) })
	if err != nil {
		return nil // an account without JetStream info to give: the stream's limit was checked
	}
	if limit := acct.Limits.MaxConsumers; limit > 0 && limit-acct.Consumers < need {
		return c.roomError(fmt.Errorf("the account allows %d consumers and has %d, %d more are needed: %w",
			limit, acct.Consumers, need, jetstream.ErrMaximumConsumersLimit))
	}
	return nil
}

// isMaxConsumers reports whether err is the server's refusal of a consumer
// past its limit (per stream, or per account: JSMaximumConsumersLimitErr,
// err_code 10026).
func isMaxConsumers(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, jetstream.ErrMaximumConsumersLimit) || errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeMaximumConsumersLimit
}

// deleteLegacy deletes the consumers of earlier versions whose filters
// overlap this version's (see NewConsumer), and returns how many of this
// version's exist.
func (c *Consumer) deleteLegacy(ctx context.Context) (have int, err error) {
	names := c.stream.ConsumerNames(ctx)
	var legacy []string
	for name := range names.Name() {
		rest, ok := strings.CutPrefix(name, c.cc.Name+"-")
		switch {
		case !ok:
		case rest == "high" || rest == "normal" || strings.Contains(rest, "-t-"):
			legacy = append(legacy, name)
		case !strings.HasPrefix(rest, "stray-"):
			have++
		}
	}
	if err := names.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return 0, fmt.Errorf("list the consumers of stream %s: %w", c.cfg.Stream, err)
	}
	for _, name := range legacy {
		if err := c.js.DeleteConsumer(ctx, c.cfg.Stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return 0, fmt.Errorf("delete the earlier consumer %s: %w", name, err)
		}
	}
	return have, nil
}

// Lanes is the Consumer's placement of tenants' jobs on fair lanes, its
// view kept by Queues: for a Publisher in the same process (WithLanes).
func (c *Consumer) Lanes() *Lanes { return c.place }

// laneFor returns the queue consumer of subject: one made at start, or
// one made now for a queue seen since (a stray subject, a fair lane past
// FairLanes), one try (the caller comes back), at most maxOnDemand. The
// cap is taken under c.mu before the consumer is made (so callers at once
// cannot overshoot it), recorded on the lane (lane.onDemand) and given
// back by forget, or here when the consumer is not made or another caller
// made it first.
func (c *Consumer) laneFor(ctx context.Context, subject string) (*lane, error) {
	k, ok := ParseJobSubject(subject)
	fair := ok && k.Fair && k.Index < c.cc.FairLanes && IsChannel(k.Channel)
	c.mu.Lock()
	if l := c.lanes[subject]; l != nil {
		c.mu.Unlock()
		return l, nil
	}
	onDemand := !fair
	if onDemand {
		if c.onDemand >= maxOnDemand {
			c.mu.Unlock()
			return nil, fmt.Errorf("queue %s: %w (%d at once): its jobs wait until one is deleted", subject, ErrTooManyQueues, maxOnDemand)
		}
		c.onDemand++
	}
	c.mu.Unlock()
	l, err := c.newLane(ctx, subject, false)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if onDemand {
			c.onDemand--
		}
		return nil, c.roomError(err)
	}
	if have := c.lanes[subject]; have != nil {
		if onDemand {
			c.onDemand--
		}
		return have, nil
	}
	l.onDemand = onDemand
	c.lanes[subject] = l
	return l, nil
}

// newLane creates or updates the consumer of subject's queue. At start
// (retry), a busy or forming cluster is waited for (retryStart).
func (c *Consumer) newLane(ctx context.Context, subject string, retry bool) (*lane, error) {
	key, ok := ParseJobSubject(subject)
	stray := !ok || !IsChannel(key.Channel) || key.Tenant != ""
	var name, desc string
	var inactive time.Duration
	switch {
	case stray:
		h := fnv.New64a()
		h.Write([]byte(subject))
		name = fmt.Sprintf("%s-stray-%016x", c.cc.Name, h.Sum64())
		desc = "notifier stray subject (jobs dead-lettered as invalid)"
		if !ok {
			key = Key{Channel: ChannelOf(subject)}
		}
		inactive = strayInactive
	default:
		lane := key.Lane()
		name = c.cc.Name + "-" + key.Channel + "-" + lane
		desc = "notifier queue " + key.Channel + " " + lane
		if key.Fair {
			name += "-f" + strconv.Itoa(key.Index)
			desc += " fair lane " + strconv.Itoa(key.Index)
			if key.Index >= c.cc.FairLanes {
				inactive = strayInactive // past tenants.lanes: made on demand
			}
		}
	}
	lc := laneConfig(name, subject, desc, c.cfg.AckWait, c.cc.MaxAckPending, inactive)
	var cons jetstream.Consumer
	var err error
	if retry {
		cons, err = ensureConsumer(ctx, c.js, c.cfg.Stream, lc)
	} else {
		cons, err = ensureConsumerOnce(ctx, c.js, c.cfg.Stream, lc)
	}
	if err != nil {
		return nil, err
	}
	return &lane{name: name, subject: subject, key: key, stray: stray,
		next: c.prefix + "CONSUMER.MSG.NEXT." + c.cfg.Stream + "." + name, cons: cons}, nil
}

// forget drops a queue consumer the server no longer has (deleted after
// its inactive threshold): the next use creates it again.
func (c *Consumer) forget(l *lane) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lanes[l.subject] == l && !slices.Contains(c.defaults, l) {
		delete(c.lanes, l.subject)
		if l.onDemand {
			c.onDemand--
		}
	}
}

// queueFilters are the subject filters Queues reads: the default
// tenant's queues (three and four tokens) and the fair lanes. A tenant's
// own subjects are the router's: their number grows with the tenants.
var queueFilters = []string{normalFilter, jobsPrefix + "*.*", fairLanesFilter}

// Queues asks the server which queues hold jobs and how many (one request
// per filter; the answer's size is the number of lanes, whatever the
// number of tenants) and returns them, the default tenant's first. A
// queue seen for the first time that has no consumer yet (a stray
// subject, a fair lane past FairLanes) gets one. The fair lanes' depths
// feed Lanes.
func (c *Consumer) Queues(ctx context.Context) ([]Queue, error) {
	stored := map[string]uint64{}
	fair := map[string]uint64{}
	for _, f := range queueFilters {
		info, err := c.stream.Info(ctx, jetstream.WithSubjectFilter(f))
		if err != nil {
			return nil, fmt.Errorf("queues of stream %s: %w", c.cfg.Stream, err)
		}
		for s, n := range info.State.Subjects {
			if n > 0 {
				stored[s] = n
				if f == fairLanesFilter {
					fair[s] = n
				}
			}
		}
	}
	c.place.Observe(fair)
	subjects := slices.Sorted(maps.Keys(stored))
	// The queues seen for the first time get their consumers at once, in
	// parallel (a consumer's creation is a file-store write: 180 fair
	// lanes one after another would stall the caller for seconds).
	lanes := make([]*lane, len(subjects))
	errs := make([]error, len(subjects))
	var g errgroup.Group
	g.SetLimit(setupParallel)
	for i, s := range subjects {
		g.Go(func() error {
			lanes[i], errs[i] = c.laneFor(ctx, s)
			return nil
		})
	}
	_ = g.Wait()
	qs := make([]Queue, 0, len(subjects))
	for i, s := range subjects {
		if l := lanes[i]; l != nil {
			qs = append(qs, Queue{Subject: s, Key: l.key, Stray: l.stray, Stored: stored[s]})
		}
	}
	slices.SortStableFunc(qs, func(a, b Queue) int {
		switch {
		case !a.Key.Fair && b.Key.Fair:
			return -1
		case a.Key.Fair && !b.Key.Fair:
			return 1
		}
		return 0
	})
	if err := errors.Join(errs...); len(qs) == 0 && err != nil {
		return nil, err
	}
	return qs, nil
}

// Want asks FetchFrom for up to N jobs of the queue on Subject.
type Want struct {
	Subject string
	N       int
}

// FetchFrom pulls, in one round trip, up to w.N jobs from each wanted queue
// that it can deliver now (no-wait pull requests, all sent at once). A
// queue at MaxAckPending delivers nothing; FetchFrom waits up to 250ms for
// it before moving on. The deliveries come in wants' order. Messages
// received before an error are returned with it. If ctx ends, anything
// received is handed back with a Nak and the context's error returned.
func (c *Consumer) FetchFrom(ctx context.Context, wants []Want) ([]*Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	if !c.nc.IsConnected() {
		return nil, fmt.Errorf("fetch: %w (%s)", errNotConnected, c.nc.Status())
	}
	reqs := make([]pullWant, 0, len(wants))
	for _, w := range wants {
		if w.N < 1 {
			continue
		}
		l, err := c.laneFor(ctx, w.Subject)
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, pullWant{lane: l, n: w.N})
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	got, err := c.fetchNow(ctx, reqs)
	if err != nil && ctx.Err() != nil {
		for _, g := range got {
			nakAll(c.nc, g)
		}
		return nil, fmt.Errorf("fetch: %w", ctx.Err())
	}
	var msgs []*nats.Msg
	for _, g := range got {
		msgs = append(msgs, g...)
	}
	if err != nil && len(msgs) == 0 {
		return nil, fmt.Errorf("fetch queues: %w", err)
	}
	return c.deliveries(msgs), err
}

// Poll waits up to wait for one job on any of the queues on subjects (one
// pull request of one message each, held by the server: no busy loop) and
// returns as soon as one arrives; the other requests are withdrawn by
// draining. Priority-lane deliveries come first; more than max are handed
// back at once. A poll that ends with no message returns an empty slice and
// no error.
func (c *Consumer) Poll(ctx context.Context, subjects []string, max int, wait time.Duration) ([]*Delivery, error) {
	if max < 1 {
		return nil, fmt.Errorf("poll: max must be at least 1, got %d", max)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("poll: %w", err)
	}
	if !c.nc.IsConnected() {
		return nil, fmt.Errorf("poll: %w (%s)", errNotConnected, c.nc.Status())
	}
	lanes := make([]*lane, 0, len(subjects))
	for _, s := range subjects {
		l, err := c.laneFor(ctx, s)
		if err != nil {
			return nil, err
		}
		lanes = append(lanes, l)
	}
	if len(lanes) == 0 || wait <= 0 {
		return nil, nil
	}
	return c.longPoll(ctx, max, wait, lanes)
}

// DefaultQueues are the subjects of the default tenant's priority and
// normal lanes of channels, the priority lanes first.
func DefaultQueues(channels ...string) []string {
	out := make([]string, 0, 2*len(channels))
	for _, high := range []bool{true, false} {
		for _, ch := range channels {
			out = append(out, JobSubject(ch, high))
		}
	}
	return out
}

// Fetch returns up to max deliveries from the queues that hold jobs (as
// Queues finds them) and the default tenant's, as soon as at least one is
// available, always priority lanes first: it never returns a normal-lane
// delivery while a priority-lane message was available, and priority
// deliveries come first in the slice.
//
// It asks every such queue for what it can deliver now, all at once;
// deliveries beyond max are handed back at once with a Nak. When all have
// nothing and wait > 0 it long-polls them (see Poll). So Fetch never holds
// more than max messages: the caller passes its number of free workers,
// and no message ages in a client-side buffer (the known trap of large
// pull buffers). It is the simple way to take jobs with no regard for
// which queue they come from; the dispatcher schedules between queues with
// Queues, FetchFrom and Poll. max must be at least 1.
func (c *Consumer) Fetch(ctx context.Context, max int, wait time.Duration) ([]*Delivery, error) {
	if max < 1 {
		return nil, fmt.Errorf("fetch: max must be at least 1, got %d", max)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	qs, _ := c.Queues(ctx) // a failure shows in the fetch
	subjects := DefaultQueues(Channels...)
	for _, q := range qs {
		if !slices.Contains(subjects, q.Subject) {
			subjects = append(subjects, q.Subject)
		}
	}
	slices.SortStableFunc(subjects, func(a, b string) int {
		switch ha, hb := IsHigh(a), IsHigh(b); {
		case ha && !hb:
			return -1
		case !ha && hb:
			return 1
		}
		return 0
	})
	wants := make([]Want, len(subjects))
	for i, s := range subjects {
		wants[i] = Want{Subject: s, N: max}
	}
	ds, err := c.FetchFrom(ctx, wants)
	if err != nil && len(ds) == 0 {
		return nil, err
	}
	if len(ds) < max && err == nil {
		// A consumer answers a no-wait pull before it has taken in a job
		// stored a moment ago (one just published, or a queue Queues saw
		// for the first time): ask the queues that delivered less than
		// they hold once more, a few milliseconds later.
		got := map[string]uint64{}
		for _, d := range ds {
			got[d.Subject]++
		}
		var again []Want
		for _, q := range qs {
			if q.Stored > got[q.Subject] {
				again = append(again, Want{Subject: q.Subject, N: int(min(q.Stored-got[q.Subject], uint64(max-len(ds))))})
			}
		}
		if len(again) > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
			more, _ := c.FetchFrom(ctx, again)
			ds = append(ds, more...)
			slices.SortStableFunc(ds, func(a, b *Delivery) int {
				switch {
				case a.High && !b.High:
					return -1
				case !a.High && b.High:
					return 1
				}
				return 0
			})
		}
	}
	if len(ds) > max {
		for _, d := range ds[max:] {
			_ = d.Nak() // back to the stream at once, not left to age
		}
		ds = ds[:max]
	}
	if len(ds) > 0 || wait <= 0 {
		return ds, nil
	}
	return c.Poll(ctx, subjects, max, wait)
}

// known is every queue consumer this Consumer knows, priority lanes first.
func (c *Consumer) known() []*lane {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*lane, 0, len(c.lanes))
	for _, l := range c.lanes {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *lane) int {
		switch {
		case a.key.High && !b.key.High:
			return -1
		case !a.key.High && b.key.High:
			return 1
		}
		return strings.Compare(a.subject, b.subject)
	})
	return out
}

// Lane is the state of one lane consumer.
type Lane struct {
	Pending     uint64 // stored, not yet delivered
	AckPending  int    // delivered, not yet acknowledged
	Redelivered int    // delivered more than once and not yet acknowledged
	Waiting     int    // pull requests waiting at the server
}

// Backlog is the state of the queues this Consumer knows, summed by lane.
type Backlog struct {
	High, Normal Lane
}

// Backlog asks the server for the state of every queue this Consumer
// knows and sums it by lane.
func (c *Consumer) Backlog(ctx context.Context) (Backlog, error) {
	var b Backlog
	for _, l := range c.known() {
		info, err := l.cons.Info(ctx)
		if err != nil {
			return Backlog{}, fmt.Errorf("consumer info %s: %w", l.name, err)
		}
		out := &b.Normal
		if l.key.High {
			out = &b.High
		}
		out.Pending += info.NumPending
		out.AckPending += info.NumAckPending
		out.Redelivered += info.NumRedelivered
		out.Waiting += info.NumWaiting
	}
	return b, nil
}
