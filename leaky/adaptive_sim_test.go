package leaky_test

import (
	"container/heap"
	"context"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/testenv"
)

// The adaptive contract driven as the dispatcher drives it, against a
// provider whose real limit is not the contract, on a fake clock: a
// deterministic simulation of the real algorithm (the Memory backend, or
// Redis with the clock as its now argument), whose figures the tests below
// hold to issue 27's targets.

// simProvider is a provider whose real limit is limit(t) requests accepted
// in any trailing second, as testenv's fakes count it (and most HTTP APIs):
// over it, 429 with Retry-After the whole seconds, rounded up, until the
// window frees (at least 1).
type simProvider struct {
	limit    func(t time.Duration) float64
	accepted []time.Duration
}

func (p *simProvider) answer(at time.Duration) (bool, time.Duration) {
	n := int(math.Floor(p.limit(at)))
	i := sort.Search(len(p.accepted), func(i int) bool { return p.accepted[i] > at-time.Second })
	if len(p.accepted)-i < n {
		p.accepted = append(p.accepted, at)
		return true, 0
	}
	wait := p.accepted[len(p.accepted)-n] + time.Second - at
	return false, max(time.Second, (wait+time.Second-1)/time.Second*time.Second)
}

// simConfig is one run.
type simConfig struct {
	contract leaky.Contract
	workers  int                                  // jobs in flight, each holding a slot (two dispatchers of 32)
	duration time.Duration                        // simulated time
	limit    func(t time.Duration) float64        // the provider's real limit at t, units/s
	rtt      time.Duration                        // a request's round trip
	late     time.Duration                        // a send leaves up to this long after its slot
	onAnswer func(t time.Duration, ok bool)       // optional
	backoff  func(rl time.Duration) time.Duration // the pause the dispatcher sets for a 429's Retry-After
}

// simResult is what the provider saw: every request's time and answer.
type simResult struct {
	at       []time.Duration
	ok       []bool
	lowered  int // backoffs that lowered the rate
	backoffs int
}

// window is the accepted rate and the 429s' share of the requests in [from, to).
func (r simResult) window(from, to time.Duration) (rate, share float64, accepted, refused int) {
	for i, at := range r.at {
		if at < from || at >= to {
			continue
		}
		if r.ok[i] {
			accepted++
		} else {
			refused++
		}
	}
	if accepted+refused > 0 {
		share = float64(refused) / float64(accepted+refused)
	}
	return float64(accepted) / (to - from).Seconds(), share, accepted, refused
}

// reached is the first time from on at which the accepted rate over the
// trailing span is at least rate; -1 if never.
func (r simResult) reached(from, span time.Duration, rate float64) time.Duration {
	var acc []time.Duration
	for i, at := range r.at {
		if r.ok[i] {
			acc = append(acc, at)
		}
	}
	need := int(math.Ceil(rate * span.Seconds()))
	for j := range acc {
		if acc[j] < from || j+1 < need {
			continue
		}
		if acc[j]-acc[j+1-need] < span {
			return acc[j]
		}
	}
	return -1
}

type simEvent struct {
	at     time.Duration
	seq    int
	worker int
	kind   int // simReserve, simSend, simAnswer
	ok     bool
	retry  time.Duration
}

const (
	simReserve = iota
	simSend
	simAnswer
)

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// simulate runs cfg against q on clock: each worker reserves a slot, sends
// at it (a little late), unless a pause came meanwhile (then it gives the
// slot back and reserves again, as the dispatcher does), and on a 429 backs
// the provider off for the answer's Retry-After and takes a new slot; on a
// 200 it starts its next job (the backlog never runs out).
func simulate(t testing.TB, q leaky.Queue, clock *testenv.Clock, cfg simConfig) simResult {
	t.Helper()
	ctx := context.Background()
	start := clock.Now()
	p := &simProvider{limit: cfg.limit}
	var res simResult
	var events simQueue
	seq := 0
	push := func(e simEvent) {
		seq++
		e.seq = seq
		heap.Push(&events, e)
	}
	held := make([]leaky.Reservation, cfg.workers)
	rng := uint64(0x9E3779B97F4A7C15)
	lateness := func() time.Duration {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		if cfg.late <= 0 {
			return 0
		}
		return time.Duration(rng % uint64(cfg.late))
	}
	for w := range cfg.workers {
		push(simEvent{at: time.Duration(w) * time.Microsecond, worker: w, kind: simReserve})
	}
	pauseOf := cfg.backoff
	if pauseOf == nil {
		pauseOf = func(d time.Duration) time.Duration { return d }
	}
	for events.Len() > 0 {
		e := heap.Pop(&events).(simEvent)
		if e.at > cfg.duration {
			break
		}
		clock.Advance(start.Add(e.at).Sub(clock.Now()))
		switch e.kind {
		case simReserve:
			r, err := q.Reserve(ctx, "p", cfg.contract, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !r.OK {
				push(simEvent{at: e.at + r.RetryAfter + time.Microsecond, worker: e.worker, kind: simReserve})
				continue
			}
			held[e.worker] = r
			push(simEvent{at: e.at + r.Delay + lateness(), worker: e.worker, kind: simSend})
		case simSend:
			if d, err := q.PausedFor(ctx, "p"); err != nil {
				t.Fatal(err)
			} else if d > 0 {
				if err := q.Cancel(ctx, "p", cfg.contract, held[e.worker], 1); err != nil {
					t.Fatal(err)
				}
				push(simEvent{at: e.at, worker: e.worker, kind: simReserve})
				continue
			}
			ok, retry := p.answer(e.at)
			res.at = append(res.at, e.at)
			res.ok = append(res.ok, ok)
			push(simEvent{at: e.at + cfg.rtt, worker: e.worker, kind: simAnswer, ok: ok, retry: retry})
		case simAnswer:
			if cfg.onAnswer != nil {
				cfg.onAnswer(e.at, e.ok)
			}
			if !e.ok {
				res.backoffs++
				lowered, err := q.Backoff(ctx, "p", cfg.contract, pauseOf(e.retry))
				if err != nil {
					t.Fatal(err)
				}
				if lowered {
					res.lowered++
				}
			}
			push(simEvent{at: e.at, worker: e.worker, kind: simReserve})
		}
	}
	return res
}

// defaultAdaptive is issue 27's contract: 100/s, adaptive { min_rate: 10 }
// and every other default (providers.AdaptiveConfig.WithDefaults).
func defaultAdaptive() leaky.Contract {
	a := providers.AdaptiveConfig{MinRate: 10}.WithDefaults(100)
	return leaky.Contract{Rate: 100, MaxQueueDelay: providers.DefaultMaxQueueDelay,
		Adaptive: &leaky.Adaptive{MinRate: a.MinRate, Decrease: a.Decrease, IncreasePerS: a.IncreasePerS, Quiet: a.Quiet}}
}

// runSim simulates cfg on a fresh Memory queue (the default headroom).
func runSim(t testing.TB, cfg simConfig) simResult {
	t.Helper()
	clock := testenv.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	q, err := leaky.NewMemory(leaky.WithNow(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.workers == 0 {
		cfg.workers = 64
	}
	if cfg.rtt == 0 {
		cfg.rtt = 2 * time.Millisecond
	}
	if cfg.late == 0 {
		cfg.late = 3 * time.Millisecond
	}
	return simulate(t, q, clock, cfg)
}

func constant(l float64) func(time.Duration) float64 { return func(time.Duration) float64 { return l } }

func step(before, after float64, at time.Duration) func(time.Duration) float64 {
	return func(t time.Duration) float64 {
		if t < at {
			return before
		}
		return after
	}
}

// window5 is the first time from on at which the accepted rate over the
// trailing second, and over the trailing five, is at least rate.
func (r simResult) reach(from time.Duration, rate float64) (one, five time.Duration) {
	return r.reached(from, time.Second, rate) - from, r.reached(from, 5*time.Second, rate) - from
}

// TestAdaptiveHoldsTheRealLimit is issue 27's case: a provider contracted
// at 100/s whose real limit is 60/s (a trailing second, 429 with
// Retry-After over it), adaptive { min_rate: 10 } and every other default,
// 64 jobs in flight. Measured from 10 s on over 50 s (the length of the
// issue's runs), the fleet holds at least 95 % of the real limit (57/s)
// with at most 1 % of its requests answered 429 (AIMD held 43.3/s here;
// the outside test saw 42.6/s). Over 110 s it holds at least 94.5 %: each
// probe above the limit costs the 429's pause, a second in 24 (the
// measured figures are logged). go test -run TestAdaptive -v ./leaky/
// prints every scenario's.
func TestAdaptiveHoldsTheRealLimit(t *testing.T) {
	t.Parallel()
	r := runSim(t, simConfig{contract: defaultAdaptive(), duration: 120 * time.Second, limit: constant(60)})
	for _, w := range []struct {
		from, to time.Duration
		least    float64
	}{{10 * time.Second, 60 * time.Second, 0.95 * 60}, {10 * time.Second, 120 * time.Second, 0.945 * 60}} {
		rate, share, acc, ref := r.window(w.from, w.to)
		t.Logf("real limit 60/s, [%s, %s): %.1f/s, %d of %d requests answered 429 (%.2f %%)", w.from, w.to, rate, ref, acc+ref, 100*share)
		if rate < w.least || share > 0.01 {
			t.Errorf("[%s, %s): %.1f/s with %.2f %% 429s, want at least %.1f/s with at most 1 %%", w.from, w.to, rate, 100*share, w.least)
		}
	}
}

// TestAdaptiveFindsARaisedLimit: the real limit steps from 60/s to 90/s.
// The fleet holds just under 60/s and probes above it once per quiet +
// AdaptiveHold (24 s): whenever the step comes, the first probe after it
// finds the new limit. For steps at every second from 40 s to 70 s (every
// phase of the probe cycle, the worst right after a probe), the accepted
// rate over a second reaches 85/s within 30 s of the step (its worst and
// mean, and over five seconds, are logged); from 40 s after the step the
// fleet holds at least 93 % of 90/s with at most 1 % 429s (a probe's pause
// costs a second in 24 there too).
func TestAdaptiveFindsARaisedLimit(t *testing.T) {
	t.Parallel()
	var worst1, worst5, sum1, sum5 time.Duration
	n := 0
	for at := 40 * time.Second; at <= 70*time.Second; at += time.Second {
		r := runSim(t, simConfig{contract: defaultAdaptive(), duration: at + 100*time.Second, limit: step(60, 90, at)})
		one, five := r.reach(at, 85)
		if one < 0 || five < 0 {
			t.Fatalf("step at %s: 85/s never reached", at)
		}
		worst1, worst5, sum1, sum5, n = max(worst1, one), max(worst5, five), sum1+one, sum5+five, n+1
		if one > 30*time.Second {
			t.Errorf("step at %s: 85/s over a second %s after it, want within 30 s", at, one)
		}
		rate, share, _, _ := r.window(at+40*time.Second, at+100*time.Second)
		if rate < 0.93*90 || share > 0.01 {
			t.Errorf("step at %s: from 40 s after it %.1f/s with %.2f %% 429s, want at least 83.7/s with at most 1 %%", at, rate, 100*share)
		}
	}
	t.Logf("real limit 60/s → 90/s: 85/s over a second reached %.1f s after the step at worst, %.1f s on average; over five seconds %.1f s at worst, %.1f s on average",
		worst1.Seconds(), (sum1 / time.Duration(n)).Seconds(), worst5.Seconds(), (sum5 / time.Duration(n)).Seconds())
}

// TestAdaptiveFollowsALoweredLimit: the real limit steps from 90/s down to
// 60/s. The 429 met at the rate held drops it (Decrease, then the ramp
// finds the new limit from below): from 15 s after the step the fleet
// holds at least 94 % of 60/s with at most 1 % 429s.
func TestAdaptiveFollowsALoweredLimit(t *testing.T) {
	t.Parallel()
	r := runSim(t, simConfig{contract: defaultAdaptive(), duration: 180 * time.Second, limit: step(90, 60, 60*time.Second)})
	rate0, share0, _, ref0 := r.window(60*time.Second, 75*time.Second)
	rate, share, _, _ := r.window(75*time.Second, 180*time.Second)
	t.Logf("real limit 90/s → 60/s at 60 s: the first 15 s %.1f/s, %d 429s (%.2f %%); then %.1f/s, %.2f %% 429s", rate0, ref0, 100*share0, rate, 100*share)
	if rate < 0.94*60 || share > 0.01 {
		t.Errorf("from 15 s after the step: %.1f/s with %.2f %% 429s, want at least 56.4/s with at most 1 %%", rate, 100*share)
	}
}

// TestAdaptiveFollowsADrift: the real limit drifts, 60/s ± 10 % over ten
// minutes (a slow drift: a shared quota's neighbours come and go), and ±
// 33 % over five (a fast one, logged only). Over the slow drift the fleet
// sends at least 90 % of what the limit allowed, with at most 1 % 429s: a
// rising limit is found by the probes, a falling one by the 429 met at the
// rate held, which eases the rate by AdaptiveEase before ramping back.
func TestAdaptiveFollowsADrift(t *testing.T) {
	t.Parallel()
	for _, d := range []struct {
		name   string
		amp    float64
		period time.Duration
		check  bool
	}{{"slow", 6, 10 * time.Minute, true}, {"fast", 20, 5 * time.Minute, false}} {
		limit := func(t time.Duration) float64 { return 60 + d.amp*math.Sin(2*math.Pi*t.Seconds()/d.period.Seconds()) }
		r := runSim(t, simConfig{contract: defaultAdaptive(), duration: 600 * time.Second, limit: limit})
		rate, share, acc, ref := r.window(10*time.Second, 600*time.Second)
		avail := 0.0
		for s := 10; s < 600; s++ {
			avail += math.Floor(limit(time.Duration(s) * time.Second))
		}
		avail /= 590
		t.Logf("%s drift (60 ± %g over %s): %.1f/s of the %.1f/s allowed (%.1f %%), %d of %d requests 429 (%.2f %%)",
			d.name, d.amp, d.period, rate, avail, 100*rate/avail, ref, acc+ref, 100*share)
		if d.check && (rate < 0.9*avail || share > 0.01) {
			t.Errorf("%s drift: %.1f %% of the limit with %.2f %% 429s, want at least 90 %% with at most 1 %%", d.name, 100*rate/avail, 100*share)
		}
	}
}

// TestAdaptiveSimulationRedisMatchesMemory: the whole of a simulation (a
// minute and a half of the 60/s case, every reservation, pause found,
// cancel and backoff) makes the same requests at the same instants on the
// Redis backend (its scripts, the fake clock as their now) as on Memory.
func TestAdaptiveSimulationRedisMatchesMemory(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client()
	cold := time.Duration(0) // a first start, as Memory starts
	c := defaultAdaptive()
	c.ColdStart = &cold
	cfg := simConfig{contract: c, duration: 90 * time.Second, limit: step(60, 75, 45*time.Second), workers: 64,
		rtt: 2 * time.Millisecond, late: 3 * time.Millisecond}
	mem := runSim(t, cfg)
	clock := testenv.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	red := simulate(t, newRedis(t, rdb, newPrefix("sim"), leaky.WithNow(clock.Now)), clock, cfg)
	if len(mem.at) != len(red.at) || mem.backoffs != red.backoffs || mem.lowered != red.lowered {
		t.Fatalf("memory made %d requests (%d backoffs, %d lowered), redis %d (%d, %d)", len(mem.at), mem.backoffs, mem.lowered, len(red.at), red.backoffs, red.lowered)
	}
	for i := range mem.at {
		if mem.at[i] != red.at[i] || mem.ok[i] != red.ok[i] {
			t.Fatalf("request %d: memory at %s (%v), redis at %s (%v)", i, mem.at[i], mem.ok[i], red.at[i], red.ok[i])
		}
	}
	if mem.backoffs < 4 {
		t.Errorf("%d backoffs: the run did not exercise the adaptive rate", mem.backoffs)
	}
}
