package testenv

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/notifier/notifier/internal/localenv"
)

// FakeOption configures a fake provider.
type FakeOption func(*Fake)

// WithContract makes the fake enforce a rate contract: at most n accepted
// requests in any trailing 1 s window. A request over it is answered 429 with
// Retry-After set to the whole seconds (rounded up) until the window frees.
// 0 (the default) is no contract.
func WithContract(n int) FakeOption {
	return func(f *Fake) { f.contract = n }
}

// WithClock replaces the clock the fake stamps arrivals with and measures its
// contract window and injection periods against (default time.Now).
// Latency injected with SlowFor is real time either way.
func WithClock(now func() time.Time) FakeOption {
	return func(f *Fake) { f.now = now }
}

// FakeRequest is one request the fake provider received.
type FakeRequest struct {
	At     time.Time   // when it arrived, by the fake's clock
	ID     string      // the body's "id" (the job's id within its tenant), or else the Idempotency-Key
	Key    string      // the Idempotency-Key header's key (unique across tenants), or else the body's "id"
	Method string      // HTTP method
	Path   string      // URL path
	Header http.Header // request headers
	Body   []byte      // request body (at most 1 MiB is read)
	// Status is what the fake answered (or, for a SlowFor request whose
	// client gave up before the answer, or an AcceptThenHang request, decided
	// to answer: the request was accepted as a real provider would have). 0
	// for a request held by HangFor, which is never answered.
	Status int
}

// Fake is a fake notification provider: an HTTP server speaking the webhook
// protocol (SPEC §7) that enforces a rate contract, records every request
// and can be told to misbehave for a while. Its methods are safe for
// concurrent use.
//
// A request is checked, in this order: the protocol (POST, Content-Type
// application/json, a JSON object body: 405, 415, 413 or 400 otherwise);
// HangFor (held, never answered, until the client gives up); AcceptThenHang
// (accepted, then held the same way); FailNext;
// FailFor; RateLimitFor; the contract; then it is accepted with 200. SlowFor
// delays whatever answer was decided. Only 2xx answers are accepted and only
// they count toward the contract (and MaxInWindow); every request past the
// protocol checks, whatever its answer, is an arrival (Arrivals,
// MaxArrivalsInWindow), which is what a pacing check counts.
type Fake struct {
	// faultState holds the injected faults, the contract and the acceptance
	// times, shared with the service fakes; its mu also guards requests and
	// accepted below. FailNext, FailFor, RateLimitFor, SlowFor, HangFor,
	// AcceptThenHang, Reset, MaxInWindow, Arrivals and MaxArrivalsInWindow
	// are its.
	*faultState
	srv     *httptest.Server
	closing chan struct{}
	close   sync.Once

	requests []FakeRequest
	accepted []int // indexes into requests, in order of acceptance

	// The allowance of WithBudget: budget requests a window of
	// budgetWindow, the first window starting at the first request.
	budget       int
	budgetWindow time.Duration
	budgetStart  time.Time
	budgetUsed   int
}

// WithBudget makes the fake an API with an allowance it advertises, as
// SendGrid or GitHub do: at most limit requests are accepted in each
// window (the first starts at the first request), every answer carries
// X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (seconds
// until the window ends, rounded up), and a request over the allowance is
// answered 429 with Retry-After.
func WithBudget(limit int, window time.Duration) FakeOption {
	return func(f *Fake) { f.budget, f.budgetWindow = limit, window }
}

// FakeProvider starts a fake provider on a loopback port and closes it when
// the test ends.
func FakeProvider(t testing.TB, opts ...FakeOption) *Fake {
	t.Helper()
	f := &Fake{faultState: &faultState{now: time.Now}, closing: make(chan struct{})}
	for _, o := range opts {
		o(f)
	}
	if f.contract < 0 {
		t.Fatalf("testenv: fake provider contract %d: must be >= 0", f.contract)
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

// URL is the fake's endpoint, http://127.0.0.1:<port>/send.
func (f *Fake) URL() string { return f.srv.URL + "/send" }

// Close stops the server: held and slow requests are cut off, later
// requests are refused. Safe to call more than once.
func (f *Fake) Close() {
	f.close.Do(func() {
		close(f.closing)
		f.srv.Close()
	})
}

// answer is what the fake decided to do with one request.
type answer struct {
	status     int
	retryAfter string
	body       string
	hold       bool // never answered, not accepted
	withhold   bool // accepted, never answered
	latency    time.Duration
}

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	wr, status, why := localenv.ReadWebhook(r)

	f.mu.Lock()
	now := f.now()
	rec := FakeRequest{At: now, Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: wr.Body, ID: wr.ID, Key: wr.Key}
	a := answer{status: status, body: localenv.ReasonBody(why)}
	if status == 0 {
		a = f.decide(now)
	}
	var budget http.Header
	if f.budget > 0 && a.status != 0 && !a.hold {
		budget = f.spendBudget(now, &a)
	}
	if !a.hold {
		rec.Status = a.status
	}
	f.requests = append(f.requests, rec)
	if a.status >= 200 && a.status <= 299 && !a.hold {
		f.accepted = append(f.accepted, len(f.requests)-1)
		f.acceptedAt = append(f.acceptedAt, now)
	}
	f.mu.Unlock()

	delayAnswer(r, f.closing, a.hold || a.withhold, a.latency)
	w.Header().Set("Content-Type", "application/json")
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	for k, v := range budget {
		w.Header()[k] = v
	}
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body)
}

// spendBudget counts an accepted answer against WithBudget's allowance, or
// turns it into a 429 when the window's allowance is spent, and returns the
// headers that advertise what is left. f.mu is held.
func (f *Fake) spendBudget(now time.Time, a *answer) http.Header {
	if f.budgetStart.IsZero() {
		f.budgetStart = now
	}
	for now.Sub(f.budgetStart) >= f.budgetWindow {
		f.budgetStart, f.budgetUsed = f.budgetStart.Add(f.budgetWindow), 0
	}
	reset := f.budgetStart.Add(f.budgetWindow).Sub(now)
	secs := strconv.FormatInt(int64((reset+time.Second-1)/time.Second), 10)
	if a.status >= 200 && a.status <= 299 {
		if f.budgetUsed >= f.budget {
			a.status, a.retryAfter = http.StatusTooManyRequests, secs
			a.body = `{"reason":"allowance spent"}` + "\n"
		} else {
			f.budgetUsed++
		}
	}
	return http.Header{
		"X-Ratelimit-Limit":     {strconv.Itoa(f.budget)},
		"X-Ratelimit-Remaining": {strconv.Itoa(f.budget - f.budgetUsed)},
		"X-Ratelimit-Reset":     {secs},
	}
}

// decide picks the answer to a request that passed the protocol checks,
// arriving at now. f.mu is held.
func (f *Fake) decide(now time.Time) answer {
	var a answer
	v := f.faultState.decide(now)
	switch {
	case v.hold:
		a.hold = true
		return a
	case v.status != 0:
		a.status, a.retryAfter, a.body = v.status, v.retryAfter, localenv.ReasonBody(v.why)
		return a
	}
	a.latency, a.withhold = v.latency, v.withhold
	a.status = http.StatusOK
	a.body = `{"status":"accepted"}` + "\n"
	return a
}

// Requests returns every request received so far, in order of arrival. The
// slice is the caller's; the headers and bodies must not be modified.
func (f *Fake) Requests() []FakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]FakeRequest(nil), f.requests...)
}

// Accepted returns the accepted (2xx) requests in order of acceptance.
func (f *Fake) Accepted() []FakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]FakeRequest, len(f.accepted))
	for i, idx := range f.accepted {
		out[i] = f.requests[idx]
	}
	return out
}

// AcceptedIDs returns the job ids of the accepted requests, in order.
func (f *Fake) AcceptedIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, len(f.accepted))
	for i, idx := range f.accepted {
		out[i] = f.requests[idx].ID
	}
	return out
}

// Count returns how many requests were answered with status (0 counts the
// requests held by HangFor).
func (f *Fake) Count(status int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return countStatus(f.requests, status)
}

// Duplicates returns the keys (Idempotency-Key: a job's id within its
// tenant) accepted more than once, each once, in the order their second
// acceptance happened: two tenants' jobs of one id are not duplicates.
func (f *Fake) Duplicates() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]int{}
	var dups []string
	for _, idx := range f.accepted {
		id := f.requests[idx].Key
		seen[id]++
		if seen[id] == 2 {
			dups = append(dups, id)
		}
	}
	return dups
}
