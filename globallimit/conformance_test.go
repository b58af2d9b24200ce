package globallimit_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/globallimit/globallimittest"
	"github.com/notifier/notifier/testenv"
)

var prefixes atomic.Int64

func newPrefix(name string) string {
	return fmt.Sprintf("test:%s:%d:", name, prefixes.Add(1))
}

func redisBackend(rdb redis.Scripter, name string) globallimittest.Backend {
	return globallimittest.Backend{New: func(t *testing.T, opts ...globallimit.Option) globallimit.Store {
		return globallimit.NewRedis(rdb, newPrefix(name), opts...)
	}}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("Memory", func(t *testing.T) {
		t.Parallel()
		globallimittest.Run(t, globallimittest.Backend{New: func(t *testing.T, opts ...globallimit.Option) globallimit.Store {
			return globallimit.NewMemory(opts...)
		}})
	})
	t.Run("Redis", func(t *testing.T) {
		t.Parallel()
		globallimittest.Run(t, redisBackend(testenv.Redis(t).Client(), "redis"))
	})
	t.Run("RedisCluster", func(t *testing.T) {
		t.Parallel()
		cluster := testenv.RedisCluster(t)
		globallimittest.Run(t, redisBackend(cluster.Client(), "cluster"))
	})
}

// TestKey checks the key's name and that the cluster serves it (one key,
// so no CROSSSLOT is possible; the hash tag keeps it so if keys are added).
func TestKey(t *testing.T) {
	t.Parallel()
	if got := globallimit.Key("notifier:"); got != "{notifier:g}" {
		t.Fatalf("key %q, want {notifier:g}", got)
	}
	ctx := context.Background()
	rdb := testenv.RedisCluster(t).Client()
	for _, prefix := range []string{"notifier:", "", "a}b", "{x"} {
		k := globallimit.Key(prefix)
		slot, err := rdb.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatalf("cluster keyslot %q: %v", k, err)
		}
		tagged, err := rdb.ClusterKeySlot(ctx, k+":other").Result()
		if err != nil {
			t.Fatal(err)
		}
		if slot != tagged {
			t.Errorf("%q in slot %d but %q in %d: the hash tag does not hold", k, slot, k+":other", tagged)
		}
	}
}
