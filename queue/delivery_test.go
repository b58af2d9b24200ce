package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// fetchOne fetches exactly one delivery within wait.
func fetchOne(t *testing.T, c *queue.Consumer, wait time.Duration) *queue.Delivery {
	t.Helper()
	ds, err := c.Fetch(ctx(t), 1, wait)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Fetch: %d deliveries, %v; want 1", len(ds), err)
	}
	return ds[0]
}

// expectNone fails if c delivers anything within wait.
func expectNone(t *testing.T, c *queue.Consumer, wait time.Duration, why string) {
	t.Helper()
	ds, err := c.Fetch(ctx(t), 5, wait)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if len(ds) != 0 {
		t.Fatalf("%s: got a delivery of %s (delivered %d times)", why, ds[0].Subject, ds[0].NumDelivered)
	}
}

func TestInProgressKeepsADeliveryPastAckWait(t *testing.T) {
	t.Parallel()
	const ackWait = time.Second
	b := setup(t, ackWait)
	b.publish(t, false, job("sms", "held"))
	worker := b.consumer(t, queue.ConsumerConfig{})
	other := b.consumer(t, queue.ConsumerConfig{}) // another process

	d := fetchOne(t, worker, time.Second)
	// Keep it alive for 3× the ack wait while the other process polls.
	stop := make(chan struct{})
	beat := make(chan error, 1)
	go func() {
		tick := time.NewTicker(ackWait / 4)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				if err := d.InProgress(); err != nil {
					beat <- err
					return
				}
			case <-stop:
				beat <- nil
				return
			}
		}
	}()
	expectNone(t, other, 3*ackWait, "a delivery kept alive with InProgress was redelivered")
	close(stop)
	if err := <-beat; err != nil {
		t.Fatalf("InProgress: %v", err)
	}
	if err := d.Ack(ctx(t)); err != nil {
		t.Fatalf("Ack after holding: %v", err)
	}
	if err := d.Ack(ctx(t)); !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		t.Errorf("second Ack: %v, want ErrMsgAlreadyAckd", err)
	}
	if err := d.InProgress(); !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		t.Errorf("InProgress after Ack: %v, want ErrMsgAlreadyAckd", err)
	}
	if n := b.streamMsgs(t, "NOTIFY"); n != 0 {
		t.Fatalf("NOTIFY holds %d messages after the ack (work queue), want 0", n)
	}
}

func TestUnackedDeliveryComesBackAfterAckWait(t *testing.T) {
	t.Parallel()
	const ackWait = time.Second
	b := setup(t, ackWait)
	b.publish(t, true, job("push", "crashed"))
	crashed := b.consumer(t, queue.ConsumerConfig{})
	other := b.consumer(t, queue.ConsumerConfig{})
	first := fetchOne(t, crashed, time.Second) // and never acked
	start := time.Now()
	again := fetchOne(t, other, 10*ackWait)
	if waited := time.Since(start); waited < ackWait/2 {
		t.Errorf("redelivered after %s, before the ack wait of %s", waited, ackWait)
	}
	if again.StreamSeq != first.StreamSeq || again.NumDelivered != 2 || !again.High {
		t.Fatalf("redelivery: seq %d delivered %d high %v; want seq %d, 2nd delivery, high", again.StreamSeq, again.NumDelivered, again.High, first.StreamSeq)
	}
	if err := again.Ack(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestNakRedeliversAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 30*time.Second) // a lost message would wait 30s: the test would fail
	b.publish(t, false, job("email", "naked"))
	c := b.consumer(t, queue.ConsumerConfig{})
	d := fetchOne(t, c, time.Second)
	if err := d.Nak(); err != nil {
		t.Fatalf("Nak: %v", err)
	}
	again := fetchOne(t, c, 5*time.Second)
	if again.StreamSeq != d.StreamSeq || again.NumDelivered != 2 {
		t.Fatalf("after Nak: seq %d delivered %d, want seq %d delivered 2", again.StreamSeq, again.NumDelivered, d.StreamSeq)
	}
	if err := again.Ack(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestNakWithDelayRedeliversAfterTheDelay(t *testing.T) {
	t.Parallel()
	b := setup(t, 30*time.Second)
	b.publish(t, false, job("sms", "later"))
	c := b.consumer(t, queue.ConsumerConfig{})
	d := fetchOne(t, c, time.Second)
	const delay = 700 * time.Millisecond
	start := time.Now()
	if err := d.NakWithDelay(delay); err != nil {
		t.Fatalf("NakWithDelay: %v", err)
	}
	again := fetchOne(t, c, 10*time.Second)
	if waited := time.Since(start); waited < delay-50*time.Millisecond {
		t.Fatalf("redelivered after %s, before the delay of %s", waited, delay)
	}
	if again.StreamSeq != d.StreamSeq || again.NumDelivered != 2 {
		t.Fatalf("after NakWithDelay: seq %d delivered %d", again.StreamSeq, again.NumDelivered)
	}
	if err := again.Ack(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestTermDropsTheJob(t *testing.T) {
	t.Parallel()
	const ackWait = time.Second
	b := setup(t, ackWait)
	b.publish(t, false, job("sms", "term-reason"), job("sms", "term-plain"))
	c := b.consumer(t, queue.ConsumerConfig{})
	ds, err := c.Fetch(ctx(t), 2, time.Second)
	if err != nil || len(ds) != 2 {
		t.Fatalf("Fetch: %d, %v", len(ds), err)
	}
	if err := ds[0].Term("poison"); err != nil {
		t.Fatalf("Term with a reason: %v", err)
	}
	if err := ds[1].Term(""); err != nil {
		t.Fatalf("Term: %v", err)
	}
	if err := ds[0].Nak(); !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		t.Errorf("Nak after Term: %v, want ErrMsgAlreadyAckd", err)
	}
	expectNone(t, c, 2*ackWait, "a terminated job was redelivered")
	testenv.WaitFor(t, 10*time.Second, "NOTIFY empty after Term", func() bool { return b.streamMsgs(t, "NOTIFY") == 0 })
}

func TestAckHonoursContext(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.publish(t, false, job("sms", "ack-ctx"))
	c := b.consumer(t, queue.ConsumerConfig{})
	d := fetchOne(t, c, time.Second)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Ack(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ack with a cancelled context: %v", err)
	}
	if err := d.Ack(ctx(t)); err != nil {
		t.Fatalf("Ack: %v", err)
	}
}
