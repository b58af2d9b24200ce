package dispatch

import (
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/testenv"
)

// TestProviderBudgetPausesBeforeA429: a provider that advertises its
// allowance (X-RateLimit-Remaining/-Reset, 20 requests per 2 s window) far
// below the configured 100/s contract. Two dispatchers pause it fleet-wide
// when an answer says none is left, until the window resets: no request
// meets a 429, and every job is sent once.
func TestProviderBudgetPausesBeforeA429(t *testing.T) {
	measures(t)
	b := setup(t, setupOpts{rate: 100})
	b.fake = testenv.FakeProvider(t, testenv.WithBudget(20, 2*time.Second))
	b.pcfgs[0].URL = b.fake.URL()
	ids := b.publishN("budget", "sms", 60, 60)
	b.start(func(o *Options) { o.Workers = 8 })
	b.start(func(o *Options) { o.Workers = 8 })
	testenv.WaitFor(t, 30*time.Second, "every job sent", func() bool { return len(b.fake.AcceptedIDs()) >= len(ids) })
	reqs := b.fake.Requests()
	t.Logf("%d requests for %d jobs over %s", len(reqs), len(ids), reqs[len(reqs)-1].At.Sub(reqs[0].At).Round(time.Millisecond))
	if n := b.fake.Count(http.StatusTooManyRequests); n > 0 {
		t.Errorf("the provider answered 429 %d times, want none: its headers said when its allowance was spent", n)
	}
	b.acceptedOnce(ids)
}

// TestFailoverWhenThePrimaryRefusesConnections: the SMS gateway refuses
// every connection; its breaker opens after breakerTrip failures and every
// job goes to the fallback (providers[].fallback) under the fallback's
// contract: each sent once, through the fallback only.
func TestFailoverWhenThePrimaryRefusesConnections(t *testing.T) {
	waits(t)
	fallback := testenv.FakeProvider(t, testenv.WithContract(200))
	b := setup(t, setupOpts{rate: 200, extra: []providers.Config{{
		Name: "sms-b", Channel: "sms", Kind: "webhook", URL: fallback.URL(),
		Rate: 200, MaxQueueDelay: 2 * time.Second, Timeout: 2 * time.Second,
	}}})
	b.pcfgs[0].URL = fmt.Sprintf("http://127.0.0.1:%d/send", testenv.FreePort(t)) // nothing listens
	b.pcfgs[0].Fallback = "sms-b"
	b.pcfgs[3] = b.pcfgs[3].WithDefaults()
	ids := b.publishN("fo", "sms", 60, 60)
	p := b.start(nil)
	testenv.WaitFor(t, 30*time.Second, "every job sent through the fallback", func() bool { return len(fallback.AcceptedIDs()) >= len(ids) })
	(&bundle{t: t, fake: fallback}).acceptedOnce(ids)
	if n := len(b.fake.Requests()); n != 0 {
		t.Errorf("the old fake got %d requests", n)
	}
	if got := p.count(p.d.m.Failovers.WithLabelValues("sms-gw", "sms-b", FailoverCircuitOpen)); got < 1 {
		t.Errorf("failovers counted %v, want at least 1", got)
	}
	if dl := b.deadLetters(); len(dl) != 0 {
		t.Errorf("%d jobs dead-lettered, want none: %+v", len(dl), dl[0])
	}
}

// TestExpiredBeforeItsSlotIsSuppressedAtOnce: a job whose expires_at (1 s
// ahead) comes before the earliest slot its provider's queue can give
// (another fleet filled it with 10 s of sends) is suppressed as expired at
// once, not after waiting for a slot; with a fallback it goes there and is
// sent instead.
func TestExpiredBeforeItsSlotIsSuppressedAtOnce(t *testing.T) {
	group(t)
	for _, withFallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("fallback=%v", withFallback), func(t *testing.T) {
			measures(t)
			fallback := testenv.FakeProvider(t)
			// The fallback's queue starts cold (no horizon keeper here):
			// its first slot is max_queue_delay ahead, well within 1 s.
			b := setup(t, setupOpts{rate: 10, extra: []providers.Config{{
				Name: "sms-b", Channel: "sms", Kind: "webhook", URL: fallback.URL(),
				Rate: 100, MaxQueueDelay: 300 * time.Millisecond, Timeout: 2 * time.Second,
			}}})
			if withFallback {
				b.pcfgs[0].Fallback = "sms-b"
			}
			b.pcfgs[3] = b.pcfgs[3].WithDefaults()
			// Another fleet's 100 sends at 10/s: the queue ends 10 s ahead.
			b.fillQueue("sms-gw", 100)
			p := b.start(nil)
			testenv.WaitFor(t, 10*time.Second, "the dispatcher ready", func() bool { return p.d.Ready() == nil })
			j := newJob("soon-stale", "sms", "u1")
			j.ExpiresAt = time.Now().Add(time.Second)
			start := time.Now()
			b.publish(j)
			if withFallback {
				testenv.WaitFor(t, 5*time.Second, "the job sent through the fallback", func() bool { return len(fallback.AcceptedIDs()) == 1 })
				if got := p.count(p.d.m.Failovers.WithLabelValues("sms-gw", "sms-b", FailoverDeadline)); got != 1 {
					t.Errorf("deadline failovers %v, want 1", got)
				}
				return
			}
			testenv.WaitFor(t, 5*time.Second, "the job suppressed", func() bool { return len(b.deadLetters()) == 1 })
			took := time.Since(start)
			dl := b.deadLetters()[0]
			t.Logf("suppressed %s after its publish: %s", took.Round(time.Millisecond), dl.Detail)
			if dl.Reason != ledger.ReasonExpired || !strings.Contains(dl.Detail, "earliest send slot") {
				t.Errorf("dead letter %s: %s, want expired before the earliest slot", dl.Reason, dl.Detail)
			}
			if took >= time.Second {
				t.Errorf("suppressed %s after its publish, want before its expires_at (1 s): at once, without waiting for a slot", took.Round(time.Millisecond))
			}
			if n := len(b.fake.Requests()) + len(fallback.Requests()); n != 0 {
				t.Errorf("%d requests at the providers, want none", n)
			}
		})
	}
}

// TestQuotaExactThroughTheDispatcher: a quota of 100 per 4 s window beside
// a 100/s contract, two dispatchers, 260 jobs. Every window of the quota
// (epoch-aligned, on the Redis clock) has at most 100 sends, and every one
// but the last exactly 100 although a 429 paused the provider for 1 s in
// the second (the slots given up at the pause return their units); the
// jobs over it wait in JetStream and are sent in later windows, each once.
// With a fallback the jobs over the quota go there at once instead.
func TestQuotaExactThroughTheDispatcher(t *testing.T) {
	group(t)
	limit, per, jobs, wait := 100, 4*time.Second, 260, 60*time.Second
	if os.Getenv("NOTIFIER_QUOTA_MINUTE") != "" {
		// The README's scenario: 500 a minute beside 100/s.
		limit, per, jobs, wait = 500, time.Minute, 700, 3*time.Minute
	}
	for _, withFallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("fallback=%v", withFallback), func(t *testing.T) {
			measures(t)
			fallback := testenv.FakeProvider(t)
			b := setup(t, setupOpts{rate: 100, maxQueueDelay: 300 * time.Millisecond, extra: []providers.Config{{
				Name: "sms-b", Channel: "sms", Kind: "webhook", URL: fallback.URL(),
				Rate: 200, MaxQueueDelay: 300 * time.Millisecond, Timeout: 2 * time.Second,
			}}})
			b.pcfgs[0].Quotas = []providers.QuotaConfig{{Limit: int64(limit), Per: per}}
			if withFallback {
				b.pcfgs[0].Fallback = "sms-b"
			}
			b.pcfgs[3] = b.pcfgs[3].WithDefaults()
			ids := b.publishN("quota", "sms", jobs, jobs)
			b.start(nil)
			b.start(nil)
			all := func() []string { return append(b.fake.AcceptedIDs(), fallback.AcceptedIDs()...) }
			if !withFallback {
				// A 429 (Retry-After: 1) early in the second window: the
				// jobs waiting for their slots meet the pause there and give
				// the slots up, units that must go back to the window (or it
				// could not be used in full: 1 s of pause and the window's
				// rest still fit in its 4 s).
				testenv.WaitFor(t, wait, "20 sends into the second quota window", func() bool {
					perWindow := map[int64]int{}
					for _, s := range b.slots.of("sms-gw") {
						perWindow[s.at/per.Microseconds()] += s.cost
					}
					var ws []int64
					for w := range perWindow {
						ws = append(ws, w)
					}
					sort.Slice(ws, func(i, j int) bool { return ws[i] < ws[j] })
					return len(ws) >= 2 && perWindow[ws[1]] >= 20
				})
				b.fake.RateLimitFor(30*time.Millisecond, "1")
			}
			testenv.WaitFor(t, wait, "every job sent", func() bool { return len(all()) >= len(ids) })
			got := map[string]int{}
			for _, id := range all() {
				got[id]++
			}
			for _, id := range ids {
				if got[id] != 1 {
					t.Fatalf("job %s sent %d times, want once", id, got[id])
				}
			}
			perWindow := map[int64]int{}
			for _, s := range b.slots.of("sms-gw") {
				perWindow[s.at/per.Microseconds()] += s.cost
			}
			var windows []int64
			for w, n := range perWindow {
				windows = append(windows, w)
				if n > limit {
					t.Errorf("quota window %d: %d sends, more than the quota's %d", w, n, limit)
				}
			}
			sort.Slice(windows, func(i, j int) bool { return windows[i] < windows[j] })
			t.Logf("sends per quota window at sms-gw: %v (windows %v); at the fallback %d", perWindow, windows, len(fallback.AcceptedIDs()))
			if withFallback {
				if n := len(b.fake.AcceptedIDs()); n > limit*len(windows) || len(fallback.AcceptedIDs()) == 0 {
					t.Errorf("primary sent %d, fallback %d: want the jobs over the quota at the fallback", n, len(fallback.AcceptedIDs()))
				}
				return
			}
			// The first window may be cut short by when sending began, the
			// last holds what was left; each one between, and at least one,
			// is used in full.
			full := 0
			for i, w := range windows {
				if perWindow[w] == limit {
					full++
				} else if i > 0 && i < len(windows)-1 {
					t.Errorf("quota window %d holds %d sends, want the quota's %d", w, perWindow[w], limit)
				}
			}
			if len(windows) < 2 || full == 0 {
				t.Errorf("sends per window %v: want the quota's %d in a full window, the rest waiting for the next", perWindow, limit)
			}
		})
	}
}

// of is a copy of the slots of provider's sends.
func (l *slotLog) of(provider string) []sentSlot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sentSlot(nil), l.m[provider]...)
}

// adaptiveRun sends jobs jobs through two dispatchers to a provider
// configured at 100/s whose real limit is 60/s (the fake answers 429 with
// Retry-After above it), adaptive as given, and returns the 429s among the
// requests after the first 10 s, the requests then, and the accepted rate
// then; and the reference measured first on the same dispatchers: 300 push
// jobs to the same fake through push-gw configured at the real 60/s, not
// adaptive (referenceRate).
func adaptiveRun(t *testing.T, jobs int, adaptive *providers.AdaptiveConfig) (n429, reqs int, rate, ref float64) {
	b := setup(t, setupOpts{rate: 100, contract: 60})
	b.pcfgs[0].Adaptive = adaptive
	b.pcfgs[0] = b.pcfgs[0].WithDefaults()
	b.pcfgs[1].Rate = 60
	b.start(nil)
	b.start(nil)
	refIDs, ref := b.referenceRate(b.fake, "ref", "push", 300)
	ids := b.publishN("adaptive", "sms", jobs, jobs)
	testenv.WaitFor(t, 120*time.Second, "every job sent", func() bool { return len(b.fake.AcceptedIDs()) >= len(ids)+len(refIDs) })
	b.acceptedOnce(append(refIDs, ids...))
	var all []testenv.FakeRequest
	for _, r := range b.fake.Requests() {
		if strings.HasPrefix(r.ID, "adaptive-") {
			all = append(all, r)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].At.Before(all[j].At) })
	from := all[0].At.Add(10 * time.Second)
	var first, last time.Time
	accepted := 0
	for _, r := range all {
		if r.At.Before(from) {
			continue
		}
		reqs++
		switch r.Status {
		case http.StatusTooManyRequests:
			n429++
		case http.StatusOK:
			if first.IsZero() {
				first = r.At
			}
			last, accepted = r.At, accepted+1
		}
	}
	if accepted > 1 {
		rate = float64(accepted-1) / last.Sub(first).Seconds()
	}
	perSecond := make([]int, int(all[len(all)-1].At.Sub(all[0].At)/time.Second)+1)
	for _, r := range all {
		if r.Status == http.StatusOK {
			perSecond[int(r.At.Sub(all[0].At)/time.Second)]++
		}
	}
	t.Logf("accepted per second from the first request: %v", perSecond)
	return n429, reqs, rate, ref
}

// TestAdaptiveContractFindsTheRealLimit: a provider configured at 100/s
// whose real limit is 60/s (429 with Retry-After: 1 over it), two
// dispatchers, adaptive with every default but min_rate 10 (issue 27's
// set-up: AIMD with those defaults paced it at 42.6/s). After the first
// 10 s the 429s are at most 1 % of the requests and the fleet sustains at
// least 85 % of what the same dispatchers reach first, in the same run,
// configured at the real 60/s without adaptive (the reference). (The
// search may still meet the limit after 10 s: a loaded CI run under -race
// saw 429s at 8–17 s and 0.87 of the reference; each costs the Retry-After
// second and a ramp back, which a 24 s window cannot average out.)
// The promise, 95 %, is measured over a longer run:
// NOTIFIER_ADAPTIVE_JOBS=3000 NOTIFIER_ADAPTIVE_COMPARE=1 runs the
// README's figures (58.0/s), with adaptive off beside it.
func TestAdaptiveContractFindsTheRealLimit(t *testing.T) {
	measures(t)
	jobs := 2000
	if v, err := strconv.Atoi(os.Getenv("NOTIFIER_ADAPTIVE_JOBS")); err == nil && v > 0 {
		jobs = v // the README's figures: 3000
	}
	on429, onReqs, onRate, ref := adaptiveRun(t, jobs, &providers.AdaptiveConfig{MinRate: 10})
	t.Logf("%d jobs, after the first 10 s: adaptive on: %d 429s in %d requests (%.1f %%), %.1f/s of the real 60/s (%.2f of the %.1f/s configured at 60/s reached first)",
		jobs, on429, onReqs, 100*float64(on429)/float64(onReqs), onRate, onRate/ref, ref)
	if os.Getenv("NOTIFIER_ADAPTIVE_COMPARE") != "" {
		off429, offReqs, offRate, _ := adaptiveRun(t, jobs, nil)
		t.Logf("adaptive off: %d 429s in %d requests (%.1f %%), %.1f/s", off429, offReqs, 100*float64(off429)/float64(offReqs), offRate)
	}
	if float64(on429) > 0.01*float64(onReqs) {
		t.Errorf("adaptive: %d 429s in %d requests after the first 10 s, want at most 1 %%", on429, onReqs)
	}
	// 95 % is the promise, measured in the README (3,000 jobs, no race
	// detector: the first seconds after 10 s still weigh here); the test
	// leaves room for them, against a reference that a loaded machine and
	// the race detector slow alike.
	atLeastShareOf(t, "adaptive, sustained", onRate, ref, 60, 0.85)
}

// fillQueue reserves n slots of provider's queue at 10/s in Redis, as
// another fleet's sends would: a queue that starts now (no cold start)
// and ends n/10 s ahead.
func (b *bundle) fillQueue(provider string, n int) {
	b.t.Helper()
	q := leakyRedis(b.t, b.redis.Client(), b.prefix)
	var now time.Duration // a first start: the queue begins at now
	for range n {
		if _, err := q.Reserve(b.t.Context(), provider, leaky.Contract{Rate: 10, MaxQueueDelay: time.Minute, ColdStart: &now}, 1); err != nil {
			b.t.Fatal(err)
		}
	}
}

// TestExpiredBeforeAGrantedSlotIsSuppressedAtOnce: the slot the queue
// grants may lie inside max_queue_delay and still after the job's
// expires_at: the job is then suppressed (expired) at once, never sent
// late. (An audit that made the deadline check use the time of the call
// instead of the slot saw a job expiring in 400 ms sent 582 ms after its
// expires_at, and no test fail.)
func TestExpiredBeforeAGrantedSlotIsSuppressedAtOnce(t *testing.T) {
	measures(t)
	b := setup(t, setupOpts{rate: 10, maxQueueDelay: 5 * time.Second})
	// Another fleet's 20 sends at 10/s: the queue ends 2 s ahead, well
	// within max_queue_delay: the next reservation is granted, 2 s on.
	b.fillQueue("sms-gw", 20)
	p := b.start(nil)
	testenv.WaitFor(t, 10*time.Second, "the dispatcher ready", func() bool { return p.d.Ready() == nil })
	j := newJob("stale-in-400ms", "sms", "u1")
	j.ExpiresAt = time.Now().Add(400 * time.Millisecond)
	start := time.Now()
	b.publish(j)
	testenv.WaitFor(t, 5*time.Second, "the job suppressed", func() bool { return len(b.deadLetters()) == 1 })
	took := time.Since(start)
	dl := b.deadLetters()[0]
	t.Logf("suppressed %s after its publish: %s", took.Round(time.Millisecond), dl.Detail)
	if dl.Reason != ledger.ReasonExpired || !strings.Contains(dl.Detail, "earliest send slot") {
		t.Errorf("dead letter %s: %s, want expired before its granted slot", dl.Reason, dl.Detail)
	}
	if took >= 400*time.Millisecond {
		t.Errorf("suppressed %s after its publish, want at once, before its expires_at (400 ms)", took.Round(time.Millisecond))
	}
	time.Sleep(2500 * time.Millisecond) // past the slot it was granted
	if n := len(b.fake.Requests()); n != 0 {
		t.Errorf("%d requests at the provider, want none (the job expired before its slot)", n)
	}
}
