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

// Batcher takes from many token buckets at once (MemoryStore and
// RedisStore implement it). TakeAll takes n tokens from every bucket of
// ls, all or nothing, in one atomic step; n = 0 only reads them. It
// reports whether they were taken and each bucket's state after the call
// (states[i] is ls[i]'s): when refused, the longest Wait is when a retry
// can succeed. n must be from 0 to every bucket's burst. The limits are
// clamped into the store's window (WithWindow), not refused: a rate
// slower than the burst per window is taken as that, and a state further
// ahead than the bucket's refill (written under another configuration) is
// read, and written back, as an empty bucket.
type Batcher interface {
	TakeAll(ctx context.Context, n int, ls ...Limit) (taken bool, states []State, err error)
}

// Limit is one bucket of a TakeAll: where its state lives (the Redis key,
// any name in memory) and its rate and burst.
type Limit struct {
	Key   string
	Rate  float64 // tokens per second, at most MaxRate
	Burst int     // 1 to MaxBurst
}

// State is one bucket's state after a take.
type State struct {
	Remaining int           // whole tokens left
	Wait      time.Duration // until the bucket holds the tokens asked for (0: it does)
	Reset     time.Duration // until the bucket is full again
}

// em is the time k tokens take to refill at rate, in µs, rounded up. The
// Lua twin in take.lua must compute the same: (k × 10⁶) / rate, ceil.
func em(k int, rate float64) int64 {
	return int64(math.Ceil(float64(k) * 1e6 / rate))
}

// request is one take of take.lua's arguments: up to n tokens from every
// bucket, at least least (n: all or nothing; 1: a lease; 0 and 0: a read).
type request struct {
	n, least int
	now      int64 // µs
	limit    int64 // µs, the furthest a state may be ahead of now
	clamp    bool  // clamp what is out of range (TakeAll), else it was refused before (Take)
}

// bucketState is one bucket of a decision: its new tat and its State in µs.
type bucketState struct {
	tat, remaining, wait, reset int64
	write                       bool // the new tat is stored (else the stored one stays)
}

// decide is the buckets' maths (see the package doc and take.lua), shared
// by MemoryStore and mirrored line by line by take.lua: tats[i] is bucket
// ls[i]'s stored state (0: none, a full bucket). It returns the tokens
// granted and each bucket's state after them.
func decide(tats []int64, ls []Limit, r request) (int, []bucketState) {
	rate := make([]float64, len(ls))
	full := make([]int64, len(ls))
	base := make([]int64, len(ls))
	clamped := make([]bool, len(ls))
	for i, l := range ls {
		if r.clamp {
			// no slower than refilling the whole burst within limit
			rate[i] = max(l.Rate, float64(l.Burst)*1e6/float64(r.limit))
			full[i] = min(em(l.Burst, rate[i]), r.limit)
		} else {
			rate[i] = l.Rate
			full[i] = em(l.Burst, rate[i])
		}
	}
	granted := r.n
	for i := range ls {
		t := tats[i]
		if r.clamp && t > r.now+full[i] {
			t, clamped[i] = r.now+full[i], true
		} else if !r.clamp && t-r.now > r.limit {
			t = 0 // written by no valid Config: no state, as a lost key
		}
		base[i] = max(t, r.now)
		// g: the most tokens up to n that bucket i holds
		room := r.now + full[i] - base[i]
		g := 0
		if room > 0 {
			g = int(min(math.Floor(float64(room)*rate[i]/1e6), float64(r.n)))
			for g > 0 && em(g, rate[i]) > room {
				g--
			}
			for g < r.n && em(g+1, rate[i]) <= room {
				g++
			}
		}
		granted = min(granted, g)
	}
	if granted < r.least {
		granted = 0
	}
	out := make([]bucketState, len(ls))
	for i, l := range ls {
		t := base[i] + em(granted, rate[i])
		s := bucketState{tat: t, reset: t - r.now, write: granted > 0 || clamped[i]}
		if granted < r.n {
			s.wait = max(0, t+em(r.least, rate[i])-full[i]-r.now)
		}
		s.remaining = left(t, r.now, full[i], rate[i], l.Burst)
		out[i] = s
	}
	return granted, out
}

// left is the whole tokens in a bucket (full, rate, burst) whose tat is t.
func left(t, now, full int64, rate float64, burst int) int64 {
	room := now + full - t
	if room <= 0 {
		return 0
	}
	x := int(min(math.Floor(float64(room)*rate/1e6), float64(burst)))
	for x > 0 && em(x, rate) > room {
		x--
	}
	for x < burst && em(x+1, rate) <= room {
		x++
	}
	return int64(x)
}

// decision is the answer of take.
type decision struct {
	tat     int64 // new tat, µs
	granted int
	wait    int64 // µs; 0 when granted == n
}

// take is decide for the fleet's bucket: up to n tokens at now from the
// state tat (0: none, full), its arguments checked before (checkTake).
func take(tat, now int64, cfg Config, n int) decision {
	g, s := decide([]int64{tat}, []Limit{{Rate: cfg.Rate, Burst: cfg.Burst}},
		request{n: n, least: 1, now: now, limit: MaxRefill.Microseconds()})
	return decision{tat: s[0].tat, granted: g, wait: s[0].wait}
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

// checkTakeAll checks a TakeAll's arguments against every bucket's range.
func checkTakeAll(n int, ls []Limit) error {
	for _, l := range ls {
		if !(l.Rate >= 0 && l.Rate <= MaxRate) || l.Burst < 1 || l.Burst > MaxBurst {
			return fmt.Errorf("take %d tokens of %s: rate must be from 0 to %d and burst from 1 to %d, got %v and %d", n, l.Key, MaxRate, MaxBurst, l.Rate, l.Burst)
		}
		if n < 0 || n > l.Burst {
			return fmt.Errorf("take %d tokens of %s: n must be from 0 to the burst %d", n, l.Key, l.Burst)
		}
	}
	return nil
}

// states converts the buckets of a decision to States.
func states(bs []bucketState) []State {
	out := make([]State, len(bs))
	for i, b := range bs {
		out[i] = State{Remaining: int(b.remaining), Wait: time.Duration(b.wait) * time.Microsecond, Reset: time.Duration(b.reset) * time.Microsecond}
	}
	return out
}

// MemoryStore is a Store and a Batcher kept in this process (tests, the
// demo, a single process). It is safe for concurrent use; the zero value
// is not usable, call NewMemory. Its TakeAll keeps one entry per key ever
// taken from.
type MemoryStore struct {
	now    func() time.Time
	window time.Duration
	mu     sync.Mutex
	tat    int64
	tats   map[string]int64 // TakeAll's buckets by key
}

var (
	_ Store   = (*MemoryStore)(nil)
	_ Batcher = (*MemoryStore)(nil)
)

// NewMemory returns a full in-process bucket. Of the options, it reads
// WithNow (default time.Now) and WithWindow.
func NewMemory(opts ...Option) *MemoryStore {
	o := buildOptions(opts)
	now := o.now
	if now == nil {
		now = time.Now
	}
	return &MemoryStore{now: now, window: o.window, tats: map[string]int64{}}
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

// TakeAll implements Batcher.
func (s *MemoryStore) TakeAll(_ context.Context, n int, ls ...Limit) (bool, []State, error) {
	if err := checkTakeAll(n, ls); err != nil {
		return false, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tats := make([]int64, len(ls))
	for i, l := range ls {
		tats[i] = s.tats[l.Key]
	}
	g, bs := decide(tats, ls, request{n: n, least: n, now: s.now().UnixMicro(), limit: s.window.Microseconds(), clamp: true})
	for i, l := range ls {
		if bs[i].write {
			s.tats[l.Key] = bs[i].tat
		}
	}
	return g == n, states(bs), nil
}
