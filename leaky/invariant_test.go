package leaky_test

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/testenv"
)

// granted is one reservation Memory granted and the invariant test keeps.
type granted struct {
	r          leaky.Reservation
	cost       int
	reservedAt int64 // µs, the clock when it was granted
	step       int   // when, in the order of the calls
}

// pauseSpan is one Pause call: from its call to its end, µs.
type pauseSpan struct {
	from, until int64 // µs
	step        int   // when, in the order of the calls
}

// TestMemoryKeepsItsPromises drives leaky.Memory on the fake clock with
// random sequences of reservations (random costs up to the max cost),
// cancels, pauses and clock steps (some far past the queue's drain time)
// and checks the promises themselves, not agreement with another backend,
// on the slots still held (a cancelled reservation is not sent, whether
// the cancel gave its slot back or not):
//
//   - spacing: in slot order, each slot is at least cost·interval after
//     the one before it, cost being the earlier reservation's and interval
//     1/(rate·(1−headroom)) s (WithHeadroom; the package doc);
//   - the contract: no window [t, t+1 s) holds more than rate units,
//     counting a reservation's units one interval apart from its slot (the
//     time GCRA charges it); counting each reservation's whole cost at its
//     slot, a window holds at most rate + maxCost − 1 (the last
//     reservation's units not yet paid for);
//   - pauses: no slot granted after a Pause lies inside it;
//   - the bound: no slot is more than MaxQueueDelay after its reservation;
//   - refusals: a refused reservation's earliest possible slot (the end of
//     the queue as the Queue doc defines it: every held or un-returned slot
//     plus its cost·interval, and the pause end) really was more than
//     MaxQueueDelay away, and RetryAfter says by how much.
func TestMemoryKeepsItsPromises(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		clock := testenv.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
		headroom := rapid.SampledFrom([]float64{0, 0.01, 0.015, 0.1}).Draw(rt, "headroom")
		maxCost := rapid.IntRange(1, 4).Draw(rt, "maxCost")
		q := newMemory(rt, leaky.WithNow(clock.Now), leaky.WithHeadroom(headroom), leaky.WithMaxCost(maxCost))
		rate := rapid.IntRange(1, 500).Draw(rt, "rate") // whole units: a 1 s window holds whole units
		c := leaky.Contract{
			Rate:          float64(rate),
			MaxQueueDelay: time.Duration(rapid.Int64Range(0, 3_000_000).Draw(rt, "mqdMicros")) * time.Microsecond,
		}
		const provider = "p"
		interval := 1e6 / (float64(rate) * (1 - headroom)) // µs per unit, exactly
		inc := func(cost int) int64 { return int64(math.Ceil(float64(cost) * interval)) }
		now := func() int64 { return clock.Now().UnixMicro() }

		var (
			held   []granted   // granted, not cancelled
			pauses []pauseSpan // every Pause call
			// The end of the queue as Queue's doc defines it: the last grant's
			// slot plus its ⌈cost·interval⌉, moved back by a cancel of the
			// last grant (when nothing followed it) and forward by a pause.
			tail      int64
			tailGrant *granted // the grant tail ends, while a cancel may return it
			pauseEnd  int64
			step      int
		)

		rt.Repeat(map[string]func(*rapid.T){
			"advance": func(rt *rapid.T) {
				us := rapid.Int64Range(0, 2*int64(interval)*int64(maxCost)+c.MaxQueueDelay.Microseconds()).Draw(rt, "advanceMicros")
				clock.Advance(time.Duration(us) * time.Microsecond)
			},
			"gap": func(rt *rapid.T) { // past the drain time: the queue is idle again
				clock.Advance(c.MaxQueueDelay + time.Duration(rapid.IntRange(1, 120).Draw(rt, "gapSeconds"))*time.Second)
			},
			"reserve": func(rt *rapid.T) {
				cost := rapid.IntRange(1, maxCost).Draw(rt, "cost")
				at := now()
				r, err := q.Reserve(ctx, provider, c, cost)
				if err != nil {
					rt.Fatal(err)
				}
				earliest := max(at, tail, pauseEnd)
				if !r.OK {
					if earliest-at <= c.MaxQueueDelay.Microseconds() {
						rt.Fatalf("cost %d refused at %d though the queue ends at %d, within max_queue_delay %s", cost, at, earliest, c.MaxQueueDelay)
					}
					if want := time.Duration(earliest-at-c.MaxQueueDelay.Microseconds()) * time.Microsecond; r.RetryAfter != want {
						rt.Fatalf("refused with RetryAfter %s, the queue frees in %s", r.RetryAfter, want)
					}
					return
				}
				if r.Slot < at {
					rt.Fatalf("slot %d before the reservation at %d", r.Slot, at)
				}
				if d := r.Slot - at; d > c.MaxQueueDelay.Microseconds() {
					rt.Fatalf("slot %s ahead of its reservation, max_queue_delay %s", time.Duration(d)*time.Microsecond, c.MaxQueueDelay)
				}
				if r.Delay != time.Duration(r.Slot-at)*time.Microsecond {
					rt.Fatalf("Delay %s, slot %d µs after now", r.Delay, r.Slot-at)
				}
				step++
				g := granted{r: r, cost: cost, reservedAt: at, step: step}
				held = append(held, g)
				tail, tailGrant = max(tail, r.Slot+inc(cost)), &g
			},
			"cancel": func(rt *rapid.T) {
				if len(held) == 0 {
					rt.Skip("nothing held")
				}
				i := rapid.IntRange(0, len(held)-1).Draw(rt, "which")
				g := held[i]
				if err := q.Cancel(ctx, provider, c, g.r, g.cost); err != nil {
					rt.Fatal(err)
				}
				if tailGrant != nil && tailGrant.r == g.r {
					tail, tailGrant = g.r.Slot, nil // given back: nothing followed it
				}
				held = slices.Delete(held, i, i+1)
			},
			"pause": func(rt *rapid.T) {
				d := time.Duration(rapid.Int64Range(1, 3_000_000).Draw(rt, "pauseMicros")) * time.Microsecond
				at := now()
				if err := q.Pause(ctx, provider, d); err != nil {
					rt.Fatal(err)
				}
				step++
				pauses = append(pauses, pauseSpan{from: at, until: at + d.Microseconds(), step: step})
				pauseEnd = max(pauseEnd, at+d.Microseconds())
				if tail < pauseEnd {
					// The pause moved the end of the queue: the last grant
					// can no longer be given back (one that ends after the
					// pause still can; the pause end holds either way).
					tail, tailGrant = pauseEnd, nil
				}
			},
			"": func(rt *rapid.T) { checkHeld(rt, held, pauses, interval, rate, maxCost) },
		})
	})
}

// checkHeld checks the spacing, contract and pause promises on the slots
// held (see TestMemoryKeepsItsPromises).
func checkHeld(rt *rapid.T, held []granted, pauses []pauseSpan, interval float64, rate, maxCost int) {
	s := slices.Clone(held)
	slices.SortFunc(s, func(a, b granted) int { return int(a.r.Slot - b.r.Slot) })
	for i := 1; i < len(s); i++ {
		need := float64(s[i-1].cost) * interval
		if gap := float64(s[i].r.Slot - s[i-1].r.Slot); gap < need-1e-6 {
			rt.Fatalf("slot %d only %.1f µs after slot %d of cost %d: %.1f µs needed", s[i].r.Slot, gap, s[i-1].r.Slot, s[i-1].cost, need)
		}
	}

	var spread, atSlot []float64 // µs after the first slot (small: exact enough in a float64)
	for _, g := range s {
		for u := range g.cost {
			spread = append(spread, float64(g.r.Slot-s[0].r.Slot)+float64(u)*interval)
			atSlot = append(atSlot, float64(g.r.Slot-s[0].r.Slot))
		}
	}
	slices.Sort(spread)
	if most := mostIn(spread, 1e6); most > rate {
		rt.Fatalf("%d units (one interval apart from each slot) in a 1 s window, contract %d/s", most, rate)
	}
	if most := mostIn(atSlot, 1e6); most > rate+maxCost-1 {
		rt.Fatalf("%d units (each cost at its slot) in a 1 s window, contract %d/s and max cost %d", most, rate, maxCost)
	}

	for _, g := range s {
		for _, p := range pauses {
			if g.step > p.step && g.r.Slot >= p.from && g.r.Slot < p.until {
				rt.Fatalf("slot %d granted at %d lies in the pause [%d, %d)", g.r.Slot, g.reservedAt, p.from, p.until)
			}
		}
	}
}

// mostIn is the most of ts (sorted) in any [t, t+window); times less than
// a nanosecond short of window apart count as window apart (float rounding
// of the spread units).
func mostIn(ts []float64, window float64) int {
	best, i := 0, 0
	for j := range ts {
		for ts[j]-ts[i] >= window-1e-3 {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}
