package dispatch

import (
	"cmp"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/testenv"
)

// jitterBudget is how late an arrival may be relative to its send slot in
// the pacing checks: h/(1−h) s at the default headroom h, ≈ 15.2 ms at
// 1.5 % (limits.Config.Headroom: with slots cost/(rate·(1−h)) apart,
// contract+1 of them span 1/(1−h) s, so arrivals late by less than
// h/(1−h) s still never put contract+1 in one 1 s window). A check counts
// every arrival in windows of 1 s − jitterBudget: the slots of the arrivals
// in such a window lie in a 1 s window, which the queue's schedule keeps to
// the contract; so the check fails only if the schedule broke the contract
// or an arrival came later than the budget allows.
var jitterBudget = leaky.JitterFor(leaky.DefaultHeadroom)

// arrivalCounter is what every testenv fake offers about its arrivals.
type arrivalCounter interface {
	Arrivals() []time.Time
	MaxArrivalsInWindow(window, budget time.Duration) int
}

// arrivalsPaced fails t when more than contract of the fake's arrivals
// (every send attempt it saw: accepted, refused with 429, failed) lie in a
// window of 1 s − jitterBudget, and returns that most. It replaces the
// checks of the accepted requests' 1 s windows, which a fake enforcing the
// contract caps at the contract whatever is sent, and the demands of no
// 429 at all, which the exact contract such a fake enforces turns into
// flakes: one arrival a few ms late on a loaded machine draws a 429
// without any slot breaking the contract.
func arrivalsPaced(t testing.TB, name string, f arrivalCounter, contract int) int {
	t.Helper()
	return arrivalsPacedWithin(t, name, f, contract, jitterBudget)
}

// arrivalsPacedWithin is arrivalsPaced for a provider configured with
// jitter_budget: budget rather than the default.
func arrivalsPacedWithin(t testing.TB, name string, f arrivalCounter, contract int, budget time.Duration) int {
	t.Helper()
	most := f.MaxArrivalsInWindow(time.Second, budget)
	if most > contract {
		t.Errorf("%s: %d arrivals (429s included) in a window of 1 s − %s jitter budget, contract %d/s",
			name, most, budget.Round(100*time.Microsecond), contract)
	}
	return most
}

// slotLog records the leaky slot of every send the dispatchers of a test
// make (Dispatcher.sentSlot), per provider. Safe for concurrent use; the
// zero value is ready.
type slotLog struct {
	mu sync.Mutex
	m  map[string][]sentSlot
}

// sentSlot is one send's slot, µs on the limit backend's clock, its cost,
// when the send was made (µs on this process's clock, which on this
// machine is the backend's), and its job's id.
type sentSlot struct {
	at   int64
	cost int
	sent int64
	id   string
}

func (l *slotLog) add(provider, id string, slot int64, cost int) {
	now := time.Now().UnixMicro()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string][]sentSlot{}
	}
	l.m[provider] = append(l.m[provider], sentSlot{at: slot, cost: cost, sent: now, id: id})
}

// slotsPaced checks the dispatcher's own promise on the slots its sends
// were made in, which no late wake-up, stalled reply or loaded machine
// moves (the arrivals check, arrivalsPaced, adds the lateness): in slot
// order each slot is at least cost·interval after the one before it, with
// interval = 1/(rate·(1 − leaky.DefaultHeadroom)) (leaky's doc), and no window
// [t, t+1 s) holds more than rate units. It returns that most.
func slotsPaced(t testing.TB, l *slotLog, provider string, rate int) int {
	t.Helper()
	l.mu.Lock()
	s := slices.Clone(l.m[provider])
	l.mu.Unlock()
	if len(s) == 0 {
		t.Errorf("%s: no send slot recorded", provider)
		return 0
	}
	slices.SortFunc(s, func(a, b sentSlot) int { return cmp.Compare(a.at, b.at) })
	interval := 1e6 / (float64(rate) * (1 - leaky.DefaultHeadroom)) // µs per unit
	tight := 0
	for i := 1; i < len(s); i++ {
		if need := float64(s[i-1].cost) * interval; float64(s[i].at-s[i-1].at) < need {
			if tight++; tight <= 3 {
				t.Errorf("%s: send slots %d µs apart, cost %d needs %.1f", provider, s[i].at-s[i-1].at, s[i-1].cost, need)
			}
		}
	}
	if tight > 3 {
		t.Errorf("%s: %d send slots closer than cost·interval in all", provider, tight)
	}
	most, units, i := 0, 0, 0
	for j := range s {
		units += s[j].cost
		for s[j].at-s[i].at >= 1_000_000 {
			units -= s[i].cost
			i++
		}
		most = max(most, units)
	}
	if most > rate {
		t.Errorf("%s: %d units sent in the slots of one 1 s window, contract %d/s", provider, most, rate)
	}
	return most
}

// pausedByRefusals is the time the provider ordered the sender to hold:
// for each arrival not among accepted (a 429 by the contract, in these
// tests), the time from it to the next accepted arrival (the dispatcher
// pauses the provider fleet-wide until Retry-After, which the fake rounds
// up to whole seconds), overlapping spans counted once. Both slices are in
// order of arrival, and accepted's times are among arrivals.
func pausedByRefusals(arrivals, accepted []time.Time) time.Duration {
	var paused time.Duration
	var until time.Time // the end of the span counted so far
	a := 0
	for _, at := range arrivals {
		if a < len(accepted) && accepted[a].Equal(at) {
			a++
			continue
		}
		// A refusal at at: the hold lasts until the next acceptance.
		next := at
		for i := a; i < len(accepted); i++ {
			if accepted[i].After(at) {
				next = accepted[i]
				break
			}
		}
		start := at
		if start.Before(until) {
			start = until
		}
		if next.After(start) {
			paused += next.Sub(start)
			until = next
		}
	}
	return paused
}

// sustainedRate is the rate the provider's queue ran at between the first
// and the last accepted request, in slots per second: the accepted requests
// plus late, the slots given up because a worker woke more than
// LateTolerance after them (on a loaded machine a late wake costs a slot,
// never the contract; paced in kinds_e2e_test.go counts them the same way),
// over the time the provider let the dispatcher send: the holds ordered by
// 429s (pausedByRefusals) are left out, since the pacing checks now allow a
// rare 429 (arrivalsPaced) and each costs at least 1 s of the fake's
// Retry-After that no pacing could use.
func sustainedRate(f *testenv.Fake, late float64) float64 {
	acc := f.Accepted()
	if len(acc) < 2 {
		return 0
	}
	sort.Slice(acc, func(i, j int) bool { return acc[i].At.Before(acc[j].At) })
	at := make([]time.Time, len(acc))
	for i, r := range acc {
		at[i] = r.At
	}
	span := acc[len(acc)-1].At.Sub(acc[0].At) - pausedByRefusals(f.Arrivals(), at)
	return (float64(len(acc)-1) + late) / span.Seconds()
}

// max429s bounds the 429s of a pacing test of jobs sends: a rare late
// arrival may draw one from a fake enforcing the exact contract, but each
// pauses the provider fleet-wide, so more than 1 % of the sends is a storm,
// not jitter.
func max429s(jobs int) int { return max(1, jobs/100) }

// TestPacingAcrossDispatchers: three dispatchers (separate Redis and NATS
// connections, as separate processes have) on a 100/s contract drain a
// 1,200-job backlog (12 s at the contract): every job exactly once, no window of 1 s − jitterBudget
// holding more than 100 arrivals (429s included), at most max429s 429s from
// a provider that enforces the same contract, and at least 95 % of the
// contract sustained.
func TestPacingAcrossDispatchers(t *testing.T) {
	measures(t)
	b := setup(t, setupOpts{contract: 100, rate: 100, maxQueueDelay: time.Second})
	ids := b.publishN("pace", "sms", 1200, 300)
	var procs []*proc
	for i := 0; i < 3; i++ {
		procs = append(procs, b.start(func(o *Options) { o.Workers = 16 }))
	}
	late := func() float64 { // slots given up because a worker woke more than 5 ms late
		var n float64
		for _, p := range procs {
			n += p.count(p.d.m.Deferrals.WithLabelValues(LayerLeaky, "late"))
		}
		return n
	}
	testenv.WaitFor(t, 60*time.Second, "1200 jobs accepted", func() bool { return len(b.fake.AcceptedIDs()) >= 1200 })
	b.acceptedOnce(ids)
	// The promise is the arrival window; a 429 is a late arrival the
	// budget forgives, so only a storm of them fails (was: none at all).
	most := arrivalsPaced(t, "sms-gw", b.fake, 100)
	slotsMost := slotsPaced(t, &b.slots, "sms-gw", 100)
	if n := b.fake.Count(http.StatusTooManyRequests); n > max429s(1200) {
		t.Errorf("the provider answered 429 %d times for 1200 jobs, more than %d", n, max429s(1200))
	}
	if r := sustainedRate(b.fake, late()); r < 95 {
		t.Errorf("the queue ran at %.1f slots/s (%v given up late), want at least 95 %% of the 100/s contract", r, late())
	} else {
		t.Logf("the queue ran at %.1f slots/s (%v given up late) on a 100/s contract; most arrivals in a 1 s − %s window %d, most send slots in 1 s %d; %d answered 429",
			r, late(), jitterBudget.Round(100*time.Microsecond), most, slotsMost, b.fake.Count(http.StatusTooManyRequests))
	}
}

// TestRateLimitedProviderNoStorm: the provider really allows only half the
// configured contract and answers the excess with 429. Every job is sent
// in the end, and 429s stay a small fraction of the jobs: a 429 pauses the
// provider fleet-wide, no retry storm.
func TestRateLimitedProviderNoStorm(t *testing.T) {
	measures(t)
	b := setup(t, setupOpts{contract: 50, rate: 100, maxQueueDelay: time.Second})
	ids := b.publishN("half", "sms", 600, 100)
	var procs []*proc
	for i := 0; i < 2; i++ {
		procs = append(procs, b.start(func(o *Options) { o.Workers = 16 }))
	}
	testenv.WaitFor(t, 90*time.Second, "600 jobs accepted", func() bool { return len(b.fake.AcceptedIDs()) >= 600 })
	testenv.WaitFor(t, 10*time.Second, "job stream empty", func() bool { return b.remaining() == 0 })
	b.acceptedOnce(ids)
	n429 := b.fake.Count(http.StatusTooManyRequests)
	if frac := float64(n429) / 600; frac > 0.10 {
		t.Errorf("429s: %d for 600 jobs (%.0f %%); a pause should keep them a small fraction", n429, 100*frac)
	}
	var paused float64
	for _, p := range procs {
		paused += p.count(p.d.m.Deferrals.WithLabelValues(LayerProvider, "rate_limited"))
	}
	if int(paused) != n429 {
		t.Errorf("deferrals{reason=rate_limited} = %v, want one per 429 (%d)", paused, n429)
	}
	if len(b.deadLetters()) != 0 {
		t.Errorf("a rate-limited job was dead-lettered")
	}
	t.Logf("600 jobs through a provider allowing half the contract: %d answers 429 (%.1f %%)", n429, 100*float64(n429)/600)
}

// TestTransientFailuresRetryThenDead: 5xx answers are retried with backoff
// and counted in the ledger across redeliveries; after max_attempts the job
// is dead with reason max_attempts. Permanent refusals are dead at once.
func TestTransientFailuresRetryThenDead(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	b.fake.FailNext(2, http.StatusServiceUnavailable)
	b.publish(newJob("flaky-1", "sms", "u1"))
	p := b.start(nil) // max_attempts 3
	testenv.WaitFor(t, 20*time.Second, "flaky job sent after 2 failures", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	if got := p.count(p.d.m.Deferrals.WithLabelValues(LayerProvider, "retry")); got != 2 {
		t.Errorf("retries counted: %v, want 2", got)
	}

	b.fake.FailFor(time.Hour, http.StatusInternalServerError)
	b.publish(newJob("doomed-1", "sms", "u2"))
	testenv.WaitFor(t, 20*time.Second, "doomed job dead-lettered", func() bool { return len(b.deadLetters()) == 1 })
	dl := b.deadLetters()[0]
	if dl.Reason != ledger.ReasonMaxAttempts || !strings.Contains(dl.Detail, "3 transient provider failures") {
		t.Fatalf("dead letter: reason %q detail %q", dl.Reason, dl.Detail)
	}
	b.fake.Reset()

	b.fake.FailNext(1, http.StatusBadRequest)
	b.publish(newJob("refused-1", "sms", "u3"))
	testenv.WaitFor(t, 20*time.Second, "refused job dead-lettered", func() bool { return len(b.deadLetters()) == 2 })
	dl = b.deadLetters()[1]
	if dl.Reason != ledger.ReasonRejected || !strings.Contains(dl.Detail, "400") {
		t.Fatalf("refused job: reason %q detail %q, want rejected with the status", dl.Reason, dl.Detail)
	}
	if got := p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeDead)); got != 2 {
		t.Errorf("dead counted %v, want 2", got)
	}
}

// TestRedisRestartHold: Redis restarts empty mid-run under redis.on_failure
// hold. Nothing is lost, nothing sent twice, the contract holds.
func TestRedisRestartHold(t *testing.T) {
	measures(t)
	b := setup(t, setupOpts{contract: 100, rate: 100, maxQueueDelay: time.Second})
	ids := b.publishN("rr", "push", 600, 100)
	for i := 0; i < 2; i++ {
		b.start(func(o *Options) { o.Workers = 16 })
	}
	testenv.WaitFor(t, 30*time.Second, "a third of the jobs sent", func() bool { return len(b.fake.AcceptedIDs()) >= 200 })
	b.redis.Stop()
	time.Sleep(time.Second) // an outage, not a blip: the test is about what happens meanwhile
	before := len(b.fake.AcceptedIDs())
	b.redis.Start()
	testenv.WaitFor(t, 60*time.Second, "all 600 sent", func() bool { return len(b.fake.AcceptedIDs()) >= 600 })
	testenv.WaitFor(t, 10*time.Second, "job stream empty", func() bool { return b.remaining() == 0 })
	b.acceptedOnce(ids)
	// The arrival window is the promise; 429s are bounded, not forbidden
	// (arrivalsPaced says why).
	most := arrivalsPaced(t, "push-gw", b.fake, 100)
	slotsPaced(t, &b.slots, "push-gw", 100) // across the restart's cold start too
	if n := b.fake.Count(http.StatusTooManyRequests); n > max429s(600) {
		t.Errorf("provider answered 429 %d times for 600 jobs, more than %d", n, max429s(600))
	}
	t.Logf("%d sent before the outage's end, all 600 after; most arrivals in 1 s − %s: %d",
		before, jitterBudget.Round(100*time.Microsecond), most)
}

// TestLogsCarryNoPersonalData runs a load with sends, retries, dead letters
// and suppressions, and greps every log line for the recipients, bodies and
// secrets of the jobs.
func TestLogsCarryNoPersonalData(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	b.fake.FailNext(3, http.StatusBadGateway)
	for i := 0; i < 30; i++ {
		j := newJob(fmt.Sprintf("pii-%d", i), []string{"sms", "push", "email"}[i%3], "user-secret-name")
		j.To = map[string]string{"sms": "+447700900777", "push": "devtoken-SECRET-abcdefghijklmnopqrstuvwxyz0123456789", "email": "private.person@example.org"}[j.Channel]
		j.Body = "your one-time code is 987654"
		if i%10 == 0 {
			j.ExpiresAt = time.Now().Add(-time.Hour)
		}
		b.publish(j)
	}
	b.fake.FailNext(1, http.StatusBadRequest)
	b.start(nil)
	testenv.WaitFor(t, 30*time.Second, "every job handled", func() bool { return b.remaining() == 0 })
	logs := b.logs.String()
	if !strings.Contains(logs, "pii-") {
		t.Fatalf("logs should name job ids (they are not personal data); got:\n%.2000s", logs)
	}
	for _, secret := range []string{"+447700900777", "447700900777", "devtoken-SECRET-abcdefghijklmnopqrstuvwxyz0123456789", "private.person@example.org", "987654", "one-time code", "user-secret-name"} {
		if strings.Contains(logs, secret) {
			t.Errorf("a log line carries %q", secret)
		}
	}
	// Phone numbers in any form.
	if m := regexp.MustCompile(`\+?\d{10,15}`).FindString(logs); m != "" {
		t.Errorf("a log line carries a long number %q", m)
	}
}

// TestPausedByRefusals: the hold a refusal orders runs to the next
// acceptance; overlapping holds count once; acceptances alone hold nothing.
func TestPausedByRefusals(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ms := func(v ...int) []time.Time {
		out := make([]time.Time, len(v))
		for i, m := range v {
			out[i] = t0.Add(time.Duration(m) * time.Millisecond)
		}
		return out
	}
	for _, c := range []struct {
		arrivals, accepted []time.Time
		want               time.Duration
	}{
		{ms(0, 10, 20), ms(0, 10, 20), 0},
		{ms(0, 10, 1010, 1020), ms(0, 1010, 1020), time.Second},                                     // refused at 10, next accepted at 1010
		{ms(0, 10, 15, 1010), ms(0, 1010), time.Second},                                             // two refusals, one hold
		{ms(0, 10, 500, 1500, 1600), ms(0, 500, 1600), 490*time.Millisecond + 100*time.Millisecond}, // two holds
		{ms(0, 10), ms(0), 0}, // a refusal no acceptance followed holds nothing countable
	} {
		if got := pausedByRefusals(c.arrivals, c.accepted); got != c.want {
			t.Errorf("pausedByRefusals(%v, %v) = %s, want %s", c.arrivals, c.accepted, got, c.want)
		}
	}
}
