// Package topn keeps hourly top-N counts in Redis: per series (a channel's
// cap denials for `notifier top`, the gateway's rejections per key for
// `notifier top --gateway`) and UTC hour, one sorted set of member →
// count, and reads back the members counted most in a window of hours.
// Members are ids (user ids, key names), never a metric label.
//
// A Series is a plain value, safe for concurrent use; its zero value is not
// usable (it needs Name and Retention). Every method takes the instant it
// is about explicitly: the keys name UTC hours, for people, and another
// process reads them back by its own clock.
package topn

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/internal/luapre"
)

var (
	//go:embed add.lua
	addLua    string
	addScript = redis.NewScript(luapre.Num + addLua)
)

// Series is one family of hourly counts.
type Series struct {
	Prefix string // redis.key_prefix ("notifier:")
	// Name says what is counted and is part of the key: "top:sms",
	// "top:shadow:sms", "gwtop".
	Name string
	// Retention is how long an hour's set is kept (and the longest window
	// Top reads).
	Retention time.Duration
	// MaxMembers bounds the members an hour keeps (0: no bound, for
	// members as few as the configuration's): past it the half counted
	// least is dropped.
	MaxMembers int
}

// Count is a member and its count: what Add adds, what Top returns.
type Count struct {
	Member string
	N      int64
}

// Key is the sorted set of s in the UTC hour of t:
// {<prefix><name>}:<yyyymmddhh>. All hours of a series share one hash tag,
// so a window of them is summed with one ZUNION on Redis Cluster.
func (s Series) Key(t time.Time) string {
	return "{" + s.Prefix + s.Name + "}:" + t.UTC().Format("2006010215")
}

// Add adds counts to the hour of t, in one script run.
func (s Series) Add(ctx context.Context, rdb redis.Scripter, t time.Time, counts ...Count) error {
	key := s.Key(t)
	if err := addScript.Run(ctx, rdb, []string{key}, s.args(counts)...).Err(); err != nil {
		return fmt.Errorf("add to %s: %w", key, err)
	}
	return nil
}

// AddCmd queues in pipe the Add of counts to the hour of t; its error is
// the command's, read after the pipeline ran. The script goes whole (a
// pipelined EVALSHA of a script the server lost could not fall back).
func (s Series) AddCmd(ctx context.Context, pipe redis.Pipeliner, t time.Time, counts ...Count) *redis.Cmd {
	return addScript.Eval(ctx, pipe, []string{s.Key(t)}, s.args(counts)...)
}

func (s Series) args(counts []Count) []any {
	args := make([]any, 0, 2+2*len(counts))
	args = append(args, s.Retention.Milliseconds(), s.MaxMembers)
	for _, c := range counts {
		args = append(args, c.Member, c.N)
	}
	return args
}

// Unioner is what Top needs of a client (redis.Cmdable has it).
type Unioner interface {
	ZUnionWithScores(ctx context.Context, store redis.ZStore) *redis.ZSliceCmd
	Pipeline() redis.Pipeliner
}

// minDepth is the fewest members Top reads of each hour of a series with
// MaxMembers, 10 times its limit when that is more.
const minDepth = 200

// Top returns the limit members (all when limit <= 0) counted most in the
// hours overlapping the window ending at t (at most Retention), most
// first, equal counts by member.
func (s Series) Top(ctx context.Context, rdb Unioner, t time.Time, window time.Duration, limit int) ([]Count, error) {
	window = min(window, s.Retention)
	hour := t.UTC().Truncate(time.Hour)
	var keys []string
	for h := hour; !h.Before(hour.Add(-window + time.Hour)); h = h.Add(-time.Hour) {
		keys = append(keys, s.Key(h))
	}
	var zs []redis.Z
	var err error
	if limit > 0 && s.MaxMembers > 0 {
		zs, err = s.candidates(ctx, rdb, keys, limit)
	} else {
		zs, err = rdb.ZUnionWithScores(ctx, redis.ZStore{Keys: keys}).Result()
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.Key(hour), err)
	}
	out := make([]Count, 0, len(zs))
	for _, z := range zs {
		m, _ := z.Member.(string)
		out = append(out, Count{Member: m, N: int64(math.Round(z.Score))})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].N != out[j].N {
			return out[i].N > out[j].N
		}
		return out[i].Member < out[j].Member
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// candidates are Top's members of a series whose hours hold up to
// MaxMembers each (a million users over 50 hours): not the union of every
// hour (one ZUNION of them all kept redis-server busy for seconds and
// returned every member), but each hour's depth most counted members
// (depth = max(minDepth, 10 limit)), summed, and for the 4 limit members
// first by those partial sums their counts in every hour of the window
// (ZMSCORE): the counts shown are exact; a member is missed only when it
// is in no hour's top depth, as an hour's least counted half is dropped
// when it outgrows MaxMembers (and where an hour's read is cut among equal
// counts, Redis keeps the members last in order: which of those is shown
// is not said). Redis reads at most hours x depth members,
// whatever the number counted.
func (s Series) candidates(ctx context.Context, rdb Unioner, keys []string, limit int) ([]redis.Z, error) {
	depth := int64(max(minDepth, 10*limit))
	pipe := rdb.Pipeline()
	tops := make([]*redis.ZSliceCmd, len(keys))
	for i, k := range keys {
		tops[i] = pipe.ZRevRangeWithScores(ctx, k, 0, depth-1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	partial := map[string]float64{}
	for _, c := range tops {
		for _, z := range c.Val() {
			m, _ := z.Member.(string)
			partial[m] += z.Score
		}
	}
	cands := make([]string, 0, len(partial))
	for m := range partial {
		cands = append(cands, m)
	}
	sort.Slice(cands, func(i, j int) bool {
		if a, b := partial[cands[i]], partial[cands[j]]; a != b {
			return a > b
		}
		return cands[i] < cands[j]
	})
	cands = cands[:min(len(cands), 4*limit)]
	if len(cands) == 0 {
		return nil, nil
	}
	pipe = rdb.Pipeline()
	scores := make([]*redis.FloatSliceCmd, len(keys))
	for i, k := range keys {
		scores[i] = pipe.ZMScore(ctx, k, cands...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	zs := make([]redis.Z, len(cands))
	for i, m := range cands {
		zs[i].Member = m
		for _, c := range scores {
			if v := c.Val(); i < len(v) {
				zs[i].Score += v[i]
			}
		}
	}
	return zs, nil
}
