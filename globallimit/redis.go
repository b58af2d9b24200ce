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
// Cluster), one atomic script per Take reading the Redis clock, and a
// Batcher of any buckets in the same script. It is safe for concurrent use
// by any number of goroutines and processes.
type RedisStore struct {
	rdb    redis.Scripter
	key    string
	now    func() time.Time // WithNow, tests only: sent as the now argument instead of TIME
	window time.Duration
}

var (
	_ Store   = (*RedisStore)(nil)
	_ Batcher = (*RedisStore)(nil)
)

// NewRedis returns the bucket under the key {<prefix>g}, prefix being the
// configured redis.key_prefix (e.g. "notifier:"). Of the options, it reads
// WithNow and WithWindow.
func NewRedis(rdb redis.Scripter, prefix string, opts ...Option) *RedisStore {
	o := buildOptions(opts)
	return &RedisStore{rdb: rdb, key: Key(prefix), now: o.now, window: o.window}
}

// Key is the bucket's Redis key for prefix: {<prefix>g}.
func Key(prefix string) string { return "{" + prefix + "g}" }

// Take implements Store.
func (s *RedisStore) Take(ctx context.Context, cfg Config, n int) (int, time.Duration, error) {
	if err := checkTake(cfg, n); err != nil {
		return 0, 0, fmt.Errorf("take global tokens: %w", err)
	}
	g, st, err := s.run(ctx, request{n: n, least: 1, limit: MaxRefill.Microseconds()}, Limit{Key: s.key, Rate: cfg.Rate, Burst: cfg.Burst})
	if err != nil {
		return 0, 0, fmt.Errorf("take global tokens: %w", err)
	}
	return g, st[0].Wait, nil
}

// TakeAll implements Batcher, in one round trip. Every key of ls must
// share one hash tag on Redis Cluster.
func (s *RedisStore) TakeAll(ctx context.Context, n int, ls ...Limit) (bool, []State, error) {
	if err := checkTakeAll(n, ls); err != nil {
		return false, nil, err
	}
	g, st, err := s.run(ctx, request{n: n, least: n, limit: s.window.Microseconds(), clamp: true}, ls...)
	if err != nil {
		return false, nil, fmt.Errorf("take %d tokens of %d buckets: %w", n, len(ls), err)
	}
	return g == n, st, nil
}

// run runs take.lua for r (its now from WithNow, else the Redis clock's)
// on the buckets of ls.
func (s *RedisStore) run(ctx context.Context, r request, ls ...Limit) (int, []State, error) {
	keys := make([]string, len(ls))
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMicro(), 10)
	}
	clamp := 0
	if r.clamp {
		clamp = 1
	}
	args := make([]any, 0, 5+2*len(ls))
	args = append(args, r.n, r.least, now, r.limit, clamp)
	for i, l := range ls {
		keys[i] = l.Key
		args = append(args, strconv.FormatFloat(l.Rate, 'g', -1, 64), l.Burst)
	}
	v, err := takeScript.Run(ctx, s.rdb, keys, args...).Result()
	if err != nil {
		return 0, nil, err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 1+3*len(ls) {
		return 0, nil, fmt.Errorf("unexpected script reply %v", v)
	}
	x := make([]int64, len(a))
	for i := range a {
		if x[i], ok = a[i].(int64); !ok || x[i] < 0 {
			return 0, nil, fmt.Errorf("unexpected script reply %v", v)
		}
	}
	if x[0] > int64(r.n) {
		return 0, nil, fmt.Errorf("unexpected script reply %v", v)
	}
	st := make([]State, len(ls))
	for i := range st {
		y := x[1+3*i:]
		st[i] = State{Remaining: int(y[0]), Wait: time.Duration(y[1]) * time.Microsecond, Reset: time.Duration(y[2]) * time.Microsecond}
	}
	return int(x[0]), st, nil
}
