package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/testenv"
)

// internalConsumer is a Consumer on a private server with both streams.
func internalConsumer(t *testing.T, ctx context.Context) (*Consumer, jetstream.JetStream, Config) {
	t.Helper()
	srv := testenv.NATS(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{URL: srv.URL()}.WithDefaults()
	if err := EnsureStreams(ctx, js, cfg, 1); err != nil {
		t.Fatal(err)
	}
	c, err := NewConsumer(ctx, js, cfg, ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return c, js, cfg
}

func (c *Consumer) onDemandCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.onDemand
}

// TestOnDemandQueuesAreGivenBack: the queues made on demand count toward
// maxOnDemand exactly while they exist. A fair lane's subject of a
// channel that is none (notify.jobs.fax.f.1: a stray queue) was counted
// when made and never given back when the server deleted it, so after 64
// such subjects every later stray was refused until a restart (found in
// review). Callers at once never overshoot the cap either: it was checked
// outside the lock.
func TestOnDemandQueuesAreGivenBack(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, _, _ := internalConsumer(t, ctx)
	// Junk fair lanes of unknown channels come (made on demand) and go
	// (forgotten, as when the server deleted them), three times the cap.
	for round := range 3 {
		var made []*lane
		for i := range maxOnDemand {
			l, err := c.laneFor(ctx, fmt.Sprintf("notify.jobs.fax%d.f.%d", round*maxOnDemand+i, i%MaxFairLanes))
			if err != nil {
				t.Fatalf("round %d, junk lane %d: %v", round, i, err)
			}
			if !l.stray || !l.onDemand {
				t.Fatalf("junk lane %s: stray %v, counted %v", l.subject, l.stray, l.onDemand)
			}
			made = append(made, l)
		}
		if n := c.onDemandCount(); n != maxOnDemand {
			t.Fatalf("round %d: %d queues counted, want %d", round, n, maxOnDemand)
		}
		for _, l := range made {
			c.forget(l)
		}
		if n := c.onDemandCount(); n != 0 {
			t.Fatalf("round %d: %d queues still counted after every one went, want 0", round, n)
		}
	}
	// A fair lane within tenants.lanes, and the default tenant's queues,
	// are not counted.
	if l, err := c.laneFor(ctx, "notify.jobs.sms.f.3"); err != nil || l.onDemand || c.onDemandCount() != 0 {
		t.Fatalf("fair lane 3: %v, counted %v, count %d", err, l != nil && l.onDemand, c.onDemandCount())
	}
	// Later strays are still served; callers at once make at most the cap.
	const callers = maxOnDemand + 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ok, far int
	)
	for i := range callers {
		wg.Go(func() {
			_, err := c.laneFor(ctx, fmt.Sprintf("notify.jobs.stray%d", i))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ErrTooManyQueues):
				far++
			default:
				t.Errorf("stray %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if ok != maxOnDemand || far != callers-maxOnDemand || c.onDemandCount() != maxOnDemand {
		t.Fatalf("%d callers at once: %d made, %d refused, %d counted; want %d, %d, %d",
			callers, ok, far, c.onDemandCount(), maxOnDemand, callers-maxOnDemand, maxOnDemand)
	}
}
