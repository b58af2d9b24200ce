package userlimit_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
	"github.com/notifier/notifier/userlimit/userlimittest"
)

// TestPropertySendsKeepTheBound drives Memory the way the dispatcher does
// (a job admitted for now when it is taken, then moved to its send slot,
// which may lie ahead and be decided in any order; deferred, redelivered,
// its slot taken again) and checks each algorithm's promise on the
// instants the jobs are finally sent, not agreement with another backend:
//
//   - sliding_log: at most limit in any window;
//   - fixed_window: at most limit in any epoch-aligned window (so 2·limit
//     in any window);
//   - sliding_window: at most 2·limit−1 in any window;
//   - token_bucket: at most limit + d/T in any interval of length d
//     (T = ceil(window/limit)).
func TestPropertySendsKeepTheBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, alg := range userlimittest.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			rapid.Check(t, func(rt *rapid.T) { checkSendsKeepTheBound(ctx, rt, alg) })
		})
	}
}

func checkSendsKeepTheBound(ctx context.Context, rt *rapid.T, alg userlimit.Algorithm) {
	{
		window := rapid.SampledFrom([]time.Duration{10 * time.Millisecond, time.Second, 3 * time.Second}).Draw(rt, "window")
		w := window.Microseconds()
		limit := rapid.IntRange(1, 5).Draw(rt, "limit")
		rule := userlimit.Rule{Limit: limit, Window: window, Algorithm: alg}
		clock := testenv.NewClock(userlimittest.Start.Add(time.Duration(rapid.Int64Range(0, w).Draw(rt, "offset")) * time.Microsecond))
		mem := userlimit.NewMemory(userlimit.WithNow(clock.Now))
		key := userlimit.Key{Channel: "sms", User: "u"}

		// stands: each job's admission (the instant it would be sent at);
		// sent: the instants of admissions that lapsed (sent and done).
		stands := map[string]int64{}
		var sent []int64
		settle := func(job string, now int64) {
			if at, ok := stands[job]; ok && at+w <= now {
				sent = append(sent, at) // its window is over: it was sent then
				delete(stands, job)
			}
		}
		steps := rapid.IntRange(1, 120).Draw(rt, "steps")
		for i := range steps {
			clock.Advance(time.Duration(rapid.Int64Range(0, w/2).Draw(rt, "advance µs")) * time.Microsecond)
			now := clock.Now().UnixMicro()
			job := fmt.Sprintf("j%d", rapid.IntRange(0, 12).Draw(rt, "job"))
			settle(job, now)
			var res userlimit.Result
			var err error
			move := rapid.Bool().Draw(rt, "move to a slot")
			var ahead int64
			if move {
				ahead = rapid.Int64Range(-w/4, 2*w).Draw(rt, "slot ahead µs")
				res, err = mem.AllowAt(ctx, key, job, rule, clock.Now().Add(time.Duration(ahead)*time.Microsecond))
			} else {
				res, err = mem.Allow(ctx, key, job, rule)
			}
			if err != nil {
				rt.Fatalf("step %d: %v", i, err)
			}
			switch {
			case res.Allowed && move:
				// The dispatcher sends at the slot it asked for (or now, for
				// a slot already passed).
				slot := max(clock.Now().Add(time.Duration(ahead)*time.Microsecond).UnixMicro(), now)
				if res.At.UnixMicro() != slot {
					rt.Fatalf("step %d: allowed for slot %d, but the admission stands at %d", i, slot, res.At.UnixMicro())
				}
				stands[job] = slot
			case res.Allowed:
				stands[job] = res.At.UnixMicro()
			case move:
				delete(stands, job) // denied at its slot: not sent there
			}
			all := append([]int64(nil), sent...)
			for _, at := range stands {
				all = append(all, at)
			}
			if msg := overBound(alg, all, w, int64(limit)); msg != "" {
				rt.Fatalf("step %d (%s, limit %d, window %s): %s", i, alg, limit, window, msg)
			}
		}
	}
}

// overBound describes the first window of instants over the algorithm's
// bound, or returns "".
func overBound(alg userlimit.Algorithm, instants []int64, w, limit int64) string {
	ts := append([]int64(nil), instants...)
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	T := (w + limit - 1) / limit
	for i := range ts {
		n := int64(0)
		for j := i; j < len(ts); j++ {
			d := ts[j] - ts[i]
			n++
			switch alg {
			case userlimit.SlidingLog:
				if d < w && n > limit {
					return fmt.Sprintf("%d admitted in [%d, %d], a window of %dµs", n, ts[i], ts[j], w)
				}
			case userlimit.SlidingWindow:
				if d < w && n > 2*limit-1 {
					return fmt.Sprintf("%d admitted in [%d, %d], over 2·limit−1", n, ts[i], ts[j])
				}
			case userlimit.FixedWindow:
				if floorDiv(ts[i], w) == floorDiv(ts[j], w) && n > limit {
					return fmt.Sprintf("%d admitted in the fixed window of %d", n, ts[i])
				}
			case userlimit.TokenBucket:
				if n > limit+d/T {
					return fmt.Sprintf("%d admitted in [%d, %d], over limit + d/T = %d", n, ts[i], ts[j], limit+d/T)
				}
			}
		}
	}
	return ""
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
