package globallimit_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/testenv"
)

var benchGoroutines = []int{1, 8, 64}

// benchCtx is the context of every benchmarked call.
var benchCtx = context.Background()

// a bucket that grants and refuses at a high rate: the decision is measured,
// not the pacing
var benchConfig = globallimit.Config{Rate: 1e6, Burst: 1000}

func BenchmarkTake(b *testing.B) {
	b.Run("Memory", func(b *testing.B) {
		for _, g := range benchGoroutines {
			b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
				s := globallimit.NewMemory()
				testenv.RunConcurrent(b, g, func(int64) error {
					_, _, err := s.Take(benchCtx, benchConfig, 1)
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
				testenv.RunConcurrent(b, g, func(int64) error {
					_, _, err := s.Take(benchCtx, benchConfig, 1)
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
			testenv.RunConcurrent(b, g, func(int64) error { return bk.Wait(benchCtx) })
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
			testenv.RunConcurrent(b, g, func(int64) error {
				return floorScript.Run(benchCtx, rdb, nil).Err()
			})
		})
	}
}
