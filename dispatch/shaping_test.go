package dispatch

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/testenv"
)

// TestProviderBudgetPausesBeforeA429: a provider that advertises its
// allowance (X-RateLimit-Remaining/-Reset, 20 requests per 2 s window) far
// below the configured 100/s contract. Two dispatchers pause it fleet-wide
// when an answer says none is left, until the window resets: no request
// meets a 429, and every job is sent once.
func TestProviderBudgetPausesBeforeA429(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
	for _, withFallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("fallback=%v", withFallback), func(t *testing.T) {
			t.Parallel()
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
			q := leaky.NewRedis(b.redis.Client(), b.prefix)
			var now time.Duration // a first start: the queue begins at now
			for range 100 {
				if _, err := q.Reserve(t.Context(), "sms-gw", leaky.Contract{Rate: 10, MaxQueueDelay: time.Minute, ColdStart: &now}, 1); err != nil {
					t.Fatal(err)
				}
			}
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
			if dl.Reason != ReasonExpired || !strings.Contains(dl.Detail, "earliest send slot") {
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
