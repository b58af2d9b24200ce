package userlimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
	"github.com/notifier/notifier/userlimit/userlimittest"
)

// TestMemoryDropsIdleKeys: a stream of ever-new users, each idle after its
// window, keeps Memory's key count bounded by the live keys plus what one
// amortised sweep per shard leaves, instead of growing with every user seen.
func TestMemoryDropsIdleKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, alg := range userlimittest.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			clock := testenv.NewClock(userlimittest.Start)
			mem := userlimit.NewMemory(userlimit.WithNow(clock.Now))
			rule := userlimit.Rule{Limit: 5, Window: time.Second, Algorithm: alg}
			const perRound, rounds = 1000, 30
			peak := 0
			for round := range rounds {
				for u := range perRound {
					key := userlimit.Key{Channel: "push", User: fmt.Sprintf("user-%d-%d", round, u)}
					if _, err := mem.Allow(ctx, key, "job", rule); err != nil {
						t.Fatal(err)
					}
					peak = max(peak, mem.LenForTest())
				}
				clock.Advance(3 * time.Second) // everything so far is idle
			}
			// Live: one round. Dead but not yet swept: per shard, at most
			// max(64, what its last sweep left), so about as many again.
			t.Logf("peak %d keys", peak)
			if limit := 2*perRound + 32*64; peak > limit {
				t.Fatalf("peak of %d keys for %d users seen, %d live: want at most %d", peak, perRound*rounds, perRound, limit)
			}
		})
	}
}

// TestMemoryContextDone: a done context is an error, as with Redis.
func TestMemoryContextDone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := userlimit.NewMemory().Allow(ctx, userlimit.Key{Channel: "push", User: "a"}, "job", userlimit.Rule{Limit: 1, Window: time.Second})
	if err == nil {
		t.Fatal("no error on a canceled context")
	}
}
