package gateway

import (
	"context"
	_ "embed"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/internal/luapre"
	"github.com/notifier/notifier/internal/topn"
)

var (
	//go:embed authfail.lua
	authFailLua    string
	authFailScript = redis.NewScript(luapre.Num + authFailLua)
)

// The kinds of the gateway's buckets, which are also the policy names of
// their RateLimit fields.
const (
	KindKey      = "key"
	KindTenant   = "tenant"
	KindCapacity = "capacity"
)

// BucketKey is the Redis key of one of the gateway's token buckets:
// {<prefix>gw}:<kind>:<name> (kind key: an API key's, by its name; tenant:
// a tenant's; capacity: the whole intake's, name ""). Every bucket shares
// one hash tag, so that globallimit's take.lua takes from a key's, its tenant's and the
// capacity bucket in one atomic call on Redis Cluster too; with a capacity
// bucket every request goes to that node anyway.
func BucketKey(prefix, kind, name string) string { return "{" + prefix + "gw}:" + kind + ":" + name }

// AuthFailKey is the Redis key counting a client IP's failed
// authentications: {<prefix>gwauth:<ip>}.
func AuthFailKey(prefix, ip string) string { return "{" + prefix + "gwauth:" + ip + "}" }

// rejectionSeries is the hourly count of the rejections per key, in the
// sorted sets {<prefix>gwtop}:<yyyymmddhh> (internal/topn). The members
// are configured key names, so the sets stay as small as the
// configuration.
func rejectionSeries(prefix string) topn.Series {
	return topn.Series{Prefix: prefix, Name: "gwtop", Retention: RejectionRetention}
}

// Bucket is one token bucket: its Redis key (BucketKey) and its limit.
type Bucket struct {
	Key string
	Limit
}

// Take is one bucket's state after a take: Remaining whole tokens left,
// Wait until the bucket holds the tokens asked for (0: it does), Reset
// until it is full again.
type Take = globallimit.State

// Buckets are the gateway's token buckets in Redis, shared by every
// gateway instance, on the Redis clock: globallimit's batch take, clamped
// to MaxWindow. Safe for concurrent use.
type Buckets struct {
	rdb redis.Scripter
	now func() time.Time // tests only: sent as the script's now
}

// NewBuckets returns the buckets of rdb.
func NewBuckets(rdb redis.Scripter) *Buckets { return &Buckets{rdb: rdb} }

// Take takes n tokens (0 ≤ n ≤ every burst) from every bucket of bs, all
// or nothing, in one round trip; n = 0 only reads them. It reports whether
// they were taken, and each bucket's state after the call (ts[i] is
// bs[i]'s): when refused, the longest Wait is when a retry can succeed.
func (b *Buckets) Take(ctx context.Context, n int, bs ...Bucket) (allowed bool, ts []Take, err error) {
	ls := make([]globallimit.Limit, len(bs))
	for i, bk := range bs {
		ls[i] = globallimit.Limit{Key: bk.Key, Rate: bk.Rate, Burst: bk.Burst}
	}
	store := globallimit.NewRedis(b.rdb, "", globallimit.WithNow(b.now), globallimit.WithWindow(MaxWindow))
	return store.TakeAll(ctx, n, ls...)
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
	rows := make([]topn.Count, 0, len(counts))
	for name, n := range counts {
		rows = append(rows, topn.Count{Member: name, N: n})
	}
	if err := rejectionSeries(r.prefix).Add(ctx, r.rdb, r.now(), rows...); err != nil {
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
	rows, err := rejectionSeries(prefix).Top(ctx, rdb, now, window, limit)
	if err != nil {
		return nil, fmt.Errorf("read gateway rejections: %w", err)
	}
	out := make([]KeyRejections, len(rows))
	for i, r := range rows {
		out[i] = KeyRejections{Key: r.Member, Rejected: r.N}
	}
	return out, nil
}
