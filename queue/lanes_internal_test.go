package queue

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// idle waits until l has no read under way (none outlives the test).
func (l *Lanes) idle(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		reading := l.reading
		l.mu.Unlock()
		if !reading {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the lanes' read did not end")
		}
	}
}

// TestLanesReadInTheBackground: Place never waits for the lanes' depths.
// It read them on the publish's path, every 250 ms one publish paid a
// STREAM.INFO round trip (up to a second) on its request's context, and a
// request that ended marked the view fresh without one (found in review).
// Now the read runs in the background, one at a time, with a context of
// its own; its view serves the jobs after it; a failed read keeps the view
// and is tried again after 250 ms, not by every job.
func TestLanesReadInTheBackground(t *testing.T) {
	t.Parallel()
	const n = DefaultFairLanes
	a, b := LanePair("sms", "small", n)
	flooded := Key{Channel: "sms", Fair: true, Index: a}.Subject()
	release := make(chan struct{})
	var reads, at, most atomic.Int32
	seen := make(chan error, 16)
	l := NewLanes(n, func(ctx context.Context) (map[string]uint64, error) {
		reads.Add(1)
		now := at.Add(1)
		defer at.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		<-release
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > laneViewTimeout {
			seen <- errors.New("the read has no deadline of its own")
		}
		seen <- ctx.Err()
		return map[string]uint64{flooded: 5000}, nil
	})
	ended, cancel := context.WithCancel(context.Background())
	cancel() // a publish whose request has ended
	k := KeyFor("sms", "small", false, "")
	placed := make(chan struct{})
	go func() {
		defer close(placed)
		for range 1000 {
			l.Place(ended, k)
		}
	}()
	select {
	case <-placed:
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("Place waited for the lanes' read")
	}
	for deadline := time.Now().Add(5 * time.Second); reads.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // the read's goroutine starts
	}
	if r := reads.Load(); r != 1 {
		t.Errorf("%d reads started by 1,000 jobs, want 1 (one at a time, none while fresh)", r)
	}
	close(release)
	l.idle(t)
	for len(seen) > 0 {
		if err := <-seen; err != nil {
			t.Errorf("the read's context: %v, want its own, alive", err)
		}
	}
	if most.Load() != 1 {
		t.Errorf("%d reads at once, want 1", most.Load())
	}
	// The view it read (lane a holds 5,000) serves the jobs after it.
	for i := range 100 {
		if got := l.Place(ended, k); got.Index != b {
			t.Fatalf("job %d after the read: lane %d, want %d (its lane %d holds 5,000)", i, got.Index, b, a)
		}
	}

	// A failed read keeps the view and is not retried by every job.
	var failed atomic.Int32
	f := NewLanes(n, func(context.Context) (map[string]uint64, error) {
		failed.Add(1)
		return nil, errors.New("no responders")
	})
	f.Observe(map[string]uint64{flooded: 5000})
	f.mu.Lock()
	f.readAt = time.Time{} // stale
	f.mu.Unlock()
	f.Place(ended, k)
	f.idle(t)
	for i := range 100 {
		if got := f.Place(ended, k); got.Index != b {
			t.Fatalf("job %d after a failed read: lane %d, want %d (the view kept)", i, got.Index, b)
		}
	}
	if r := failed.Load(); r != 1 {
		t.Errorf("%d reads after a failure within 250 ms, want 1", r)
	}
	time.Sleep(laneViewEvery + 50*time.Millisecond)
	f.Place(ended, k)
	f.idle(t)
	if r := failed.Load(); r != 2 {
		t.Errorf("%d reads 250 ms after a failed one, want 2", r)
	}
}
