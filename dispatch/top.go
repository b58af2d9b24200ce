package dispatch

import (
	"context"
	_ "embed"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/internal/luapre"
)

var (
	//go:embed top.lua
	topLua    string
	topScript = redis.NewScript(luapre.Num + topLua)
)

// Denials are counted per channel and UTC hour, kept TopRetention, at most
// TopMaxUsers users an hour.
const (
	TopRetention = 8 * 24 * time.Hour
	TopMaxUsers  = 20_000
)

// DenialsKey is the sorted set (user → count) of one channel's cap denials
// in the UTC hour of t (the denials a cap in shadow mode would have made,
// when shadow). All hours of a channel share one hash tag, so a window of
// them can be summed with one ZUNION on Redis Cluster.
func DenialsKey(prefix, channel string, shadow bool, t time.Time) string {
	kind := "top:"
	if shadow {
		kind = "top:shadow:"
	}
	return "{" + prefix + kind + channel + "}:" + t.UTC().Format("2006010215")
}

// Denials counts per-user cap denials in Redis, so that the users hitting
// their caps most can be found: "a tenant hitting their limit continuously
// is either abusing the API or has outgrown their plan". Never a metric
// label: user ids stay in Redis.
type Denials struct {
	rdb    redis.UniversalClient
	prefix string
	now    func() time.Time
}

// NewDenials returns the counter under prefix. It reads the wall clock
// (time.Now), not the dispatcher's Options.Now: its keys name UTC hours,
// for people, which `notifier top` reads back in another process by its
// own clock.
func NewDenials(rdb redis.UniversalClient, prefix string) *Denials {
	return &Denials{rdb: rdb, prefix: prefix, now: time.Now}
}

// ledger.Record counts one denial of user's job on channel.
func (d *Denials) Record(ctx context.Context, channel, user string) error {
	err := topScript.Run(ctx, d.rdb, []string{DenialsKey(d.prefix, channel, false, d.now())},
		user, TopRetention.Milliseconds(), TopMaxUsers).Err()
	if err != nil {
		return fmt.Errorf("count cap denial on %s: %w", channel, err)
	}
	return nil
}

// recordShadowCmd queues in pipe the count of one denial a cap in shadow
// mode would have made of user's job on channel (read with TopShadow); its
// error is the command's, read after the pipeline ran. The script goes
// whole (a pipelined EVALSHA of a script the server lost could not fall
// back).
func (d *Denials) recordShadowCmd(ctx context.Context, pipe redis.Pipeliner, channel, user string) *redis.Cmd {
	return topScript.Eval(ctx, pipe, []string{DenialsKey(d.prefix, channel, true, d.now())},
		user, TopRetention.Milliseconds(), TopMaxUsers)
}

// UserDenials is one row of Top.
type UserDenials struct {
	User    string
	Denials int64
}

// Top returns the limit users of channel with the most cap denials in the
// hours overlapping the last window (at most TopRetention), most first.
func (d *Denials) Top(ctx context.Context, channel string, window time.Duration, limit int) ([]UserDenials, error) {
	return d.top(ctx, channel, false, window, limit)
}

// TopShadow is Top of the denials a cap in shadow mode would have made.
func (d *Denials) TopShadow(ctx context.Context, channel string, window time.Duration, limit int) ([]UserDenials, error) {
	return d.top(ctx, channel, true, window, limit)
}

func (d *Denials) top(ctx context.Context, channel string, shadow bool, window time.Duration, limit int) ([]UserDenials, error) {
	window = min(window, TopRetention)
	now := d.now().UTC().Truncate(time.Hour)
	var keys []string
	for t := now; !t.Before(now.Add(-window + time.Hour)); t = t.Add(-time.Hour) {
		keys = append(keys, DenialsKey(d.prefix, channel, shadow, t))
	}
	zs, err := d.rdb.ZUnionWithScores(ctx, redis.ZStore{Keys: keys}).Result()
	if err != nil {
		return nil, fmt.Errorf("read cap denials of %s: %w", channel, err)
	}
	out := make([]UserDenials, 0, len(zs))
	for _, z := range zs {
		user, _ := z.Member.(string)
		out = append(out, UserDenials{User: user, Denials: int64(z.Score)})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Denials != out[j].Denials {
			return out[i].Denials > out[j].Denials
		}
		return out[i].User < out[j].User
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
