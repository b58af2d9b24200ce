package globallimit_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/testenv"
)

// TestFleetKeepsTheLeasingBound checks the package doc's promise for a fleet
// of leasing processes: in any window of length t the fleet admits at most
//
//	Burst + Rate·t + P·L    (P processes, L the lease size)
//
// Several Buckets (the processes) share one MemoryStore on the fake clock;
// random sequences of Waits (single ones and runs that drain the bucket),
// clock steps and idle gaps are applied, a Wait that must wait for the
// store sleeps by advancing the clock, and every admission is stamped with
// the clock. Every pair of admissions, the window [first, last] they span
// holds at most the bound. It checks the bound itself, not agreement with
// the Redis store.
func TestFleetKeepsTheLeasingBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		clock := testenv.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
		cfg := globallimit.Config{
			Rate:  rapid.Float64Range(1, 5000).Draw(rt, "rate"),
			Burst: rapid.IntRange(1, 300).Draw(rt, "burst"),
		}
		lease := globallimit.LeaseSize(cfg)
		var opts []globallimit.Option
		if rapid.Bool().Draw(rt, "fixedLease") {
			lease = rapid.IntRange(1, 40).Draw(rt, "lease")
			opts = append(opts, globallimit.WithLeaseSize(lease))
		}
		ttl := time.Duration(rapid.Int64Range(1, 2000).Draw(rt, "leaseTTLMillis")) * time.Millisecond
		opts = append(opts, globallimit.WithLeaseTTL(ttl), globallimit.WithNow(clock.Now),
			globallimit.WithSleeper(func(_ context.Context, d time.Duration) error {
				clock.Advance(d) // the fake clock's sleep: time passes, nothing blocks
				return nil
			}))
		store := globallimit.NewMemory(globallimit.WithNow(clock.Now))
		procs := make([]*globallimit.Bucket, rapid.IntRange(1, 4).Draw(rt, "processes"))
		for i := range procs {
			procs[i] = globallimit.New(store, cfg, opts...)
		}

		var admitted []time.Time // in order: one goroutine, a clock that only moves forward
		wait := func(p int) {
			if err := procs[p].Wait(ctx); err != nil {
				rt.Fatal(err)
			}
			admitted = append(admitted, clock.Now())
		}
		refill := time.Duration(float64(time.Second) / cfg.Rate)
		rt.Repeat(map[string]func(*rapid.T){
			"wait": func(rt *rapid.T) { wait(rapid.IntRange(0, len(procs)-1).Draw(rt, "process")) },
			"run": func(rt *rapid.T) { // many at once: drains the bucket, leases, sleeps
				p := rapid.IntRange(0, len(procs)-1).Draw(rt, "process")
				for range rapid.IntRange(1, cfg.Burst+3*lease).Draw(rt, "n") {
					wait(p)
				}
			},
			"advance": func(rt *rapid.T) {
				clock.Advance(time.Duration(rapid.Int64Range(0, 3*int64(refill)+int64(ttl)).Draw(rt, "advanceNanos")))
			},
			"gap": func(rt *rapid.T) {
				clock.Advance(time.Duration(rapid.IntRange(1, 10).Draw(rt, "gapSeconds")) * time.Second)
			},
		})
		checkLeasingBound(rt, admitted, cfg, len(procs), lease)
	})
}

// checkLeasingBound fails rt when some window [admitted[i], admitted[j]]
// holds more admissions than Burst + Rate·t + P·L.
func checkLeasingBound(rt *rapid.T, admitted []time.Time, cfg globallimit.Config, procs, lease int) {
	if !slices.IsSortedFunc(admitted, func(a, b time.Time) int { return a.Compare(b) }) {
		rt.Fatalf("admissions out of clock order")
	}
	extra := float64(cfg.Burst + procs*lease)
	for i := range admitted {
		for j := i; j < len(admitted); j++ {
			span := admitted[j].Sub(admitted[i])
			bound := extra + cfg.Rate*span.Seconds()
			if n := j - i + 1; float64(n) > bound+1e-9 {
				rt.Fatalf("%d admitted in %s (from +%s): bound Burst %d + Rate %.3f/s × t + %d processes × lease %d = %.3f",
					n, span, admitted[i].Sub(admitted[0]), cfg.Burst, cfg.Rate, procs, lease, bound)
			}
			if float64(len(admitted)-i) <= bound {
				break // no later j can break it: the bound only grows with t
			}
		}
	}
}
