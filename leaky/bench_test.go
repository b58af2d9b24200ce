package leaky_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/testenv"
)

var benchGoroutines = []int{1, 8, 64}

// runConcurrent runs op b.N times in total on exactly goroutines goroutines
// and reports decisions per second.
func runConcurrent(b *testing.B, goroutines int, op func(ctx context.Context) error) {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := op(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// the benchmark contract: reservations are decided, queued or refused,
// at a high rate on one provider (the hottest key)
var benchContract = leaky.Contract{Rate: 100_000, MaxQueueDelay: 50 * time.Millisecond}

func BenchmarkReserve(b *testing.B) {
	b.Run("Memory", func(b *testing.B) {
		for _, g := range benchGoroutines {
			b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
				q := leaky.NewMemory(nil)
				runConcurrent(b, g, func(ctx context.Context) error {
					_, err := q.Reserve(ctx, "sms", benchContract, 1)
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
					q := leaky.NewRedis(rdb, newPrefix("bench"), v.opts...)
					runConcurrent(b, g, func(ctx context.Context) error {
						_, err := q.Reserve(ctx, "sms", benchContract, 1)
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
			runConcurrent(b, g, func(ctx context.Context) error {
				return floorScript.Run(ctx, rdb, nil).Err()
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
			runConcurrent(b, g, func(ctx context.Context) error {
				return infoScript.Run(ctx, rdb, nil).Err()
			})
		})
	}
}
