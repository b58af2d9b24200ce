package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Pull timing.
const (
	// stuckAfter ends a no-wait pull that the server has not answered: it
	// holds one open while the lane is at MaxAckPending. Draining the inbox
	// withdraws it without losing anything it sent.
	stuckAfter = 250 * time.Millisecond
	// pollSlice caps one long-poll request; a longer wait is several slices,
	// so a request lost to a server restart costs at most one slice.
	pollSlice = 5 * time.Second
	// pollSlack is how long past its expiry a long-poll request may go
	// unanswered before it is presumed lost.
	pollSlack = 2 * time.Second
)

// errNotConnected fails a Fetch while the connection is down (reconnecting).
var errNotConnected = errors.New("not connected to NATS")

// pullRequest is the body of a JetStream pull request
// ($JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>).
type pullRequest struct {
	Batch   int           `json:"batch"`
	Expires time.Duration `json:"expires,omitempty"`
	NoWait  bool          `json:"no_wait,omitempty"`
}

// lane is one queue's durable pull consumer.
type lane struct {
	name    string // durable name
	subject string // the queue's subject, its consumer's filter
	key     Key    // what the subject says
	stray   bool   // a subject of no queue shape: invalid jobs
	// onDemand: made since the start and counted toward maxOnDemand
	// (Consumer.laneFor), given back when forgotten.
	onDemand bool
	next     string             // pull request subject
	cons     jetstream.Consumer // for info
}

// pullWant is a pull of up to n messages from lane.
type pullWant struct {
	lane *lane
	n    int
}

// apiPrefix is the JetStream API prefix js uses ($JS.API. by default,
// $JS.<domain>.API. for a domain).
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		if o.APIPrefix[len(o.APIPrefix)-1] != '.' {
			return o.APIPrefix + "."
		}
		return o.APIPrefix
	default:
		return jetstream.DefaultAPIPrefix
	}
}

// request sends a pull request for l answered on inbox.
func (c *Consumer) request(l *lane, inbox string, req pullRequest) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if err := c.nc.PublishRequest(l.next, inbox, body); err != nil {
		return fmt.Errorf("pull request to %s: %w", l.name, err)
	}
	return nil
}

// status classifies a message received on a pull inbox: a stored message
// (ok false), or a status that ends the request (end true, with an error
// for a status that is a problem rather than "nothing (more) now").
func status(m *nats.Msg) (isStatus, end bool, err error) {
	code := m.Header.Get("Status")
	if m.Reply != "" || code == "" || len(m.Data) > 0 {
		return false, false, nil
	}
	switch code {
	case "100": // idle heartbeat or flow control
		return true, false, nil
	case "404", "408": // no messages; request expired or pending elsewhere
		return true, true, nil
	case "409": // e.g. consumer deleted, leadership change, max waiting
		return true, true, fmt.Errorf("server: %s %s", code, m.Header.Get("Description"))
	case "503":
		return true, true, fmt.Errorf("%w (is the stream or consumer missing?)", nats.ErrNoResponders)
	default:
		return true, true, fmt.Errorf("server: status %s %s", code, m.Header.Get("Description"))
	}
}

// subscribe opens a pull inbox delivering into ch.
func (c *Consumer) subscribe(ch chan *nats.Msg) (*nats.Subscription, error) {
	sub, err := c.nc.ChanSubscribe(c.nc.NewInbox(), ch)
	if err != nil {
		return nil, fmt.Errorf("subscribe pull inbox: %w", err)
	}
	return sub, nil
}

// drain withdraws the pull requests answered on subs: the server drops a
// waiting request once its inbox has no interest, and draining (rather than
// unsubscribing) receives whatever it sent before that. It returns the
// stored messages received, each with the subscription it came on.
func drain(ch chan *nats.Msg, subs ...*nats.Subscription) []*nats.Msg {
	closed := make([]chan struct{}, len(subs))
	for i, s := range subs {
		done := make(chan struct{})
		var once sync.Once
		closed[i] = done
		// Called by the client (under its locks) once the subscription is
		// removed: after the drain's flush, or by an unsubscribe.
		s.SetClosedHandler(func(string) { once.Do(func() { close(done) }) })
		if err := s.Drain(); err != nil {
			_ = s.Unsubscribe() // connection closed: nothing more will come
			once.Do(func() { close(done) })
		}
	}
	timeout := time.NewTimer(drainTimeout)
	defer timeout.Stop()
wait:
	for _, done := range closed {
		select {
		case <-done:
		case <-timeout.C:
			// The connection is failing: whatever is not in yet comes back
			// when its ack wait ends.
			for _, s := range subs {
				_ = s.Unsubscribe()
			}
			break wait
		}
	}
	var msgs []*nats.Msg
	for {
		select {
		case m := <-ch:
			if isStatus, _, _ := status(m); !isStatus {
				msgs = append(msgs, m)
			}
		default:
			return msgs
		}
	}
}

// fetchNow pulls up to w.n messages from each wanted lane that it can
// deliver now, all requests sent at once (one round trip however many
// lanes): a no-wait request per lane, answered at once with the messages
// available and a 404 or 408. If the server holds a request instead (the
// lane is at MaxAckPending), it is withdrawn after stuckAfter. It returns
// each lane's messages in wants' order; messages received before an error
// are returned with it (the first lane's error first); if ctx ends they are
// handed back and only the error returned. A lane whose consumer is gone
// (deleted after its inactive threshold) is forgotten, to be created again.
// A lane wanted twice is asked once, for the sum; its messages come in its
// first entry.
//
// The requests are answered on a pull inbox (takeInbox), each on a subject
// of its own. An inbox is kept for the next fetch only when every request
// on it ended the ordinary way (all it asked for, or a 404 or 408) and
// nothing else came on it; one withdrawn, or that saw an error status (a
// 409 at a leader change can come before the old leader's deliveries) or a
// stray, is drained and dropped.
func (c *Consumer) fetchNow(ctx context.Context, wants []pullWant) ([][]*nats.Msg, error) {
	wants, first := mergeWants(wants)
	total := 0
	for _, w := range wants {
		total += w.n
	}
	in, err := c.takeInbox(total)
	if err != nil {
		return nil, err
	}
	got, err := c.pullOn(ctx, in, wants)
	if got == nil || first == nil {
		return got, err
	}
	out := make([][]*nats.Msg, len(first))
	for i, j := range first {
		if j >= 0 {
			out[i] = got[j]
		}
	}
	return out, err
}

// mergeWants asks each lane once: the wants with a lane's repeats added to
// its first, and for each original entry the index of its merged want (-1
// for a repeat). first is nil when no lane repeats.
func mergeWants(wants []pullWant) (merged []pullWant, first []int) {
	at := func(ws []pullWant, l *lane) int {
		for j, w := range ws {
			if w.lane == l {
				return j
			}
		}
		return -1
	}
	repeats := false
	for i, w := range wants {
		if at(wants[:i], w.lane) >= 0 {
			repeats = true
		}
	}
	if !repeats {
		return wants, nil
	}
	first = make([]int, len(wants))
	for i, w := range wants {
		if j := at(merged, w.lane); j >= 0 {
			merged[j].n += w.n
			first[i] = -1
			continue
		}
		first[i] = len(merged)
		merged = append(merged, w)
	}
	return merged, first
}

// pullOn is fetchNow's requests, each lane once, on in.
func (c *Consumer) pullOn(ctx context.Context, in *pullInbox, wants []pullWant) ([][]*nats.Msg, error) {
	keep := true // every request ends the ordinary way, nothing else comes
	replies := make([]string, len(wants))
	for i, w := range wants {
		replies[i] = in.next()
		if err := c.request(w.lane, replies[i], pullRequest{Batch: w.n, NoWait: true}); err != nil {
			// The lanes asked before may be delivering already: take in
			// what they sent and hand it back, rather than leave it to its
			// ack wait.
			nakAll(c.nc, in.withdraw())
			return nil, err
		}
	}
	got := make([][]*nats.Msg, len(wants))
	errs := make([]error, len(wants))
	ended := make([]bool, len(wants))
	// A stored message comes with its own subject: its ack subject names
	// the consumer, the lane, that sent it (one request per lane). A
	// status comes on the subject of the request it ends.
	laneOf := func(m *nats.Msg) int {
		if m.Reply != "" {
			stream, consumer, ok := ackConsumer(m.Reply)
			for i, w := range wants {
				if ok && consumer == w.lane.name && stream == c.cfg.Stream {
					return i
				}
			}
			return -1
		}
		for i, r := range replies {
			if m.Subject == r {
				return i
			}
		}
		return -1
	}
	stuck := time.NewTimer(stuckAfter)
	defer stuck.Stop()
	for open := len(wants); open > 0; {
		select {
		case m := <-in.ch:
			i := laneOf(m)
			if i < 0 || ended[i] {
				keep = false
				c.stray(m)
				continue
			}
			isStatus, end, serr := status(m)
			if !isStatus {
				got[i] = append(got[i], m)
				if len(got[i]) < wants[i].n {
					continue
				}
			} else if !end {
				continue
			}
			// The request is complete: nothing more can come.
			ended[i], open = true, open-1
			if isStatus && m.Header.Get("Status") != "404" && m.Header.Get("Status") != "408" {
				keep = false
			}
			if serr != nil {
				errs[i] = fmt.Errorf("pull from %s: %w", wants[i].lane.name, serr)
				if gone(m) {
					c.forget(wants[i].lane)
				}
			}
		case <-stuck.C:
			for _, m := range in.withdraw() {
				if i := laneOf(m); i >= 0 && !ended[i] {
					got[i] = append(got[i], m)
				} else {
					c.stray(m)
				}
			}
			return got, errors.Join(errs...)
		case <-ctx.Done():
			var all []*nats.Msg
			for _, g := range got {
				all = append(all, g...)
			}
			nakAll(c.nc, append(all, in.withdraw()...))
			return nil, ctx.Err()
		}
	}
	if keep {
		c.putInbox(in)
	} else {
		for _, m := range in.withdraw() {
			c.stray(m)
		}
	}
	return got, errors.Join(errs...)
}

// A pull inbox answers the no-wait requests of one fetch at a time: one
// subscription to a wildcard inbox, each request answered on a subject of
// its own under it. A fetch used to subscribe an inbox of its own for each
// lane it pulled from and unsubscribe it after, a SUB and an UNSUB (a
// subscription made and removed on the server) for every few jobs; an
// inbox whose requests have all ended has nothing more coming and is kept
// for the next fetch (a Consumer keeps up to maxIdleInboxes, one per fetch
// running at once). A message on it that answers none of the current
// fetch's requests is a stray (stray).
type pullInbox struct {
	sub    *nats.Subscription
	ch     chan *nats.Msg
	prefix string // "<inbox>.", the requests' subjects are prefix + a counter
	seq    uint64
	pooled bool // taken from or made for the pool: its channel holds pullInboxRoom
}

const (
	// pullInboxRoom is how many messages a kept inbox's channel holds (a
	// fetch of more gets an inbox of its own, dropped after). A full
	// channel would drop what the server sends (nats.go's slow consumer):
	// a fetch never asks for more than its inbox holds.
	pullInboxRoom = 1024
	// pullInboxSlack is the room an inbox has beyond what its fetch asks
	// for, for the status messages that end requests.
	pullInboxSlack = 64
	// maxIdleInboxes bounds the inboxes a Consumer keeps between fetches.
	maxIdleInboxes = 4
)

// next is the subject of the inbox's next request.
func (in *pullInbox) next() string {
	in.seq++
	return in.prefix + strconv.FormatUint(in.seq, 10)
}

// withdraw ends every request still open on the inbox: draining it (rather
// than unsubscribing) receives whatever the server sent before it dropped
// them, which it returns. The inbox is not used again.
func (in *pullInbox) withdraw() []*nats.Msg {
	return drain(in.ch, in.sub)
}

// takeInbox returns an inbox for a fetch of up to n messages: one kept
// from an earlier fetch, or a new one.
func (c *Consumer) takeInbox(n int) (*pullInbox, error) {
	pooled := n <= pullInboxRoom
	if pooled {
		c.inboxMu.Lock()
		if k := len(c.inboxes); k > 0 {
			in := c.inboxes[k-1]
			c.inboxes = c.inboxes[:k-1]
			c.inboxMu.Unlock()
			// Nothing is expected on a kept inbox; anything there is
			// none of this fetch's (and this fetch is its only reader).
			for len(in.ch) > 0 {
				c.stray(<-in.ch)
			}
			return in, nil
		}
		c.inboxMu.Unlock()
		n = pullInboxRoom
	}
	in := &pullInbox{ch: make(chan *nats.Msg, n+pullInboxSlack), prefix: c.nc.NewInbox() + ".", pooled: pooled}
	sub, err := c.nc.ChanSubscribe(in.prefix+"*", in.ch)
	if err != nil {
		return nil, fmt.Errorf("subscribe pull inbox: %w", err)
	}
	in.sub = sub
	return in, nil
}

// putInbox keeps an inbox whose requests have all ended for a later
// fetch, or unsubscribes it.
func (c *Consumer) putInbox(in *pullInbox) {
	if in.pooled && in.sub.IsValid() {
		c.inboxMu.Lock()
		if !c.closed && len(c.inboxes) < maxIdleInboxes {
			c.inboxes = append(c.inboxes, in)
			c.inboxMu.Unlock()
			return
		}
		c.inboxMu.Unlock()
	}
	_ = in.sub.Unsubscribe()
}

// Close unsubscribes the pull inboxes the Consumer keeps between fetches
// (at most maxIdleInboxes), and keeps none after: a Consumer that is done
// with, on a connection that lives on, leaves no subscription behind. The
// durable consumers on the server are not touched, and a fetch still in
// progress, or one after, works (on an inbox of its own). Safe to call more
// than once.
func (c *Consumer) Close() {
	c.inboxMu.Lock()
	kept := c.inboxes
	c.inboxes, c.closed = nil, true
	c.inboxMu.Unlock()
	for _, in := range kept {
		for _, m := range in.withdraw() {
			c.stray(m)
		}
	}
}

// stray handles a message on a pull inbox that answers none of the
// current fetch's requests (a request that ended, or one of an earlier
// fetch): a stored message of the job stream goes back to it at once
// rather than wait out its ack wait; anything else is dropped, a status or
// a message some client published to the inbox (it names no job, and its
// reply subject is not ours to answer).
func (c *Consumer) stray(m *nats.Msg) {
	if stream, _, ok := ackConsumer(m.Reply); ok && stream == c.cfg.Stream {
		nakAll(c.nc, []*nats.Msg{m})
	}
}

// longPoll asks each of lanes for one message, held by the server up to
// wait (in slices of pollSlice), and returns as soon as one arrives; the
// other requests are withdrawn by draining. Priority-lane messages come
// first; more than max are handed back at once.
func (c *Consumer) longPoll(ctx context.Context, max int, wait time.Duration, lanes []*lane) ([]*Delivery, error) {
	ch := make(chan *nats.Msg, len(lanes)+8)
	subs := make([]*nats.Subscription, 0, len(lanes))
	for range lanes {
		sub, err := c.subscribe(ch)
		if err != nil {
			for _, s := range subs {
				_ = s.Unsubscribe()
			}
			return nil, err
		}
		subs = append(subs, sub)
	}
	deadline := time.Now().Add(wait)
	var (
		got     []*nats.Msg
		pollErr error
	)
	for len(got) == 0 && pollErr == nil {
		slice := min(time.Until(deadline), pollSlice)
		if slice <= 0 {
			break
		}
		req := pullRequest{Batch: 1, Expires: slice}
		for i, l := range lanes {
			if err := c.request(l, subs[i].Subject, req); err != nil {
				pollErr = err
				break
			}
		}
		if pollErr != nil {
			break
		}
		var lost bool
		got, pollErr, lost = c.awaitSlice(ctx, ch, len(lanes), slice+pollSlack)
		if lost || ctx.Err() != nil {
			break
		}
	}
	got = append(got, drain(ch, subs...)...)

	// Priority lanes first.
	high := map[*nats.Subscription]bool{}
	for i, l := range lanes {
		high[subs[i]] = l.key.High
	}
	msgs := make([]*nats.Msg, 0, len(got))
	for _, m := range got {
		if high[m.Sub] {
			msgs = append(msgs, m)
		}
	}
	for _, m := range got {
		if !high[m.Sub] {
			msgs = append(msgs, m)
		}
	}
	if err := ctx.Err(); err != nil {
		nakAll(c.nc, msgs)
		return nil, fmt.Errorf("fetch: %w", err)
	}
	if len(msgs) > max {
		nakAll(c.nc, msgs[max:]) // back to the stream at once, not left to age
		msgs = msgs[:max]
	}
	if len(msgs) == 0 && pollErr != nil {
		return nil, fmt.Errorf("poll queues: %w", pollErr)
	}
	return c.deliveries(msgs), nil
}

// awaitSlice waits for the n requests of one poll slice: until a message
// arrives, all end, ctx ends, or they are presumed lost after guard.
func (c *Consumer) awaitSlice(ctx context.Context, ch chan *nats.Msg, n int, guard time.Duration) (got []*nats.Msg, err error, lost bool) {
	timer := time.NewTimer(guard)
	defer timer.Stop()
	for open := n; open > 0; {
		select {
		case m := <-ch:
			isStatus, end, serr := status(m)
			if !isStatus {
				return []*nats.Msg{m}, nil, false
			}
			if end {
				open--
				if serr != nil && err == nil {
					err = serr
				}
			}
		case <-timer.C:
			return nil, err, true
		case <-ctx.Done():
			return nil, err, false
		}
	}
	return nil, err, false
}

// gone reports whether a status message says the consumer no longer exists.
func gone(m *nats.Msg) bool {
	code := m.Header.Get("Status")
	desc := strings.ToLower(m.Header.Get("Description"))
	return code == "503" || (code == "409" && strings.Contains(desc, "deleted"))
}

func (c *Consumer) deliveries(msgs []*nats.Msg) []*Delivery {
	out := make([]*Delivery, len(msgs))
	for i, m := range msgs {
		out[i] = newPulledDelivery(m, c.nc)
	}
	return out
}

// nakAll hands messages back for immediate redelivery. A failed nak only
// delays a job until its ack wait ends.
func nakAll(nc *nats.Conn, msgs []*nats.Msg) {
	for _, m := range msgs {
		_ = (&pulledMsg{m: m, nc: nc}).Nak()
	}
}
