package leaky_test

import (
	"context"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/testenv"
)

// TestMemoryKeepsItsQuotas drives leaky.Memory with random reservations,
// pauses, backoffs, resumes and clock steps under an adaptive contract
// with quotas (no cancels: every slot granted is sent) and checks the
// promises themselves:
//
//   - no quota window holds more than its limit;
//   - slots never go back, and each is at least the previous reservation's
//     cost·interval at the contract's full rate (headroom applied) after it:
//     adaptive pacing is never faster than the contract;
//   - a refusal that names a quota has that quota's window of its earliest
//     slot spent, and RetryAfter brings the next window's start within
//     max_queue_delay.
func TestMemoryKeepsItsQuotas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	refusals := 0
	defer func() {
		if !t.Failed() && refusals == 0 {
			t.Error("no reservation was refused by a quota")
		}
	}()
	rapid.Check(t, func(rt *rapid.T) {
		clock := testenv.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
		headroom := rapid.SampledFrom([]float64{0, 0.01, 0.1}).Draw(rt, "headroom")
		// WithMaxCost(4): Resume restarts the queue one interval at the
		// largest cost past max_queue_delay
		q := newMemory(rt, leaky.WithNow(clock.Now), leaky.WithHeadroom(headroom), leaky.WithMaxCost(4))
		rate := rapid.Float64Range(1, 500).Draw(rt, "rate")
		c := leaky.Contract{
			Rate:          rate,
			MaxQueueDelay: time.Duration(rapid.Int64Range(0, 5000).Draw(rt, "mqdMillis")) * time.Millisecond,
			Adaptive: &leaky.Adaptive{
				MinRate:      rate * rapid.Float64Range(0.01, 1).Draw(rt, "minFraction"),
				Decrease:     rapid.Float64Range(0.1, 0.9).Draw(rt, "decrease"),
				IncreasePerS: rate * rapid.Float64Range(0.01, 1).Draw(rt, "increaseFraction"),
				Quiet:        time.Duration(rapid.Int64Range(0, 2000).Draw(rt, "quietMillis")) * time.Millisecond,
			},
		}
		for i, n := 0, rapid.IntRange(1, 3).Draw(rt, "quotas"); i < n; i++ {
			c.Quotas = append(c.Quotas, leaky.Quota{
				Limit: rapid.Int64Range(4, 30).Draw(rt, "limit"),
				Per:   time.Duration(rapid.IntRange(1, 4).Draw(rt, "perSeconds")) * time.Second,
			})
		}
		used := make([]map[int64]int64, len(c.Quotas)) // per quota: window index → units
		for i := range used {
			used[i] = map[int64]int64{}
		}
		fullRate := rate * (1 - headroom)
		var last leaky.Reservation
		lastCost := 0
		for step := 0; step < 150; step++ {
			switch rapid.IntRange(0, 5).Draw(rt, "action") {
			case 0, 1:
				clock.Advance(time.Duration(rapid.Int64Range(0, 3000).Draw(rt, "advanceMillis")) * time.Millisecond)
			case 2, 3:
				cost := rapid.IntRange(1, 4).Draw(rt, "cost")
				r, err := q.Reserve(ctx, "p", c, cost)
				if err != nil {
					rt.Fatal(err)
				}
				now := clock.Now().UnixMicro()
				if !r.OK {
					if r.Quota < 0 {
						continue
					}
					// its earliest slot lies past a spent window of that quota
					qt := c.Quotas[r.Quota]
					next := now + (r.RetryAfter + c.MaxQueueDelay).Microseconds()
					if next%qt.Per.Microseconds() != 0 {
						rt.Fatalf("refused by quota %d: retry at %d µs, not a window start of %s", r.Quota, next, qt.Per)
					}
					refusals++
					k := next/qt.Per.Microseconds() - 1
					if used[r.Quota][k]+int64(cost) <= qt.Limit {
						rt.Fatalf("refused by quota %d, whose window %d holds %d of %d (cost %d)", r.Quota, k, used[r.Quota][k], qt.Limit, cost)
					}
					continue
				}
				if last.OK {
					if r.Slot < last.Slot {
						rt.Fatalf("slot %d before the previous %d", r.Slot, last.Slot)
					}
					if gap, min := float64(r.Slot-last.Slot), float64(lastCost)*1e6/fullRate; gap < math.Floor(min) {
						rt.Fatalf("slots %v µs apart, under cost %d at the full rate (%v µs)", gap, lastCost, min)
					}
				}
				for i, qt := range c.Quotas {
					k := r.Slot / qt.Per.Microseconds()
					used[i][k] += int64(cost)
					if used[i][k] > qt.Limit {
						rt.Fatalf("quota %d window %d holds %d units, limit %d", i, k, used[i][k], qt.Limit)
					}
				}
				last, lastCost = r, cost
			case 4:
				d := time.Duration(rapid.Int64Range(1, 3000).Draw(rt, "backoffMillis")) * time.Millisecond
				if _, err := q.Backoff(ctx, "p", c, d); err != nil {
					rt.Fatal(err)
				}
			case 5:
				if _, err := q.Resume(ctx, "p", c); err != nil {
					rt.Fatal(err)
				}
			}
		}
	})
}
