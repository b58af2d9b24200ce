package globallimit

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// Store is the fleet's token bucket. Take takes up to n tokens at once (for
// leasing): granted is in [0, n]; when granted < n, wait is when the next
// token is due. Implementations are safe for concurrent use.
type Store interface {
	Take(ctx context.Context, cfg Config, n int) (granted int, wait time.Duration, err error)
}

// em is the time k tokens take to refill at rate, in µs, rounded up. The
// Lua twin in take.lua must compute the same: (k × 10⁶) / rate, ceil.
func em(k int, rate float64) int64 {
	return int64(math.Ceil(float64(k) * 1e6 / rate))
}

// decision is the answer of take.
type decision struct {
	tat     int64 // new tat, µs
	granted int
	wait    int64 // µs; 0 when granted == n
}

// take is the bucket's maths (see the package doc), shared by MemoryStore
// and mirrored line by line by take.lua. tat 0 means no state (full).
func take(tat, now int64, cfg Config, n int) decision {
	full := em(cfg.Burst, cfg.Rate)
	if tat-now > MaxRefill.Microseconds() {
		tat = 0 // written by no valid Config: no state, as a lost key
	}
	base := max(tat, now)
	room := now + full - base
	g := 0
	if room > 0 {
		g = int(min(math.Floor(float64(room)*cfg.Rate/1e6), float64(n)))
		for g > 0 && em(g, cfg.Rate) > room {
			g--
		}
		for g < n && em(g+1, cfg.Rate) <= room {
			g++
		}
	}
	d := decision{tat: base + em(g, cfg.Rate), granted: g}
	if g < n {
		d.wait = max(0, d.tat+em(1, cfg.Rate)-full-now)
	}
	return d
}

func checkTake(cfg Config, n int) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if n < 1 || n > MaxBurst {
		return fmt.Errorf("n must be from 1 to %d, got %d", MaxBurst, n)
	}
	return nil
}

// MemoryStore is a Store kept in this process (tests, the demo, a single
// process). It is safe for concurrent use; the zero value is not usable,
// call NewMemory.
type MemoryStore struct {
	now func() time.Time
	mu  sync.Mutex
	tat int64
}

var _ Store = (*MemoryStore)(nil)

// NewMemory returns a full in-process bucket. Of the options, it reads
// WithNow (default time.Now).
func NewMemory(opts ...Option) *MemoryStore {
	now := buildOptions(opts).now
	if now == nil {
		now = time.Now
	}
	return &MemoryStore{now: now}
}

// Take implements Store.
func (s *MemoryStore) Take(_ context.Context, cfg Config, n int) (int, time.Duration, error) {
	if err := checkTake(cfg, n); err != nil {
		return 0, 0, fmt.Errorf("take global tokens: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := take(s.tat, s.now().UnixMicro(), cfg, n)
	if d.granted > 0 {
		s.tat = d.tat
	}
	return d.granted, time.Duration(d.wait) * time.Microsecond, nil
}
