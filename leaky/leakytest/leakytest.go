// Package leakytest is the conformance suite every leaky.Queue passes: step
// tables of reservations on a fake clock, cancel, pause, depth, cold start,
// validation and concurrent reservations. Run it from a backend's tests:
//
//	leakytest.Run(t, leakytest.Backend{New: func(t *testing.T, opts ...leaky.Option) leaky.Queue {
//		q, err := leaky.NewMemory(opts...)
//		if err != nil {
//			t.Fatal(err)
//		}
//		return q
//	}})
//
// The suites of leaky, userlimit and globallimit take their backends alike:
// a Backend whose New builds one from the options the suite passes, the
// suite's fake clock (testenv.Clock) among them as WithNow.
package leakytest

import (
	"context"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/testenv"
)

// Backend is a Queue implementation under test.
type Backend struct {
	// New returns a new queue with opts applied, isolated from every other
	// one it returned (its own key prefix). The suite's fake clock is among
	// opts (leaky.WithNow).
	New func(t *testing.T, opts ...leaky.Option) leaky.Queue
	// ColdStart: a provider with no state starts as if its queue were full
	// (Redis), rather than at now (Memory).
	ColdStart bool
}

// Step is one reservation of a step table: advance the clock, reserve cost
// units, and expect ok with delay, or full with retryAfter.
type Step struct {
	Advance    time.Duration
	Cost       int
	OK         bool
	Delay      time.Duration
	RetryAfter time.Duration
}

// Table is a named sequence of steps on one provider.
type Table struct {
	Name     string
	Contract leaky.Contract
	Opts     []leaky.Option
	Steps    []Step
}

// us is n microseconds.
func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

var ms = time.Millisecond

// noHeadroom makes the tables' numbers round: rate 10/s paces at 100 ms.
var noHeadroom = []leaky.Option{leaky.WithHeadroom(0)}

// Tables are the step tables every backend must reproduce exactly, from a
// warm provider (one whose earlier state has drained).
var Tables = []Table{
	{
		Name:     "paces at the contract with no slack after idle",
		Contract: leaky.Contract{Rate: 10, MaxQueueDelay: 300 * ms},
		Opts:     noHeadroom,
		Steps: []Step{
			{Cost: 1, OK: true, Delay: 0},
			{Cost: 1, OK: true, Delay: 100 * ms},
			{Cost: 1, OK: true, Delay: 200 * ms},
			{Cost: 1, OK: true, Delay: 300 * ms},
			{Cost: 1, OK: false, RetryAfter: 100 * ms},
			{Advance: 40 * ms, Cost: 1, OK: false, RetryAfter: 60 * ms},
			{Advance: 60 * ms, Cost: 1, OK: true, Delay: 300 * ms},
			{Advance: 10 * time.Second, Cost: 1, OK: true, Delay: 0},
			{Cost: 1, OK: true, Delay: 100 * ms},
		},
	},
	{
		Name:     "cost k advances k intervals",
		Contract: leaky.Contract{Rate: 10, MaxQueueDelay: 300 * ms},
		Opts:     noHeadroom,
		Steps: []Step{
			{Cost: 3, OK: true, Delay: 0},
			{Cost: 1, OK: true, Delay: 300 * ms},
			{Cost: 1, OK: false, RetryAfter: 100 * ms},
			{Advance: 100 * ms, Cost: 2, OK: true, Delay: 300 * ms},
			{Advance: 300 * ms, Cost: 1, OK: true, Delay: 200 * ms},
			{Cost: 5, OK: true, Delay: 300 * ms},
			{Cost: 1, OK: false, RetryAfter: 500 * ms},
		},
	},
	{
		Name:     "zero max queue delay is a plain pacer",
		Contract: leaky.Contract{Rate: 10, MaxQueueDelay: 0},
		Opts:     noHeadroom,
		Steps: []Step{
			{Cost: 1, OK: true, Delay: 0},
			{Cost: 1, OK: false, RetryAfter: 100 * ms},
			{Advance: 50 * ms, Cost: 1, OK: false, RetryAfter: 50 * ms},
			{Advance: 50 * ms, Cost: 1, OK: true, Delay: 0},
		},
	},
	{
		Name:     "default headroom paces 1.5 % under the contract",
		Contract: leaky.Contract{Rate: 100, MaxQueueDelay: time.Second},
		Steps: []Step{
			{Cost: 1, OK: true, Delay: 0},
			{Cost: 1, OK: true, Delay: us(10153)}, // ⌈1e6/98.5⌉
			{Cost: 2, OK: true, Delay: us(20306)}, // then + ⌈2e6/98.5⌉ = 20305
			{Cost: 1, OK: true, Delay: us(40611)},
		},
	},
	{
		Name:     "a fractional interval rounds up to whole microseconds",
		Contract: leaky.Contract{Rate: 3, MaxQueueDelay: time.Second},
		Opts:     noHeadroom,
		Steps: []Step{
			{Cost: 1, OK: true, Delay: 0},
			{Cost: 1, OK: true, Delay: us(333334)},
			{Cost: 1, OK: true, Delay: us(666668)},
			{Cost: 1, OK: false, RetryAfter: us(2)},
			{Advance: us(2), Cost: 1, OK: true, Delay: time.Second},
		},
	},
}

type harness struct {
	t     *testing.T
	q     leaky.Queue
	clock *testenv.Clock
	ctx   context.Context
}

func setup(t *testing.T, b Backend, opts ...leaky.Option) *harness {
	t.Helper()
	clock := testenv.NewClock(time.Now())
	opts = append([]leaky.Option{leaky.WithNow(clock.Now)}, opts...)
	return &harness{t: t, q: b.New(t, opts...), clock: clock, ctx: context.Background()}
}

// warm makes provider's state exist and drain, so that a cold-starting
// backend behaves like one that starts at now.
func (h *harness) warm(provider string, c leaky.Contract) {
	h.t.Helper()
	h.reserve(provider, c, 1)
	h.clock.Advance(time.Minute + 2*c.MaxQueueDelay)
}

func (h *harness) reserve(provider string, c leaky.Contract, cost int) leaky.Reservation {
	h.t.Helper()
	r, err := h.q.Reserve(h.ctx, provider, c, cost)
	if err != nil {
		h.t.Fatalf("reserve %s cost %d: %v", provider, cost, err)
	}
	return r
}

func (h *harness) expect(what string, r leaky.Reservation, ok bool, delay, retryAfter time.Duration) {
	h.t.Helper()
	if r.OK != ok || r.Delay != delay || r.RetryAfter != retryAfter {
		h.t.Fatalf("%s: got ok=%v delay=%v retryAfter=%v, want ok=%v delay=%v retryAfter=%v",
			what, r.OK, r.Delay, r.RetryAfter, ok, delay, retryAfter)
	}
	if ok && r.Slot != h.clock.Now().Add(delay).UnixMicro() {
		h.t.Fatalf("%s: slot %d, want now+delay = %d", what, r.Slot, h.clock.Now().Add(delay).UnixMicro())
	}
}

func (h *harness) pausedFor(provider string) time.Duration {
	h.t.Helper()
	d, err := h.q.PausedFor(h.ctx, provider)
	if err != nil {
		h.t.Fatalf("paused for %s: %v", provider, err)
	}
	return d
}

func (h *harness) depth(provider string, c leaky.Contract) float64 {
	h.t.Helper()
	d, err := h.q.Depth(h.ctx, provider, c)
	if err != nil {
		h.t.Fatalf("depth %s: %v", provider, err)
	}
	return d
}

// Run runs the conformance suite against b.
func Run(t *testing.T, b Backend) {
	t.Run("Tables", func(t *testing.T) {
		t.Parallel()
		for _, tb := range Tables {
			t.Run(tb.Name, func(t *testing.T) {
				t.Parallel()
				h := setup(t, b, tb.Opts...)
				h.warm("sms", tb.Contract)
				for i, s := range tb.Steps {
					h.clock.Advance(s.Advance)
					r := h.reserve("sms", tb.Contract, s.Cost)
					h.expect("step "+itoa(i), r, s.OK, s.Delay, s.RetryAfter)
				}
			})
		}
	})
	t.Run("ColdStart", func(t *testing.T) { t.Parallel(); testColdStart(t, b) })
	t.Run("Cancel", func(t *testing.T) { t.Parallel(); testCancel(t, b) })
	t.Run("CancelPastSlot", func(t *testing.T) { t.Parallel(); testCancelPastSlot(t, b) })
	t.Run("Pause", func(t *testing.T) { t.Parallel(); testPause(t, b) })
	t.Run("Resume", func(t *testing.T) { t.Parallel(); testResume(t, b) })
	t.Run("Depth", func(t *testing.T) { t.Parallel(); testDepth(t, b) })
	t.Run("ProvidersAreIndependent", func(t *testing.T) { t.Parallel(); testIndependent(t, b) })
	t.Run("ContractHeadroom", func(t *testing.T) { t.Parallel(); testContractHeadroom(t, b) })
	t.Run("Invalid", func(t *testing.T) { t.Parallel(); testInvalid(t, b) })
	t.Run("ConcurrentReservations", func(t *testing.T) { t.Parallel(); testConcurrent(t, b) })
	t.Run("AdaptiveBackoff", func(t *testing.T) { t.Parallel(); testAdaptiveBackoff(t, b) })
	t.Run("AdaptiveClimb", func(t *testing.T) { t.Parallel(); testAdaptiveClimb(t, b) })
	t.Run("AdaptiveSpacing", func(t *testing.T) { t.Parallel(); testAdaptiveSpacing(t, b) })
	t.Run("Quota", func(t *testing.T) { t.Parallel(); testQuota(t, b) })
	t.Run("TwoQuotas", func(t *testing.T) { t.Parallel(); testTwoQuotas(t, b) })
	t.Run("QuotaCancel", func(t *testing.T) { t.Parallel(); testQuotaCancel(t, b) })
	t.Run("QuotaShape", func(t *testing.T) { t.Parallel(); testQuotaShape(t, b) })
	t.Run("InvalidShaping", func(t *testing.T) { t.Parallel(); testInvalidShaping(t, b) })
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

func testColdStart(t *testing.T, b Backend) {
	c := leaky.Contract{Rate: 10, MaxQueueDelay: 300 * ms}
	t.Run("fresh provider", func(t *testing.T) {
		h := setup(t, b, noHeadroom...)
		r := h.reserve("sms", c, 1)
		if !b.ColdStart {
			h.expect("first reservation", r, true, 0, 0)
			return
		}
		// as if full: tat = now + 300 ms + 100 ms
		h.expect("first reservation", r, false, 0, 100*ms)
		h.clock.Advance(100 * ms)
		h.expect("after one interval", h.reserve("sms", c, 1), true, 300*ms, 0)
		h.expect("then", h.reserve("sms", c, 1), false, 0, 100*ms)
	})
	t.Run("max cost", func(t *testing.T) {
		h := setup(t, b, append([]leaky.Option{leaky.WithMaxCost(3)}, noHeadroom...)...)
		r := h.reserve("sms", c, 1)
		if !b.ColdStart {
			h.expect("first reservation", r, true, 0, 0)
			return
		}
		h.expect("first reservation", r, false, 0, 300*ms)
	})
	t.Run("pause before the first reservation", func(t *testing.T) {
		h := setup(t, b, noHeadroom...)
		if err := h.q.Pause(h.ctx, "sms", time.Second); err != nil {
			t.Fatal(err)
		}
		// both backends: the slot is the pause end, 700 ms past the bound
		h.expect("during the pause", h.reserve("sms", c, 1), false, 0, 700*ms)
		h.clock.Advance(700 * ms)
		h.expect("at the bound", h.reserve("sms", c, 1), true, 300*ms, 0)
	})
}

func testCancel(t *testing.T, b Backend) {
	c := leaky.Contract{Rate: 10, MaxQueueDelay: time.Second}
	h := setup(t, b, noHeadroom...)
	h.warm("sms", c)
	ctx := h.ctx

	a := h.reserve("sms", c, 1)
	h.expect("a", a, true, 0, 0)
	bb := h.reserve("sms", c, 1)
	h.expect("b", bb, true, 100*ms, 0)
	if err := h.q.Cancel(ctx, "sms", c, bb, 1); err != nil {
		t.Fatalf("cancel b: %v", err)
	}
	cc := h.reserve("sms", c, 1)
	h.expect("c takes b's slot back", cc, true, 100*ms, 0)

	// a is followed by c: giving it back would put c's successor too close
	if err := h.q.Cancel(ctx, "sms", c, a, 1); err != nil {
		t.Fatalf("cancel a: %v", err)
	}
	d := h.reserve("sms", c, 1)
	h.expect("d after a refused cancel", d, true, 200*ms, 0)

	// the wrong cost does not match where tat ends
	if err := h.q.Cancel(ctx, "sms", c, d, 2); err != nil {
		t.Fatalf("cancel d with the wrong cost: %v", err)
	}
	e := h.reserve("sms", c, 1)
	h.expect("e", e, true, 300*ms, 0)

	// a second cancel of the same reservation does nothing
	if err := h.q.Cancel(ctx, "sms", c, e, 1); err != nil {
		t.Fatal(err)
	}
	if err := h.q.Cancel(ctx, "sms", c, e, 1); err != nil {
		t.Fatal(err)
	}
	f := h.reserve("sms", c, 1)
	h.expect("f takes e's slot", f, true, 300*ms, 0)

	// a pause after the reservation forbids the cancel
	if err := h.q.Pause(ctx, "sms", 500*ms); err != nil {
		t.Fatal(err)
	}
	if err := h.q.Cancel(ctx, "sms", c, f, 1); err != nil {
		t.Fatal(err)
	}
	h.expect("g after the pause", h.reserve("sms", c, 1), true, 500*ms, 0)

	// a refused reservation cancels to nothing
	full := leaky.Reservation{RetryAfter: time.Second}
	if err := h.q.Cancel(ctx, "sms", c, full, 1); err != nil {
		t.Fatalf("cancel a full reservation: %v", err)
	}
	h.expect("h", h.reserve("sms", c, 1), true, 600*ms, 0)
}

func testCancelPastSlot(t *testing.T, b Backend) {
	c := leaky.Contract{Rate: 10, MaxQueueDelay: time.Second}
	h := setup(t, b, noHeadroom...)
	h.warm("sms", c)
	a := h.reserve("sms", c, 1)
	h.expect("a", a, true, 0, 0)
	h.clock.Advance(50 * ms)
	// a's job expired at its slot and was not sent: the provider is free now
	if err := h.q.Cancel(h.ctx, "sms", c, a, 1); err != nil {
		t.Fatal(err)
	}
	h.expect("b sends now", h.reserve("sms", c, 1), true, 0, 0)
	h.expect("c one interval later", h.reserve("sms", c, 1), true, 100*ms, 0)
}

func testPause(t *testing.T, b Backend) {
	c := leaky.Contract{Rate: 10, MaxQueueDelay: 2 * time.Second}
	h := setup(t, b, noHeadroom...)
	ctx := h.ctx
	if got := h.pausedFor("sms"); got != 0 {
		t.Fatalf("paused for on a new provider: %v, want 0", got)
	}
	h.warm("sms", c)
	for i, want := range []time.Duration{0, 100 * ms, 200 * ms} {
		h.expect("before "+itoa(i), h.reserve("sms", c, 1), true, want, 0)
	}
	if err := h.q.Pause(ctx, "sms", time.Second); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if got := h.pausedFor("sms"); got != time.Second {
		t.Fatalf("paused for right after the pause: %v, want 1s", got)
	}
	h.clock.Advance(400 * ms)
	if got := h.pausedFor("sms"); got != 600*ms {
		t.Fatalf("paused for 400ms later: %v, want 600ms", got)
	}
	h.expect("first slot after the pause", h.reserve("sms", c, 1), true, 600*ms, 0)
	h.expect("then the contract", h.reserve("sms", c, 1), true, 700*ms, 0)
	// a shorter pause changes nothing
	if err := h.q.Pause(ctx, "sms", 100*ms); err != nil {
		t.Fatal(err)
	}
	if got := h.pausedFor("sms"); got != 600*ms {
		t.Fatalf("paused for after a shorter pause: %v, want 600ms", got)
	}
	h.expect("after a shorter pause", h.reserve("sms", c, 1), true, 800*ms, 0)
	// no-op pauses
	for _, d := range []time.Duration{0, -time.Second, 500 * time.Nanosecond} {
		if err := h.q.Pause(ctx, "sms", d); err != nil {
			t.Fatalf("pause %v: %v", d, err)
		}
	}
	h.clock.Advance(700 * ms)
	if got := h.pausedFor("sms"); got != 0 {
		t.Fatalf("paused for after the end: %v, want 0", got)
	}
	// a pause longer than the queue's bound refuses reservations until it
	// comes within the bound, each refusal saying how much of the pause is
	// left
	if err := h.q.Pause(ctx, "sms", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	r := h.reserve("sms", c, 1)
	h.expect("in a long pause", r, false, 0, time.Second)
	if r.Paused != 3*time.Second {
		t.Fatalf("a refusal in a 3s pause says paused %v, want 3s (the pause still to run)", r.Paused)
	}
	h.clock.Advance(time.Second)
	h.expect("within the bound", h.reserve("sms", c, 1), true, 2*time.Second, 0)
	if got := h.pausedFor("other"); got != 0 {
		t.Fatalf("another provider is paused for %v", got)
	}
}

// testResume: a pause lifted before its end (Queue.Resume) lets sends
// resume within max_queue_delay, after every slot granted before the pause;
// the depth during the pause counts the slots after it, not the pause.
func testResume(t *testing.T, b Backend) {
	c := leaky.Contract{Rate: 10, MaxQueueDelay: 2 * time.Second}
	h := setup(t, b, noHeadroom...)
	h.warm("sms", c)
	if left, err := h.q.Resume(h.ctx, "sms", c); err != nil || left != 0 {
		t.Fatalf("resume without a pause: %v %v, want 0", left, err)
	}
	h.expect("no pause: at once", h.reserve("sms", c, 1), true, 0, 0)
	for i, want := range []time.Duration{100 * ms, 200 * ms} {
		h.expect("before "+itoa(i), h.reserve("sms", c, 1), true, want, 0)
	}
	if err := h.q.Pause(h.ctx, "sms", time.Hour); err != nil {
		t.Fatal(err)
	}
	h.expect("in the pause", h.reserve("sms", c, 1), false, 0, time.Hour-2*time.Second)
	if got := h.depth("sms", c); got != 0 {
		t.Fatalf("depth in a pause: %v units, want 0 (the pause is not queued work)", got)
	}
	h.clock.Advance(time.Minute)
	left, err := h.q.Resume(h.ctx, "sms", c)
	if err != nil {
		t.Fatal(err)
	}
	if left != 59*time.Minute {
		t.Fatalf("resume: %v of the pause left, want 59m", left)
	}
	if got := h.pausedFor("sms"); got != 0 {
		t.Fatalf("paused for after resume: %v", got)
	}
	// Slots restart max_queue_delay plus one interval ahead: the queue is
	// full for one interval, then takes slots from max_queue_delay on.
	h.expect("just after resume", h.reserve("sms", c, 1), false, 0, 100*ms)
	h.clock.Advance(100 * ms)
	h.expect("after one interval", h.reserve("sms", c, 1), true, 2*time.Second, 0)
	h.expect("the queue full again", h.reserve("sms", c, 1), false, 0, 100*ms)
	h.clock.Advance(100 * ms)
	h.expect("then the contract", h.reserve("sms", c, 1), true, 2*time.Second, 0)
}

func testDepth(t *testing.T, b Backend) {
	c := leaky.Contract{Rate: 10, MaxQueueDelay: time.Second}
	h := setup(t, b, noHeadroom...)
	if got := h.depth("sms", c); got != 0 {
		t.Fatalf("depth of a new provider: %v, want 0", got)
	}
	h.warm("sms", c)
	if got := h.depth("sms", c); got != 0 {
		t.Fatalf("depth of a drained provider: %v, want 0", got)
	}
	for i := 0; i < 3; i++ {
		h.reserve("sms", c, 1)
	}
	if got := h.depth("sms", c); got != 3 {
		t.Fatalf("depth after 3 reservations: %v, want 3", got)
	}
	h.clock.Advance(150 * ms)
	if got := h.depth("sms", c); got != 1.5 {
		t.Fatalf("depth 150ms later: %v, want 1.5", got)
	}
	h.reserve("sms", c, 4)
	if got := h.depth("sms", c); got != 5.5 {
		t.Fatalf("depth after a cost-4 reservation: %v, want 5.5", got)
	}

	hd := setup(t, b) // default headroom: 100/s paces at 98.5/s, ⌈1e6/98.5⌉ = 10153 µs
	c2 := leaky.Contract{Rate: 100, MaxQueueDelay: time.Second}
	hd.warm("sms", c2)
	for i := 0; i < 3; i++ {
		hd.reserve("sms", c2, 1)
	}
	if got, want := hd.depth("sms", c2), 30459*98.5/1e6; math.Abs(got-want) > 1e-9 {
		t.Fatalf("depth with headroom: %v, want %v", got, want)
	}
}

// testContractHeadroom: a contract's own headroom (a provider's jitter
// budget) replaces the queue's: at 100/s with a 50 ms budget (h = 0.05/1.05)
// slots are 10.5 ms apart, and the queue's 1 % is left for the others.
func testContractHeadroom(t *testing.T, b Backend) {
	h := setup(t, b, leaky.WithHeadroom(0.01))
	budget := leaky.Contract{Rate: 100, MaxQueueDelay: time.Second, Headroom: leaky.HeadroomFor(50 * time.Millisecond)}
	plain := leaky.Contract{Rate: 100, MaxQueueDelay: time.Second}
	h.warm("budget", budget)
	h.warm("plain", plain)
	r1, r2 := h.reserve("budget", budget, 1), h.reserve("budget", budget, 1)
	// 10.5 ms, rounded up to a whole µs (10.501: float rounding of 1/(1−h)).
	if got := r2.Delay - r1.Delay; got < 10500*time.Microsecond || got > 10501*time.Microsecond {
		t.Errorf("slots of a 100/s contract with a 50ms jitter budget: %s apart, want 10.5ms", got)
	}
	p1, p2 := h.reserve("plain", plain, 1), h.reserve("plain", plain, 1)
	if got := p2.Delay - p1.Delay; got != 10102*time.Microsecond {
		t.Errorf("slots of a 100/s contract with the queue's 1 %%: %s apart, want 10.102ms", got)
	}
	if _, err := h.q.Reserve(h.ctx, "budget", leaky.Contract{Rate: 100, MaxQueueDelay: time.Second, Headroom: 0.5}, 1); err == nil {
		t.Error("a headroom of 0.5 was accepted")
	}
}

func testIndependent(t *testing.T, b Backend) {
	c := leaky.Contract{Rate: 10, MaxQueueDelay: 0}
	h := setup(t, b, noHeadroom...)
	h.warm("a", c)
	h.warm("b", c)
	h.expect("a", h.reserve("a", c, 1), true, 0, 0)
	h.expect("a full", h.reserve("a", c, 1), false, 0, 100*ms)
	h.expect("b", h.reserve("b", c, 1), true, 0, 0)
	if err := h.q.Pause(h.ctx, "a", time.Second); err != nil {
		t.Fatal(err)
	}
	if got := h.pausedFor("b"); got != 0 {
		t.Fatalf("b paused for %v after a pause of a", got)
	}
}

func testInvalid(t *testing.T, b Backend) {
	h := setup(t, b)
	good := leaky.Contract{Rate: 10, MaxQueueDelay: time.Second}
	cases := []struct {
		name string
		c    leaky.Contract
		cost int
		want string
	}{
		{"zero rate", leaky.Contract{Rate: 0, MaxQueueDelay: time.Second}, 1, "rate must be greater than 0, got 0"},
		{"negative rate", leaky.Contract{Rate: -5, MaxQueueDelay: time.Second}, 1, "rate must be greater than 0, got -5"},
		// Its interval in µs overflowed int64: every job went at once.
		{"rate too slow to pace", leaky.Contract{Rate: 1e-15, MaxQueueDelay: time.Second}, 1, "rate must be at least"},
		{"NaN rate", leaky.Contract{Rate: math.NaN(), MaxQueueDelay: time.Second}, 1, "rate must be a finite number, got NaN"},
		{"infinite rate", leaky.Contract{Rate: math.Inf(1), MaxQueueDelay: time.Second}, 1, "rate must be a finite number, got +Inf"},
		{"negative delay", leaky.Contract{Rate: 10, MaxQueueDelay: -time.Second}, 1, "max queue delay must not be negative, got -1s"},
		{"zero cost", good, 0, "cost must be at least 1, got 0"},
	}
	for _, tc := range cases {
		_, err := h.q.Reserve(h.ctx, "sms", tc.c, tc.cost)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "reserve slot sms: ") {
			t.Errorf("%s: reserve error %v, want reserve slot sms: ...%s", tc.name, err, tc.want)
		}
	}
	if _, err := h.q.Depth(h.ctx, "sms", leaky.Contract{}); err == nil || !strings.HasPrefix(err.Error(), "read queue depth sms: ") {
		t.Errorf("depth of an invalid contract: %v", err)
	}
	r := h.reserve("sms", good, 1)
	if err := h.q.Cancel(h.ctx, "sms", good, r, 0); err == nil || !strings.HasPrefix(err.Error(), "cancel slot sms: ") {
		t.Errorf("cancel with cost 0: %v", err)
	}
}

func testConcurrent(t *testing.T, b Backend) {
	const goroutines, each = 16, 10
	c := leaky.Contract{Rate: 1000, MaxQueueDelay: time.Second}
	h := setup(t, b, noHeadroom...)
	h.warm("sms", c)
	var (
		mu    sync.Mutex
		slots []int64
		wg    sync.WaitGroup
	)
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				r, err := h.q.Reserve(h.ctx, "sms", c, 1)
				if err != nil {
					errs <- err
					return
				}
				if !r.OK {
					continue
				}
				mu.Lock()
				slots = append(slots, r.Slot)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// the clock stands still: 160 reservations fit in a 1 s queue at 1 ms each
	if len(slots) != goroutines*each {
		t.Fatalf("%d reservations of %d succeeded", len(slots), goroutines*each)
	}
	sort.Slice(slots, func(i, j int) bool { return slots[i] < slots[j] })
	now := h.clock.Now().UnixMicro()
	for i, s := range slots {
		if want := now + int64(i)*1000; s != want {
			t.Fatalf("slot %d at now+%dµs, want now+%dµs", i, s-now, want-now)
		}
	}
}

// alignTo advances the clock to the next multiple of per since the Unix
// epoch (a quota window's start).
func (h *harness) alignTo(per time.Duration) {
	h.t.Helper()
	now := h.clock.Now().UnixNano()
	p := per.Nanoseconds()
	h.clock.Advance(time.Duration(((now/p)+1)*p - now))
}

func (h *harness) backoff(provider string, c leaky.Contract, d time.Duration) bool {
	h.t.Helper()
	lowered, err := h.q.Backoff(h.ctx, provider, c, d)
	if err != nil {
		h.t.Fatalf("backoff %s: %v", provider, err)
	}
	return lowered
}

func (h *harness) shape(provider string, c leaky.Contract) leaky.Shape {
	h.t.Helper()
	s, err := h.q.Shape(h.ctx, provider, c)
	if err != nil {
		h.t.Fatalf("shape %s: %v", provider, err)
	}
	return s
}

func (h *harness) effective(provider string, c leaky.Contract, want float64) {
	h.t.Helper()
	if got := h.shape(provider, c).EffectiveRate; got != want {
		h.t.Fatalf("effective rate %v, want %v", got, want)
	}
}

func (h *harness) target(provider string, c leaky.Contract, want float64) {
	h.t.Helper()
	if got := h.shape(provider, c).Target; got != want {
		h.t.Fatalf("target %v, want %v", got, want)
	}
}

func (h *harness) expectQuota(what string, r leaky.Reservation, ok bool, delay, retryAfter time.Duration, quota int) {
	h.t.Helper()
	h.expect(what, r, ok, delay, retryAfter)
	if r.Quota != quota {
		h.t.Fatalf("%s: quota %d, want %d", what, r.Quota, quota)
	}
}

// adaptive is a 10/s contract that halves on a Backoff at a rate it held,
// down to 2/s, and climbs 1/s per second from 2 s after the last backoff.
var adaptive = leaky.Contract{
	Rate: 10, MaxQueueDelay: 10 * time.Second,
	Adaptive: &leaky.Adaptive{MinRate: 2, Decrease: 0.5, IncreasePerS: 1, Quiet: 2 * time.Second},
}

// testAdaptiveBackoff: the many Backoffs of one pause lower the rate once;
// each new pause lowers it again, down to MinRate and not below; Resume
// leaves it as it is; a plain contract's Backoff is a Pause.
func testAdaptiveBackoff(t *testing.T, b Backend) {
	h := setup(t, b, noHeadroom...)
	c := adaptive
	h.warm("sms", c)
	h.effective("sms", c, 10)
	if !h.backoff("sms", c, time.Second) {
		t.Fatal("the first backoff did not lower the rate")
	}
	h.effective("sms", c, 5)
	if got := h.pausedFor("sms"); got != time.Second {
		t.Fatalf("paused for %v after a backoff of 1s, want 1s", got)
	}
	for i := 0; i < 5; i++ {
		h.clock.Advance(100 * ms)
		if h.backoff("sms", c, time.Second) {
			t.Fatalf("backoff %d during the pause lowered the rate again", i+2)
		}
	}
	h.effective("sms", c, 5)
	if got := h.pausedFor("sms"); got != time.Second {
		t.Fatalf("paused for %v after the later backoffs, want 1s (the last one's)", got)
	}
	h.clock.Advance(time.Second) // the pause is over
	if !h.backoff("sms", c, time.Second) {
		t.Fatal("a backoff after the pause did not lower the rate")
	}
	h.effective("sms", c, 2.5)
	if left, err := h.q.Resume(h.ctx, "sms", c); err != nil || left != time.Second {
		t.Fatalf("resume: %v %v, want 1s left", left, err)
	}
	h.effective("sms", c, 2.5)
	if !h.backoff("sms", c, time.Second) {
		t.Fatal("a backoff after resume did not lower the rate")
	}
	h.effective("sms", c, 2) // max(2, 1.25)
	h.clock.Advance(time.Second + ms)
	if h.backoff("sms", c, time.Second) {
		t.Fatal("a backoff at the min rate reported lowering it")
	}
	h.effective("sms", c, 2)

	// d <= 0 does nothing
	h.clock.Advance(2 * time.Second)
	if h.backoff("sms", c, 0) || h.backoff("sms", c, -time.Second) {
		t.Fatal("a backoff of d <= 0 lowered the rate")
	}
	if got := h.pausedFor("sms"); got != 0 {
		t.Fatalf("paused for %v after a backoff of 0", got)
	}

	plain := leaky.Contract{Rate: 10, MaxQueueDelay: 10 * time.Second}
	h.warm("plain", plain)
	if h.backoff("plain", plain, time.Second) {
		t.Fatal("the backoff of a plain contract lowered its rate")
	}
	if got := h.pausedFor("plain"); got != time.Second {
		t.Fatalf("plain backoff: paused for %v, want 1s", got)
	}
	h.effective("plain", plain, 10)
	h.expect("plain after its backoff", h.reserve("plain", plain, 1), true, time.Second, 0)
}

// testAdaptiveClimb: Quiet after the last backoff the rate climbs
// IncreasePerS per second up to the backoff's target (just under the rate
// the provider throttled at), holds it for AdaptiveHold, then probes above
// it, ever faster (leaky.AdaptiveConvex), up to Rate and never above it.
func testAdaptiveClimb(t *testing.T, b Backend) {
	h := setup(t, b, noHeadroom...)
	c := adaptive
	h.warm("sms", c)
	h.backoff("sms", c, 100*ms) // 5/s, target 9.8/s
	h.clock.Advance(200 * ms)
	h.backoff("sms", c, 100*ms) // 2.5/s, target 4.9/s: a 429 at 5/s held
	h.clock.Advance(200 * ms)
	h.backoff("sms", c, 100*ms) // 2/s: the floor; target ⌊2.5 × 0.98⌋ = 2.45/s
	h.effective("sms", c, 2)
	h.target("sms", c, 2.45)
	h.clock.Advance(2 * time.Second) // quiet
	h.effective("sms", c, 2)
	h.clock.Advance(300 * ms)
	h.effective("sms", c, 2.3)
	h.clock.Advance(200 * ms)
	h.effective("sms", c, 2.45) // the target, held
	h.clock.Advance(leaky.AdaptiveHold - 500*ms)
	h.effective("sms", c, 2.45)
	// A second into the probe: the climb (1) times 1 + 1 s/AdaptiveConvex.
	h.clock.Advance(time.Second)
	h.effective("sms", c, 3.7) // 2.45 + 1 × (1 + 1 s / 4 s)
	h.clock.Advance(time.Hour)
	h.effective("sms", c, 10)

	// a rate lowered by a reload caps the climb at once
	lower := c
	lower.Rate = 3
	h.effective("sms", lower, 3)
	// a decrease from the climbed rate, held at Rate: to 5/s, target 9.8/s
	h.clock.Advance(time.Minute)
	h.backoff("sms", c, 100*ms)
	h.effective("sms", c, 5)
	h.target("sms", c, 9.8)
}

// testAdaptiveSpacing: reservations are spaced by the effective interval,
// headroom applied; at the full rate exactly as a plain contract.
func testAdaptiveSpacing(t *testing.T, b Backend) {
	h := setup(t, b, noHeadroom...)
	c := adaptive
	h.warm("sms", c)
	h.expect("full rate 0", h.reserve("sms", c, 1), true, 0, 0)
	h.expect("full rate 1", h.reserve("sms", c, 1), true, 100*ms, 0)
	h.clock.Advance(time.Second)
	h.backoff("sms", c, 500*ms) // 5/s from the pause end
	h.expect("after the pause", h.reserve("sms", c, 1), true, 500*ms, 0)
	h.expect("at 5/s", h.reserve("sms", c, 1), true, 700*ms, 0)
	h.expect("cost 2 at 5/s", h.reserve("sms", c, 2), true, 900*ms, 0)
	h.expect("then", h.reserve("sms", c, 1), true, 1300*ms, 0)

	// 2/s with the default 1.5 % headroom: ⌈1e12 / ⌊2e6 × 0.985⌋⌉ = 507615 µs
	hd := setup(t, b)
	hd.warm("sms", c)
	hd.clock.Advance(time.Second)
	hd.backoff("sms", c, 100*ms)
	hd.clock.Advance(200 * ms)
	hd.backoff("sms", c, 100*ms)
	hd.clock.Advance(200 * ms)
	hd.backoff("sms", c, 100*ms)
	hd.effective("sms", c, 2)
	hd.clock.Advance(100 * ms)
	hd.expect("2/s with headroom", hd.reserve("sms", c, 1), true, 0, 0)
	hd.expect("then", hd.reserve("sms", c, 1), true, us(507615), 0)
}

// testQuota: exactly Limit units a window; the next at the next window's
// start; beyond MaxQueueDelay refused with the quota's index.
func testQuota(t *testing.T, b Backend) {
	h := setup(t, b, noHeadroom...)
	c := leaky.Contract{Rate: 100, MaxQueueDelay: 1500 * ms, Quotas: []leaky.Quota{{Limit: 3, Per: time.Second}}}
	h.warm("sms", c)
	h.alignTo(time.Second)
	for i, want := range []time.Duration{0, 10 * ms, 20 * ms} {
		h.expectQuota("window 0, "+itoa(i), h.reserve("sms", c, 1), true, want, 0, -1)
	}
	for i, want := range []time.Duration{time.Second, 1010 * ms, 1020 * ms} {
		h.expectQuota("window 1, "+itoa(i), h.reserve("sms", c, 1), true, want, 0, -1)
	}
	h.expectQuota("window 2 beyond the queue", h.reserve("sms", c, 1), false, 0, 500*ms, 0)
	h.clock.Advance(500 * ms)
	h.expectQuota("window 2", h.reserve("sms", c, 1), true, 1500*ms, 0, -1)
	// the queue itself full: not the quota's doing
	c0 := c
	c0.MaxQueueDelay = 0
	h.expectQuota("queue full", h.reserve("sms", c0, 1), false, 0, 1510*ms, -1)
	// cost 2 of a window that has 1 left moves on
	h.clock.Advance(1510 * ms) // window 2 + 10 ms: 1 used
	h.expectQuota("cost 2 in window 2", h.reserve("sms", c, 2), true, 0, 0, -1)
	h.expectQuota("cost 2 moves on", h.reserve("sms", c, 2), true, 990*ms, 0, -1)
}

// testTwoQuotas: every quota counts; the one that refuses is named.
func testTwoQuotas(t *testing.T, b Backend) {
	h := setup(t, b, noHeadroom...)
	c := leaky.Contract{Rate: 100, MaxQueueDelay: 5 * time.Second, Quotas: []leaky.Quota{
		{Limit: 2, Per: time.Second}, {Limit: 3, Per: 10 * time.Second},
	}}
	h.warm("sms", c)
	h.alignTo(10 * time.Second)
	h.expectQuota("0", h.reserve("sms", c, 1), true, 0, 0, -1)
	h.expectQuota("1", h.reserve("sms", c, 1), true, 10*ms, 0, -1)
	h.expectQuota("2: the 1s window is spent", h.reserve("sms", c, 1), true, time.Second, 0, -1)
	h.expectQuota("3: the 10s window is spent", h.reserve("sms", c, 1), false, 0, 5*time.Second, 1)
	h.clock.Advance(5 * time.Second)
	h.expectQuota("3 within the queue", h.reserve("sms", c, 1), true, 5*time.Second, 0, -1)
	h.clock.Advance(time.Second)
	h.expectQuota("4", h.reserve("sms", c, 1), true, 4010*ms, 0, -1)
	h.expectQuota("5: the next 1s window", h.reserve("sms", c, 1), true, 5*time.Second, 0, -1)
	s := h.shape("sms", c)
	if len(s.Quotas) != 2 || s.Quotas[0].Used != 1 || s.Quotas[1].Used != 3 {
		t.Fatalf("shape %+v, want 1 used of the 1s quota's window 11, 3 of the 10s quota's next window", s)
	}
}

// testQuotaCancel: a reservation given back gives its units back to every
// quota; one that is followed keeps its slot but gives its units back to
// the windows that are its own and still current.
func testQuotaCancel(t *testing.T, b Backend) {
	h := setup(t, b, noHeadroom...)
	c := leaky.Contract{Rate: 100, MaxQueueDelay: 2 * time.Second, Quotas: []leaky.Quota{
		{Limit: 2, Per: time.Second}, {Limit: 100, Per: time.Minute},
	}}
	h.warm("sms", c)
	h.alignTo(time.Minute)
	r1 := h.reserve("sms", c, 1)
	r2 := h.reserve("sms", c, 1)
	h.expect("r2", r2, true, 10*ms, 0)
	if err := h.q.Cancel(h.ctx, "sms", c, r2, 1); err != nil {
		t.Fatal(err)
	}
	if s := h.shape("sms", c); s.Quotas[0].Used != 1 || s.Quotas[1].Used != 1 {
		t.Fatalf("shape after a cancel: %+v, want 1 used in each", s)
	}
	r3 := h.reserve("sms", c, 1)
	h.expect("r3 takes r2's slot and units", r3, true, 10*ms, 0)
	// the wrong cost cancels nothing
	if err := h.q.Cancel(h.ctx, "sms", c, r3, 2); err != nil {
		t.Fatal(err)
	}
	// r1 was followed by r3: its slot stays taken, but nobody sends in
	// it, so its unit leaves both windows (its own, still current).
	if err := h.q.Cancel(h.ctx, "sms", c, r1, 1); err != nil {
		t.Fatal(err)
	}
	if s := h.shape("sms", c); s.Quotas[0].Used != 1 || s.Quotas[1].Used != 1 {
		t.Fatalf("shape after giving up a followed slot: %+v, want 1 used in each (r3)", s)
	}
	h.expect("r4 takes the unit r1 gave up, after r3's slot", h.reserve("sms", c, 1), true, 20*ms, 0)
	h.expect("r5 in the next window", h.reserve("sms", c, 1), true, time.Second, 0)
	if s := h.shape("sms", c); s.Quotas[0].Used != 1 || s.Quotas[1].Used != 3 {
		t.Fatalf("shape: %+v, want 1 used in the next 1s window, 3 in the minute", s)
	}
}

// testQuotaShape: Shape reports each quota's window: used, limit, reset.
func testQuotaShape(t *testing.T, b Backend) {
	h := setup(t, b, noHeadroom...)
	c := leaky.Contract{Rate: 100, MaxQueueDelay: 2 * time.Second, Quotas: []leaky.Quota{
		{Limit: 3, Per: time.Second}, {Limit: 1000, Per: 24 * time.Hour},
	}}
	h.warm("sms", c)
	h.alignTo(24 * time.Hour) // a UTC midnight
	if got := h.clock.Now().UTC(); got.Hour() != 0 || got.Minute() != 0 || got.Second() != 0 || got.Nanosecond()%1000 != 0 {
		t.Fatalf("aligned to %v, want a UTC midnight", got)
	}
	want := func(what string, used0, used1 int64, reset0, reset1 time.Duration) {
		t.Helper()
		s := h.shape("sms", c)
		wantS := leaky.Shape{EffectiveRate: 100, Quotas: []leaky.QuotaState{
			{Limit: 3, Used: used0, Per: time.Second, ResetsIn: reset0},
			{Limit: 1000, Used: used1, Per: 24 * time.Hour, ResetsIn: reset1},
		}}
		if s.EffectiveRate != wantS.EffectiveRate || len(s.Quotas) != 2 || s.Quotas[0] != wantS.Quotas[0] || s.Quotas[1] != wantS.Quotas[1] {
			t.Fatalf("%s: shape %+v, want %+v", what, s, wantS)
		}
	}
	want("fresh window", 0, 0, time.Second, 24*time.Hour)
	h.reserve("sms", c, 1)
	h.reserve("sms", c, 1)
	h.clock.Advance(300 * ms)
	want("two used", 2, 2, 700*ms, 24*time.Hour-300*ms)
	h.reserve("sms", c, 1)
	h.reserve("sms", c, 1) // moved to the next second
	want("moved on", 1, 4, 1700*ms, 24*time.Hour-300*ms)
	h.clock.Advance(2 * time.Second)
	want("later", 0, 4, 700*ms, 24*time.Hour-2300*ms)
}

func testInvalidShaping(t *testing.T, b Backend) {
	h := setup(t, b)
	base := leaky.Contract{Rate: 10, MaxQueueDelay: time.Second}
	ad := func(a leaky.Adaptive) leaky.Contract { c := base; c.Adaptive = &a; return c }
	qs := func(q ...leaky.Quota) leaky.Contract { c := base; c.Quotas = q; return c }
	good := leaky.Adaptive{MinRate: 1, Decrease: 0.5, IncreasePerS: 1}
	with := func(f func(*leaky.Adaptive)) leaky.Contract { a := good; f(&a); return ad(a) }
	cases := []struct {
		name string
		c    leaky.Contract
		cost int
		want string
	}{
		{"zero min rate", with(func(a *leaky.Adaptive) { a.MinRate = 0 }), 1, "adaptive min rate must be in (0, rate 10], got 0"},
		{"min rate above rate", with(func(a *leaky.Adaptive) { a.MinRate = 11 }), 1, "adaptive min rate must be in (0, rate 10], got 11"},
		{"NaN min rate", with(func(a *leaky.Adaptive) { a.MinRate = math.NaN() }), 1, "adaptive min rate must be in (0, rate 10], got NaN"},
		{"tiny min rate", with(func(a *leaky.Adaptive) { a.MinRate = 1e-9 }), 1, "adaptive min rate must be at least"},
		{"decrease 1", with(func(a *leaky.Adaptive) { a.Decrease = 1 }), 1, "adaptive decrease must be in (0, 1), got 1"},
		{"decrease 0", with(func(a *leaky.Adaptive) { a.Decrease = 0 }), 1, "adaptive decrease must be in (0, 1), got 0"},
		{"zero increase", with(func(a *leaky.Adaptive) { a.IncreasePerS = 0 }), 1, "adaptive increase per second must be in (0, 9000], got 0"},
		{"infinite increase", with(func(a *leaky.Adaptive) { a.IncreasePerS = math.Inf(1) }), 1, "adaptive increase per second must be in (0, 9000], got +Inf"},
		{"negative quiet", with(func(a *leaky.Adaptive) { a.Quiet = -time.Second }), 1, "adaptive quiet must not be negative, got -1s"},
		{"adaptive cost", ad(good), leaky.MaxAdaptiveCost + 1, "the most an adaptive contract takes at once"},
		{"zero limit", qs(leaky.Quota{Limit: 0, Per: time.Second}), 1, "quotas[0]: limit must be at least 1, got 0"},
		{"short per", qs(leaky.Quota{Limit: 1, Per: 500 * ms}), 1, "quotas[0]: per must be a whole number of seconds, at least 1s, got 500ms"},
		{"fractional per", qs(leaky.Quota{Limit: 5, Per: time.Second}, leaky.Quota{Limit: 1, Per: 1500 * ms}), 1, "quotas[1]: per must be a whole number of seconds"},
		{"long per", qs(leaky.Quota{Limit: 1, Per: 400 * 24 * time.Hour}), 1, "quotas[0]: per must be at most"},
		{"five quotas", qs(make([]leaky.Quota, 5)...), 1, "at most 4 quotas, got 5"},
		{"cost above a limit", qs(leaky.Quota{Limit: 10, Per: time.Minute}, leaky.Quota{Limit: 2, Per: time.Second}), 3, "cost 3 is more than quotas[1]'s limit 2"},
	}
	for _, tc := range cases {
		_, err := h.q.Reserve(h.ctx, "sms", tc.c, tc.cost)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "reserve slot sms: ") {
			t.Errorf("%s: reserve error %v, want reserve slot sms: ...%s", tc.name, err, tc.want)
		}
	}
	bad := with(func(a *leaky.Adaptive) { a.Decrease = 2 })
	if _, err := h.q.Backoff(h.ctx, "sms", bad, time.Second); err == nil || !strings.HasPrefix(err.Error(), "back off provider sms: adaptive decrease") {
		t.Errorf("backoff of an invalid contract: %v", err)
	}
	if _, err := h.q.Shape(h.ctx, "sms", bad); err == nil || !strings.HasPrefix(err.Error(), "read shape sms: adaptive decrease") {
		t.Errorf("shape of an invalid contract: %v", err)
	}
}
