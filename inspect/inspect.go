package inspect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/digest"
	"github.com/notifier/notifier/limits/fleet"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/userlimit"
)

// ErrInvalid is wrapped by the error of a question that cannot be asked:
// an empty user, a channel that is none, a malformed job id.
var ErrInvalid = errors.New("invalid question")

// ErrUnknownProvider is wrapped by Provider's error for a name the
// configuration does not hold.
var ErrUnknownProvider = errors.New("unknown provider")

// Config is what an Inspector needs of the notifier's configuration.
type Config struct {
	// Limits is the limit set's configuration, as `notifier run` builds it
	// (prefix, dedup_ttl, the largest cost, the queues' headroom).
	Limits limits.Config
	// UserLimits are the per-user caps by channel (user_limits).
	UserLimits map[string]userlimit.Rule
	// CategoryLimits are the categories' own caps
	// (user_limits.<channel>.<category>).
	CategoryLimits map[limits.CategoryCap]userlimit.Rule
	// Categories are the channels' categories (categories).
	Categories map[string]queue.Category
	// Providers are the configured providers.
	Providers []providers.Config
	// FindWaiting looks through the job stream for a job (queue.FindWaiting
	// on the fleet's stream), reading at most limit messages (0: all); nil
	// when the stream cannot be read (then Job looks only at the ledger
	// and the dead letters).
	FindWaiting func(ctx context.Context, tenant, id string, limit int) (queue.WaitingScan, error)
}

// Inspector answers questions about the fleet's live state. It holds no
// state of its own beyond its clients and is safe for concurrent use. Use
// New; the zero value is not usable.
type Inspector struct {
	rdb     redis.UniversalClient
	dead    *queue.DeadLetters
	cfg     Config
	ledger  recorder
	users   userlimit.Peeker
	queue   leaky.Queue
	reasons fleet.PauseReasons
	digests digest.Store
}

// recorder reads a job's ledger record.
type recorder interface {
	Record(ctx context.Context, id string) (ledger.Record, error)
}

// New returns an Inspector on rdb, reading dead letters through dead (nil:
// Job reports none). It builds the dispatcher's own Redis limit set
// (limits.Redis) for its reads, and starts nothing.
func New(rdb redis.UniversalClient, dead *queue.DeadLetters, cfg Config) (*Inspector, error) {
	l, err := limits.Redis(rdb, cfg.Limits)
	if err != nil {
		return nil, fmt.Errorf("new inspector: %w", err)
	}
	rec, ok := l.Ledger.(recorder)
	if !ok {
		return nil, fmt.Errorf("new inspector: the ledger %T cannot be read", l.Ledger)
	}
	users, ok := l.Users.(userlimit.Peeker)
	if !ok {
		return nil, fmt.Errorf("new inspector: the user limiter %T cannot be peeked at", l.Users)
	}
	return &Inspector{rdb: rdb, dead: dead, cfg: cfg, ledger: rec, users: users, queue: l.Leaky, reasons: l.Reasons, digests: l.Digests}, nil
}

// redisNow reads the Redis clock.
func (in *Inspector) redisNow(ctx context.Context) (time.Time, error) {
	t, err := in.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("read the redis clock: %w", err)
	}
	return t.UTC(), nil
}

// When is an instant an answer names: "now", or a time on the Redis clock.
type When struct {
	// Now is true when the instant is the answer's own (nothing to wait).
	Now bool `json:"now"`
	// At is the instant (the answer's At when Now).
	At time.Time `json:"at"`
	// InSeconds is At less the answer's At, in seconds (0 when Now).
	InSeconds float64 `json:"in_seconds"`
}

// whenAfter is the instant d after at ("now" for d <= 0).
func whenAfter(at time.Time, d time.Duration) When {
	if d <= 0 {
		return When{Now: true, At: at}
	}
	return When{At: at.Add(d), InSeconds: d.Seconds()}
}

// String is "now" or the instant in RFC 3339 with milliseconds and how far
// ahead it lies.
func (w When) String() string {
	if w.Now {
		return "now"
	}
	return fmt.Sprintf("%s (in %s)", w.At.UTC().Format("2006-01-02 15:04:05.000 UTC"), time.Duration(w.InSeconds*float64(time.Second)).Round(time.Millisecond))
}
