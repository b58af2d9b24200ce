package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// ackAll acknowledges deliveries and returns their job ids.
func ackAll(t *testing.T, ds []*queue.Delivery) []string {
	t.Helper()
	ids := make([]string, len(ds))
	for i, d := range ds {
		if err := d.Ack(ctx(t)); err != nil {
			t.Fatalf("Ack: %v", err)
		}
		ids[i] = d.Header.Get(jetstream.MsgIDHeader)
	}
	return ids
}

func TestFetchTakesHighLaneFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	batch := b.pub.NewBatch(64, 0)
	for i := range 200 {
		if err := batch.Publish(ctx(t), job(queue.Channels[i%3], fmt.Sprintf("n-%03d", i)), false); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := batch.Wait(ctx(t)); err != nil || res.Stored != 200 {
		t.Fatalf("normal backlog: %+v %v", res, err)
	}
	for i := range 20 {
		b.publish(t, true, job(queue.Channels[i%3], fmt.Sprintf("h-%02d", i)))
	}
	c := b.consumer(t, queue.ConsumerConfig{})

	// Small batches: all 20 high before any further normal.
	var high int
	for high < 20 {
		ds, err := c.Fetch(ctx(t), 3, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 || len(ds) > 3 {
			t.Fatalf("Fetch(3) returned %d deliveries", len(ds))
		}
		for i, d := range ds {
			if !d.High {
				if high < 20 {
					t.Fatalf("normal delivery %s while %d high messages were waiting", d.Subject, 20-high)
				}
				// The batch that drains the high lane is topped up from the
				// normal lane, high first.
				for _, rest := range ds[i:] {
					if rest.High {
						t.Fatal("a high delivery after a normal one in a batch")
					}
				}
				break
			}
			high++
		}
		ackAll(t, ds)
	}
	ds, err := c.Fetch(ctx(t), 5, time.Second)
	if err != nil || len(ds) != 5 || ds[0].High {
		t.Fatalf("after the high lane: %d deliveries (%v), want 5 normal", len(ds), err)
	}
	ackAll(t, ds)

	// A high message published while the normal lane has a backlog is the
	// next one fetched.
	b.publish(t, true, job("email", "h-late"))
	// The server counts a stored message as pending for a consumer a moment
	// after the publish is acknowledged; until then no pull can see it.
	testenv.WaitFor(t, 5*time.Second, "the high lane counts the late message", func() bool {
		bl, err := c.Backlog(ctx(t))
		return err == nil && bl.High.Pending >= 1
	})
	ds, err = c.Fetch(ctx(t), 1, time.Second)
	if err != nil || len(ds) != 1 || !ds[0].High || ds[0].Channel != "email" {
		t.Fatalf("next after a late high publish: %+v %v", ds, err)
	}
	if ids := ackAll(t, ds); ids[0] != "h-late" {
		t.Fatalf("fetched %s, want h-late", ids[0])
	}
	ds, err = c.Fetch(ctx(t), 3, time.Second)
	if err != nil || len(ds) != 3 {
		t.Fatal(len(ds), err)
	}
	for _, d := range ds {
		if d.High {
			t.Fatal("high delivery from an empty high lane")
		}
	}
	// Deliveries carry their metadata. The fetch of h-late asked both
	// lanes at once (the high lane had been empty): the normal message it
	// had no room for was handed back, and comes again as its second
	// delivery; the others are first deliveries.
	again := 0
	for _, d := range ds {
		if d.Stream != "NOTIFY" || d.StreamSeq == 0 || d.NumDelivered < 1 || d.NumDelivered > 2 || time.Since(d.Published) > time.Minute || d.Channel == "" {
			t.Errorf("delivery metadata: %+v", d)
		}
		if d.NumDelivered == 2 {
			again++
		}
	}
	if again > 1 {
		t.Errorf("%d deliveries came a second time, want at most the one handed back", again)
	}
	ackAll(t, ds)
}

// TestFetchAsksBothLanesAtOnce: once the high lane was found empty, a
// fetch asks both lanes in one round trip. When high messages have come
// meanwhile they still come first, the normal messages beyond max are
// handed back at once, and every message is delivered exactly once in the
// end (the handed-back ones as their second delivery).
func TestFetchAsksBothLanesAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.consumer(t, queue.ConsumerConfig{})
	b.publish(t, false, job("sms", "warm"))
	ds, err := c.Fetch(ctx(t), 1, time.Second) // the high lane is seen empty
	if err != nil || len(ds) != 1 || ds[0].High {
		t.Fatalf("first fetch: %+v %v", ds, err)
	}
	ackAll(t, ds)
	for i := range 6 {
		b.publish(t, false, job("sms", fmt.Sprintf("n-%d", i)))
	}
	b.publish(t, true, job("push", "h-0"), job("push", "h-1"))
	testenv.WaitFor(t, 5*time.Second, "both lanes count their messages", func() bool {
		bl, err := c.Backlog(ctx(t))
		return err == nil && bl.High.Pending == 2 && bl.Normal.Pending == 6
	})
	ds, err = c.Fetch(ctx(t), 3, time.Second)
	if err != nil || len(ds) != 3 {
		t.Fatalf("fetch 3: %d deliveries, %v", len(ds), err)
	}
	if !ds[0].High || !ds[1].High || ds[2].High {
		t.Fatalf("fetch 3: high flags %v %v %v, want high, high, normal", ds[0].High, ds[1].High, ds[2].High)
	}
	seen := map[string]int{}
	again := 0
	for _, id := range ackAll(t, ds) {
		seen[id]++
	}
	for len(seen) < 8 {
		ds, err := c.Fetch(ctx(t), 2, time.Second)
		if err != nil || len(ds) == 0 {
			t.Fatalf("after %d of 8 jobs: %d deliveries, %v", len(seen), len(ds), err)
		}
		for _, d := range ds {
			if d.High {
				t.Fatalf("a high delivery from an emptied high lane: %+v", d)
			}
			if d.NumDelivered > 1 {
				again++
			}
		}
		for _, id := range ackAll(t, ds) {
			seen[id]++
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s delivered %d times", id, n)
		}
	}
	// The normal request asked for 3 and 1 fitted: 2 were handed back.
	if again != 2 {
		t.Errorf("%d second deliveries, want the 2 handed back", again)
	}
}

func TestFetchLongPollWakesOnPublish(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.consumer(t, queue.ConsumerConfig{})
	for _, high := range []bool{false, true} {
		id := fmt.Sprintf("wake-%v", high)
		type result struct {
			ds  []*queue.Delivery
			err error
		}
		done := make(chan result, 1)
		start := time.Now()
		go func() {
			ds, err := c.Fetch(ctx(t), 4, 20*time.Second)
			done <- result{ds, err}
		}()
		// Wait until the poll's requests are parked at the server.
		waitWaiting(t, c, 1)
		b.publish(t, high, job("sms", id))
		r := <-done
		if r.err != nil || len(r.ds) != 1 || r.ds[0].High != high {
			t.Fatalf("long poll: %d deliveries, %v", len(r.ds), r.err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("long poll returned after %s, not when the message came", took)
		}
		if ids := ackAll(t, r.ds); ids[0] != id {
			t.Fatalf("got %s, want %s", ids[0], id)
		}
	}
}

// waitWaiting waits until both lanes have at least n pull requests parked.
func waitWaiting(t *testing.T, c *queue.Consumer, n int) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, "pull requests parked on both lanes", func() bool {
		bl, err := c.Backlog(ctx(t))
		return err == nil && bl.High.Waiting >= n && bl.Normal.Waiting >= n
	})
}

func TestFetchLongPollTimesOutAndLeavesNoRequestBehind(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.consumer(t, queue.ConsumerConfig{})
	start := time.Now()
	ds, err := c.Fetch(ctx(t), 5, 300*time.Millisecond)
	took := time.Since(start)
	if err != nil || len(ds) != 0 {
		t.Fatalf("empty long poll: %d deliveries, %v", len(ds), err)
	}
	if took < 300*time.Millisecond {
		t.Fatalf("empty long poll returned after %s, before its wait", took)
	}
	// The withdrawn requests must not swallow a message published now.
	for i := range 5 {
		id := fmt.Sprintf("after-%d", i)
		b.publish(t, i%2 == 0, job("push", id))
		ds, err := c.Fetch(ctx(t), 1, 0)
		if err != nil || len(ds) != 1 {
			t.Fatalf("message %s published after a long poll: %d deliveries, %v (a stale pull request took it?)", id, len(ds), err)
		}
		ackAll(t, ds)
	}
	bl, err := c.Backlog(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if bl.High.AckPending+bl.Normal.AckPending+int(bl.High.Pending+bl.Normal.Pending) != 0 {
		t.Fatalf("backlog after the test: %+v", bl)
	}
}

func TestFetchNeverPullsMoreThanMax(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.consumer(t, queue.ConsumerConfig{})
	// Both lanes get a message at nearly the same moment during a poll of
	// one: one is returned, the other is handed back at once, not left to
	// age until its ack wait (30s) ends.
	for round := range 5 {
		done := make(chan []*queue.Delivery, 1)
		go func() {
			ds, err := c.Fetch(ctx(t), 1, 20*time.Second)
			if err != nil {
				t.Errorf("Fetch: %v", err)
			}
			done <- ds
		}()
		waitWaiting(t, c, 1)
		batch := b.pub.NewBatch(2, 0)
		if err := batch.Publish(ctx(t), job("sms", fmt.Sprintf("r%d-normal", round)), false); err != nil {
			t.Fatal(err)
		}
		if err := batch.Publish(ctx(t), job("sms", fmt.Sprintf("r%d-high", round)), true); err != nil {
			t.Fatal(err)
		}
		if _, err := batch.Wait(ctx(t)); err != nil {
			t.Fatal(err)
		}
		first := <-done
		if len(first) != 1 {
			t.Fatalf("round %d: Fetch(1) returned %d deliveries", round, len(first))
		}
		ackAll(t, first)
		rest, err := c.Fetch(ctx(t), 5, 5*time.Second)
		if err != nil || len(rest) != 1 {
			t.Fatalf("round %d: the other message: %d deliveries, %v (lost until ack wait?)", round, len(rest), err)
		}
		ackAll(t, rest)
	}

	// With a backlog, never more than max.
	for i := range 30 {
		b.publish(t, i%4 == 0, job("email", fmt.Sprintf("m-%d", i)))
	}
	var got int
	for got < 30 {
		ds, err := c.Fetch(ctx(t), 7, time.Second)
		if err != nil || len(ds) == 0 || len(ds) > 7 {
			t.Fatalf("Fetch(7): %d deliveries, %v", len(ds), err)
		}
		got += len(ds)
		ackAll(t, ds)
	}
	if bl, err := c.Backlog(ctx(t)); err != nil || bl.Normal.AckPending+bl.High.AckPending != 0 {
		t.Fatalf("deliveries out after all acks: %+v %v", bl, err)
	}
}

func TestFetchSharedAcrossProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	const jobs, workers = 120, 4
	for i := range jobs {
		b.publish(t, i%5 == 0, job(queue.Channels[i%3], fmt.Sprintf("s-%d", i)))
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	for range workers { // a consumer per process on its own connection
		c := b.consumer(t, queue.ConsumerConfig{})
		wg.Go(func() {
			for {
				ds, err := c.Fetch(ctx(t), 3, 500*time.Millisecond)
				if err != nil {
					t.Errorf("Fetch: %v", err)
					return
				}
				if len(ds) == 0 {
					return
				}
				for _, id := range ackAll(t, ds) {
					mu.Lock()
					seen[id]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != jobs {
		t.Fatalf("%d distinct jobs delivered, want %d", len(seen), jobs)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("job %s delivered %d times", id, n)
		}
	}
}

func TestFetchContextCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.consumer(t, queue.ConsumerConfig{})
	cctx, cancel := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	go func() {
		_, err := c.Fetch(cctx, 2, time.Minute)
		done <- err
	}()
	waitWaiting(t, c, 1)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Fetch after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Fetch did not return after its context was cancelled")
	}
	if _, err := c.Fetch(cctx, 1, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Fetch with a cancelled context: %v", err)
	}
	if _, err := c.Fetch(ctx(t), 0, 0); err == nil {
		t.Fatal("Fetch(0) succeeded")
	}
	// Nothing is left pulled: a message published now is fetched at once.
	b.publish(t, false, job("sms", "after-cancel"))
	ds, err := c.Fetch(ctx(t), 1, 0)
	if err != nil || len(ds) != 1 {
		t.Fatalf("after a cancelled poll: %d deliveries, %v", len(ds), err)
	}
	ackAll(t, ds)
}

func TestNewConsumerConcurrentlyAndSettings(t *testing.T) {
	t.Parallel()
	b := setup(t, 7*time.Second)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 5 {
		js, err := jetstream.New(b.srv.Conn())
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			<-start
			if _, err := queue.NewConsumer(ctx(t), js, b.cfg, queue.ConsumerConfig{MaxAckPending: 64}); err != nil {
				t.Errorf("NewConsumer: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	s, err := b.js.Stream(ctx(t), "NOTIFY")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, ch := range queue.Channels {
		want["notifier-"+ch+"-high"] = "notify.jobs." + ch + ".high"
		want["notifier-"+ch+"-normal"] = "notify.jobs." + ch
		want["notifier-"+ch+"-marketing"] = "notify.jobs." + ch + ".marketing"
		want["notifier-"+ch+"-transactional"] = "notify.jobs." + ch + ".transactional"
	}
	want["notifier-route"] = "notify.jobs.*.t.>"
	if len(want) != 13 {
		t.Fatalf("%d consumers made at start, want the default tenant's 12 and the router", len(want))
	}
	names := s.ConsumerNames(ctx(t))
	var n int
	for name := range names.Name() {
		n++
		cons, err := s.Consumer(ctx(t), name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := cons.CachedInfo().Config
		if cfg.FilterSubject != want[name] || cfg.AckPolicy != jetstream.AckExplicitPolicy || cfg.AckWait != 7*time.Second ||
			cfg.MaxDeliver != -1 || cfg.MaxAckPending != 64 || len(cfg.BackOff) != 0 || cfg.Durable != name {
			t.Errorf("consumer %s: %+v", name, cfg)
		}
	}
	if n != len(want) {
		t.Fatalf("%d consumers, want %d", n, len(want))
	}
	// Settings follow the configuration on the next start.
	b.cfg.AckWait = 9 * time.Second
	if _, err := queue.NewConsumer(ctx(t), b.js, b.cfg, queue.ConsumerConfig{MaxAckPending: 10}); err != nil {
		t.Fatal(err)
	}
	cons, err := s.Consumer(ctx(t), "notifier-sms-normal")
	if err != nil {
		t.Fatal(err)
	}
	if cfg := cons.CachedInfo().Config; cfg.AckWait != 9*time.Second || cfg.MaxAckPending != 10 {
		t.Errorf("updated consumer: ack wait %s, max ack pending %d", cfg.AckWait, cfg.MaxAckPending)
	}
	if _, err := queue.NewConsumer(ctx(t), b.js, b.cfg, queue.ConsumerConfig{MaxAckPending: -1}); err == nil {
		t.Error("an unbounded MaxAckPending was accepted")
	}
}

func TestFetchRespectsMaxAckPending(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	for i := range 10 {
		b.publish(t, false, job("sms", fmt.Sprintf("p-%d", i)))
	}
	c := b.consumer(t, queue.ConsumerConfig{MaxAckPending: 3})
	ds, err := c.Fetch(ctx(t), 10, time.Second)
	if err != nil || len(ds) != 3 {
		t.Fatalf("Fetch(10) with MaxAckPending 3: %d deliveries, %v", len(ds), err)
	}
	more, err := c.Fetch(ctx(t), 10, 200*time.Millisecond)
	if err != nil || len(more) != 0 {
		t.Fatalf("Fetch while 3 are pending: %d deliveries, %v", len(more), err)
	}
	ackAll(t, ds)
	ds, err = c.Fetch(ctx(t), 10, time.Second)
	if err != nil || len(ds) != 3 {
		t.Fatalf("Fetch after the acks: %d deliveries, %v", len(ds), err)
	}
	ackAll(t, ds)
}

func TestFetchAcrossServerRestart(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.consumer(t, queue.ConsumerConfig{})
	b.publish(t, false, job("sms", "before-restart"))
	b.srv.Restart() // same store: the stream, the durables and the job survive
	var ds []*queue.Delivery
	testenv.WaitFor(t, 20*time.Second, "a fetch after the restart", func() bool {
		var err error
		ds, err = c.Fetch(ctx(t), 2, 200*time.Millisecond)
		return err == nil && len(ds) == 1
	})
	if ids := ackAll(t, ds); ids[0] != "before-restart" {
		t.Fatalf("fetched %s", ids[0])
	}
}

func TestFetchReportsAMissingConsumer(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.consumer(t, queue.ConsumerConfig{Name: "gone"})
	if err := b.js.DeleteConsumer(ctx(t), "NOTIFY", "gone-sms-high"); err != nil {
		t.Fatal(err)
	}
	_, err := c.Fetch(ctx(t), 1, time.Second)
	if err == nil || !strings.Contains(err.Error(), "gone-sms-high") {
		t.Fatalf("Fetch from a deleted consumer: %v, want an error naming it", err)
	}
}
