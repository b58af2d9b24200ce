package globallimit

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/internal/luapre"
)

var (
	//go:embed take.lua
	takeLua    string
	takeScript = redis.NewScript(luapre.Now + luapre.Num + takeLua)
)

// RedisStore is the fleet's bucket in Redis (standalone, Sentinel or
// Cluster), one atomic script per Take reading the Redis clock. It is safe
// for concurrent use by any number of goroutines and processes.
type RedisStore struct {
	rdb redis.Scripter
	key string
	now func() time.Time // WithNow, tests only: sent as the now argument instead of TIME
}

var _ Store = (*RedisStore)(nil)

// NewRedis returns the bucket under the key {<prefix>g}, prefix being the
// configured redis.key_prefix (e.g. "notifier:"). Of the options, it reads
// WithNow.
func NewRedis(rdb redis.Scripter, prefix string, opts ...Option) *RedisStore {
	return &RedisStore{rdb: rdb, key: Key(prefix), now: buildOptions(opts).now}
}

// Key is the bucket's Redis key for prefix: {<prefix>g}.
func Key(prefix string) string { return "{" + prefix + "g}" }

// Take implements Store.
func (s *RedisStore) Take(ctx context.Context, cfg Config, n int) (int, time.Duration, error) {
	if err := checkTake(cfg, n); err != nil {
		return 0, 0, fmt.Errorf("take global tokens: %w", err)
	}
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMicro(), 10)
	}
	rate := strconv.FormatFloat(cfg.Rate, 'g', -1, 64)
	v, err := takeScript.Run(ctx, s.rdb, []string{s.key}, rate, cfg.Burst, n, now).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("take global tokens: %w", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return 0, 0, fmt.Errorf("take global tokens: unexpected script reply %v", v)
	}
	granted, ok1 := a[0].(int64)
	wait, ok2 := a[1].(int64)
	if !ok1 || !ok2 || granted < 0 || granted > int64(n) || wait < 0 {
		return 0, 0, fmt.Errorf("take global tokens: unexpected script reply %v", v)
	}
	return int(granted), time.Duration(wait) * time.Microsecond, nil
}
