package globallimit

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifier/notifier/internal/luapre"
	"github.com/notifier/notifier/testenv"
)

var rangePrefixes atomic.Int64

func rangePrefix() string { return fmt.Sprintf("ranges:%d:", rangePrefixes.Add(1)) }

// TestTakeRefusesArgumentsOutOfRange calls take.lua directly with the
// values issue 26 found accepted (a rate of 1e-15 made em(1) 1e21 µs and
// left the bucket's key for ~1e18 ms) and others no Config allows: each
// stops the script with an error naming the argument, and no key is
// written.
func TestTakeRefusesArgumentsOutOfRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	for _, c := range []struct {
		rate, burst, n, now any
		want                string
	}{
		{"1e-15", 500, 1, "", "argument rate out of range: 1e-15"},
		{"1e12", 500, 1, "", "argument rate out of range: 1e12"},
		{"0", 500, 1, "", "argument rate out of range: 0"},
		{"nan", 500, 1, "", "argument rate out of range: nan"},
		{"100", "1e12", 1, "", "argument burst out of range: 1e12"},
		{"100", 0, 1, "", "argument burst out of range: 0"},
		{"100", "2.5", 1, "", "argument burst out of range: 2.5"},
		{"100", 500, 0, "", "argument n out of range: 0"},
		{"100", 500, "1e12", "", "argument n out of range: 1e12"},
		{"0.001", 500, 1, "", "argument refill em(burst) out of range"},
		{"100", 500, 1, "1e20", "argument now out of range: 1e20"},
	} {
		key := Key(rangePrefix())
		// the fleet's take: up to n, at least 1, ranges refused (clamp 0)
		err := takeScript.Run(ctx, rdb, []string{key}, c.n, 1, c.now, MaxRefill.Microseconds(), 0, c.rate, c.burst).Err()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("take rate %v burst %v n %v now %v: %v, want an error saying %q", c.rate, c.burst, c.n, c.now, err, c.want)
		}
		if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Errorf("take rate %v burst %v n %v: the key was written (%d, %v)", c.rate, c.burst, c.n, n, err)
		}
	}
}

// TestTakeExpiryWithinRefill: at the edges of Config's ranges (a burst of
// a million, a refill of exactly MaxRefill at the slowest rate) the key
// lives at most MaxRefill and a second.
func TestTakeExpiryWithinRefill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	for _, cfg := range []Config{
		{Rate: MinRate, Burst: 1},
		{Rate: MaxBurst / MaxRefill.Seconds(), Burst: MaxBurst},
		{Rate: MaxRate, Burst: MaxBurst},
	} {
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		s := NewRedis(rdb, rangePrefix())
		if g, _, err := s.Take(ctx, cfg, cfg.Burst); err != nil || g != cfg.Burst {
			t.Fatalf("take the whole burst of %+v: %d, %v", cfg, g, err)
		}
		d, err := rdb.PTTL(ctx, s.key).Result()
		if err != nil || d <= 0 || d > MaxRefill+time.Second {
			t.Errorf("%+v: PTTL %v, %v; want at most %v", cfg, d, err, MaxRefill+time.Second)
		}
	}
}

// TestTakeReadsAnImpossibleStateAsNone: a key holding a tat no valid Config
// writes (1e21 µs, as a rate of 1e-15 did, with an expiry of ~1e18 ms) no
// longer stops the fleet once the rate is fixed: it is read as a lost key
// (a full bucket), and the first grant rewrites it with an expiry within
// MaxRefill. Memory does the same arithmetic.
func TestTakeReadsAnImpossibleStateAsNone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	prefix := rangePrefix()
	key := Key(prefix)
	if err := rdb.Do(ctx, "SET", key, "1e+21", "PX", "1000000000000000000").Err(); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Rate: 100, Burst: 10}
	s := NewRedis(rdb, prefix)
	g, wait, err := s.Take(ctx, cfg, 10)
	if err != nil || g != 10 || wait != 0 {
		t.Fatalf("take 10 from a poisoned key: %d, %v, %v; want the whole burst", g, wait, err)
	}
	if d, err := rdb.PTTL(ctx, key).Result(); err != nil || d <= 0 || d > 2*time.Second {
		t.Errorf("PTTL after the grant %v, %v; want about 1.1 s", d, err)
	}
	if d := take(1e15, 1e9, cfg, 10); d.granted != 10 {
		t.Errorf("memory's take from tat 1e15 at now 1e9: granted %d, want 10", d.granted)
	}
	if d := take(1e9+MaxRefill.Microseconds(), 1e9, cfg, 10); d.granted != 0 {
		t.Errorf("memory's take from a tat a day ahead: granted %d, want 0 (a valid state is kept)", d.granted)
	}
	if luapre.MaxTTL < MaxRefill {
		t.Errorf("luapre.MaxTTL %v is shorter than MaxRefill %v", luapre.MaxTTL, MaxRefill)
	}
}
