// Package globallimittest is the conformance suite every globallimit.Store
// passes: step tables on a fake clock, rounding, configuration changes,
// validation and concurrent takes, and the same of its batch take
// (globallimit.Batcher: all or nothing from many buckets). Run it from a
// backend's tests:
//
//	globallimittest.Run(t, globallimittest.Backend{New: func(t *testing.T, opts ...globallimit.Option) globallimit.Store {
//		return globallimit.NewMemory(opts...)
//	}})
package globallimittest

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/testenv"
)

// Backend is a Store implementation under test.
type Backend struct {
	// New returns a new, full bucket with opts applied, isolated from every
	// other one it returned (its own key prefix). The suite's fake clock is
	// among opts (globallimit.WithNow).
	New func(t *testing.T, opts ...globallimit.Option) globallimit.Store
}

// start returns a new store of b and the fake clock it reads, stopped at
// the current time.
func (b Backend) start(t *testing.T) (globallimit.Store, *testenv.Clock) {
	clock := testenv.NewClock(time.Now())
	return b.New(t, globallimit.WithNow(clock.Now)), clock
}

// Step is one Take of a step table: advance the clock, optionally switch
// the configuration, take up to N tokens, expect Granted and Wait.
type Step struct {
	Advance time.Duration
	Config  *globallimit.Config // nil: keep the table's
	N       int
	Granted int
	Wait    time.Duration
}

// Table is a named sequence of steps on a new bucket.
type Table struct {
	Name   string
	Config globallimit.Config
	Steps  []Step
}

const ms = time.Millisecond

func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

// Tables are the step tables every Store must reproduce exactly.
var Tables = []Table{
	{
		Name:   "burst then the rate",
		Config: globallimit.Config{Rate: 10, Burst: 3},
		Steps: []Step{
			{N: 1, Granted: 1},
			{N: 5, Granted: 2, Wait: 100 * ms},
			{N: 1, Granted: 0, Wait: 100 * ms},
			{Advance: 50 * ms, N: 1, Granted: 0, Wait: 50 * ms},
			{Advance: 50 * ms, N: 1, Granted: 1},
			{Advance: 250 * ms, N: 3, Granted: 2, Wait: 50 * ms},
			{Advance: 10 * time.Second, N: 10, Granted: 3, Wait: 100 * ms},
			{Advance: 300 * ms, N: 3, Granted: 3},
		},
	},
	{
		Name:   "a fractional interval rounds each grant up",
		Config: globallimit.Config{Rate: 3, Burst: 2},
		Steps: []Step{
			{N: 2, Granted: 2},                   // em(2) = ⌈666666.7⌉ = 666667 µs
			{N: 1, Granted: 0, Wait: us(333334)}, // em(1) = 333334 µs
			{Advance: us(333333), N: 1, Granted: 0, Wait: us(1)},
			{Advance: us(1), N: 1, Granted: 1},
		},
	},
	{
		// 63 tokens at 0.7/s take exactly 90 s, but 9e7 × 0.7 / 1e6 is
		// 62.99999999999999 in floating point: the count must be corrected
		// up, identically in Go and Lua
		Name:   "float rounding never loses a token",
		Config: globallimit.Config{Rate: 0.7, Burst: 63},
		Steps: []Step{
			{N: 63, Granted: 63},
			{N: 1, Granted: 0, Wait: us(1428572)}, // ⌈1e6/0.7⌉
		},
	},
	{
		Name:   "a burst of one is a plain rate",
		Config: globallimit.Config{Rate: 1000, Burst: 1},
		Steps: []Step{
			{N: 3, Granted: 1, Wait: ms},
			{Advance: ms, N: 3, Granted: 1, Wait: ms},
			{Advance: 5 * ms, N: 3, Granted: 1, Wait: ms},
		},
	},
	{
		Name:   "configuration changes apply to the same state",
		Config: globallimit.Config{Rate: 10, Burst: 10},
		Steps: []Step{
			{N: 10, Granted: 10},
			// tat is now+1s; a burst of 2 leaves no room until 900 ms from now
			{Config: &globallimit.Config{Rate: 10, Burst: 2}, N: 1, Granted: 0, Wait: 900 * ms},
			{Advance: 900 * ms, Config: &globallimit.Config{Rate: 10, Burst: 2}, N: 2, Granted: 1, Wait: 100 * ms},
			// the state is time owed (tat = now+200ms), not tokens: at a faster
			// rate the burst's room is shorter, the next token due at
			// tat + em(1) − em(burst) = 200 + 10 − 20 ms
			{Config: &globallimit.Config{Rate: 100, Burst: 2}, N: 5, Granted: 0, Wait: 190 * ms},
		},
	},
}

// BatchStep is one TakeAll of a batch table: advance the clock, take N
// tokens from Buckets (their indices in the table's Limits), expect Taken
// and each bucket's Remaining and Wait.
type BatchStep struct {
	Advance   time.Duration
	N         int
	Buckets   []int
	Taken     bool
	Remaining []int
	Wait      []time.Duration
	Reset     []time.Duration // nil: not checked
}

// BatchTable is a named sequence of batch steps on new buckets.
type BatchTable struct {
	Name   string
	Limits []globallimit.Limit // Key is a name: the backend's prefix goes before it
	Steps  []BatchStep
}

// BatchTables are the batch step tables every Batcher must reproduce.
var BatchTables = []BatchTable{
	{
		// a request's wait is until its bucket holds the tokens asked
		// for (not until it is full), and a take from several buckets is
		// all or nothing (the gateway's TestTakeSteps)
		Name: "a batch waits for its tokens, all or nothing",
		Limits: []globallimit.Limit{
			{Key: "key", Rate: 10, Burst: 50},
			{Key: "tenant", Rate: 1, Burst: 3},
		},
		Steps: []BatchStep{
			{N: 50, Buckets: []int{0}, Taken: true, Remaining: []int{0}, Wait: []time.Duration{0}},
			{N: 1, Buckets: []int{0}, Remaining: []int{0}, Wait: []time.Duration{100 * ms}},
			{N: 9, Buckets: []int{0}, Remaining: []int{0}, Wait: []time.Duration{900 * ms}},
			{Advance: 100 * ms, N: 1, Buckets: []int{0}, Taken: true, Remaining: []int{0}, Wait: []time.Duration{0}},
			{Advance: 250 * ms, N: 1, Buckets: []int{0}, Taken: true, Remaining: []int{1}, Wait: []time.Duration{0}},
			{Advance: 5 * time.Second, N: 0, Buckets: []int{0}, Taken: true, Remaining: []int{50}, Wait: []time.Duration{0}, Reset: []time.Duration{0}},
			// the tenant's 3 and the key's 50: 2 jobs, then 2 more that the
			// tenant refuses, which leaves the key's bucket as it was
			{N: 2, Buckets: []int{1, 0}, Taken: true, Remaining: []int{1, 48}, Wait: []time.Duration{0, 0}},
			{N: 2, Buckets: []int{1, 0}, Remaining: []int{1, 48}, Wait: []time.Duration{time.Second, 0}},
			{N: 1, Buckets: []int{0}, Taken: true, Remaining: []int{47}, Wait: []time.Duration{0}},
			{Advance: time.Second, N: 2, Buckets: []int{1, 0}, Taken: true, Remaining: []int{0, 48}, Wait: []time.Duration{0, 0}},
		},
	},
	{
		// a state further ahead than the bucket's refill (its burst
		// lowered from 10 to 2) reads as an empty bucket, not as the
		// time owed that Take keeps
		Name: "a state past the refill reads as an empty bucket",
		Limits: []globallimit.Limit{
			{Key: "b", Rate: 10, Burst: 10},
			{Key: "b", Rate: 10, Burst: 2},
		},
		Steps: []BatchStep{
			{N: 10, Buckets: []int{0}, Taken: true, Remaining: []int{0}, Wait: []time.Duration{0}, Reset: []time.Duration{time.Second}},
			{N: 1, Buckets: []int{1}, Remaining: []int{0}, Wait: []time.Duration{100 * ms}, Reset: []time.Duration{200 * ms}},
			{Advance: 100 * ms, N: 1, Buckets: []int{1}, Taken: true, Remaining: []int{0}, Wait: []time.Duration{0}, Reset: []time.Duration{200 * ms}},
			{Advance: 150 * ms, N: 1, Buckets: []int{1}, Taken: true, Remaining: []int{0}, Wait: []time.Duration{0}, Reset: []time.Duration{150 * ms}},
			{N: 1, Buckets: []int{1}, Remaining: []int{0}, Wait: []time.Duration{50 * ms}, Reset: []time.Duration{150 * ms}},
		},
	},
}

// Run runs the conformance suite against b.
func Run(t *testing.T, b Backend) {
	t.Run("BatchTables", func(t *testing.T) {
		t.Parallel()
		for _, tb := range BatchTables {
			t.Run(tb.Name, func(t *testing.T) {
				t.Parallel()
				s, clock := b.start(t)
				bs, ok := s.(globallimit.Batcher)
				if !ok {
					t.Fatalf("%T is no globallimit.Batcher", s)
				}
				prefix := "batch:" + strings.ReplaceAll(tb.Name, " ", "-") + ":"
				for i, st := range tb.Steps {
					clock.Advance(st.Advance)
					ls := make([]globallimit.Limit, len(st.Buckets))
					for j, k := range st.Buckets {
						ls[j] = tb.Limits[k]
						ls[j].Key = "{" + prefix + "}" + ls[j].Key
					}
					taken, states, err := bs.TakeAll(context.Background(), st.N, ls...)
					if err != nil {
						t.Fatalf("step %d: take %d: %v", i, st.N, err)
					}
					if taken != st.Taken || len(states) != len(ls) {
						t.Fatalf("step %d: take %d: taken %v %+v, want %v", i, st.N, taken, states, st.Taken)
					}
					for j, x := range states {
						if x.Remaining != st.Remaining[j] || x.Wait != st.Wait[j] || st.Reset != nil && x.Reset != st.Reset[j] {
							t.Errorf("step %d, bucket %d: %+v, want remaining %d wait %s (reset %v)", i, j, x, st.Remaining[j], st.Wait[j], st.Reset)
						}
					}
				}
			})
		}
	})
	t.Run("BatchInvalid", func(t *testing.T) {
		t.Parallel()
		s, _ := b.start(t)
		bs, ok := s.(globallimit.Batcher)
		if !ok {
			t.Fatalf("%T is no globallimit.Batcher", s)
		}
		l := globallimit.Limit{Key: "{batch:invalid}", Rate: 10, Burst: 5}
		for _, n := range []int{-1, 6} {
			if _, _, err := bs.TakeAll(context.Background(), n, l); err == nil || !strings.Contains(err.Error(), "n must be from 0 to the burst 5") {
				t.Errorf("take %d of a burst of 5: %v, want an error", n, err)
			}
		}
	})
	t.Run("Tables", func(t *testing.T) {
		t.Parallel()
		for _, tb := range Tables {
			t.Run(tb.Name, func(t *testing.T) {
				t.Parallel()
				s, clock := b.start(t)
				for i, st := range tb.Steps {
					clock.Advance(st.Advance)
					cfg := tb.Config
					if st.Config != nil {
						cfg = *st.Config
					}
					g, w, err := s.Take(context.Background(), cfg, st.N)
					if err != nil {
						t.Fatalf("step %d: take %d: %v", i, st.N, err)
					}
					if g != st.Granted || w != st.Wait {
						t.Fatalf("step %d: take %d: granted %d wait %v, want granted %d wait %v",
							i, st.N, g, w, st.Granted, st.Wait)
					}
				}
			})
		}
	})
	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		s, _ := b.start(t)
		cases := []struct {
			cfg  globallimit.Config
			n    int
			want string
		}{
			{globallimit.Config{Rate: 0, Burst: 1}, 1, "take global tokens: rate: must be a number of tokens per second from 1/86400 (one a day) to 1000000, got 0"},
			{globallimit.Config{Rate: 1e-15, Burst: 1}, 1, "take global tokens: rate: must be a number of tokens per second from 1/86400 (one a day) to 1000000, got 1e-15"},
			{globallimit.Config{Rate: 1e12, Burst: 1}, 1, "take global tokens: rate: must be a number of tokens per second from 1/86400 (one a day) to 1000000, got 1e+12"},
			{globallimit.Config{Rate: 10, Burst: 0}, 1, "take global tokens: burst: must be a whole number from 1 to 1000000, got 0"},
			{globallimit.Config{Rate: 10, Burst: 1e12}, 1, "take global tokens: burst: must be a whole number from 1 to 1000000, got 1000000000000"},
			{globallimit.Config{Rate: 0.001, Burst: 500}, 1, "take global tokens: burst: 500 tokens at rate 0.001 take 138h53m20s to refill, more than 24h"},
			{globallimit.Config{Rate: 10, Burst: 1, ShadowRate: 1e-15}, 1, "take global tokens: shadow_rate: must be 0 (none) or a number of tokens per second from 1/86400"},
			{globallimit.Config{Rate: 10, Burst: 1}, 0, "take global tokens: n must be from 1 to 1000000, got 0"},
		}
		for _, tc := range cases {
			_, _, err := s.Take(context.Background(), tc.cfg, tc.n)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("take %d with %+v: %v, want %q", tc.n, tc.cfg, err, tc.want)
			}
		}
	})
	t.Run("ConcurrentTakes", func(t *testing.T) {
		t.Parallel()
		// the clock stands still: exactly the burst is granted, however
		// the takes interleave
		s, _ := b.start(t)
		cfg := globallimit.Config{Rate: 1, Burst: 100}
		var granted atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10; i++ {
					n, _, err := s.Take(context.Background(), cfg, 1+i%3)
					if err != nil {
						errs <- err
						return
					}
					granted.Add(int64(n))
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if got := granted.Load(); got != 100 {
			t.Fatalf("granted %d tokens from a bucket of 100 on a stopped clock", got)
		}
	})
}
