package dispatch

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/testenv"
)

// TestLimitsRefuseAnOutOfRangeHeadroom: a limit set whose configuration
// the leaky queue cannot take is an error from its constructor, not a
// panic.
func TestLimitsRefuseAnOutOfRangeHeadroom(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: building a limit set sends nothing
	t.Cleanup(func() { _ = rdb.Close() })
	bad := LimitsConfig{DedupTTL: time.Hour, Headroom: 0.5}
	if _, err := RedisLimits(rdb, bad); err == nil || !strings.Contains(err.Error(), "redis limits: ") || !strings.Contains(err.Error(), "headroom must be in [0, 0.5), got 0.5") {
		t.Errorf("RedisLimits with headroom 0.5: %v", err)
	}
	if _, err := MemoryLimits(bad, 1); err == nil || !strings.Contains(err.Error(), "local limits: ") || !strings.Contains(err.Error(), "headroom must be in [0, 0.5), got 0.5") {
		t.Errorf("MemoryLimits with headroom 0.5: %v", err)
	}
	good := LimitsConfig{DedupTTL: time.Hour, Headroom: 0.4}
	if _, err := RedisLimits(rdb, good); err != nil {
		t.Errorf("RedisLimits with headroom 0.4: %v", err)
	}
	if _, err := MemoryLimits(good, 1); err != nil {
		t.Errorf("MemoryLimits with headroom 0.4: %v", err)
	}
}

// TestFallbackThatFailsHolds: under redis.on_failure: local, a fallback
// that cannot be built leaves the process holding, as without one, and
// says why.
func TestFallbackThatFailsHolds(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	p := b.start(func(o *Options) {
		o.Fallback = func() (*Limits, error) { return nil, errors.New("no local limits today") }
	})
	testenv.WaitFor(t, 10*time.Second, "the dispatcher ready", func() bool { return p.d.Ready() == nil })
	b.redis.Stop()
	testenv.WaitFor(t, 10*time.Second, "the process holding", func() bool { return p.d.LimitsName() == "holding" })
	testenv.WaitFor(t, 5*time.Second, "the fallback's error logged", func() bool {
		return strings.Contains(b.logs.String(), "no local limits today")
	})
	b.redis.Start()
	testenv.WaitFor(t, 30*time.Second, "back on Redis", func() bool { return p.d.LimitsName() == "redis" })
}
