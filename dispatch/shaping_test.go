package dispatch

import (
	"net/http"
	"testing"
	"time"

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
