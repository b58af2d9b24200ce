package leaky_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/testenv"
)

// TestQuotaAcrossProcesses: workers with separate Redis clients (separate
// processes, as far as Redis can tell) reserve against a quota, alone and
// in groups; every window gets exactly Limit units, never one more.
func TestQuotaAcrossProcesses(t *testing.T) {
	t.Parallel()
	t.Run("Redis", func(t *testing.T) {
		t.Parallel()
		srv := testenv.Redis(t)
		testQuotaFrozenClock(t, func() pipeClient { return srv.Client() })
	})
	t.Run("RedisCluster", func(t *testing.T) {
		t.Parallel()
		cluster := testenv.RedisCluster(t)
		testQuotaFrozenClock(t, func() pipeClient { return cluster.Client() })
	})
	t.Run("RedisClock", func(t *testing.T) {
		t.Parallel()
		srv := testenv.Redis(t)
		testQuotaRedisClock(t, func() pipeClient { return srv.Client() })
	})
}

// quotaWorkers runs n workers, each with its own client and queue, calling
// reserve until it returns false; it returns the slots granted.
func quotaWorkers(t *testing.T, n int, newClient func() pipeClient, prefix string, opts []leaky.Option,
	reserve func(w int, rdb pipeClient, q *leaky.Redis) ([]leaky.Reservation, bool, error)) []int64 {
	t.Helper()
	var (
		mu    sync.Mutex
		slots []int64
		wg    sync.WaitGroup
	)
	errs := make(chan error, n)
	for w := 0; w < n; w++ {
		rdb := newClient()
		q := newRedis(t, rdb, prefix, opts...)
		if err := q.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				rs, more, err := reserve(w, rdb, q)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, r := range rs {
					if r.OK {
						slots = append(slots, r.Slot)
					}
				}
				mu.Unlock()
				if !more {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sort.Slice(slots, func(i, j int) bool { return slots[i] < slots[j] })
	return slots
}

// reserveSome reserves one slot, or (odd workers) a pipelined group of
// three.
func reserveSome(ctx context.Context, w int, rdb pipeClient, q *leaky.Redis, c leaky.Contract) ([]leaky.Reservation, error) {
	if w%2 == 0 {
		r, err := q.Reserve(ctx, "sms", c, 1)
		return []leaky.Reservation{r}, err
	}
	g := q.ReserveGroup("sms", c)
	cmds := []*leaky.ReserveCmd{g.Add(1), g.Add(1), g.Add(1)}
	pipe := rdb.Pipeline()
	g.Queue(ctx, pipe)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	var rs []leaky.Reservation
	for _, cmd := range cmds {
		r, err := cmd.Result()
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// testQuotaFrozenClock: on a clock stopped at a window's start, 8 workers
// fill every window the 5 s queue reaches with exactly 37 units, and the
// window at the queue's bound with 1 (its first slot is exactly 5 s away).
func testQuotaFrozenClock(t *testing.T, newClient func() pipeClient) {
	ctx := context.Background()
	const limit = 37
	zero := time.Duration(0)
	c := leaky.Contract{Rate: 100_000, MaxQueueDelay: 5 * time.Second, ColdStart: &zero,
		Quotas: []leaky.Quota{{Limit: limit, Per: time.Second}}}
	start := time.Now().Truncate(time.Second).Add(time.Second)
	now := func() time.Time { return start }
	slots := quotaWorkers(t, 8, newClient, newPrefix("quota"), []leaky.Option{leaky.WithNow(now)},
		func(w int, rdb pipeClient, q *leaky.Redis) ([]leaky.Reservation, bool, error) {
			rs, err := reserveSome(ctx, w, rdb, q, c)
			for _, r := range rs {
				if !r.OK {
					return rs, false, err // the clock stands still: refused for good
				}
			}
			return rs, true, err
		})
	per := map[int64]int{}
	for _, s := range slots {
		per[(s-start.UnixMicro())/1_000_000]++
	}
	want := map[int64]int{0: limit, 1: limit, 2: limit, 3: limit, 4: limit, 5: 1}
	if len(per) != len(want) {
		t.Fatalf("units per window from the start: %v, want %v", per, want)
	}
	for k, n := range want {
		if per[k] != n {
			t.Fatalf("units per window from the start: %v, want %v", per, want)
		}
	}
}

// testQuotaRedisClock: on the Redis clock, for about 3 s, 6 workers keep
// the queue full: no window gets more than the limit, and every window
// but the first and the last (partly before the run, partly past it) gets
// exactly the limit.
func testQuotaRedisClock(t *testing.T, newClient func() pipeClient) {
	ctx := context.Background()
	const limit = 40
	zero := time.Duration(0)
	c := leaky.Contract{Rate: 2000, MaxQueueDelay: 2500 * time.Millisecond, ColdStart: &zero,
		Quotas: []leaky.Quota{{Limit: limit, Per: time.Second}}}
	deadline := time.Now().Add(3 * time.Second)
	slots := quotaWorkers(t, 6, newClient, newPrefix("quota-clock"), nil,
		func(w int, rdb pipeClient, q *leaky.Redis) ([]leaky.Reservation, bool, error) {
			rs, err := reserveSome(ctx, w, rdb, q, c)
			for _, r := range rs {
				if !r.OK {
					time.Sleep(min(r.RetryAfter, 20*time.Millisecond))
					break
				}
			}
			return rs, time.Now().Before(deadline), err
		})
	per := map[int64]int{}
	first, last := slots[0]/1_000_000, slots[len(slots)-1]/1_000_000
	for _, s := range slots {
		per[s/1_000_000]++
	}
	if last-first < 3 {
		t.Fatalf("slots span windows %d to %d only", first, last)
	}
	for k := first; k <= last; k++ {
		n := per[k]
		if n > limit || (k != first && k != last && n != limit) {
			t.Fatalf("window %d (of %d to %d) got %d units, want %d; all: %v", k, first, last, n, limit, per)
		}
	}
}

var _ pipeClient = (*redis.ClusterClient)(nil)
