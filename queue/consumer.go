package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
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

// ConsumerConfig names the two durable lane consumers and bounds them. The
// zero value uses the defaults.
type ConsumerConfig struct {
	// Name is the durable name prefix: the lanes are <Name>-high (filter
	// notify.jobs.*.high) and <Name>-normal (filter notify.jobs.*). Every
	// process of a fleet must use the same name. Default "notifier".
	Name string
	// MaxAckPending bounds the deliveries of each lane that are out with a
	// worker and not yet acknowledged, fleet-wide; the server stops
	// delivering past it. Set it above the fleet's total worker count.
	// Default 1000.
	MaxAckPending int
}

// WithDefaults fills the zero fields.
func (cc ConsumerConfig) WithDefaults() ConsumerConfig {
	if cc.Name == "" {
		cc.Name = DefaultConsumerName
	}
	if cc.MaxAckPending == 0 {
		cc.MaxAckPending = DefaultMaxAckPending
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
	return errors.Join(errs...)
}

// laneConfig is the durable pull consumer of one lane:
//
//   - explicit acks, with AckWait from Config: a job not acknowledged (nor
//     kept alive with InProgress) within it is redelivered, which is how a
//     crashed worker's jobs come back;
//   - MaxDeliver -1: deferrals (InProgress) and retries (NakWithDelay) must
//     never make the server drop a job; provider failures are counted by the
//     dispatcher's ledger instead;
//   - no BackOff: it only applies to ack-wait expiries (not to naks), and
//     would replace AckWait as the redelivery timer; retries are timed by
//     the dispatcher with NakWithDelay;
//   - MaxAckPending bounded, from ConsumerConfig.
func laneConfig(name, filter, description string, ackWait time.Duration, maxAckPending int) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   description,
		FilterSubject: filter,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: maxAckPending,
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
	}
}

// ensureConsumer returns the durable consumer lc on stream, creating it, or
// updating it when its settings drifted. A consumer already as wanted is
// only read: processes starting together do not all rewrite it (which also
// keeps clear of a race in nats-server 2.15's consumer update).
func ensureConsumer(ctx context.Context, js jetstream.JetStream, stream string, lc jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if cons, err := js.Consumer(ctx, stream, lc.Durable); err == nil {
		if c := cons.CachedInfo().Config; c.FilterSubject == lc.FilterSubject && c.AckPolicy == lc.AckPolicy &&
			c.AckWait == lc.AckWait && c.MaxDeliver == lc.MaxDeliver && c.MaxAckPending == lc.MaxAckPending &&
			c.DeliverPolicy == lc.DeliverPolicy && c.Description == lc.Description {
			return cons, nil
		}
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, lc)
	if err != nil {
		return nil, fmt.Errorf("create or update consumer %s on stream %s: %w", lc.Durable, stream, err)
	}
	return cons, nil
}

// Consumer pulls jobs from the two lanes of the job stream, the priority
// lane first. It is safe for concurrent use; each Fetch pulls at most its
// max. It holds no resources between calls: stop using it and close the
// connection.
type Consumer struct {
	nc           *nats.Conn
	high, normal *lane
	highIdle     atomic.Bool // the priority lane had nothing at the last look
}

// NewConsumer creates or updates the two durable lane consumers on the job
// stream (which EnsureStreams must have created) and returns a Consumer
// pulling from them. All processes share the durables, so each job is out
// with one worker at a time. Safe to call from many processes at once.
func NewConsumer(ctx context.Context, js jetstream.JetStream, cfg Config, cc ConsumerConfig) (*Consumer, error) {
	cfg = cfg.WithDefaults()
	cc = cc.WithDefaults()
	if err := cc.Validate(); err != nil {
		return nil, fmt.Errorf("consumer configuration: %w", err)
	}
	lanes := []jetstream.ConsumerConfig{
		laneConfig(cc.Name+"-high", highFilter, "notifier priority lane", cfg.AckWait, cc.MaxAckPending),
		laneConfig(cc.Name+"-normal", normalFilter, "notifier normal lane", cfg.AckWait, cc.MaxAckPending),
	}
	prefix := apiPrefix(js)
	var ls [2]*lane
	for i, lc := range lanes {
		cons, err := ensureConsumer(ctx, js, cfg.Stream, lc)
		if err != nil {
			return nil, err
		}
		ls[i] = &lane{name: lc.Durable, next: prefix + "CONSUMER.MSG.NEXT." + cfg.Stream + "." + lc.Durable, cons: cons}
	}
	return &Consumer{nc: js.Conn(), high: ls[0], normal: ls[1]}, nil
}

// Fetch returns up to max deliveries as soon as at least one is available,
// always taking the priority lane first: it never returns a normal-lane
// delivery while a high-lane message is available, and high-lane deliveries
// come first in the slice.
//
// It first asks the lanes for what they can deliver now: both at once
// while the priority lane had nothing at the last look (normal-lane
// messages beyond max are then handed back at once), else the priority lane
// first and the normal lane for the rest. When both have nothing and wait > 0 it long-polls: one pull
// request of one message on each lane, held by the server (no busy loop)
// for up to wait. The first message to arrive ends the poll; the other
// request is withdrawn by draining its inbox, so a message the server sent
// meanwhile is still received, never left to its ack wait. If both lanes
// delivered and max is 1, the normal one is handed back at once with a Nak.
// So Fetch never holds more than max messages: the caller passes its number
// of free workers, and no message ages in a client-side buffer (the known
// trap of large pull buffers).
//
// A lane at MaxAckPending delivers nothing; Fetch waits up to 250ms for it
// before moving on. A poll that ends with no message returns an empty slice
// and no error. If ctx ends, anything received is handed back with a Nak
// and the context's error returned. max must be at least 1.
func (c *Consumer) Fetch(ctx context.Context, max int, wait time.Duration) ([]*Delivery, error) {
	if max < 1 {
		return nil, fmt.Errorf("fetch: max must be at least 1, got %d", max)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	if !c.nc.IsConnected() {
		return nil, fmt.Errorf("fetch: %w (%s)", errNotConnected, c.nc.Status())
	}
	msgs, err := c.fetchLanes(ctx, max)
	if err != nil {
		return nil, err
	}
	if len(msgs) > 0 || wait <= 0 {
		return c.deliveries(msgs), nil
	}
	return c.longPoll(ctx, max, wait)
}

// fetchLanes takes up to max messages the lanes can deliver now, the
// priority lane's first. When the priority lane had nothing at the last
// look (the usual case), both lanes are asked at once, one round trip; the
// normal-lane messages that the priority lane's leave no room for are handed
// back at once with a Nak. Otherwise the priority lane is asked first and
// the normal lane for the rest, so that a busy priority lane costs no
// handed-back messages.
func (c *Consumer) fetchLanes(ctx context.Context, max int) ([]*nats.Msg, error) {
	if c.highIdle.Load() {
		got, err := c.fetchNow(ctx, max, c.high, c.normal)
		if err != nil && ctx.Err() != nil {
			for _, g := range got {
				nakAll(c.nc, g) // a lane's error and a stop at once: hand back what came
			}
			return nil, fmt.Errorf("fetch: %w", ctx.Err())
		}
		if got == nil {
			c.highIdle.Store(false)
			return nil, fmt.Errorf("fetch lanes: %w", err)
		}
		high, normal := got[0], got[1]
		// A lane that failed is asked alone next time, where its error
		// shows as it did before.
		c.highIdle.Store(len(high) == 0 && err == nil)
		if len(high)+len(normal) == 0 && err != nil {
			return nil, fmt.Errorf("fetch lanes: %w", err)
		}
		if room := max - len(high); len(normal) > room {
			nakAll(c.nc, normal[room:])
			normal = normal[:room]
		}
		return append(high, normal...), nil
	}
	got, err := c.fetchNow(ctx, max, c.high)
	if err != nil && ctx.Err() != nil {
		for _, g := range got {
			nakAll(c.nc, g)
		}
		return nil, fmt.Errorf("fetch: %w", ctx.Err())
	}
	var msgs []*nats.Msg
	if got != nil {
		msgs = got[0]
	}
	c.highIdle.Store(len(msgs) == 0 && err == nil)
	if err != nil && len(msgs) == 0 {
		return nil, fmt.Errorf("fetch high lane: %w", err)
	}
	if len(msgs) < max {
		got, err := c.fetchNow(ctx, max-len(msgs), c.normal)
		switch {
		case err != nil && ctx.Err() != nil:
			nakAll(c.nc, msgs)
			if got != nil {
				nakAll(c.nc, got[0])
			}
			return nil, fmt.Errorf("fetch: %w", err)
		case err != nil && len(msgs) == 0 && (got == nil || len(got[0]) == 0):
			return nil, fmt.Errorf("fetch normal lane: %w", err)
		}
		if got != nil {
			msgs = append(msgs, got[0]...)
		}
	}
	return msgs, nil
}

// Lane is the state of one lane consumer.
type Lane struct {
	Pending     uint64 // stored, not yet delivered
	AckPending  int    // delivered, not yet acknowledged
	Redelivered int    // delivered more than once and not yet acknowledged
	Waiting     int    // pull requests waiting at the server
}

// Backlog is the state of both lanes.
type Backlog struct {
	High, Normal Lane
}

// Backlog asks the server for the state of both lanes.
func (c *Consumer) Backlog(ctx context.Context) (Backlog, error) {
	var b Backlog
	for _, l := range []struct {
		lane *lane
		out  *Lane
	}{{c.high, &b.High}, {c.normal, &b.Normal}} {
		info, err := l.lane.cons.Info(ctx)
		if err != nil {
			return Backlog{}, fmt.Errorf("consumer info %s: %w", l.lane.name, err)
		}
		*l.out = Lane{Pending: info.NumPending, AckPending: info.NumAckPending, Redelivered: info.NumRedelivered, Waiting: info.NumWaiting}
	}
	return b, nil
}
