package userlimit_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
	"github.com/notifier/notifier/userlimit/userlimittest"
)

// benchUsers is how many users the benchmarks spread decisions over; with
// benchRule nearly every decision is an admission, the costlier path.
const benchUsers = 100_000

var benchRule = userlimit.Rule{Limit: 100, Window: time.Hour}

// floorScript is the floor every Redis figure is compared with: a bare
// EVALSHA round trip of a script that does nothing.
var floorScript = redis.NewScript("return 1")

func benchKey(i int64) userlimit.Key {
	return userlimit.Key{Channel: "push", User: "user-" + strconv.FormatInt(i%benchUsers, 10)}
}

// BenchmarkAllow measures decisions per second of each algorithm on each
// backend at 1, 8 and 64 goroutines, beside the floor (a bare EVALSHA round
// trip) and go-redis/redis_rate's Allow on the same server in the same run.
func BenchmarkAllow(b *testing.B) {
	ctx := context.Background()
	srv := testenv.Redis(b)
	opts := srv.Options()
	opts.PoolSize = 128 // enough connections for 64 goroutines: measure the server, not the pool
	rdb := redis.NewClient(opts)
	b.Cleanup(func() { _ = rdb.Close() })
	if err := floorScript.Load(ctx, rdb).Err(); err != nil {
		b.Fatal(err)
	}
	fresh := func(b *testing.B) {
		b.Helper()
		if err := rdb.FlushAll(ctx).Err(); err != nil { // the private server of this benchmark only
			b.Fatal(err)
		}
	}
	for _, g := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("floor_evalsha/g=%d", g), func(b *testing.B) {
			testenv.RunConcurrent(b, g, func(i int64) error {
				return floorScript.Run(ctx, rdb, []string{"floor:" + strconv.FormatInt(i%benchUsers, 10)}).Err()
			})
		})
		b.Run(fmt.Sprintf("redis_rate/g=%d", g), func(b *testing.B) {
			fresh(b)
			lim := redis_rate.NewLimiter(rdb)
			limit := redis_rate.Limit{Rate: benchRule.Limit, Burst: benchRule.Limit, Period: benchRule.Window}
			testenv.RunConcurrent(b, g, func(i int64) error {
				_, err := lim.Allow(ctx, "push:user-"+strconv.FormatInt(i%benchUsers, 10), limit)
				return err
			})
		})
		for _, alg := range userlimittest.Algorithms {
			rule := benchRule
			rule.Algorithm = alg
			b.Run(fmt.Sprintf("redis/%s/g=%d", alg, g), func(b *testing.B) {
				fresh(b)
				lim := userlimit.NewRedis(rdb, "bench:")
				testenv.RunConcurrent(b, g, func(i int64) error {
					_, err := lim.Allow(ctx, benchKey(i), "job-"+strconv.FormatInt(i, 10), rule)
					return err
				})
			})
			b.Run(fmt.Sprintf("memory/%s/g=%d", alg, g), func(b *testing.B) {
				lim := userlimit.NewMemory()
				testenv.RunConcurrent(b, g, func(i int64) error {
					_, err := lim.Allow(ctx, benchKey(i), "job-"+strconv.FormatInt(i, 10), rule)
					return err
				})
			})
		}
	}
}

// BenchmarkGroup decides in groups (one script run per group on one
// pipeline, as the dispatcher batches its workers' decisions), from one
// goroutine, for each algorithm; size=1 is a lone pipelined decision. One
// op is one decision.
func BenchmarkGroup(b *testing.B) {
	ctx := context.Background()
	rdb := testenv.Redis(b).Client()
	if err := userlimit.NewRedis(rdb, "").Load(ctx); err != nil {
		b.Fatal(err)
	}
	for _, alg := range userlimittest.Algorithms {
		for _, size := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/size=%d", alg, size), func(b *testing.B) {
				lim := userlimit.NewRedis(rdb, newPrefix("bench-group"))
				rule := benchRule
				rule.Algorithm = alg
				b.ResetTimer()
				for done := 0; done < b.N; done += size {
					g := lim.Group(alg)
					ds := make([]*userlimit.Decision, size)
					for k := range ds {
						i := int64(done + k)
						ds[k] = g.Add(benchKey(i), "job-"+strconv.FormatInt(i, 10), rule)
					}
					pipe := rdb.Pipeline()
					g.Queue(ctx, pipe)
					if _, err := pipe.Exec(ctx); err != nil {
						b.Fatal(err)
					}
					for _, d := range ds {
						if _, err := d.Result(); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			})
		}
	}
}

// BenchmarkBusyUser measures one decision for a user whose log is full:
// limit jobs admitted in the window, every further one denied. sliding_log
// counts its log with ZCOUNT (O(log n)). token_bucket is O(1) for an
// instant after every admission ("past": the jobs were sent), and reads its
// whole log for an instant before its newest admission ("ahead": the jobs
// wait in a provider's queue for slots ahead of now), so that cost grows
// with the limit; MaxTokenBucketLimit bounds it.
func BenchmarkBusyUser(b *testing.B) {
	ctx := context.Background()
	srv := testenv.Redis(b)
	rdb := redis.NewClient(srv.Options())
	b.Cleanup(func() { _ = rdb.Close() })
	for _, limit := range []int{10, 100, userlimit.MaxTokenBucketLimit} {
		for _, alg := range []userlimit.Algorithm{userlimit.SlidingLog, userlimit.TokenBucket} {
			for _, ahead := range []bool{false, true} {
				where := map[bool]string{false: "past", true: "ahead"}[ahead]
				b.Run(fmt.Sprintf("redis/%s/limit=%d/%s", alg, limit, where), func(b *testing.B) {
					rule := userlimit.Rule{Limit: limit, Window: time.Hour, Algorithm: alg}
					lim := userlimit.NewRedis(rdb, fmt.Sprintf("busy%d%s:", limit, where))
					key := userlimit.Key{Channel: "push", User: "busy"}
					for i := range limit {
						var err error
						if ahead {
							_, err = lim.AllowAt(ctx, key, "fill-"+strconv.Itoa(i), rule, time.Now().Add(time.Minute+time.Duration(i)*time.Millisecond))
						} else {
							_, err = lim.Allow(ctx, key, "fill-"+strconv.Itoa(i), rule)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					b.ResetTimer()
					for i := 0; b.Loop(); i++ {
						if _, err := lim.Allow(ctx, key, "job-"+strconv.Itoa(i), rule); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
