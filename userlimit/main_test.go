package userlimit_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
	"github.com/notifier/notifier/userlimit/userlimittest"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

var prefixes atomic.Int64

// newPrefix returns a key prefix no other limiter of this test binary uses.
func newPrefix(name string) string {
	return fmt.Sprintf("test:%s:%d:", name, prefixes.Add(1))
}

// redisBackend returns limiters on rdb, each with a fresh prefix (and
// driven by the suite's fake clock through the scripts' optional now
// argument).
func redisBackend(rdb redis.Scripter) userlimittest.Backend {
	return userlimittest.Backend{New: func(t *testing.T, opts ...userlimit.Option) userlimit.Limiter {
		return userlimit.NewRedis(rdb, newPrefix(t.Name()), opts...)
	}}
}

func TestConformanceMemory(t *testing.T) {
	t.Parallel()
	userlimittest.Run(t, userlimittest.Backend{New: func(t *testing.T, opts ...userlimit.Option) userlimit.Limiter {
		return userlimit.NewMemory(opts...)
	}})
}

func TestConformanceRedis(t *testing.T) {
	t.Parallel()
	srv := testenv.Redis(t)
	userlimittest.Run(t, redisBackend(srv.Client()))
}

func TestConformanceRedisCluster(t *testing.T) {
	t.Parallel()
	cluster := testenv.RedisCluster(t)
	userlimittest.Run(t, redisBackend(cluster.Client()))
}

// TestRedisReadsServerTime checks the production path, where the scripts
// read the server's TIME.
func TestRedisReadsServerTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testenv.Redis(t)
	lim := userlimit.NewRedis(srv.Client(), newPrefix("time"))
	for _, alg := range userlimittest.Algorithms {
		rule := userlimit.Rule{Limit: 3, Window: 24 * time.Hour, Algorithm: alg}
		key := userlimit.Key{Channel: "push", User: "alice"}
		for i := range 3 {
			res, err := lim.Allow(ctx, key, fmt.Sprintf("job-%d", i), rule)
			if err != nil || !res.Allowed || res.Remaining != 2-i {
				t.Fatalf("%s job %d: got %+v, %v; want allowed with %d remaining", alg, i, res, err, 2-i)
			}
		}
		res, err := lim.Allow(ctx, key, "job-3", rule)
		if err != nil || res.Allowed || res.RetryAfter <= 0 || res.RetryAfter > 2*rule.Window {
			t.Fatalf("%s job 3: got %+v, %v; want denied with 0 < RetryAfter <= 2×window", alg, res, err)
		}
	}
}
