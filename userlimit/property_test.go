package userlimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
	"github.com/notifier/notifier/userlimit/userlimittest"
)

// TestPropertyMemoryMatchesRedis applies random sequences of (advance the
// clock, key, job id, limit, for now or for a slot) to Memory and to Redis (the same fake clock,
// passed to the scripts as their optional now) and requires the very same
// decision every step. The exact algorithms must agree by construction;
// sliding_window agrees too, because both backends do its floating-point
// arithmetic in the same order.
func TestPropertyMemoryMatchesRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	windows := []time.Duration{
		time.Millisecond, 3*time.Millisecond + time.Microsecond, time.Second,
		1500*time.Millisecond + 7*time.Microsecond, 10 * time.Second, time.Hour,
	}
	users := []string{"alice", "bob", "{c}:d"}
	rapid.Check(t, func(rt *rapid.T) {
		alg := rapid.SampledFrom(userlimittest.Algorithms).Draw(rt, "algorithm")
		window := rapid.SampledFrom(windows).Draw(rt, "window")
		w := window.Microseconds()
		offset := rapid.Int64Range(0, 3*w).Draw(rt, "start offset µs")
		clock := testenv.NewClock(userlimittest.Start.Add(time.Duration(offset) * time.Microsecond))
		mem := userlimit.NewMemory(userlimit.WithNow(clock.Now))
		red := userlimit.NewRedis(rdb, newPrefix("property"), userlimit.WithNow(clock.Now))
		advance := rapid.OneOf(
			rapid.Just(int64(0)),
			rapid.Int64Range(1, max(w/10, 1)),
			rapid.Int64Range(0, 3*w),
			// Quarters of the window land exactly on boundaries and lapses.
			rapid.Map(rapid.IntRange(1, 8), func(k int) int64 { return int64(k) * w / 4 }),
		)
		steps := rapid.IntRange(1, 80).Draw(rt, "steps")
		for i := range steps {
			clock.Advance(time.Duration(advance.Draw(rt, "advance µs")) * time.Microsecond)
			key := userlimit.Key{Channel: "push", User: rapid.SampledFrom(users).Draw(rt, "user")}
			job := fmt.Sprintf("job-%d", rapid.IntRange(0, 20).Draw(rt, "job"))
			rule := userlimit.Rule{Limit: rapid.IntRange(1, 6).Draw(rt, "limit"), Window: window, Algorithm: alg}
			// Half the decisions are for a send slot: ahead of now (up to
			// two windows, decided in any order), or just passed.
			decide := func(l userlimit.Limiter) (userlimit.Result, error) { return l.Allow(ctx, key, job, rule) }
			if rapid.Bool().Draw(rt, "for a slot") {
				at := clock.Now().Add(time.Duration(rapid.Int64Range(-w/4, 2*w).Draw(rt, "slot µs")) * time.Microsecond)
				decide = func(l userlimit.Limiter) (userlimit.Result, error) { return l.AllowAt(ctx, key, job, rule, at) }
			}
			want, err := decide(mem)
			if err != nil {
				rt.Fatalf("step %d: memory: %v", i, err)
			}
			got, err := decide(red)
			if err != nil {
				rt.Fatalf("step %d: redis: %v", i, err)
			}
			if got != want {
				rt.Fatalf("step %d (%s, %s, %s, limit %d, at +%s): redis %+v, memory %+v",
					i, alg, key.User, job, rule.Limit, clock.Now().Sub(userlimittest.Start), got, want)
			}
		}
	})
}

// TestPropertyGroupMatchesMemory: the decisions of several jobs made by one
// script run (a Group on a pipeline, as the dispatcher makes them, among
// them the same user and the same job more than once) answer as that many
// Memory decisions at one instant, for every algorithm.
func TestPropertyGroupMatchesMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	if err := userlimit.NewRedis(rdb, "").Load(ctx); err != nil {
		t.Fatal(err)
	}
	users := []string{"alice", "bob", "{c}:d"}
	rapid.Check(t, func(rt *rapid.T) {
		alg := rapid.SampledFrom(userlimittest.Algorithms).Draw(rt, "algorithm")
		window := rapid.SampledFrom([]time.Duration{time.Millisecond, time.Second, time.Hour}).Draw(rt, "window")
		clock := testenv.NewClock(userlimittest.Start)
		mem := userlimit.NewMemory(userlimit.WithNow(clock.Now))
		red := userlimit.NewRedis(rdb, newPrefix("group"), userlimit.WithNow(clock.Now))
		for i := range rapid.IntRange(1, 20).Draw(rt, "groups") {
			clock.Advance(time.Duration(rapid.Int64Range(0, window.Microseconds()).Draw(rt, "advance µs")) * time.Microsecond)
			type req struct {
				key  userlimit.Key
				job  string
				rule userlimit.Rule
				at   time.Time // zero: for now
			}
			reqs := make([]req, rapid.IntRange(1, 10).Draw(rt, "decisions"))
			g := red.Group(alg)
			ds := make([]*userlimit.Decision, len(reqs))
			for k := range reqs {
				reqs[k] = req{
					key:  userlimit.Key{Channel: "sms", User: rapid.SampledFrom(users).Draw(rt, "user")},
					job:  fmt.Sprintf("job-%d", rapid.IntRange(0, 8).Draw(rt, "job")),
					rule: userlimit.Rule{Limit: rapid.IntRange(1, 4).Draw(rt, "limit"), Window: window, Algorithm: alg},
				}
				if rapid.Bool().Draw(rt, "for a slot") {
					reqs[k].at = clock.Now().Add(time.Duration(rapid.Int64Range(0, 2*window.Microseconds()).Draw(rt, "slot µs")) * time.Microsecond)
					ds[k] = g.AddAt(reqs[k].key, reqs[k].job, reqs[k].rule, reqs[k].at)
				} else {
					ds[k] = g.Add(reqs[k].key, reqs[k].job, reqs[k].rule)
				}
			}
			pipe := rdb.Pipeline()
			g.Queue(ctx, pipe)
			if _, err := pipe.Exec(ctx); err != nil {
				rt.Fatal(err)
			}
			for k, r := range reqs {
				want, err := mem.Allow(ctx, r.key, r.job, r.rule)
				if !r.at.IsZero() {
					want, err = mem.AllowAt(ctx, r.key, r.job, r.rule, r.at)
				}
				if err != nil {
					rt.Fatal(err)
				}
				got, err := ds[k].Result()
				if err != nil {
					rt.Fatal(err)
				}
				if got != want {
					rt.Fatalf("group %d, decision %d of %d (%s, %s, %s, limit %d): redis %+v, memory %+v",
						i, k+1, len(reqs), alg, r.key.User, r.job, r.rule.Limit, got, want)
				}
			}
		}
	})
}

// TestGroupRefusesAnotherAlgorithm: a decision of another algorithm than
// its group's is refused, not mixed in.
func TestGroupRefusesAnotherAlgorithm(t *testing.T) {
	t.Parallel()
	red := userlimit.NewRedis(testenv.Redis(t).Client(), newPrefix("mixed"))
	g := red.Group(userlimit.SlidingLog)
	d := g.Add(userlimit.Key{Channel: "sms", User: "u"}, "j", userlimit.Rule{Limit: 1, Window: time.Second, Algorithm: userlimit.FixedWindow})
	if _, err := d.Result(); err == nil || g.Len() != 0 {
		t.Fatalf("a fixed_window decision in a sliding_log group: err %v, group of %d", err, g.Len())
	}
}
