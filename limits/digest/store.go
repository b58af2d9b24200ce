// Package digest keeps the jobs a per-user cap with on_exceed: digest
// refused, until the user's window lets one send through: then one digest
// job goes out instead of them ("4 new notifications"), and they end
// suppressed (reason digested).
//
// The jobs themselves stay in JetStream, handed back with a delay until
// the window allows (so a crash or a restart loses none); this package
// keeps, per user's cap, which are held and which went into which digest:
// a Redis hash shared by the fleet (Redis), or one process's map (Memory).
// A digest's id is derived from its members' ids, so asking again for the
// same held jobs names the same digest, and a digest is published once
// (JetStream's duplicate window) and sent once (the ledger). Both stores
// are safe for concurrent use.
package digest

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/internal/luapre"
)

// States of a digest.
const (
	// Pending: its members are taken, the digest job not yet published
	// (whoever meets it next publishes it).
	Pending = "pending"
	// Published: the digest job is in the job stream.
	Published = "published"
)

// Bounds of a user's state.
const (
	// MaxHeld is the most jobs held for one user's digest at once: a job
	// refused past it is not held (Hold says ErrTooManyHeld), so that a
	// user flooded with jobs costs a bounded state and a bounded digest.
	MaxHeld = 10000
	// MaxMembers is the most member ids a Membership carries, the first
	// in id order (its Count is the digest's whole count): what a digest
	// job lists in its data (SPEC §4).
	MaxMembers = 100
)

// ErrTooManyHeld: Hold did not hold the job, MaxHeld jobs being held for
// the user already. The caller ends the job (it is in no digest).
var ErrTooManyHeld = errors.New("too many jobs held for the user's digest")

// Membership says whether a job went into a digest: Digest "" when not.
type Membership struct {
	Digest string
	State  string // Pending or Published
	Count  int    // the digest's jobs
	// Members are the first MaxMembers of the digest's job ids
	// (queue.MsgID), sorted, while the digest is pending (none once
	// published): whoever publishes a pending digest puts them in its data.
	Members []string
}

// Taken is what Take made of a user's held jobs: a digest of Members
// (Digest set), or nothing (the trigger goes alone).
type Taken struct {
	Digest  string
	Members []string // job ids within their tenants (queue.MsgID), sorted
	// Already: the trigger was in Digest already (another process took
	// it meanwhile); Members is empty.
	Already bool
}

// Store keeps the held jobs and the digests, per user's cap (a Key).
type Store interface {
	// Hold notes job id, refused by the cap, as held for the user's next
	// digest (expires: its expires_at, zero for none; ttl: how long the
	// user's state is kept, past the window); held is how many are held
	// now. A job that already went into a digest is not held: m says
	// which. A new job when MaxHeld are held is not held either: err is
	// ErrTooManyHeld.
	Hold(ctx context.Context, key Key, id string, expires time.Time, ttl time.Duration) (held int, m Membership, err error)
	// Of says whether job id went into a digest.
	Of(ctx context.Context, key Key, id string) (Membership, error)
	// Take makes the jobs held when the cap allowed trigger (at allowed,
	// on the store's clock; zero: now) and not yet expired, with trigger,
	// one digest when they are two or more; else trigger is no longer held
	// and goes alone (Taken.Digest ""). A job held after allowed was
	// refused because trigger took the cap: it stays held, for the next
	// window's digest. A Take that finds jobs held forgets the digests
	// taken more than ttl ago (Of, Hold and Digest no longer know them), as
	// the whole state is forgotten ttl after the last Hold or Take.
	Take(ctx context.Context, key Key, trigger string, expires, allowed time.Time, ttl time.Duration) (Taken, error)
	// Publish marks the digest published.
	Publish(ctx context.Context, key Key, digest string) error
	// Digest says whether digest is one of key's (a digest job claiming to
	// be one is checked here), and its count.
	Digest(ctx context.Context, key Key, digest string) (m Membership, ok bool, err error)
	// Held is how many of key's jobs are held now.
	Held(ctx context.Context, key Key) (int, error)
}

// Key names one user's cap: its channel, its category when it has a cap of
// its own, and the user. Its string is a hash of them, so no user id
// reaches a Redis key.
type Key string

// KeyOf is the Key of user's cap on channel (category: "" unless the
// category has a cap of its own).
func KeyOf(channel, category, user string) Key {
	h := sha256.New()
	for _, s := range []string{channel, category, user} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return Key(hex.EncodeToString(h.Sum(nil))[:32])
}

var (
	//go:embed hold.lua
	holdLua string
	//go:embed take.lua
	takeLua string
	//go:embed held.lua
	heldLua string

	holdScript    = redis.NewScript(luapre.Now + luapre.Num + heldLua + holdLua)
	takeScript    = redis.NewScript(luapre.Now + luapre.Num + heldLua + takeLua)
	publishScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'D:' .. ARGV[1])
if not st then return 0 end
redis.call('HSET', KEYS[1], 'D:' .. ARGV[1], (string.gsub(st, '^%a+', 'published', 1)))
redis.call('HDEL', KEYS[1], 'I:' .. ARGV[1])
return 1`)
)

// Redis is the fleet's store: a hash per user's cap,
// {<prefix>dg:<key>} (its fields: take.lua's header).
type Redis struct {
	rdb    redis.UniversalClient
	prefix string
	now    func() time.Time // nil: the Redis clock (TIME)
	limits
}

// limits are a store's bounds: MaxHeld and MaxMembers but in tests.
type limits struct{ maxHeld, maxMembers int }

func (l limits) held() int {
	if l.maxHeld > 0 {
		return l.maxHeld
	}
	return MaxHeld
}

func (l limits) members() int {
	if l.maxMembers > 0 {
		return l.maxMembers
	}
	return MaxMembers
}

var _ Store = (*Redis)(nil)

// NewRedis returns the store in rdb under prefix (redis.key_prefix).
func NewRedis(rdb redis.UniversalClient, prefix string) *Redis {
	return &Redis{rdb: rdb, prefix: prefix}
}

// WithNow makes Hold and Take read now rather than the Redis clock (tests,
// to compare with Memory step by step).
func (r *Redis) WithNow(now func() time.Time) *Redis { r.now = now; return r }

// nowArg is the scripts' now argument: empty (the Redis clock) but in tests.
func (r *Redis) nowArg() string {
	if r.now == nil {
		return ""
	}
	return micros(r.now())
}

func (r *Redis) key(k Key) string { return "{" + r.prefix + "dg:" + string(k) + "}" }

func micros(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return strconv.FormatInt(t.UnixMicro(), 10)
}

func ttlMs(ttl time.Duration) string { return strconv.FormatInt(max(1, ttl.Milliseconds()), 10) }

// Hold implements Store.
func (r *Redis) Hold(ctx context.Context, key Key, id string, expires time.Time, ttl time.Duration) (int, Membership, error) {
	v, err := holdScript.Run(ctx, r.rdb, []string{r.key(key)}, id, micros(expires), ttlMs(ttl), r.nowArg(), r.held()).Slice()
	if err != nil {
		return 0, Membership{}, fmt.Errorf("hold a job for a digest: %w", err)
	}
	held, ok := v[0].(int64)
	if !ok {
		return 0, Membership{}, fmt.Errorf("hold a job for a digest: reply %v", v)
	}
	if len(v) == 2 {
		return int(held), Membership{}, ErrTooManyHeld
	}
	var m Membership
	if len(v) >= 4 {
		m.Digest, _ = v[1].(string)
		m.State, _ = v[2].(string)
		c, _ := v[3].(int64)
		m.Count = int(c)
	}
	if len(v) == 5 {
		ids, _ := v[4].(string)
		m.Members = strings.Fields(ids)
	}
	return int(held), m, nil
}

// Of implements Store.
func (r *Redis) Of(ctx context.Context, key Key, id string) (Membership, error) {
	d, err := r.rdb.HGet(ctx, r.key(key), "d:"+id).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return Membership{}, nil
	case err != nil:
		return Membership{}, fmt.Errorf("is a job in a digest: %w", err)
	}
	m, _, err := r.Digest(ctx, key, d)
	return m, err
}

// Take implements Store.
func (r *Redis) Take(ctx context.Context, key Key, trigger string, expires, allowed time.Time, ttl time.Duration) (Taken, error) {
	v, err := takeScript.Run(ctx, r.rdb, []string{r.key(key)}, trigger, micros(expires), ttlMs(ttl), r.nowArg(), micros(allowed), r.members()).Slice()
	if err != nil {
		return Taken{}, fmt.Errorf("take held jobs into a digest: %w", err)
	}
	if len(v) == 0 {
		return Taken{}, nil
	}
	t := Taken{}
	t.Digest, _ = v[0].(string)
	if n, _ := v[1].(int64); n < 0 {
		t.Already = true
		return t, nil
	}
	for _, x := range v[2:] {
		s, _ := x.(string)
		t.Members = append(t.Members, s)
	}
	return t, nil
}

// Publish implements Store: the digest's member ids are dropped (no one
// needs them once it is published).
func (r *Redis) Publish(ctx context.Context, key Key, digest string) error {
	if err := publishScript.Run(ctx, r.rdb, []string{r.key(key)}, digest).Err(); err != nil {
		return fmt.Errorf("mark a digest published: %w", err)
	}
	return nil
}

// Digest implements Store.
func (r *Redis) Digest(ctx context.Context, key Key, digest string) (Membership, bool, error) {
	v, err := r.rdb.HMGet(ctx, r.key(key), "D:"+digest, "I:"+digest).Result()
	if err != nil {
		return Membership{}, false, fmt.Errorf("read a digest: %w", err)
	}
	st, ok := v[0].(string)
	if !ok {
		return Membership{}, false, nil
	}
	f := strings.Fields(st) // state, count, and (but as written before) when taken
	m := Membership{Digest: digest}
	if len(f) >= 2 {
		m.State = f[0]
		m.Count, _ = strconv.Atoi(f[1])
	}
	if ids, _ := v[1].(string); m.State == Pending {
		m.Members = strings.Fields(ids)
	}
	return m, true, nil
}

// Held implements Store.
func (r *Redis) Held(ctx context.Context, key Key) (int, error) {
	n, err := r.rdb.HGet(ctx, r.key(key), "held").Int()
	switch {
	case err == nil:
		return n, nil
	case !errors.Is(err, redis.Nil):
		return 0, fmt.Errorf("count held jobs: %w", err)
	}
	// No count: no state, or a hash written before the count was kept.
	fields, err := r.rdb.HKeys(ctx, r.key(key)).Result()
	if err != nil {
		return 0, fmt.Errorf("count held jobs: %w", err)
	}
	n = 0
	for _, f := range fields {
		if strings.HasPrefix(f, "h:") {
			n++
		}
	}
	return n, nil
}
