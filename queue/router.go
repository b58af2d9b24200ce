package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/internal/sleep"
)

// defaultTenantPair names the default tenant when its jobs are placed on
// fair lanes (no tenant name holds a NUL).
const defaultTenantPair = "\x00default"

// Router timing.
const (
	// routeBatch is the most jobs one round of the router moves.
	routeBatch = 256
	// routeWait is the long-poll of an idle router.
	routeWait = time.Second
	// routeRetry is when a job the router could not move comes back.
	routeRetry = time.Second
)

// Router moves the jobs published on tenants' own subjects
// (notify.jobs.<channel>.t.<tenant>[.<lane>]: the raw NATS publishers'
// way, which the gateway, `notifier publish` and the Go client do not
// need) to their tenant's fair lane, as a Publisher would have placed them:
// the same bytes and headers, the Notifier-Tenant header added. Each is
// acknowledged once its copy is stored; the copy's Nats-Msg-Id derives
// from the original's stream sequence and store time, so a job moved again
// after a crash between the two (within the duplicate window) is stored
// once. A tenant token that names no tenant, or a channel that is none,
// is dead-lettered as invalid. It is one pull consumer shared by the
// fleet, so each job is moved by one process; it keeps no job longer than
// a round (at most 256 jobs, one publish round trip).
type Router struct {
	c   *Consumer
	pub *Publisher
}

// Router returns the router of c's fleet. It places the jobs it moves
// with c's view of the fair lanes (Lanes) and publishes them on c's
// connection.
func (c *Consumer) Router() *Router {
	return &Router{c: c, pub: NewPublisher(c.js, WithLanes(c.place))}
}

// Run moves jobs until ctx ends, telling moved (when set) how many each
// round moved. A failed round is retried with backoff; its error is
// handed to report (when set) and Run goes on: it returns only at ctx's
// end, nil.
func (r *Router) Run(ctx context.Context, moved func(n int), report func(error)) error {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		n, err := r.Round(ctx, routeWait)
		if err != nil && ctx.Err() == nil {
			if report != nil {
				report(err)
			}
			if sleep.For(ctx, backoff) != nil {
				break
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if n > 0 && moved != nil {
			moved(n)
		}
	}
	return nil
}

// Round moves the jobs waiting now (at most 256), or waits up to wait for
// the first one to come and moves it with those that came with it. It
// returns how many it moved.
func (r *Router) Round(ctx context.Context, wait time.Duration) (int, error) {
	if !r.c.nc.IsConnected() {
		return 0, fmt.Errorf("route: %w (%s)", errNotConnected, r.c.nc.Status())
	}
	got, err := r.c.fetchNow(ctx, []pullWant{{lane: r.c.route, n: routeBatch}})
	var msgs []*nats.Msg
	if len(got) > 0 {
		msgs = got[0]
	}
	if err != nil && len(msgs) == 0 {
		return 0, fmt.Errorf("route: %w", err)
	}
	if len(msgs) == 0 && wait > 0 {
		ds, err := r.c.longPoll(ctx, 1, wait, []*lane{r.c.route})
		if err != nil {
			return 0, fmt.Errorf("route: %w", err)
		}
		for _, d := range ds {
			msgs = append(msgs, d.msg.(*pulledMsg).m)
		}
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	keys := make([]Key, 0, len(msgs))
	var valid []*nats.Msg
	for _, m := range msgs {
		k, ok := ParseJobSubject(m.Subject)
		if !ok || k.Tenant == "" || !IsChannel(k.Channel) { // a tenant token that names no tenant, a channel that is none
			r.deadLetter(ctx, &pulledMsg{m: m, nc: r.c.nc}, "subject "+m.Subject+" names no tenant (1 to 64 characters of A-Z a-z 0-9 . _ -) of a channel ("+strings.Join(Channels, ", ")+")")
			continue
		}
		valid, keys = append(valid, m), append(keys, k)
	}
	return r.move(ctx, valid, keys)
}

// Move moves deliveries of the default tenant's queues whose job names a
// tenant in its JSON (Delivery.Tenant, a valid tenant name) to that
// tenant's fair lane, as Round moves the jobs of tenants' own subjects, so
// that they are served in their tenant's share; from the queues in all it
// moves the default tenant's jobs too, to the default tenant's own pair of
// fair lanes (a queue that mixes tenants is emptied at the router's pace,
// not the default tenant's). It returns those it did not take, to be
// handled where they are. A delivery it took is acknowledged once its copy
// is stored, or handed back to come again.
func (r *Router) Move(ctx context.Context, dls []*Delivery, all map[string]bool) (rest []*Delivery, moved int, err error) {
	var msgs []*nats.Msg
	var keys []Key
	for _, d := range dls {
		pm, ok := d.msg.(*pulledMsg)
		named := d.Tenant != "" && ValidTenant(d.Tenant)
		if d.Fair || !ok || d.badTenant != "" || !named && !all[d.Subject] { // a name that is none: invalid where it is
			rest = append(rest, d)
			continue
		}
		k, parsed := ParseJobSubject(d.Subject)
		if !parsed || k.Tenant != "" || !IsChannel(k.Channel) || d.Tenant != "" && !named {
			rest = append(rest, d)
			continue
		}
		k.Tenant = d.Tenant
		msgs, keys = append(msgs, pm.m), append(keys, k)
	}
	if len(msgs) == 0 {
		return rest, 0, nil
	}
	moved, err = r.move(ctx, msgs, keys)
	return rest, moved, err
}

// move publishes each message's copy on the fair lane of its key's tenant
// (a valid tenant name, or "" the default tenant's), channel (one of
// Channels) and lane, all at once (Publisher.PublishMsgs), and
// acknowledges those stored; the others are handed back to come again.
func (r *Router) move(ctx context.Context, msgs []*nats.Msg, keys []Key) (int, error) {
	out := make([]OutMsg, 0, len(msgs))
	from := make([]*pulledMsg, 0, len(msgs))
	for i, m := range msgs {
		pm := &pulledMsg{m: m, nc: r.c.nc}
		k := keys[i]
		place := k
		if k.Tenant == "" { // the default tenant's job, from a queue that mixes tenants: its own pair
			place.Tenant = defaultTenantPair
		}
		h := nats.Header{}
		for name, v := range m.Header {
			if !strings.HasPrefix(name, "Nats-") { // the publish's own: its id, its expectations
				h[name] = v
			}
		}
		if k.Tenant != "" {
			h.Set(HeaderTenant, k.Tenant)
		}
		out = append(out, OutMsg{Subject: r.c.place.Place(ctx, place).Subject(), Data: m.Data, MsgID: routeID(pm), Header: h})
		from = append(from, pm)
	}
	if len(out) == 0 {
		return 0, nil
	}
	moved := 0
	var firstErr error
	for i, res := range r.pub.PublishMsgs(ctx, out) {
		pm := from[i]
		switch {
		case res.Err == nil: // stored, or stored before (a move repeated after a crash)
			if err := pm.Ack(); err != nil {
				firstErr = cmp.Or(firstErr, fmt.Errorf("route %s: ack: %w", pm.m.Subject, err))
			}
			moved++
		case ctx.Err() != nil:
			_ = pm.Nak()
		case errors.Is(res.Err, jetstream.ErrStreamMessageExceedsMaximum):
			// Stored as published, it is past the stream's bound once the
			// move's headers are added: refused at every try, it would come
			// back every second for ever, and fail every round it is in
			// (the router backing off for all). Larger than any job
			// (SPEC §2), it is dead-lettered as invalid where it is.
			size := len(pm.m.Data)
			for name, vs := range pm.m.Header {
				for _, v := range vs {
					size += len(name) + len(v) + 4 // "name: value\r\n"
				}
			}
			r.deadLetter(ctx, pm, fmt.Sprintf("message is %d bytes (%d with its headers), too large for the job stream once moved to its tenant's fair lane: a job is at most %d bytes",
				len(pm.m.Data), size, MaxJobBytes))
		default:
			firstErr = cmp.Or(firstErr, fmt.Errorf("route %s to %s: %w", pm.m.Subject, out[i].Subject, res.Err))
			_ = pm.NakWithDelay(routeRetry)
		}
	}
	return moved, firstErr
}

// deadLetter ends a message the router cannot move (its subject names no
// valid tenant or channel, or it is too large to copy): dead-lettered as
// invalid with detail, then acknowledged (left for its ack wait when the
// dead letter could not be stored).
func (r *Router) deadLetter(ctx context.Context, pm *pulledMsg, detail string) {
	d := newDelivery(pm)
	if err := r.pub.DeadLetter(ctx, d, Dead, "invalid", detail); err != nil {
		return
	}
	_ = d.AckNoWait()
}

// routeID is the Nats-Msg-Id of a moved job's copy: the original's
// stream, sequence and store time.
func routeID(pm *pulledMsg) string {
	md, err := pm.Metadata()
	if err != nil {
		return ""
	}
	return "route:" + md.Stream + ":" + strconv.FormatUint(md.Sequence.Stream, 10) + ":" + strconv.FormatInt(md.Timestamp.UnixNano(), 10)
}
