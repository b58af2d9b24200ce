package providers_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/notifier/notifier/providers"
)

// TestProviderRateLimitNeverShorterThanTheBackoff: a provider-wide 429
// pauses at least the kind's backoff (its floor, doubled over a run): a
// Retry-After of 0 or a past date, which paused nothing and sent the fleet
// straight back into 429s, gives the backoff, which goes on doubling over
// a run of them; a longer Retry-After is kept, explicit; a shorter one
// gives the run's backoff.
func TestProviderRateLimitNeverShorterThanTheBackoff(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	retryAfter := "0"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		w.Header().Set("Retry-After", retryAfter)
		mu.Unlock()
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	clock := newClock()
	w, err := providers.NewWebhook(providers.Config{Name: "hooks", Channel: "sms", Kind: "webhook", URL: srv.URL, Rate: 10},
		providers.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	pause := func(what, header string, want time.Duration, explicit bool) {
		t.Helper()
		mu.Lock()
		retryAfter = header
		mu.Unlock()
		err := w.Send(context.Background(), smsMessage())
		var rl *providers.RateLimitedError
		if !errors.As(err, &rl) || rl.Scope != providers.ScopeProvider || rl.RetryAfter != want || rl.Explicit != explicit {
			t.Fatalf("%s (Retry-After: %s): %v, want a provider rate limit of %s, explicit %v", what, header, err, want, explicit)
		}
	}
	pause("a first zero", "0", time.Second, false)
	pause("a request sent during that pause", "0", time.Second, false)
	clock.Advance(time.Second)
	pause("a second zero", "0", 2*time.Second, false)
	clock.Advance(2 * time.Second)
	pause("a past date", "Sun, 06 Nov 1994 08:49:37 GMT", 4*time.Second, false)
	clock.Advance(4 * time.Second)
	pause("a shorter Retry-After", "3", 8*time.Second, false)
	clock.Advance(8 * time.Second)
	pause("a longer Retry-After", "30", 30*time.Second, true)
}
