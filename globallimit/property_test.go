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

// TestRedisMatchesMemory drives MemoryStore and RedisStore (given the fake
// clock as its now argument) with the same random takes, clock steps and
// configuration changes, and demands identical answers.
func TestRedisMatchesMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	rapid.Check(t, func(rt *rapid.T) {
		clock := testenv.NewClock(time.Now())
		mem := globallimit.NewMemory(globallimit.WithNow(clock.Now))
		red := globallimit.NewRedis(rdb, newPrefix("prop"), globallimit.WithNow(clock.Now))
		genCfg := func(rt *rapid.T) globallimit.Config {
			return globallimit.Config{
				Rate:  rapid.Float64Range(0.2, 20000).Draw(rt, "rate"),
				Burst: rapid.IntRange(1, 2000).Draw(rt, "burst"),
			}
		}
		cfg := genCfg(rt)
		for i := 0; i < 200; i++ {
			switch rapid.IntRange(0, 9).Draw(rt, "action") {
			case 0:
				cfg = genCfg(rt)
			case 1, 2, 3:
				full := time.Duration(float64(cfg.Burst) / cfg.Rate * float64(time.Second))
				clock.Advance(time.Duration(rapid.Int64Range(0, int64(full/time.Microsecond)).Draw(rt, "advanceMicros")) * time.Microsecond)
			default:
				n := rapid.IntRange(1, 60).Draw(rt, "n")
				mg, mw, err := mem.Take(ctx, cfg, n)
				if err != nil {
					rt.Fatal(err)
				}
				rg, rw, err := red.Take(ctx, cfg, n)
				if err != nil {
					rt.Fatal(err)
				}
				if mg != rg || mw != rw {
					rt.Fatalf("take %d with %+v: memory %d/%v, redis %d/%v", n, cfg, mg, mw, rg, rw)
				}
			}
		}
	})
}

// TestRedisMatchesMemoryBatch is TestRedisMatchesMemory for TakeAll: the
// same random batches from one to three of three buckets, whose limits
// change (a state past a lowered burst is clamped), under a random window
// (rates slower than the burst per window are clamped), including reads
// (n = 0), must get identical answers from both stores.
func TestRedisMatchesMemoryBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	rapid.Check(t, func(rt *rapid.T) {
		clock := testenv.NewClock(time.Now())
		window := time.Duration(rapid.Int64Range(1, 3_600_000).Draw(rt, "windowMillis")) * time.Millisecond
		mem := globallimit.NewMemory(globallimit.WithNow(clock.Now), globallimit.WithWindow(window))
		red := globallimit.NewRedis(rdb, "", globallimit.WithNow(clock.Now), globallimit.WithWindow(window))
		prefix := newPrefix("batch")
		genLimit := func(rt *rapid.T, i int) globallimit.Limit {
			return globallimit.Limit{
				Key:   "{" + prefix + "}" + string(rune('a'+i)),
				Rate:  rapid.Float64Range(0.001, 20000).Draw(rt, "rate"),
				Burst: rapid.IntRange(1, 2000).Draw(rt, "burst"),
			}
		}
		limits := []globallimit.Limit{genLimit(rt, 0), genLimit(rt, 1), genLimit(rt, 2)}
		for i := 0; i < 100; i++ {
			switch rapid.IntRange(0, 9).Draw(rt, "action") {
			case 0:
				j := rapid.IntRange(0, 2).Draw(rt, "bucket")
				limits[j] = genLimit(rt, j)
			case 1, 2, 3:
				clock.Advance(time.Duration(rapid.Int64Range(0, 2_000_000).Draw(rt, "advanceMicros")) * time.Microsecond)
			default:
				var ls []globallimit.Limit
				least := globallimit.MaxBurst
				for _, j := range rapid.SliceOfNDistinct(rapid.IntRange(0, 2), 1, 3, rapid.ID[int]).Draw(rt, "buckets") {
					ls = append(ls, limits[j])
					least = min(least, limits[j].Burst)
				}
				n := rapid.IntRange(0, min(least, 60)).Draw(rt, "n")
				mt, ms, err := mem.TakeAll(ctx, n, ls...)
				if err != nil {
					rt.Fatal(err)
				}
				rtk, rs, err := red.TakeAll(ctx, n, ls...)
				if err != nil {
					rt.Fatal(err)
				}
				if mt != rtk || !slices.Equal(ms, rs) {
					rt.Fatalf("take %d of %+v: memory %v %+v, redis %v %+v", n, ls, mt, ms, rtk, rs)
				}
			}
		}
	})
}
