package leaky_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/testenv"
)

// TestShapedStateOutlivesItsWindows: with no idle TTL, a quota's state
// still lives until its window ends (a UTC day) and an adaptive state
// until the climb is back at the rate; a plain contract's state keeps the
// fields and TTL it always had.
func TestShapedStateOutlivesItsWindows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	prefix := newPrefix("ttl")
	key := func(provider string) string { return "{" + prefix + "p:" + provider + "}:tat" }
	q := newRedis(t, rdb, prefix, leaky.WithIdleTTL(0))
	zero := time.Duration(0)
	pttl := func(provider string) time.Duration {
		t.Helper()
		d, err := rdb.PTTL(ctx, key(provider)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	fields := func(provider string) []string {
		t.Helper()
		m, err := rdb.HGetAll(ctx, key(provider)).Result()
		if err != nil {
			t.Fatal(err)
		}
		var f []string
		for k := range m {
			f = append(f, k)
		}
		sort.Strings(f)
		return f
	}

	plain := leaky.Contract{Rate: 10, MaxQueueDelay: time.Second, ColdStart: &zero}
	if r, err := q.Reserve(ctx, "plain", plain, 1); err != nil || !r.OK {
		t.Fatalf("plain reserve: %+v %v", r, err)
	}
	if got := pttl("plain"); got <= 0 || got > 2*time.Second {
		t.Errorf("plain state expires in %v, want about max_queue_delay plus the queue (1.1s)", got)
	}
	if got := fields("plain"); len(got) != 3 || got[0] != "node" || got[1] != "seq" || got[2] != "tat" {
		t.Errorf("plain state fields %v, want node seq tat", got)
	}

	daily := plain
	daily.Quotas = []leaky.Quota{{Limit: 100, Per: 24 * time.Hour}}
	if r, err := q.Reserve(ctx, "daily", daily, 1); err != nil || !r.OK {
		t.Fatalf("quota reserve: %+v %v", r, err)
	}
	now := time.Now()
	midnight := now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	if got, want := pttl("daily"), midnight.Sub(now); got < want-2*time.Second {
		t.Errorf("a daily quota's state expires in %v, want at least %v (the next UTC midnight)", got, want)
	}

	ad := plain
	ad.Adaptive = &leaky.Adaptive{MinRate: 1, Decrease: 0.5, IncreasePerS: 0.01, Quiet: time.Hour}
	if lowered, err := q.Backoff(ctx, "adaptive", ad, time.Second); err != nil || !lowered {
		t.Fatalf("backoff: %v %v", lowered, err)
	}
	// 5/s back to 10/s at 0.01/s per second: 500 s after an hour's quiet
	if got, want := pttl("adaptive"), time.Hour+500*time.Second; got < want-2*time.Second {
		t.Errorf("an adaptive state expires in %v, want at least %v (the climb's end)", got, want)
	}
	if r, err := q.Reserve(ctx, "adaptive", ad, 1); err != nil {
		t.Fatalf("adaptive reserve: %+v %v", r, err)
	}
	if got, want := pttl("adaptive"), time.Hour+500*time.Second; got < want-2*time.Second {
		t.Errorf("after a reservation, an adaptive state expires in %v, want at least %v", got, want)
	}
}
