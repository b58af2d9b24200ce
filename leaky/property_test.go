package leaky_test

import (
	"context"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/leaky/leakytest"
	"github.com/notifier/notifier/testenv"
)

// held is one reservation taken from both backends by the same request.
type held struct {
	provider string
	cost     int
	mem, red leaky.Reservation
}

// TestRedisMatchesMemory drives the Memory and Redis backends with the same
// random sequences of reservations, cancels, pauses, reads and clock steps
// (Redis gets the fake clock as its now argument) and demands the same
// answers, exactly, after both providers are warm.
func TestRedisMatchesMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	rapid.Check(t, func(rt *rapid.T) {
		clock := leakytest.NewClock(time.Now())
		opts := []leaky.Option{
			leaky.WithHeadroom(rapid.SampledFrom([]float64{0, 0.01, 0.05}).Draw(rt, "headroom")),
			leaky.WithMaxCost(rapid.IntRange(1, 3).Draw(rt, "maxCost")),
			leaky.WithNow(clock.Now),
		}
		mem := leaky.NewMemory(nil, opts...)
		red := leaky.NewRedis(rdb, newPrefix("prop"), opts...)
		c := leaky.Contract{
			Rate:          rapid.Float64Range(0.5, 5000).Draw(rt, "rate"),
			MaxQueueDelay: time.Duration(rapid.Int64Range(0, 3_000_000).Draw(rt, "mqdMicros")) * time.Microsecond,
		}
		interval := time.Duration(float64(time.Second) / c.Rate)
		providers := []string{"a", "b"}
		for _, p := range providers { // warm: Redis starts cold, Memory at now
			if _, err := mem.Reserve(ctx, p, c, 1); err != nil {
				rt.Fatal(err)
			}
			if _, err := red.Reserve(ctx, p, c, 1); err != nil {
				rt.Fatal(err)
			}
		}
		clock.Advance(time.Minute + c.MaxQueueDelay + 4*interval)

		var hold []held
		actions := map[string]func(*rapid.T){
			"advance": func(rt *rapid.T) {
				max := int64(2*c.MaxQueueDelay+3*interval) / 1000
				clock.Advance(time.Duration(rapid.Int64Range(0, max).Draw(rt, "advanceMicros")) * time.Microsecond)
			},
			"reserve": func(rt *rapid.T) {
				p := rapid.SampledFrom(providers).Draw(rt, "provider")
				cost := rapid.IntRange(1, 4).Draw(rt, "cost")
				m, err := mem.Reserve(ctx, p, c, cost)
				if err != nil {
					rt.Fatal(err)
				}
				r, err := red.Reserve(ctx, p, c, cost)
				if err != nil {
					rt.Fatal(err)
				}
				if m.OK != r.OK || m.Delay != r.Delay || m.RetryAfter != r.RetryAfter || m.Slot != r.Slot {
					rt.Fatalf("reserve %s cost %d: memory %+v, redis %+v", p, cost, m, r)
				}
				if m.OK {
					hold = append(hold, held{provider: p, cost: cost, mem: m, red: r})
				}
			},
			// Several reservations in one script run (a ReserveGroup on a
			// pipeline, as the dispatcher makes them) answer as that many
			// Memory reservations at one instant.
			"reserveGroup": func(rt *rapid.T) {
				p := rapid.SampledFrom(providers).Draw(rt, "provider")
				costs := rapid.SliceOfN(rapid.IntRange(1, 4), 1, 12).Draw(rt, "costs")
				g := red.ReserveGroup(p, c)
				cmds := make([]*leaky.ReserveCmd, len(costs))
				for i, cost := range costs {
					cmds[i] = g.Add(cost)
				}
				pipe := rdb.Pipeline()
				g.Queue(ctx, pipe)
				if _, err := pipe.Exec(ctx); err != nil {
					rt.Fatal(err)
				}
				for i, cost := range costs {
					m, err := mem.Reserve(ctx, p, c, cost)
					if err != nil {
						rt.Fatal(err)
					}
					r, err := cmds[i].Result()
					if err != nil {
						rt.Fatal(err)
					}
					if m.OK != r.OK || m.Delay != r.Delay || m.RetryAfter != r.RetryAfter || m.Slot != r.Slot {
						rt.Fatalf("group reservation %d of %d (%s, cost %d): memory %+v, redis %+v", i+1, len(costs), p, cost, m, r)
					}
					if m.OK {
						hold = append(hold, held{provider: p, cost: cost, mem: m, red: r})
					}
				}
			},
			"cancel": func(rt *rapid.T) {
				if len(hold) == 0 {
					return
				}
				h := rapid.SampledFrom(hold).Draw(rt, "held")
				if err := mem.Cancel(ctx, h.provider, c, h.mem, h.cost); err != nil {
					rt.Fatal(err)
				}
				if err := red.Cancel(ctx, h.provider, c, h.red, h.cost); err != nil {
					rt.Fatal(err)
				}
			},
			"pause": func(rt *rapid.T) {
				p := rapid.SampledFrom(providers).Draw(rt, "provider")
				d := time.Duration(rapid.Int64Range(-1000, 4_000_000).Draw(rt, "pauseMicros")) * time.Microsecond
				if err := mem.Pause(ctx, p, d); err != nil {
					rt.Fatal(err)
				}
				if err := red.Pause(ctx, p, d); err != nil {
					rt.Fatal(err)
				}
			},
			"pausedFor": func(rt *rapid.T) {
				p := rapid.SampledFrom(providers).Draw(rt, "provider")
				m, err := mem.PausedFor(ctx, p)
				if err != nil {
					rt.Fatal(err)
				}
				r, err := red.PausedFor(ctx, p)
				if err != nil {
					rt.Fatal(err)
				}
				if m != r {
					rt.Fatalf("paused for %s: memory %v, redis %v", p, m, r)
				}
			},
			"depth": func(rt *rapid.T) {
				p := rapid.SampledFrom(providers).Draw(rt, "provider")
				m, err := mem.Depth(ctx, p, c)
				if err != nil {
					rt.Fatal(err)
				}
				r, err := red.Depth(ctx, p, c)
				if err != nil {
					rt.Fatal(err)
				}
				if m != r {
					rt.Fatalf("depth %s: memory %v, redis %v", p, m, r)
				}
			},
		}
		// rt.Repeat runs about 30 actions; queues need longer runs to fill,
		// drain and pause, so run 200, weighted towards reserving.
		names := []string{"advance", "advance", "reserve", "reserve", "reserve", "reserveGroup", "cancel", "pause", "pausedFor", "depth"}
		for i := 0; i < 200; i++ {
			actions[rapid.SampledFrom(names).Draw(rt, "action")](rt)
		}
	})
}
