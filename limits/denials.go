package limits

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/internal/topn"
)

// Denials are counted per channel and UTC hour, kept TopRetention, at most
// TopMaxUsers users an hour.
const (
	TopRetention = 8 * 24 * time.Hour
	TopMaxUsers  = 20_000
)

// denials is the series of one channel's cap denials (the ones a cap in
// shadow mode would have made, when shadow).
func denials(prefix, channel string, shadow bool) topn.Series {
	kind := "top:"
	if shadow {
		kind = "top:shadow:"
	}
	return topn.Series{Prefix: prefix, Name: kind + channel, Retention: TopRetention, MaxMembers: TopMaxUsers}
}

// DenialsKey is the sorted set (user → count) of one channel's cap denials
// in the UTC hour of t (the denials a cap in shadow mode would have made,
// when shadow). All hours of a channel share one hash tag, so a window of
// them can be summed with one ZUNION on Redis Cluster.
func DenialsKey(prefix, channel string, shadow bool, t time.Time) string {
	return denials(prefix, channel, shadow).Key(t)
}

// Denials counts per-user cap denials in Redis (an internal/topn series per
// channel), so that the users hitting their caps most can be found: "a
// tenant hitting their limit continuously is either abusing the API or has
// outgrown their plan". Never a metric label: user ids stay in Redis.
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

// Record counts one denial of user's job on channel.
func (d *Denials) Record(ctx context.Context, channel, user string) error {
	if err := denials(d.prefix, channel, false).Add(ctx, d.rdb, d.now(), topn.Count{Member: user, N: 1}); err != nil {
		return fmt.Errorf("count cap denial on %s: %w", channel, err)
	}
	return nil
}

// QueueShadow queues in pipe the count of one denial a cap in shadow mode
// would have made of user's job on channel (read with TopShadow); its error
// is the command's, lost with the pipeline's: `top --shadow` may miss a
// denial, never count one twice (ShadowCounter).
func (d *Denials) QueueShadow(ctx context.Context, pipe redis.Pipeliner, channel, user string) {
	denials(d.prefix, channel, true).AddCmd(ctx, pipe, d.now(), topn.Count{Member: user, N: 1})
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
	rows, err := denials(d.prefix, channel, shadow).Top(ctx, d.rdb, d.now(), window, limit)
	if err != nil {
		return nil, fmt.Errorf("read cap denials of %s: %w", channel, err)
	}
	out := make([]UserDenials, len(rows))
	for i, r := range rows {
		out[i] = UserDenials{User: r.Member, Denials: r.N}
	}
	return out, nil
}
