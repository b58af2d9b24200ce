package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// TestFirstStartDoesNotWaitAColdStart: on a new install (an empty Redis and
// no slot horizon in JetStream) the first job goes out at once instead of
// waiting a cold start's max_queue_delay (2 s here), a priority job
// published first among them. Once the fleet has handed out slots, a Redis
// that comes back empty is a lost state, not a first start: a process
// started then waits the full cold start before its first job, as the
// contract needs. Without the horizons
// (Options.Horizons nil) even the first start waits it.
func TestFirstStartDoesNotWaitAColdStart(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{}) // max_queue_delay 2s
	horizons, err := queue.OpenHorizons(context.Background(), b.js, 1)
	if err != nil {
		t.Fatal(err)
	}
	p1 := b.start(func(o *Options) { o.Horizons = horizons })
	published := time.Now()
	high := newJob("first-high", "sms", "u1")
	if _, err := b.pub.Publish(context.Background(), high, true); err != nil {
		t.Fatal(err)
	}
	b.publish(newJob("first-normal", "sms", "u2"))
	testenv.WaitFor(t, 10*time.Second, "both first jobs sent", func() bool { return len(b.fake.AcceptedIDs()) == 2 })
	// Neither waits the cold start (the priority job no longer waits it
	// either: two jobs taken at once by free workers go out in either
	// order, within milliseconds).
	for _, r := range b.fake.Requests() {
		if wait := r.At.Sub(published); wait > time.Second {
			t.Errorf("%s reached the provider %s after its publish on a first start, want well under the 2s cold start", r.ID, wait.Round(time.Millisecond))
		}
	}

	// The process stops (its horizon noted), Redis loses its state, and
	// another process starts: a provider that handed out slots is not new.
	p1.stop(t)
	if _, _, found, err := horizons.Read(context.Background(), "sms-gw"); err != nil || !found {
		t.Fatalf("no horizon noted after a stop: %v %v", found, err)
	}
	if err := b.redis.Client().FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	b.start(func(o *Options) { o.Horizons = horizons })
	lost := time.Now()
	b.publish(newJob("after-loss", "sms", "u3"))
	testenv.WaitFor(t, 10*time.Second, "the job after the loss sent", func() bool { return len(b.fake.AcceptedIDs()) == 3 })
	if wait := b.fake.Requests()[2].At.Sub(lost); wait < 2*time.Second {
		t.Errorf("after Redis lost its state the next job went out %s later, inside the 2s cold start that protects slots handed out before", wait.Round(time.Millisecond))
	}
}

// TestFirstStartWithoutHorizonsWaits: without the horizons an empty Redis
// cannot be told from a lost one, and the first job waits the cold start.
func TestFirstStartWithoutHorizonsWaits(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	b.start(nil)
	published := time.Now()
	b.publish(newJob("first", "sms", "u1"))
	testenv.WaitFor(t, 10*time.Second, "the first job sent", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	if wait := b.fake.Requests()[0].At.Sub(published); wait < 2*time.Second {
		t.Errorf("the first job went out %s after its publish without horizons, want the 2s cold start", wait.Round(time.Millisecond))
	}
}
