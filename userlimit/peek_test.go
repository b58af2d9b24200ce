package userlimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
	"github.com/notifier/notifier/userlimit/userlimittest"
)

// TestPropertyPeekAgreesWithAllow applies random sequences of (advance the
// clock, admit a job for now or for a slot, or peek then admit a new job) to
// Memory and to Redis on one fake clock. Every peek must say what the Allow
// of a new job at the same instant then decides (allowed or not, the same
// remaining, the retry time within 1 ms), and must change nothing: Redis
// holds the same keys with the same values before and after it.
func TestPropertyPeekAgreesWithAllow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	windows := []time.Duration{3*time.Millisecond + time.Microsecond, time.Second, 10 * time.Second, time.Hour}
	fresh := 0
	rapid.Check(t, func(rt *rapid.T) {
		alg := rapid.SampledFrom(userlimittest.Algorithms).Draw(rt, "algorithm")
		window := rapid.SampledFrom(windows).Draw(rt, "window")
		w := window.Microseconds()
		clock := testenv.NewClock(userlimittest.Start.Add(time.Duration(rapid.Int64Range(0, 3*w).Draw(rt, "start offset µs")) * time.Microsecond))
		prefix := newPrefix("peek")
		mem := userlimit.NewMemory(userlimit.WithNow(clock.Now))
		red := userlimit.NewRedis(rdb, prefix, userlimit.WithNow(clock.Now))
		rule := userlimit.Rule{Limit: rapid.IntRange(1, 5).Draw(rt, "limit"), Window: window, Algorithm: alg}
		key := userlimit.Key{Channel: "sms", User: "u42"}
		advance := rapid.OneOf(
			rapid.Just(int64(0)),
			rapid.Int64Range(1, max(w/10, 1)),
			rapid.Map(rapid.IntRange(1, 8), func(k int) int64 { return int64(k) * w / 4 }),
		)
		for i := range rapid.IntRange(1, 40).Draw(rt, "steps") {
			clock.Advance(time.Duration(advance.Draw(rt, "advance µs")) * time.Microsecond)
			for name, l := range map[string]interface {
				userlimit.Limiter
				userlimit.Peeker
			}{"memory": mem, "redis": red} {
				if !rapid.Bool().Draw(rt, "peek") {
					job := fmt.Sprintf("job-%d", rapid.IntRange(0, 8).Draw(rt, "job"))
					if _, err := l.AllowAt(ctx, key, job, rule, clock.Now().Add(time.Duration(rapid.Int64Range(0, w).Draw(rt, "slot µs"))*time.Microsecond)); err != nil {
						rt.Fatalf("step %d: %s: allow: %v", i, name, err)
					}
					continue
				}
				var before snap
				if name == "redis" {
					before = snapshot(rt, rdb, prefix)
				}
				peek, err := l.Peek(ctx, key, rule)
				if err != nil {
					rt.Fatalf("step %d: %s: peek: %v", i, name, err)
				}
				if name == "redis" {
					if after := snapshot(rt, rdb, prefix); !before.same(after) {
						rt.Fatalf("step %d: peek changed Redis:\nbefore %v\nafter  %v", i, before.dumps, after.dumps)
					}
				}
				fresh++
				got, err := l.Allow(ctx, key, fmt.Sprintf("new-%d", fresh), rule)
				if err != nil {
					rt.Fatalf("step %d: %s: allow: %v", i, name, err)
				}
				d := peek.RetryAfter - got.RetryAfter
				if peek.Allowed != got.Allowed || peek.Remaining != got.Remaining || d < -time.Millisecond || d > time.Millisecond {
					rt.Fatalf("step %d: %s %s limit %d: peek %+v, then allow %+v", i, name, alg, rule.Limit, peek, got)
				}
			}
		}
	})
}

// snap is every key under a prefix with its DUMP and when its TTL, read
// with it, runs out (zero for a key without one); listed is when KEYS
// answered.
type snap struct {
	listed  time.Time
	dumps   map[string]string
	expires map[string]time.Time
}

// snapshot is every key under prefix with its DUMP and expiry.
func snapshot(rt *rapid.T, rdb *redis.Client, prefix string) snap {
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "{"+prefix+"*").Result()
	if err != nil {
		rt.Fatalf("keys: %v", err)
	}
	s := snap{listed: time.Now(), dumps: map[string]string{}, expires: map[string]time.Time{}}
	for _, k := range keys {
		v, err := rdb.Dump(ctx, k).Result()
		if err != nil && err != redis.Nil {
			rt.Fatalf("dump %s: %v", k, err)
		}
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			rt.Fatalf("pttl %s: %v", k, err)
		}
		s.dumps[k] = v
		if ttl >= 0 {
			// Read after the answer: no earlier than Redis's own expiry.
			s.expires[k] = time.Now().Add(ttl)
		}
	}
	return s
}

// same reports whether after holds what s held: the same keys with the
// same values, but for keys whose TTL had run out on Redis's real clock
// before after's KEYS answered (the limiters take a fake clock, Redis
// expires on its own: a 3 ms window's keys live a few real ms, which a
// loaded machine can spend between two snapshots).
func (s snap) same(after snap) bool {
	for k, v := range s.dumps {
		got, ok := after.dumps[k]
		if exp, has := s.expires[k]; !ok && has && !exp.After(after.listed.Add(time.Millisecond)) { // PTTL's rounding
			continue
		}
		if !ok || got != v {
			return false
		}
	}
	for k := range after.dumps {
		if _, ok := s.dumps[k]; !ok {
			return false
		}
	}
	return true
}

// TestPeekInvalidRule: a bad rule is an error, never a panic.
func TestPeekInvalidRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := userlimit.Key{Channel: "sms", User: "u"}
	for _, l := range []userlimit.Peeker{userlimit.NewMemory(), userlimit.NewRedis(testenv.Redis(t).Client(), newPrefix("peekbad"))} {
		if _, err := l.Peek(ctx, key, userlimit.Rule{Limit: 0, Window: time.Second}); err == nil {
			t.Errorf("%T: peek with limit 0: no error", l)
		}
	}
}
