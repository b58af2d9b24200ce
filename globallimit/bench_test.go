package globallimit_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/globallimit"
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

// a bucket that grants and refuses at a high rate: the decision is measured,
// not the pacing
var benchConfig = globallimit.Config{Rate: 1e6, Burst: 1000}

func BenchmarkTake(b *testing.B) {
	b.Run("Memory", func(b *testing.B) {
		for _, g := range benchGoroutines {
			b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
				s := globallimit.NewMemory(nil)
				runConcurrent(b, g, func(ctx context.Context) error {
					_, _, err := s.Take(ctx, benchConfig, 1)
					return err
				})
			})
		}
	})
	b.Run("Redis", func(b *testing.B) {
		rdb := testenv.Redis(b).Client()
		for _, g := range benchGoroutines {
			b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
				s := globallimit.NewRedis(rdb, newPrefix("bench"))
				runConcurrent(b, g, func(ctx context.Context) error {
					_, _, err := s.Take(ctx, benchConfig, 1)
					return err
				})
			})
		}
	})
}

// BenchmarkWaitLeased is Bucket.Wait on Redis with the default lease for
// the default config's shape scaled up (L = 100): admissions per second a
// process gets for one Redis call per lease.
func BenchmarkWaitLeased(b *testing.B) {
	rdb := testenv.Redis(b).Client()
	cfg := globallimit.Config{Rate: 1e6, Burst: 5000}
	for _, g := range benchGoroutines {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			bk := globallimit.New(globallimit.NewRedis(rdb, newPrefix("bench")), cfg)
			runConcurrent(b, g, bk.Wait)
		})
	}
}

var floorScript = redis.NewScript(`return 1`)

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
