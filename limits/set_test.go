package limits

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestLimitsRefuseAnOutOfRangeHeadroom: a limit set whose configuration
// the leaky queue cannot take is an error from its constructor, not a
// panic.
func TestLimitsRefuseAnOutOfRangeHeadroom(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: building a limit set sends nothing
	t.Cleanup(func() { _ = rdb.Close() })
	bad := Config{DedupTTL: time.Hour, Headroom: 0.5}
	if _, err := Redis(rdb, bad); err == nil || !strings.Contains(err.Error(), "redis limits: ") || !strings.Contains(err.Error(), "headroom must be in [0, 0.5), got 0.5") {
		t.Errorf("Redis with headroom 0.5: %v", err)
	}
	if _, err := Memory(bad, 1); err == nil || !strings.Contains(err.Error(), "local limits: ") || !strings.Contains(err.Error(), "headroom must be in [0, 0.5), got 0.5") {
		t.Errorf("Memory with headroom 0.5: %v", err)
	}
	good := Config{DedupTTL: time.Hour, Headroom: 0.4}
	if _, err := Redis(rdb, good); err != nil {
		t.Errorf("Redis with headroom 0.4: %v", err)
	}
	if _, err := Memory(good, 1); err != nil {
		t.Errorf("Memory with headroom 0.4: %v", err)
	}
}
