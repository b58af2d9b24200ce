package gateway

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/internal/luapre"
)

var (
	//go:embed take.lua
	takeLua    string
	takeScript = redis.NewScript(luapre.Now + luapre.Num + takeLua)

	//go:embed authfail.lua
	authFailLua    string
	authFailScript = redis.NewScript(authFailLua)

	//go:embed rejections.lua
	rejectionsLua    string
	rejectionsScript = redis.NewScript(rejectionsLua)
)

// BucketKey is the Redis key of an API key's token bucket:
// {<prefix>gw:<name>} (one hash tag: a Redis Cluster slot per key).
func BucketKey(prefix, name string) string { return "{" + prefix + "gw:" + name + "}" }

// AuthFailKey is the Redis key counting a client IP's failed
// authentications: {<prefix>gwauth:<ip>}.
func AuthFailKey(prefix, ip string) string { return "{" + prefix + "gwauth:" + ip + "}" }

// rejectionsKey is the sorted set of the rejections in the hour of t. The
// hours share one hash tag, so a window of them is summed with one ZUNION
// on Redis Cluster.
func rejectionsKey(prefix string, t time.Time) string {
	return "{" + prefix + "gwtop}:" + t.UTC().Format("2006010215")
}

// Take is the answer of a token bucket.
type Take struct {
	Allowed   bool
	Remaining int           // whole tokens left
	Wait      time.Duration // refused: until the tokens asked for are there
	Reset     time.Duration // until the bucket is full again
}

// Buckets are the API keys' token buckets in Redis, shared by every gateway
// instance, on the Redis clock. Safe for concurrent use.
type Buckets struct {
	rdb    redis.Scripter
	prefix string
	now    func() time.Time // tests only: sent as the script's now
}

// NewBuckets returns the buckets under redis.key_prefix prefix.
func NewBuckets(rdb redis.Scripter, prefix string) *Buckets {
	return &Buckets{rdb: rdb, prefix: prefix}
}

// Take takes n tokens (0 ≤ n ≤ k.Burst) from k's bucket, all or nothing, in
// one round trip; n = 0 only reads it.
func (b *Buckets) Take(ctx context.Context, k Key, n int) (Take, error) {
	if n < 0 || n > k.Burst {
		return Take{}, fmt.Errorf("take %d tokens of key %s: n must be from 0 to the burst %d", n, k.Name, k.Burst)
	}
	now := ""
	if b.now != nil {
		now = strconv.FormatInt(b.now().UnixMicro(), 10)
	}
	rate := strconv.FormatFloat(k.Rate, 'g', -1, 64)
	v, err := takeScript.Run(ctx, b.rdb, []string{BucketKey(b.prefix, k.Name)}, rate, k.Burst, n, now).Result()
	if err != nil {
		return Take{}, fmt.Errorf("take %d tokens of key %s: %w", n, k.Name, err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		return Take{}, fmt.Errorf("take tokens of key %s: unexpected script reply %v", k.Name, v)
	}
	var x [4]int64
	for i := range x {
		if x[i], ok = a[i].(int64); !ok || x[i] < 0 {
			return Take{}, fmt.Errorf("take tokens of key %s: unexpected script reply %v", k.Name, v)
		}
	}
	return Take{
		Allowed:   x[0] == 1,
		Remaining: int(x[1]),
		Wait:      time.Duration(x[2]) * time.Microsecond,
		Reset:     time.Duration(x[3]) * time.Microsecond,
	}, nil
}

// failAuth counts one failed authentication of ip and returns the failures
// of its window so far and the time left in the window.
func failAuth(ctx context.Context, rdb redis.Scripter, prefix, ip string, window time.Duration) (int, time.Duration, error) {
	v, err := authFailScript.Run(ctx, rdb, []string{AuthFailKey(prefix, ip)}, window.Milliseconds()).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("count failed authentication: %w", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return 0, 0, fmt.Errorf("count failed authentication: unexpected script reply %v", v)
	}
	n, ok1 := a[0].(int64)
	ttl, ok2 := a[1].(int64)
	if !ok1 || !ok2 || n < 1 {
		return 0, 0, fmt.Errorf("count failed authentication: unexpected script reply %v", v)
	}
	return int(n), time.Duration(max(ttl, 1)) * time.Millisecond, nil
}

// RejectionRetention is how long the hourly rejection counts of
// `notifier top --gateway` are kept.
const RejectionRetention = 8 * 24 * time.Hour

// rejections gathers this instance's rejected requests per key and adds
// them to Redis in one call per flush, so a rejection costs no round trip.
type rejections struct {
	rdb    redis.Scripter
	prefix string
	now    func() time.Time
	mu     sync.Mutex
	counts map[string]int64
}

func (r *rejections) add(name string) { r.addN(name, 1) }

func (r *rejections) addN(name string, n int64) {
	r.mu.Lock()
	r.counts[name] += n
	r.mu.Unlock()
}

// flush adds the counts gathered so far to the current hour's set; on
// failure they are kept for the next flush.
func (r *rejections) flush(ctx context.Context) error {
	r.mu.Lock()
	counts := r.counts
	r.counts = map[string]int64{}
	r.mu.Unlock()
	if len(counts) == 0 {
		return nil
	}
	args := []any{RejectionRetention.Milliseconds()}
	for name, n := range counts {
		args = append(args, name, n)
	}
	if err := rejectionsScript.Run(ctx, r.rdb, []string{rejectionsKey(r.prefix, r.now())}, args...).Err(); err != nil {
		r.mu.Lock()
		for name, n := range counts {
			r.counts[name] += n
		}
		r.mu.Unlock()
		return fmt.Errorf("count gateway rejections: %w", err)
	}
	return nil
}

// KeyRejections is one row of TopRejected.
type KeyRejections struct {
	Key      string // a configured key name, or "unauthenticated"
	Rejected int64  // requests answered 429 (or 401 and 429 for "unauthenticated")
}

// TopRejected returns the limit keys with the most rejected requests in the
// hours overlapping the last window (at most RejectionRetention), most
// first, as every gateway instance counted them.
func TopRejected(ctx context.Context, rdb redis.Cmdable, prefix string, now time.Time, window time.Duration, limit int) ([]KeyRejections, error) {
	window = min(window, RejectionRetention)
	hour := now.UTC().Truncate(time.Hour)
	var keys []string
	for t := hour; !t.Before(hour.Add(-window + time.Hour)); t = t.Add(-time.Hour) {
		keys = append(keys, rejectionsKey(prefix, t))
	}
	zs, err := rdb.ZUnionWithScores(ctx, redis.ZStore{Keys: keys}).Result()
	if err != nil {
		return nil, fmt.Errorf("read gateway rejections: %w", err)
	}
	out := make([]KeyRejections, 0, len(zs))
	for _, z := range zs {
		name, _ := z.Member.(string)
		out = append(out, KeyRejections{Key: name, Rejected: int64(math.Round(z.Score))})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Rejected != out[j].Rejected {
			return out[i].Rejected > out[j].Rejected
		}
		return out[i].Key < out[j].Key
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
