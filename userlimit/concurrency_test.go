package userlimit_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
	"github.com/notifier/notifier/userlimit/userlimittest"
)

const (
	hammerLimit      = 100
	hammerGoroutines = 16 // per limiter
	hammerAttempts   = 10 // per goroutine
)

// hammer runs hammerGoroutines goroutines per limiter, each deciding
// hammerAttempts distinct jobs of one user, plus one job id that every
// goroutine decides (a redelivery race), and returns how many distinct jobs
// were allowed.
func hammer(t *testing.T, lims []userlimit.Limiter, rule userlimit.Rule) int {
	t.Helper()
	ctx := context.Background()
	key := userlimit.Key{Channel: "push", User: "hammered"}
	var allowed atomic.Int64
	var sharedAllowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for li, lim := range lims {
		for g := range hammerGoroutines {
			wg.Go(func() {
				<-start
				res, err := lim.Allow(ctx, key, "shared", rule)
				if err != nil {
					t.Errorf("allow shared: %v", err)
					return
				}
				if res.Allowed {
					sharedAllowed.Add(1)
				}
				for i := range hammerAttempts {
					res, err := lim.Allow(ctx, key, fmt.Sprintf("job-%d-%d-%d", li, g, i), rule)
					if err != nil {
						t.Errorf("allow: %v", err)
						return
					}
					if res.Allowed {
						allowed.Add(1)
					}
				}
			})
		}
	}
	close(start)
	wg.Wait()
	// The shared id counts once; every decision of it that came after it was
	// counted is a redelivery and allowed again.
	if sharedAllowed.Load() == 0 {
		t.Fatalf("the shared job id was never allowed")
	}
	return int(allowed.Load()) + 1
}

func serverMicros(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now.UnixMicro()
}

// TestRedisExactUnderConcurrency: 3 separate clients (as 3 processes would
// have) × 16 goroutines hammer one user's limit of 100, on the server's clock.
func TestRedisExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	srv := testenv.Redis(t)
	timeClient := srv.Client()
	for _, alg := range userlimittest.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			prefix := newPrefix("hammer")
			var lims []userlimit.Limiter
			for range 3 {
				lims = append(lims, userlimit.NewRedis(srv.Client(), prefix))
			}
			rule := userlimit.Rule{Limit: hammerLimit, Window: 24 * time.Hour, Algorithm: alg}
			t0 := serverMicros(t, timeClient)
			got := hammer(t, lims, rule)
			t1 := serverMicros(t, timeClient)
			checkHammer(t, rule, got, t0, t1)
		})
	}
}

// TestMemoryExactUnderConcurrency: 48 goroutines on one Memory, on the real
// clock.
func TestMemoryExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	for _, alg := range userlimittest.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			mem := userlimit.NewMemory()
			rule := userlimit.Rule{Limit: hammerLimit, Window: 24 * time.Hour, Algorithm: alg}
			t0 := time.Now().UnixMicro()
			got := hammer(t, []userlimit.Limiter{mem, mem, mem}, rule)
			t1 := time.Now().UnixMicro()
			checkHammer(t, rule, got, t0, t1)
		})
	}
}

// checkHammer checks the number of jobs allowed during [t0, t1] (µs) against
// what the algorithm promises. Every algorithm admits exactly limit in one
// burst well inside one window; only if the burst happened to straddle a
// fixed-window boundary (once a day here) do the windowed ones get their
// documented leeway.
func checkHammer(t *testing.T, rule userlimit.Rule, got int, t0, t1 int64) {
	t.Helper()
	w := rule.Window.Microseconds()
	straddles := t0/w != t1/w
	lo, hi := rule.Limit, rule.Limit
	switch {
	case rule.Algorithm == userlimit.FixedWindow && straddles:
		hi = 2 * rule.Limit
	case rule.Algorithm == userlimit.SlidingWindow && straddles:
		// limit + ⌊p·e/W⌋ with e < t1-t0, and possibly one fewer than limit.
		lo, hi = rule.Limit-1, rule.Limit+1+int(int64(rule.Limit)*(t1-t0)/w)
	case rule.Algorithm == userlimit.TokenBucket:
		hi += int((t1 - t0) / (w / int64(rule.Limit))) // refill during the burst (none: 864s per token)
	}
	if attempts := 3*hammerGoroutines*hammerAttempts + 1; attempts < 2*hi {
		t.Fatalf("too few attempts (%d) to test a limit of %d", attempts, hi)
	}
	if got < lo || got > hi {
		t.Fatalf("%s allowed %d distinct jobs under concurrency, want %d..%d (burst took %s, straddles a window boundary: %v)",
			rule.Algorithm, got, lo, hi, time.Duration(t1-t0)*time.Microsecond, straddles)
	}
}
