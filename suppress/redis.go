package suppress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the fleet's list in Redis: a key per listed recipient,
// {<prefix>sup:<channel>:<hash>}, holding its Entry as JSON and expiring
// with it (each key has its own hash tag: the list spreads over a Cluster's
// nodes).
type Redis struct {
	rdb    redis.UniversalClient
	prefix string
	now    func() time.Time
}

var _ Store = (*Redis)(nil)

// NewRedis returns the list kept in rdb under prefix (redis.key_prefix).
func NewRedis(rdb redis.UniversalClient, prefix string) *Redis {
	return &Redis{rdb: rdb, prefix: prefix, now: time.Now}
}

// Key is the Redis key of a listed recipient.
func (r *Redis) Key(channel, hash string) string {
	return "{" + r.prefix + "sup:" + channel + ":" + hash + "}"
}

// Add implements Store.
func (r *Redis) Add(ctx context.Context, e Entry, ttl time.Duration) error {
	if err := check(e.Channel, e.Hash); err != nil {
		return err
	}
	if err := checkTTL(ttl); err != nil {
		return err
	}
	e.At = r.now().UTC()
	e.Until = e.At.Add(ttl)
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("suppress %s: %w", e.Channel, err)
	}
	if err := r.rdb.Set(ctx, r.Key(e.Channel, e.Hash), data, ttl).Err(); err != nil {
		return fmt.Errorf("suppress a recipient of %s: %w", e.Channel, err)
	}
	return nil
}

// HasCmd queues the question of Has in a pipeline: the answer is the
// command's value, 1 when listed.
func (r *Redis) HasCmd(ctx context.Context, pipe redis.Pipeliner, channel, hash string) *redis.IntCmd {
	return pipe.Exists(ctx, r.Key(channel, hash))
}

// Has implements Store.
func (r *Redis) Has(ctx context.Context, channel, hash string) (bool, error) {
	return r.one(ctx, channel, hash, "ask after a suppressed recipient", r.rdb.Exists)
}

// one runs op, EXISTS or DEL, on the recipient's key: true when it found
// the key. doing names op in its error.
func (r *Redis) one(ctx context.Context, channel, hash, doing string, op func(context.Context, ...string) *redis.IntCmd) (bool, error) {
	if err := check(channel, hash); err != nil {
		return false, err
	}
	n, err := op(ctx, r.Key(channel, hash)).Result()
	if err != nil {
		return false, fmt.Errorf("%s of %s: %w", doing, channel, err)
	}
	return n == 1, nil
}

// Get implements Store.
func (r *Redis) Get(ctx context.Context, channel, hash string) (Entry, bool, error) {
	if err := check(channel, hash); err != nil {
		return Entry{}, false, err
	}
	data, err := r.rdb.Get(ctx, r.Key(channel, hash)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return Entry{}, false, nil
	case err != nil:
		return Entry{}, false, fmt.Errorf("read a suppressed recipient of %s: %w", channel, err)
	}
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return Entry{}, false, fmt.Errorf("read a suppressed recipient of %s: %w", channel, err)
	}
	return e, true, nil
}

// Remove implements Store.
func (r *Redis) Remove(ctx context.Context, channel, hash string) (bool, error) {
	return r.one(ctx, channel, hash, "remove a suppressed recipient", r.rdb.Del)
}

// List implements Store: it scans the keys (every master of a Cluster),
// a support desk's question, never the hot path.
func (r *Redis) List(ctx context.Context, channel string, limit int) ([]Entry, error) {
	pattern := "{" + r.prefix + "sup:*"
	if channel != "" {
		pattern = "{" + r.prefix + "sup:" + channel + ":*"
	}
	var (
		mu   sync.Mutex
		keys []string
	)
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			keys = append(keys, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	switch c := r.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		return nil, fmt.Errorf("list suppressed recipients: a %T cannot be scanned", r.rdb)
	}
	if err != nil {
		return nil, fmt.Errorf("list suppressed recipients: %w", err)
	}
	out := make([]Entry, 0, len(keys))
	for _, k := range keys {
		data, err := r.rdb.Get(ctx, k).Bytes()
		if errors.Is(err, redis.Nil) {
			continue // expired since the scan
		}
		if err != nil {
			return nil, fmt.Errorf("list suppressed recipients: %w", err)
		}
		var e Entry
		if json.Unmarshal(data, &e) == nil && strings.HasSuffix(k, ":"+e.Hash+"}") {
			out = append(out, e)
		}
	}
	sortNewest(out)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func sortNewest(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int {
		if c := b.At.Compare(a.At); c != 0 {
			return c
		}
		return strings.Compare(a.Hash, b.Hash)
	})
}
