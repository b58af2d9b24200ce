package globallimit_test

import (
	"context"
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
