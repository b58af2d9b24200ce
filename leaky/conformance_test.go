package leaky_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/leaky/leakytest"
	"github.com/notifier/notifier/testenv"
)

// prefixes gives every queue of a test binary its own keys.
var prefixes atomic.Int64

func newPrefix(name string) string {
	return fmt.Sprintf("test:%s:%d:", name, prefixes.Add(1))
}

func redisBackend(rdb redis.Scripter, name string, extra ...leaky.Option) leakytest.Backend {
	return leakytest.Backend{
		ColdStart: true,
		New: func(t *testing.T, opts ...leaky.Option) leaky.Queue {
			return leaky.NewRedis(rdb, newPrefix(name), append(opts, extra...)...)
		},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("Memory", func(t *testing.T) {
		t.Parallel()
		leakytest.Run(t, leakytest.Backend{
			New: func(t *testing.T, opts ...leaky.Option) leaky.Queue {
				return leaky.NewMemory(opts...)
			},
		})
	})
	t.Run("Redis", func(t *testing.T) {
		t.Parallel()
		srv := testenv.Redis(t)
		leakytest.Run(t, redisBackend(srv.Client(), "redis"))
	})
	t.Run("RedisWithoutFailoverGuard", func(t *testing.T) {
		t.Parallel()
		srv := testenv.Redis(t)
		leakytest.Run(t, redisBackend(srv.Client(), "noguard", leaky.WithoutFailoverGuard()))
	})
	t.Run("RedisCluster", func(t *testing.T) {
		t.Parallel()
		cluster := testenv.RedisCluster(t)
		leakytest.Run(t, redisBackend(cluster.Client(), "cluster"))
	})
}

func newClock() *testenv.Clock { return testenv.NewClock(time.Now()) }
