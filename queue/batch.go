package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultAckTimeout is how long a Batch waits for one acknowledgement.
const DefaultAckTimeout = 30 * time.Second

// errAckTimeout marks a publish whose acknowledgement never came: it may or
// may not be stored, and publishing it again with the same Nats-Msg-Id is
// safe within the duplicate window.
var errAckTimeout = errors.New("no acknowledgement in time")

// BatchResult counts the acknowledgements of a Batch so far.
type BatchResult struct {
	Stored     int   // stored as new messages
	Duplicates int   // dropped by the stream as duplicates of an earlier Nats-Msg-Id
	Failed     int   // refused by the server, lost to a disconnection, or unacknowledged in time
	Pending    int   // sent, outcome not known yet
	Err        error // the first failure, if any
}

// Batch publishes many messages asynchronously (for loads of 100k jobs)
// with at most maxInFlight of them awaiting their acknowledgement: a
// publish beyond that blocks until an acknowledgement frees a slot. One
// goroutine collects the acknowledgements in order. A Batch is safe for
// concurrent use; it must be ended with Wait, which releases its goroutine.
type Batch struct {
	js         jetstream.JetStream
	pub        *Publisher
	ackTimeout time.Duration
	slots      chan struct{}   // a token per publish awaiting its ack
	acks       chan pendingAck // in publish order; capacity maxInFlight
	abandon    chan struct{}   // closed when Wait gives up
	done       chan struct{}   // closed when the collector returns
	giveUp     sync.Once

	mu     sync.Mutex
	closed bool
	res    BatchResult
}

type pendingAck struct {
	future   jetstream.PubAckFuture
	subject  string
	deadline time.Time
}

// NewBatch starts a batch with at most maxInFlight unacknowledged publishes
// (minimum 1) that counts a publish as failed when its acknowledgement has
// not come after ackTimeout (DefaultAckTimeout when 0).
func (p *Publisher) NewBatch(maxInFlight int, ackTimeout time.Duration) *Batch {
	maxInFlight = max(maxInFlight, 1)
	if ackTimeout <= 0 {
		ackTimeout = DefaultAckTimeout
	}
	b := &Batch{
		js:         p.js,
		pub:        p,
		ackTimeout: ackTimeout,
		slots:      make(chan struct{}, maxInFlight),
		acks:       make(chan pendingAck, maxInFlight),
		abandon:    make(chan struct{}),
		done:       make(chan struct{}),
	}
	go b.collect()
	return b
}

// Publish validates j and publishes it like Publisher.Publish without
// waiting for the acknowledgement. The error is only for what was not sent
// at all (an invalid job, ctx ended while waiting for a slot, the client
// refusing the message, the batch already waited); such a message is not
// counted in the result.
func (b *Batch) Publish(ctx context.Context, j *Job, high bool) error {
	k, data, err := j.marshalFor(high)
	if err != nil {
		return fmt.Errorf("publish job: %w", err)
	}
	return b.PublishTo(ctx, k, data, j.MsgID())
}

// PublishTo publishes data as a job of queue k (placed as Publisher.Place
// says: a tenant's on a fair lane, with its Notifier-Tenant header) with
// Nats-Msg-Id msgID, without waiting for the acknowledgement.
func (b *Batch) PublishTo(ctx context.Context, k Key, data []byte, msgID string) error {
	subject, header := b.pub.Place(ctx, k)
	return b.publish(ctx, &nats.Msg{Subject: subject, Data: data, Header: header}, msgID)
}

// PublishRaw publishes data on subject with Nats-Msg-Id msgID (none when
// empty) without waiting for the acknowledgement; see Publish for the error.
func (b *Batch) PublishRaw(ctx context.Context, subject string, data []byte, msgID string) error {
	return b.publish(ctx, &nats.Msg{Subject: subject, Data: data}, msgID)
}

func (b *Batch) publish(ctx context.Context, m *nats.Msg, msgID string) error {
	subject := m.Subject
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("publish %s: wait for a slot: %w", subject, ctx.Err())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		<-b.slots
		return fmt.Errorf("publish %s: batch already waited", subject)
	}
	f, err := b.js.PublishMsgAsync(m, msgIDOpt(msgID)...)
	if err != nil {
		<-b.slots
		return fmt.Errorf("publish %s: %w", subject, err)
	}
	b.res.Pending++
	b.acks <- pendingAck{future: f, subject: subject, deadline: time.Now().Add(b.ackTimeout)} // never blocks: a slot is held
	return nil
}

// Result is a snapshot of the counts so far, for progress reports.
func (b *Batch) Result() BatchResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.res
}

// Wait ends the batch (later publishes fail) and waits for every
// outstanding acknowledgement, or for ctx to end, which leaves the
// unresolved ones counted as Pending and returns ctx's error.
func (b *Batch) Wait(ctx context.Context) (BatchResult, error) {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.acks)
	}
	b.mu.Unlock()
	select {
	case <-b.done:
		return b.Result(), nil
	case <-ctx.Done():
		b.giveUp.Do(func() { close(b.abandon) })
		<-b.done
		return b.Result(), fmt.Errorf("wait for publish acknowledgements: %w", ctx.Err())
	}
}

// collect resolves acknowledgements in publish order.
func (b *Batch) collect() {
	defer close(b.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for pa := range b.acks {
		timer.Reset(time.Until(pa.deadline))
		var (
			ack *jetstream.PubAck
			err error
		)
		select {
		case ack = <-pa.future.Ok():
		case err = <-pa.future.Err():
		case <-timer.C:
			err = errAckTimeout
		case <-b.abandon:
			return
		}
		b.mu.Lock()
		b.res.Pending--
		switch {
		case err != nil:
			b.res.Failed++
			if b.res.Err == nil {
				b.res.Err = fmt.Errorf("publish %s: %w", pa.subject, err)
			}
		case ack.Duplicate:
			b.res.Duplicates++
		default:
			b.res.Stored++
		}
		b.mu.Unlock()
		<-b.slots
	}
}
