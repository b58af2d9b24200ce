package suppress

import (
	"container/heap"
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
// a support desk's question, never the hot path. Each page of the scan is
// read in one pipeline (a Cluster's split by slot), and only the newest
// limit entries are kept meanwhile.
func (r *Redis) List(ctx context.Context, channel string, limit int) ([]Entry, error) {
	pattern := "{" + r.prefix + "sup:*"
	if channel != "" {
		pattern = "{" + r.prefix + "sup:" + channel + ":*"
	}
	var (
		mu  sync.Mutex
		top = newest{limit: limit, in: map[string]bool{}}
	)
	scan := func(ctx context.Context, c *redis.Client) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				return err
			}
			es, err := r.read(ctx, keys)
			if err != nil {
				return err
			}
			mu.Lock()
			for _, e := range es {
				top.add(e)
			}
			mu.Unlock()
			if next == 0 {
				return nil
			}
			cursor = next
		}
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
	out := top.es
	sortNewest(out)
	return out, nil
}

// read is the entries of keys, in one pipeline: a key gone since the scan
// or not holding its entry is left out.
func (r *Redis) read(ctx context.Context, keys []string) ([]Entry, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, k)
	}
	_, _ = pipe.Exec(ctx) // each command's error is its own
	out := make([]Entry, 0, len(keys))
	for i, cmd := range cmds {
		data, err := cmd.Bytes()
		if errors.Is(err, redis.Nil) {
			continue // expired since the scan
		}
		if err != nil {
			return nil, err
		}
		var e Entry
		if json.Unmarshal(data, &e) == nil && strings.HasSuffix(keys[i], ":"+e.Hash+"}") {
			out = append(out, e)
		}
	}
	return out, nil
}

// newest keeps the first limit entries in sortNewest's order (every one
// when limit is 0) among those added, each once (a scan may return a key
// twice): with a limit, es is a heap whose root is the last kept.
type newest struct {
	limit int
	es    []Entry
	in    map[string]bool // the kept entries' channel:hash
}

// before is sortNewest's order: a before b.
func before(a, b Entry) bool {
	if c := a.At.Compare(b.At); c != 0 {
		return c > 0
	}
	return a.Hash < b.Hash
}

func (n *newest) add(e Entry) {
	id := e.Channel + ":" + e.Hash
	switch {
	case n.in[id]:
		return
	case n.limit <= 0 || len(n.es) < n.limit:
		n.in[id] = true
		heap.Push(n, e)
	case before(e, n.es[0]):
		delete(n.in, n.es[0].Channel+":"+n.es[0].Hash)
		n.in[id] = true
		n.es[0] = e
		heap.Fix(n, 0)
	}
}

// heap.Interface: the root is the entry that sorts last.
func (n *newest) Len() int           { return len(n.es) }
func (n *newest) Less(i, j int) bool { return before(n.es[j], n.es[i]) }
func (n *newest) Swap(i, j int)      { n.es[i], n.es[j] = n.es[j], n.es[i] }
func (n *newest) Push(x any)         { n.es = append(n.es, x.(Entry)) }
func (n *newest) Pop() any {
	e := n.es[len(n.es)-1]
	n.es = n.es[:len(n.es)-1]
	return e
}

func sortNewest(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int {
		if c := b.At.Compare(a.At); c != 0 {
			return c
		}
		return strings.Compare(a.Hash, b.Hash)
	})
}
