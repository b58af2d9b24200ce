// Package userlimittest is the conformance suite every userlimit.Limiter
// passes: the in-memory backend with a fake clock, and the Redis backend
// (standalone and Cluster) driven by the same fake clock.
//
//	func TestConformance(t *testing.T) {
//		userlimittest.Run(t, userlimittest.Backend{New: func(t *testing.T, opts ...userlimit.Option) userlimit.Limiter {
//			return userlimit.NewMemory(opts...)
//		}})
//	}
package userlimittest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
)

// Backend is a Limiter implementation under test.
type Backend struct {
	// New returns an empty limiter with opts applied, sharing no state with
	// the ones it returned before (for Redis, a new key prefix). The
	// suite's fake clock is among opts (userlimit.WithNow). It is called
	// from parallel subtests.
	New func(t *testing.T, opts ...userlimit.Option) userlimit.Limiter
}

// start returns a new limiter of b and the fake clock it reads, reading at.
func (b Backend) start(t *testing.T, at time.Time) (userlimit.Limiter, *testenv.Clock) {
	clock := testenv.NewClock(at)
	return b.New(t, userlimit.WithNow(clock.Now)), clock
}

// Algorithms are the algorithms the suite covers, in a fixed order.
var Algorithms = []userlimit.Algorithm{
	userlimit.SlidingLog, userlimit.SlidingWindow, userlimit.FixedWindow, userlimit.TokenBucket,
}

// Run runs the whole suite against limiters of b.
func Run(t *testing.T, b Backend) {
	t.Helper()
	t.Run("Steps", func(t *testing.T) { t.Parallel(); testSteps(t, b) })
	t.Run("Idempotent", func(t *testing.T) { t.Parallel(); testIdempotent(t, b) })
	t.Run("MovedBurstKeepsItsAdmissions", func(t *testing.T) { t.Parallel(); testMovedBurstKeepsItsAdmissions(t, b) })
	t.Run("RetryAfterIsExact", func(t *testing.T) { t.Parallel(); testRetryAfterIsExact(t, b) })
	t.Run("DeniedCountsNothing", func(t *testing.T) { t.Parallel(); testDeniedCountsNothing(t, b) })
	t.Run("KeysAreIndependent", func(t *testing.T) { t.Parallel(); testKeysAreIndependent(t, b) })
	t.Run("Defaults", func(t *testing.T) { t.Parallel(); testDefaults(t, b) })
	t.Run("InvalidArguments", func(t *testing.T) { t.Parallel(); testInvalidArguments(t, b) })
}

// step is one decision of a step table, after moving the clock by advance.
type step struct {
	advance    time.Duration
	job        string // job id
	limit      int    // 0: the table's rule
	allowed    bool
	remaining  int
	retryAfter time.Duration
}

type table struct {
	name  string
	rule  userlimit.Rule
	steps []step
}

var pushAlice = userlimit.Key{Channel: "push", User: "alice"}

// T and F shorten the tables.
const (
	T = true
	F = false
)

func stepTables() []table {
	ms, s := time.Millisecond, time.Second
	return []table{
		{"sliding_log", userlimit.Rule{Limit: 3, Window: 10 * s, Algorithm: userlimit.SlidingLog}, []step{
			{0, "a", 0, T, 2, 0},
			{s, "b", 0, T, 1, 0},
			{s, "c", 0, T, 0, 0},          // t=2s: a@0 b@1 c@2
			{s, "d", 0, F, 0, 7 * s},      // a leaves at 10s
			{0, "b", 0, T, 0, 0},          // redelivery: allowed, not counted
			{6999 * ms, "e", 0, F, 0, ms}, // t=9.999s
			{ms, "e", 0, T, 0, 0},         // t=10s: a left (a counts while now < 0+10s)
			{0, "a", 0, F, 0, s},          // a's window is over: a new decision, and full
			{s, "f", 0, T, 0, 0},          // t=11s: b left; log c@2 e@10 f@11
			{0, "f", 1, T, 0, 0},          // lowered limit: a redelivery is still allowed
			{0, "g", 1, F, 0, 10 * s},     // limit 1 with 3 in the log: wait for f@11 to leave
			{0, "g", 5, T, 1, 0},          // raised limit
			{time.Hour, "h", 0, T, 2, 0},
		}},
		{"fixed_window", userlimit.Rule{Limit: 3, Window: 10 * s, Algorithm: userlimit.FixedWindow}, []step{
			{0, "a", 0, T, 2, 0},
			{9 * s, "b", 0, T, 1, 0},
			{0, "c", 0, T, 0, 0},
			{999 * ms, "d", 0, F, 0, ms}, // t=9.999s: the window ends at 10s
			{ms, "d", 0, T, 2, 0},        // t=10s: a new window
			{0, "b", 0, T, 2, 0},         // redelivery of b (admitted at 9s, marker until 19s): not counted
			{0, "e", 0, T, 1, 0},
			{0, "f", 0, T, 0, 0}, // 2×limit in 1s across the boundary: the documented weakness
			{0, "g", 0, F, 0, 10 * s},
			{9 * s, "b", 0, F, 0, s}, // t=19s: b's marker has lapsed, so b is a new job
			{s, "b", 0, T, 2, 0},
		}},
		{"sliding_window", userlimit.Rule{Limit: 4, Window: 10 * s, Algorithm: userlimit.SlidingWindow}, []step{
			{0, "a", 0, T, 3, 0},
			{0, "b", 0, T, 2, 0},
			{0, "c", 0, T, 1, 0},
			{0, "d", 0, T, 0, 0},
			{0, "e", 0, F, 0, 12500 * ms}, // next window at e=2.5s: 1 + 4·0.75 = 4
			{12500 * ms, "e", 0, T, 0, 0}, // c=1 p=4: 1 + 3 = 4
			{0, "f", 0, F, 0, 2500 * ms},  // 2 + 4·(W-e)/W <= 4 from e=5s
			{2500 * ms, "f", 0, T, 0, 0},  // t=15s
			{0, "a", 0, F, 0, 2500 * ms},  // a's marker lapsed at 10s: a new job
			{0, "e", 0, T, 0, 0},          // redelivery of e (marker until 22.5s)
			{5 * s, "g", 0, T, 1, 0},      // t=20s: c=0 p=2
			{0, "h", 0, T, 0, 0},          // 2 + 2 = 4
			{0, "i", 0, F, 0, 5 * s},      // 3 + 2·(W-e)/W <= 4 from e=5s
			{25 * s, "j", 0, T, 3, 0},     // t=45s: both windows stale
		}},
		{"sliding_window_worst_case", userlimit.Rule{Limit: 4, Window: 10 * s, Algorithm: userlimit.SlidingWindow}, []step{
			// The previous window's jobs all at its end: the estimate assumes
			// them spread evenly, and the trailing 10s admit limit+⌊p·e/W⌋.
			{9999 * ms, "a", 0, T, 3, 0},
			{0, "b", 0, T, 2, 0},
			{0, "c", 0, T, 1, 0},
			{0, "d", 0, T, 0, 0},
			{ms, "e", 0, F, 0, 2500 * ms}, // t=10s, e=0, p=4
			{2500 * ms, "e", 0, T, 0, 0},
			{2500 * ms, "f", 0, T, 0, 0},
			{2500 * ms, "g", 0, T, 0, 0}, // t=17.5s: 7 = 2·limit−1 in (7.5s, 17.5s], the bound limit+⌊4·7.5/10⌋
			{0, "h", 0, F, 0, 2500 * ms}, // c=3 fills the window: wait for the next, where p=3
		}},
		{"token_bucket", userlimit.Rule{Limit: 3, Window: 30 * s, Algorithm: userlimit.TokenBucket}, []step{
			{0, "a", 0, T, 2, 0},
			{0, "b", 0, T, 1, 0},
			{0, "c", 0, T, 0, 0},
			{0, "d", 0, F, 0, 10 * s}, // one token per 10s
			{9 * s, "d", 0, F, 0, s},
			{s, "d", 0, T, 0, 0},
			{0, "a", 0, T, 0, 0}, // redelivery (marker until 30s)
			{25 * s, "e", 0, T, 1, 0},
			{0, "e", 0, T, 1, 0},
			{time.Hour, "f", 0, T, 2, 0},
		}},
		{"token_bucket_uneven", userlimit.Rule{Limit: 3, Window: 10 * s, Algorithm: userlimit.TokenBucket}, []step{
			// 10s/3 is rounded up to a whole microsecond: 3.333334s per token.
			{0, "a", 0, T, 2, 0},
			{0, "b", 0, T, 1, 0},
			{0, "c", 0, T, 0, 0},
			{0, "d", 0, F, 0, 3333334 * time.Microsecond},
			{3333333 * time.Microsecond, "d", 0, F, 0, time.Microsecond},
			{time.Microsecond, "d", 0, T, 0, 0},
		}},
	}
}

func testSteps(t *testing.T, b Backend) {
	for _, tc := range stepTables() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			lim, clock := b.start(t, Start)
			for i, st := range tc.steps {
				clock.Advance(st.advance)
				rule := tc.rule
				if st.limit != 0 {
					rule.Limit = st.limit
				}
				got, err := lim.Allow(ctx, pushAlice, st.job, rule)
				if err != nil {
					t.Fatalf("step %d (job %s at +%s): %v", i+1, st.job, clock.Now().Sub(Start), err)
				}
				want := userlimit.Result{Allowed: st.allowed, Remaining: st.remaining, RetryAfter: st.retryAfter}
				if got.Allowed && got.At.After(clock.Now()) {
					t.Fatalf("step %d (job %s at +%s): admitted for %s, after now", i+1, st.job, clock.Now().Sub(Start), got.At)
				}
				got.At = time.Time{}
				if got != want {
					t.Fatalf("step %d (job %s at +%s): got %+v, want %+v", i+1, st.job, clock.Now().Sub(Start), got, want)
				}
			}
		})
	}
}

// mustAllow decides and fails the test on an error.
func mustAllow(t *testing.T, lim userlimit.Limiter, key userlimit.Key, job string, rule userlimit.Rule) userlimit.Result {
	t.Helper()
	res, err := lim.Allow(context.Background(), key, job, rule)
	if err != nil {
		t.Fatalf("allow %s: %v", job, err)
	}
	if res.Allowed && (res.RetryAfter != 0 || res.At.IsZero()) || !res.Allowed && (res.Remaining != 0 || res.RetryAfter <= 0 || !res.At.IsZero()) {
		t.Fatalf("allow %s: inconsistent result %+v", job, res)
	}
	return res
}

func testIdempotent(t *testing.T, b Backend) {
	for _, alg := range Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			lim, clock := b.start(t, Start)
			rule := userlimit.Rule{Limit: 3, Window: time.Hour, Algorithm: alg}
			for i := range 5 {
				res := mustAllow(t, lim, pushAlice, "same", rule)
				if !res.Allowed || res.Remaining != 2 {
					t.Fatalf("decision %d of job same: got %+v, want allowed with 2 remaining (counted once)", i+1, res)
				}
				clock.Advance(time.Second)
			}
			for i, job := range []string{"x", "y"} {
				if res := mustAllow(t, lim, pushAlice, job, rule); !res.Allowed || res.Remaining != 1-i {
					t.Fatalf("job %s: got %+v, want allowed with %d remaining", job, res, 1-i)
				}
			}
			if res := mustAllow(t, lim, pushAlice, "z", rule); res.Allowed {
				t.Fatalf("job z: got %+v, want denied (same, x, y fill the limit of 3)", res)
			}
			if res := mustAllow(t, lim, pushAlice, "same", rule); !res.Allowed {
				t.Fatalf("job same once more: got %+v, want allowed (a redelivery)", res)
			}
		})
	}
}

// testMovedBurstKeepsItsAdmissions: a user's jobs admitted for now, up to
// the limit, then moved one by one to the send slots a provider's queue
// gives them (a few tens of ms apart, in the order they were admitted or
// the reverse), are each allowed again there, and once more when their
// slots are taken again: a move withdraws the job's own admission before
// deciding it anew, so the jobs admitted since it cannot crowd it out.
// (token_bucket's GCRA, one instant of state, used to keep a moved job's
// token when another was admitted after it: two of three jobs of a burst
// were then denied at their slots.) Past the limit, a new job is still
// denied.
func testMovedBurstKeepsItsAdmissions(t *testing.T, b Backend) {
	for _, alg := range Algorithms {
		for _, reverse := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/reverse=%v", alg, reverse), func(t *testing.T) {
				t.Parallel()
				lim, clock := b.start(t, Start)
				rule := userlimit.Rule{Limit: 3, Window: time.Hour, Algorithm: alg}
				jobs := []string{"a", "b", "c"}
				for _, job := range jobs {
					if res := mustAllow(t, lim, pushAlice, job, rule); !res.Allowed {
						t.Fatalf("job %s: got %+v, want allowed (within the limit of 3)", job, res)
					}
				}
				clock.Advance(5 * time.Millisecond)
				for round := range 2 { // moved, then moved again (a slot taken again)
					for i := range jobs {
						k := i
						if reverse {
							k = len(jobs) - 1 - i
						}
						slot := clock.Now().Add(time.Duration(30*(k+1)+100*round) * time.Millisecond)
						res, err := lim.AllowAt(context.Background(), pushAlice, jobs[k], rule, slot)
						if err != nil {
							t.Fatal(err)
						}
						if !res.Allowed || !res.At.Equal(slot) {
							t.Fatalf("round %d: job %s moved to its slot %s: got %+v, want allowed there", round, jobs[k], slot.Sub(clock.Now()), res)
						}
					}
				}
				if res := mustAllow(t, lim, pushAlice, "d", rule); res.Allowed {
					t.Fatalf("job d: got %+v, want denied (a, b, c still hold the limit of 3)", res)
				}
			})
		}
	}
}

func testRetryAfterIsExact(t *testing.T, b Backend) {
	rules := []struct {
		limit  int
		window time.Duration
	}{
		{1, time.Millisecond},
		{2, 999*time.Millisecond + 7*time.Microsecond},
		{5, 7 * time.Second},
		{7, time.Hour},
	}
	for _, alg := range Algorithms {
		for _, r := range rules {
			t.Run(fmt.Sprintf("%s/%d_per_%s", alg, r.limit, r.window), func(t *testing.T) {
				t.Parallel()
				// Start off the window boundaries.
				lim, clock := b.start(t, Start.Add(r.window/3))
				rule := userlimit.Rule{Limit: r.limit, Window: r.window, Algorithm: alg}
				job := 0
				next := func() string { job++; return fmt.Sprintf("job-%d", job) }
				for round := range 12 {
					// Spend what is left, spread over a little time.
					for {
						res := mustAllow(t, lim, pushAlice, next(), rule)
						if !res.Allowed {
							break
						}
						clock.Advance(r.window / time.Duration(4*r.limit+round))
					}
					res := mustAllow(t, lim, pushAlice, next(), rule)
					if res.Allowed {
						t.Fatalf("round %d: allowed right after a denial with no time passing: %+v", round, res)
					}
					clock.Advance(res.RetryAfter - time.Microsecond)
					if early := mustAllow(t, lim, pushAlice, next(), rule); early.Allowed || early.RetryAfter != time.Microsecond {
						t.Fatalf("round %d: 1µs before RetryAfter %s: got %+v, want denied with RetryAfter 1µs", round, res.RetryAfter, early)
					}
					clock.Advance(time.Microsecond)
					if on := mustAllow(t, lim, pushAlice, next(), rule); !on.Allowed {
						t.Fatalf("round %d: at RetryAfter %s: got %+v, want allowed", round, res.RetryAfter, on)
					}
				}
			})
		}
	}
}

func testDeniedCountsNothing(t *testing.T, b Backend) {
	for _, alg := range Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			lim, clock := b.start(t, Start)
			rule := userlimit.Rule{Limit: 2, Window: time.Minute, Algorithm: alg}
			mustAllow(t, lim, pushAlice, "a", rule)
			mustAllow(t, lim, pushAlice, "b", rule)
			var first userlimit.Result
			for i := range 20 {
				res := mustAllow(t, lim, pushAlice, fmt.Sprintf("denied-%d", i), rule)
				if res.Allowed {
					t.Fatalf("denied-%d: allowed over the limit: %+v", i, res)
				}
				if i == 0 {
					first = res
				}
				if res.RetryAfter != first.RetryAfter-time.Duration(i)*time.Millisecond {
					t.Fatalf("denied-%d: RetryAfter %s, want %s: denials must not push it back", i, res.RetryAfter, first.RetryAfter-time.Duration(i)*time.Millisecond)
				}
				clock.Advance(time.Millisecond)
			}
			clock.Advance(first.RetryAfter - 20*time.Millisecond)
			if res := mustAllow(t, lim, pushAlice, "c", rule); !res.Allowed {
				t.Fatalf("after RetryAfter: got %+v, want allowed", res)
			}
		})
	}
}

func testKeysAreIndependent(t *testing.T, b Backend) {
	keys := []userlimit.Key{
		{Channel: "push", User: "alice"},
		{Channel: "sms", User: "alice"},
		{Channel: "push", User: "a:b"},
		{Channel: "push:a", User: "b"},
		{Channel: "push", User: "}"},
		{Channel: "push", User: "%7D"},
		{Channel: "push", User: "{x}"},
		{Channel: "push", User: "x"},
		{Channel: "push", User: "}{"},
		{Channel: "push", User: "用户-ü-😀"},
		{Channel: "push", User: "alice "},
	}
	for _, alg := range Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			lim, _ := b.start(t, Start)
			rule := userlimit.Rule{Limit: 1, Window: time.Hour, Algorithm: alg}
			for i, k := range keys {
				if res := mustAllow(t, lim, k, fmt.Sprintf("first-%d", i), rule); !res.Allowed {
					t.Fatalf("key %q/%q: first job denied (%+v): state shared with an earlier key", k.Channel, k.User, res)
				}
			}
			for i, k := range keys {
				if res := mustAllow(t, lim, k, fmt.Sprintf("second-%d", i), rule); res.Allowed {
					t.Fatalf("key %q/%q: second job allowed over a limit of 1", k.Channel, k.User)
				}
			}
		})
	}
}

func testDefaults(t *testing.T, b Backend) {
	t.Run("empty algorithm is sliding_log", func(t *testing.T) {
		t.Parallel()
		lim, clock := b.start(t, Start)
		rule := userlimit.Rule{Limit: 2, Window: 10 * time.Second}
		mustAllow(t, lim, pushAlice, "a", rule)
		clock.Advance(3 * time.Second)
		mustAllow(t, lim, pushAlice, "b", rule)
		// Exactly the sliding log's answer: a leaves at 10s.
		if res := mustAllow(t, lim, pushAlice, "c", rule); res.Allowed || res.RetryAfter != 7*time.Second {
			t.Fatalf("got %+v, want denied with RetryAfter 7s", res)
		}
		// And the same state as an explicit sliding_log.
		rule.Algorithm = userlimit.SlidingLog
		if res := mustAllow(t, lim, pushAlice, "c", rule); res.Allowed || res.RetryAfter != 7*time.Second {
			t.Fatalf("explicit sliding_log: got %+v, want denied with RetryAfter 7s", res)
		}
	})
}

func testInvalidArguments(t *testing.T, b Backend) {
	ctx := context.Background()
	lim, _ := b.start(t, Start)
	bad := []userlimit.Rule{
		{},
		{Limit: 0, Window: time.Hour},
		{Limit: 1, Window: 0},
		{Limit: 1, Window: time.Hour, Algorithm: "leaky"},
		{Limit: userlimit.MaxSlidingLogLimit + 1, Window: time.Hour},
		{Limit: userlimit.MaxLimit + 1, Window: time.Hour, Algorithm: userlimit.FixedWindow},
		{Limit: 1, Window: userlimit.MaxWindow + time.Millisecond},
		{Limit: 1, Window: time.Microsecond},
	}
	for _, rule := range bad {
		if res, err := lim.Allow(ctx, pushAlice, "job", rule); err == nil {
			t.Fatalf("rule %+v: got %+v and no error", rule, res)
		}
	}
	good := userlimit.Rule{Limit: 1, Window: time.Hour}
	if res, err := lim.Allow(ctx, pushAlice, "", good); err == nil {
		t.Fatalf("empty job id: got %+v and no error", res)
	}
	// An instant more than MaxAhead after now: no send slot lies that far.
	for _, alg := range []userlimit.Algorithm{userlimit.SlidingLog, userlimit.SlidingWindow, userlimit.FixedWindow, userlimit.TokenBucket} {
		rule := userlimit.Rule{Limit: 1, Window: time.Hour, Algorithm: alg}
		if res, err := lim.AllowAt(ctx, pushAlice, "job", rule, Start.Add(userlimit.MaxAhead+time.Second)); err == nil {
			t.Fatalf("%s: an instant MaxAhead and a second ahead: got %+v and no error", alg, res)
		}
	}
	if res := mustAllow(t, lim, pushAlice, "job", good); !res.Allowed {
		t.Fatalf("after refused calls: got %+v, want allowed (they must count nothing)", res)
	}
}
