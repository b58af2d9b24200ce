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

// TestAdaptiveRateProperties drives an adaptive contract on Memory with
// random waits, reservations (a queue of some depth) and backoffs, and
// checks what the adaptive rate promises, whatever the provider does:
//
//   - it stays within [MinRate, Rate];
//   - between backoffs it never falls;
//   - a backoff never raises it, and sets a target at or above the rate it
//     resumes at;
//   - until quiet + AdaptiveHold after a backoff it never climbs above that
//     target (the limit the fleet met is not probed before the hold ends);
//   - without further backoffs it is back at Rate once quiet, the hold and
//     the climb from MinRate have passed.
//
// Memory and Redis make the same decisions (TestRedisMatchesMemory), so
// this holds for both.
func TestAdaptiveRateProperties(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		clock := testenv.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
		q := newMemory(rt, leaky.WithNow(clock.Now), leaky.WithHeadroom(rapid.SampledFrom([]float64{0, 0.015, 0.1}).Draw(rt, "headroom")))
		rate := rapid.Float64Range(1, 2000).Draw(rt, "rate")
		a := &leaky.Adaptive{
			MinRate:      max(leaky.MinRate, rate*rapid.Float64Range(0.01, 1).Draw(rt, "minFraction")),
			Decrease:     rapid.Float64Range(0.05, 0.95).Draw(rt, "decrease"),
			IncreasePerS: min(leaky.MaxIncreasePerS, rate*rapid.Float64Range(0.005, 1).Draw(rt, "increaseFraction")),
			Quiet:        time.Duration(rapid.Int64Range(0, 3000).Draw(rt, "quietMillis")) * time.Millisecond,
		}
		c := leaky.Contract{Rate: rate, MaxQueueDelay: time.Duration(rapid.Int64Range(0, 5000).Draw(rt, "mqdMillis")) * time.Millisecond, Adaptive: a}
		shape := func() leaky.Shape {
			sh, err := q.Shape(ctx, "p", c)
			if err != nil {
				rt.Fatal(err)
			}
			return sh
		}
		// a rate in whole quanta, as the queue keeps it
		quanta := func(f float64) int64 { return int64(math.Round(f * 1e6)) }
		var (
			last     = shape().EffectiveRate
			backedAt time.Time // the last backoff; zero: none
			target   float64
		)
		for step := 0; step < 80; step++ {
			switch rapid.IntRange(0, 3).Draw(rt, "action") {
			case 0:
				clock.Advance(time.Duration(rapid.Int64Range(0, 30_000).Draw(rt, "advanceMillis")) * time.Millisecond)
			case 1:
				for range rapid.IntRange(1, 20).Draw(rt, "reservations") {
					if _, err := q.Reserve(ctx, "p", c, rapid.IntRange(1, 3).Draw(rt, "cost")); err != nil {
						rt.Fatal(err)
					}
				}
			case 2:
				before := shape().EffectiveRate
				paused, err := q.PausedFor(ctx, "p") // a backoff during a pause changes no rate
				if err != nil {
					rt.Fatal(err)
				}
				if _, err := q.Backoff(ctx, "p", c, time.Duration(rapid.Int64Range(1, 3000).Draw(rt, "pauseMillis"))*time.Millisecond); err != nil {
					rt.Fatal(err)
				}
				sh := shape()
				if sh.EffectiveRate > before {
					rt.Fatalf("a backoff raised the rate from %v to %v", before, sh.EffectiveRate)
				}
				if sh.Target != 0 && quanta(sh.Target) < quanta(sh.EffectiveRate) {
					rt.Fatalf("a backoff set the target %v under the rate it resumes at, %v", sh.Target, sh.EffectiveRate)
				}
				if paused == 0 {
					backedAt, target = clock.Now(), sh.Target
				}
				last = sh.EffectiveRate
				continue
			}
			sh := shape()
			eff := sh.EffectiveRate
			if quanta(eff) < quanta(a.MinRate) || eff > rate {
				rt.Fatalf("effective rate %v outside [%v, %v]", eff, a.MinRate, rate)
			}
			if eff < last {
				rt.Fatalf("the rate fell from %v to %v without a backoff", last, eff)
			}
			last = eff
			if backedAt.IsZero() {
				continue
			}
			since := clock.Now().Sub(backedAt)
			if target > 0 && since <= a.Quiet+leaky.AdaptiveHold && eff > target {
				rt.Fatalf("%s after a backoff (quiet %s, hold %s): %v, above the target %v", since, a.Quiet, leaky.AdaptiveHold, eff, target)
			}
			climb := time.Duration(math.Ceil((rate-a.MinRate)/a.IncreasePerS)+1) * time.Second
			if since > a.Quiet+leaky.AdaptiveHold+climb && eff != rate {
				rt.Fatalf("%s after the last backoff: %v, want back at the rate %v", since, eff, rate)
			}
		}
	})
}
