package suppress

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the fleet's list in Redis: a key per listed recipient,
// {<prefix>sup:<channel>:<hash>}, holding its Entry as JSON and expiring
// with it (each key has its own hash tag: the list spreads over a Cluster's
// nodes), and for List an index per channel, {<prefix>supidx:<channel>}, a
// sorted set of the hashes by the instant (ms) each stops being listed
// (Until), with the set of channels indexed, {<prefix>supidx}: List reads
// the top of an index, not every key. The index is List's alone: Has, Get and Remove
// read the recipient's own key.
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
	e.At = r.now().UTC().Truncate(time.Millisecond) // the index's resolution: List's order is the index's
	e.Until = e.At.Add(ttl)
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("suppress %s: %w", e.Channel, err)
	}
	idx := r.indexKey(e.Channel)
	pipe := r.rdb.Pipeline()
	set := pipe.Set(ctx, r.Key(e.Channel, e.Hash), data, ttl)
	// The index: this hash at the instant it leaves the list; the
	// entries that have left it trimmed; the index living as long as its
	// last entry.
	pipe.ZAdd(ctx, idx, redis.Z{Score: indexScore(e), Member: e.Hash})
	pipe.ZRemRangeByScore(ctx, idx, strconv.FormatInt(-e.At.UnixMilli(), 10), "+inf")
	ms := max(ttl.Milliseconds(), 1)
	pipe.Do(ctx, "PEXPIRE", idx, ms, "NX")
	pipe.Do(ctx, "PEXPIRE", idx, ms, "GT")
	pipe.SAdd(ctx, r.channelsKey(), e.Channel)
	_, _ = pipe.Exec(ctx)
	if err := set.Err(); err != nil {
		return fmt.Errorf("suppress a recipient of %s: %w", e.Channel, err)
	}
	return nil
}

// indexScore is e's score in its channel's index: minus the instant, in
// ms, it leaves the list, so that the index read from its lowest score
// (ZRANGE) is List's order, the latest to leave first and, in one ms, the
// hashes in order (with one suppression.ttl, the most recently listed
// first, as sortNewest); the entries gone are those scored -now or more.
func indexScore(e Entry) float64 { return -float64(e.Until.UnixMilli()) }

// indexKey is the sorted set of channel's listed hashes, by instant.
func (r *Redis) indexKey(channel string) string {
	return "{" + r.prefix + "supidx:" + channel + "}"
}

// channelsKey is the set of the channels that have an index.
func (r *Redis) channelsKey() string { return "{" + r.prefix + "supidx}" }

// builtKey marks the indexes built from the keys of an earlier build,
// which listed recipients without them (List builds them once).
func (r *Redis) builtKey() string { return "{" + r.prefix + "supidx:built}" }

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
	removed, err := r.one(ctx, channel, hash, "remove a suppressed recipient", r.rdb.Del)
	if err == nil {
		// The index entry goes too (List would drop it when it met it).
		_ = r.rdb.ZRem(ctx, r.indexKey(channel), hash).Err()
	}
	return removed, err
}

// List implements Store: the limit entries of each channel's index that
// stay listed longest (with one suppression.ttl for all, the most recently
// listed), newest first (every indexed channel's for ""), each read from
// its key, an index entry
// whose key is gone (expired, removed) dropped from the index as it is
// met: its cost is the entries it returns, not the entries listed. The
// first List on a Redis whose recipients an earlier build listed without
// the index builds the indexes from a scan of every key, once.
func (r *Redis) List(ctx context.Context, channel string, limit int) ([]Entry, error) {
	if channel != "" {
		if err := check(channel, strings.Repeat("0", 64)); err != nil {
			return nil, err
		}
	}
	built, err := r.rdb.Exists(ctx, r.builtKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("list suppressed recipients: %w", err)
	}
	if built == 0 {
		if err := r.buildIndexes(ctx); err != nil {
			return nil, err
		}
	}
	channels := []string{channel}
	if channel == "" {
		if channels, err = r.rdb.SMembers(ctx, r.channelsKey()).Result(); err != nil {
			return nil, fmt.Errorf("list suppressed recipients: %w", err)
		}
	}
	top := newest{limit: limit, in: map[string]bool{}}
	for _, c := range channels {
		es, err := r.newestOf(ctx, c, limit)
		if err != nil {
			return nil, fmt.Errorf("list suppressed recipients of %s: %w", c, err)
		}
		for _, e := range es {
			top.add(e)
		}
	}
	out := top.es
	sortNewest(out)
	return out, nil
}

// listPage is how many index entries newestOf reads at a time.
const listPage = 200

// newestOf is the limit entries of channel's index that stay listed
// longest (0: all), in the index's order, read page by page, the index
// entries whose key is gone dropped.
func (r *Redis) newestOf(ctx context.Context, channel string, limit int) ([]Entry, error) {
	idx := r.indexKey(channel)
	var out []Entry
	for start := int64(0); limit <= 0 || len(out) < limit; {
		page := int64(listPage)
		if limit > 0 {
			page = int64(min(max(limit-len(out), 16), listPage))
		}
		hashes, err := r.rdb.ZRange(ctx, idx, start, start+page-1).Result()
		if err != nil {
			return nil, err
		}
		keys := make([]string, len(hashes))
		for i, h := range hashes {
			keys[i] = r.Key(channel, h)
		}
		es, gone, err := r.readIndexed(ctx, keys, hashes)
		if err != nil {
			return nil, err
		}
		if len(gone) > 0 {
			if err := r.rdb.ZRem(ctx, idx, gone...).Err(); err != nil {
				return nil, err
			}
		}
		if limit > 0 && len(out)+len(es) > limit {
			es = es[:limit-len(out)]
		}
		out = append(out, es...)
		if int64(len(hashes)) < page {
			break
		}
		start += page - int64(len(gone)) // the dropped ones no longer take a rank
	}
	return out, nil
}

// readIndexed reads the entries of keys (the index's hashes), in one
// pipeline: those gone are returned as gone, for the index to drop.
func (r *Redis) readIndexed(ctx context.Context, keys, hashes []string) (es []Entry, gone []any, err error) {
	if len(keys) == 0 {
		return nil, nil, nil
	}
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, k)
	}
	_, _ = pipe.Exec(ctx) // each command's error is its own
	for i, cmd := range cmds {
		data, err := cmd.Bytes()
		if errors.Is(err, redis.Nil) {
			gone = append(gone, hashes[i])
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		var e Entry
		if json.Unmarshal(data, &e) == nil && e.Hash == hashes[i] {
			es = append(es, e)
		}
	}
	return es, gone, nil
}

// buildIndexes indexes every listed recipient, from a scan of every key
// (scanList), and marks the indexes built: once, for the recipients an
// earlier build listed without them.
func (r *Redis) buildIndexes(ctx context.Context) error {
	if _, err := r.scanList(ctx, "", 1, func(es []Entry) error {
		pipe := r.rdb.Pipeline()
		for _, e := range es {
			pipe.ZAddNX(ctx, r.indexKey(e.Channel), redis.Z{Score: indexScore(e), Member: e.Hash})
			pipe.SAdd(ctx, r.channelsKey(), e.Channel)
		}
		_, err := pipe.Exec(ctx)
		return err
	}); err != nil {
		return fmt.Errorf("index suppressed recipients: %w", err)
	}
	if err := r.rdb.Set(ctx, r.builtKey(), "1", 0).Err(); err != nil {
		return fmt.Errorf("index suppressed recipients: %w", err)
	}
	return nil
}

// scanList is List from a scan of the keys (every master of a Cluster),
// each page read in one pipeline (a Cluster's split by slot) and given to
// page when not nil, the newest limit entries kept meanwhile.
func (r *Redis) scanList(ctx context.Context, channel string, limit int, page func([]Entry) error) ([]Entry, error) {
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
			if page != nil {
				if err := page(es); err != nil {
					return err
				}
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
