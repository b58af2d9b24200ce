package userlimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
	"github.com/notifier/notifier/userlimit/userlimittest"
)

// TestPropertyMemoryMatchesRedis applies random sequences of (advance the
// clock, key, job id, limit) to Memory and to Redis (the same fake clock,
// passed to the scripts as their optional now) and requires the very same
// decision every step. The exact algorithms must agree by construction;
// sliding_window agrees too, because both backends do its floating-point
// arithmetic in the same order.
func TestPropertyMemoryMatchesRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	windows := []time.Duration{
		time.Millisecond, 3*time.Millisecond + time.Microsecond, time.Second,
		1500*time.Millisecond + 7*time.Microsecond, 10 * time.Second, time.Hour,
	}
	users := []string{"alice", "bob", "{c}:d"}
	rapid.Check(t, func(rt *rapid.T) {
		alg := rapid.SampledFrom(userlimittest.Algorithms).Draw(rt, "algorithm")
		window := rapid.SampledFrom(windows).Draw(rt, "window")
		w := window.Microseconds()
		offset := rapid.Int64Range(0, 3*w).Draw(rt, "start offset µs")
		clock := userlimittest.NewClock(userlimittest.Start.Add(time.Duration(offset) * time.Microsecond))
		mem := userlimit.NewMemory(clock.Now)
		red := userlimit.NewRedis(rdb, newPrefix("property"))
		red.SetNowForTest(clock.Now)
		advance := rapid.OneOf(
			rapid.Just(int64(0)),
			rapid.Int64Range(1, max(w/10, 1)),
			rapid.Int64Range(0, 3*w),
			// Quarters of the window land exactly on boundaries and lapses.
			rapid.Map(rapid.IntRange(1, 8), func(k int) int64 { return int64(k) * w / 4 }),
		)
		steps := rapid.IntRange(1, 80).Draw(rt, "steps")
		for i := range steps {
			clock.Advance(time.Duration(advance.Draw(rt, "advance µs")) * time.Microsecond)
			key := userlimit.Key{Channel: "push", User: rapid.SampledFrom(users).Draw(rt, "user")}
			job := fmt.Sprintf("job-%d", rapid.IntRange(0, 20).Draw(rt, "job"))
			rule := userlimit.Rule{Limit: rapid.IntRange(1, 6).Draw(rt, "limit"), Window: window, Algorithm: alg}
			want, err := mem.Allow(ctx, key, job, rule)
			if err != nil {
				rt.Fatalf("step %d: memory: %v", i, err)
			}
			got, err := red.Allow(ctx, key, job, rule)
			if err != nil {
				rt.Fatalf("step %d: redis: %v", i, err)
			}
			if got != want {
				rt.Fatalf("step %d (%s, %s, %s, limit %d, at +%s): redis %+v, memory %+v",
					i, alg, key.User, job, rule.Limit, clock.Now().Sub(userlimittest.Start), got, want)
			}
		}
	})
}
