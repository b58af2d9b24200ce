package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
)

// TestHeartbeatCountsTheFleet: each heartbeat answers the live count, Read
// lists the live instances with what they said of themselves, and an
// instance whose Run ends leaves the fleet at once.
func TestHeartbeatCountsTheFleet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	a := NewHeartbeat(rdb, "hb:", "a", func() InstanceInfo { return InstanceInfo{Workers: 8, Limits: "redis"} }, nil)
	b := NewHeartbeat(rdb, "hb:", "b", func() InstanceInfo { return InstanceInfo{Workers: 4, Limits: "local"} }, nil)
	if a.Live() != 1 {
		t.Fatalf("before any heartbeat Live() = %d, want 1 (itself)", a.Live())
	}
	if n, err := a.Beat(ctx); err != nil || n != 1 {
		t.Fatalf("a's first beat: %d, %v; want 1", n, err)
	}
	bctx, stopB := context.WithCancel(ctx)
	done := make(chan error, 1)
	b.Interval = 50 * time.Millisecond
	go func() { done <- b.Run(bctx) }()
	testenv.WaitFor(t, 5*time.Second, "a counting two", func() bool {
		n, err := a.Beat(ctx)
		return err == nil && n == 2 && a.Live() == 2
	})
	insts, err := Read(ctx, rdb, "hb:")
	if err != nil || len(insts) != 2 {
		t.Fatalf("Read: %+v, %v; want 2 instances", insts, err)
	}
	workers := map[string]int{}
	for _, in := range insts {
		workers[in.ID] = in.Info.Workers
		if in.LastSeen < 0 || in.LastSeen > fleetLiveness {
			t.Errorf("instance %s last seen %v ago", in.ID, in.LastSeen)
		}
	}
	if workers["a"] != 8 || workers["b"] != 4 {
		t.Errorf("workers by instance %v, want a 8, b 4", workers)
	}
	stopB()
	if err := <-done; err != nil {
		t.Fatalf("b's Run: %v", err)
	}
	if n, err := a.Beat(ctx); err != nil || n != 1 {
		t.Fatalf("a's beat after b left: %d, %v; want 1", n, err)
	}
	if insts, err := Read(ctx, rdb, "hb:"); err != nil || len(insts) != 1 || insts[0].ID != "a" {
		t.Fatalf("Read after b left: %+v, %v; want a alone", insts, err)
	}
}

// TestPauseReasonsAgree: both stores say credentials while a credentials
// pause is recorded and rate_limited otherwise, forget it on Clear, and
// give the one probe of a provider once per interval.
func TestPauseReasonsAgree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := testenv.NewClock(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	rdb := testenv.Redis(t).Client()
	stores := map[string]PauseReasons{
		"memory": MemoryPauseReasons(clock.Now),
		"redis":  RedisPauseReasons(rdb, "pr:"),
	}
	for name, r := range stores {
		t.Run(name, func(t *testing.T) {
			reason := func(p string) string {
				t.Helper()
				got, err := r.Reason(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			if got := reason("sms"); got != PauseRateLimited {
				t.Fatalf("nothing recorded: %q, want %q", got, PauseRateLimited)
			}
			if err := r.SetCredentials(ctx, "sms", time.Minute); err != nil {
				t.Fatal(err)
			}
			if got := reason("sms"); got != PauseCredentials {
				t.Fatalf("after SetCredentials: %q, want %q", got, PauseCredentials)
			}
			if got := reason("push"); got != PauseRateLimited {
				t.Fatalf("another provider: %q, want %q", got, PauseRateLimited)
			}
			if err := r.Clear(ctx, "sms"); err != nil {
				t.Fatal(err)
			}
			if got := reason("sms"); got != PauseRateLimited {
				t.Fatalf("after Clear: %q, want %q", got, PauseRateLimited)
			}
			for i, want := range []bool{true, false, false} {
				if got, err := r.TryProbe(ctx, "sms", time.Minute); err != nil || got != want {
					t.Fatalf("probe %d: %v, %v; want %v", i, got, err, want)
				}
			}
			if got, err := r.TryProbe(ctx, "push", time.Minute); err != nil || !got {
				t.Fatalf("another provider's probe: %v, %v; want true", got, err)
			}
		})
	}
	// The memory store's pause outlives its duration by a second, as
	// Redis's key does.
	m := stores["memory"]
	if err := m.SetCredentials(ctx, "email", time.Second); err != nil {
		t.Fatal(err)
	}
	clock.Advance(1900 * time.Millisecond)
	if got, _ := m.Reason(ctx, "email"); got != PauseCredentials {
		t.Fatalf("1.9 s into a 1 s pause: %q, want %q", got, PauseCredentials)
	}
	clock.Advance(200 * time.Millisecond)
	if got, _ := m.Reason(ctx, "email"); got != PauseRateLimited {
		t.Fatalf("2.1 s into a 1 s pause: %q, want %q", got, PauseRateLimited)
	}
	// Redis's reason key expires the same second after the pause's end, so
	// a reason outlives no pause by more than that.
	if err := stores["redis"].SetCredentials(ctx, "email", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl, err := rdb.PTTL(ctx, pauseReasonKey("pr:", "email")).Result(); err != nil || ttl <= 3*time.Second || ttl > 4*time.Second {
		t.Fatalf("the reason's TTL after a 3 s credentials pause: %v, %v; want in (3 s, 4 s]", ttl, err)
	}
}
