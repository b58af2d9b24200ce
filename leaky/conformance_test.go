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
			return newRedis(t, rdb, newPrefix(name), append(opts, extra...)...)
		},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("Memory", func(t *testing.T) {
		t.Parallel()
		leakytest.Run(t, leakytest.Backend{
			New: func(t *testing.T, opts ...leaky.Option) leaky.Queue {
				return newMemory(t, opts...)
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

// fataler is what newMemory and newRedis need of a *testing.T, *testing.B
// or *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
}

// newMemory is leaky.NewMemory, failing the test on an error.
func newMemory(t fataler, opts ...leaky.Option) *leaky.Memory {
	t.Helper()
	q, err := leaky.NewMemory(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// newRedis is leaky.NewRedis, failing the test on an error.
func newRedis(t fataler, rdb redis.Scripter, prefix string, opts ...leaky.Option) *leaky.Redis {
	t.Helper()
	q, err := leaky.NewRedis(rdb, prefix, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return q
}
