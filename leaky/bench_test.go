package leaky_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/testenv"
)

var benchGoroutines = []int{1, 8, 64}

// benchCtx is the context of every benchmarked call.
var benchCtx = context.Background()

// the benchmark contract: reservations are decided, queued or refused,
// at a high rate on one provider (the hottest key)
var benchContract = leaky.Contract{Rate: 100_000, MaxQueueDelay: 50 * time.Millisecond}

// the shaped benchmark contracts: the same, with two quotas that never run
// out (a UTC day and a minute), adaptive, or both
var (
	benchQuotas   = []leaky.Quota{{Limit: 1 << 50, Per: 24 * time.Hour}, {Limit: 1 << 50, Per: time.Minute}}
	benchAdaptive = &leaky.Adaptive{MinRate: 1000, Decrease: 0.7, IncreasePerS: 1000, Quiet: time.Second}
)

func benchShaped(adaptive bool, quotas bool) leaky.Contract {
	c := benchContract
	if adaptive {
		c.Adaptive = benchAdaptive
	}
	if quotas {
		c.Quotas = benchQuotas
	}
	return c
}

// BenchmarkReserveShaped is BenchmarkReserve under shaped contracts: what
// quotas and an adaptive rate add to a reservation. Adaptive contracts are
// backed off first (a 1 ms pause), so that reservations pace at a lowered
// rate (the longest path) for the benchmark's length (Quiet is 1 s, the
// climb back 99 s).
func BenchmarkReserveShaped(b *testing.B) {
	variants := []struct {
		name string
		c    leaky.Contract
	}{
		{"Quotas", benchShaped(false, true)},
		{"Adaptive", benchShaped(true, false)},
		{"AdaptiveQuotas", benchShaped(true, true)},
	}
	for _, v := range variants {
		b.Run("Memory/"+v.name, func(b *testing.B) {
			for _, g := range benchGoroutines {
				b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
					q := newMemory(b)
					if _, err := q.Backoff(benchCtx, "sms", v.c, time.Millisecond); err != nil {
						b.Fatal(err)
					}
					testenv.RunConcurrent(b, g, func(int64) error {
						_, err := q.Reserve(benchCtx, "sms", v.c, 1)
						return err
					})
				})
			}
		})
	}
	rdb := testenv.Redis(b).Client()
	for _, v := range variants {
		b.Run("Redis/"+v.name, func(b *testing.B) {
			for _, g := range benchGoroutines {
				b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
					q := newRedis(b, rdb, newPrefix("bench-shaped"))
					if _, err := q.Backoff(benchCtx, "sms", v.c, time.Millisecond); err != nil {
						b.Fatal(err)
					}
					testenv.RunConcurrent(b, g, func(int64) error {
						_, err := q.Reserve(benchCtx, "sms", v.c, 1)
						return err
					})
				})
			}
		})
	}
}

func BenchmarkReserve(b *testing.B) {
	b.Run("Memory", func(b *testing.B) {
		for _, g := range benchGoroutines {
			b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
				q := newMemory(b)
				testenv.RunConcurrent(b, g, func(int64) error {
					_, err := q.Reserve(benchCtx, "sms", benchContract, 1)
					return err
				})
			})
		}
	})
	for _, v := range []struct {
		name string
		opts []leaky.Option
	}{
		{"Redis", nil},
		{"RedisWithoutFailoverGuard", []leaky.Option{leaky.WithoutFailoverGuard()}},
	} {
		b.Run(v.name, func(b *testing.B) {
			rdb := testenv.Redis(b).Client()
			for _, g := range benchGoroutines {
				b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
					q := newRedis(b, rdb, newPrefix("bench"), v.opts...)
					testenv.RunConcurrent(b, g, func(int64) error {
						_, err := q.Reserve(benchCtx, "sms", benchContract, 1)
						return err
					})
				})
			}
		})
	}
}

var (
	floorScript = redis.NewScript(`return 1`)
	// infoScript is the failover guard's part of the reserve script alone
	infoScript = redis.NewScript(`return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')`)
)

// BenchmarkEvalShaFloor is the floor of any Redis decision: one EVALSHA
// round trip of a trivial script on the same client.
func BenchmarkEvalShaFloor(b *testing.B) {
	rdb := testenv.Redis(b).Client()
	for _, g := range benchGoroutines {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			testenv.RunConcurrent(b, g, func(int64) error {
				return floorScript.Run(benchCtx, rdb, nil).Err()
			})
		})
	}
}

// BenchmarkEvalShaRunID is a script that only reads the run_id as the
// reserve script's failover guard does: its cost over the floor is the
// guard's.
func BenchmarkEvalShaRunID(b *testing.B) {
	rdb := testenv.Redis(b).Client()
	for _, g := range benchGoroutines {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			testenv.RunConcurrent(b, g, func(int64) error {
				return infoScript.Run(benchCtx, rdb, nil).Err()
			})
		})
	}
}

// BenchmarkReserveGroup reserves slots in groups (one script run per group
// on one pipeline, as the dispatcher batches its workers' reservations),
// from one goroutine; size=1 is a lone pipelined reservation. One op is one
// reservation.
func BenchmarkReserveGroup(b *testing.B) {
	rdb := testenv.Redis(b).Client()
	for _, size := range []int{1, 16} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			q := newRedis(b, rdb, newPrefix("bench-group"))
			if err := q.Load(benchCtx); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for done := 0; done < b.N; done += size {
				g := q.ReserveGroup("sms", benchContract)
				cmds := make([]*leaky.ReserveCmd, size)
				for k := range cmds {
					cmds[k] = g.Add(1)
				}
				pipe := rdb.Pipeline()
				g.Queue(benchCtx, pipe)
				if _, err := pipe.Exec(benchCtx); err != nil {
					b.Fatal(err)
				}
				for _, c := range cmds {
					if _, err := c.Result(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}
