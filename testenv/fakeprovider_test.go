package testenv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
)

func newFakeClock() *testenv.Clock {
	return testenv.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
}

// poster sends webhook requests to a fake provider.
type poster struct {
	t      *testing.T
	url    string
	client *http.Client
}

func newPoster(t *testing.T, f *testenv.Fake) *poster {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &poster{t: t, url: f.URL(), client: &http.Client{Transport: tr}}
}

type reply struct {
	status     int
	retryAfter string
	body       string
	err        error
}

// post sends one job with id, the way the webhook provider does.
func (p *poster) post(ctx context.Context, id string) reply {
	body := fmt.Sprintf(`{"id":%q,"user_id":"u1","channel":"sms","to":"+447700900123","body":"hi"}`, id)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, strings.NewReader(body))
	if err != nil {
		p.t.Fatalf("new request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", id)
	return p.do(req)
}

func (p *poster) do(req *http.Request) reply {
	resp, err := p.client.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(b)}
}

func (p *poster) expect(id string, status int) reply {
	p.t.Helper()
	r := p.post(context.Background(), id)
	if r.err != nil || r.status != status {
		p.t.Fatalf("post %s: got status %d err %v, want %d", id, r.status, r.err, status)
	}
	return r
}

func TestFakeContractWindowIsExact(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	f := testenv.FakeProvider(t, testenv.WithContract(3), testenv.WithClock(clk.Now))
	p := newPoster(t, f)

	for i := range 3 {
		p.expect(fmt.Sprintf("a%d", i), 200)
	}
	clk.Advance(999 * time.Millisecond)
	if r := p.expect("b0", 429); r.retryAfter != "1" {
		t.Fatalf("Retry-After %q, want 1 (the window frees in 1 ms, rounded up)", r.retryAfter)
	}
	clk.Advance(time.Millisecond) // the first three are now exactly 1 s old: out of the window
	for i := range 3 {
		p.expect(fmt.Sprintf("c%d", i), 200)
	}
	p.expect("d0", 429)
	clk.Advance(500 * time.Millisecond)
	p.expect("d1", 429)

	if got := f.Count(200); got != 6 {
		t.Errorf("Count(200) = %d, want 6", got)
	}
	if got := f.Count(429); got != 3 {
		t.Errorf("Count(429) = %d, want 3", got)
	}
	if got := f.MaxInWindow(time.Second); got != 3 {
		t.Errorf("MaxInWindow(1s) = %d, want 3", got)
	}
	if got := f.MaxInWindow(2 * time.Second); got != 6 {
		t.Errorf("MaxInWindow(2s) = %d, want 6", got)
	}
	want := []string{"a0", "a1", "a2", "c0", "c1", "c2"}
	if got := f.AcceptedIDs(); !slices.Equal(got, want) {
		t.Errorf("AcceptedIDs = %v, want %v", got, want)
	}
}

func TestFakeContractRealClockFreesAfterRetryAfter(t *testing.T) {
	t.Parallel()
	f := testenv.FakeProvider(t, testenv.WithContract(2))
	p := newPoster(t, f)

	// Send until the contract answers 429 (at the latest at the third send
	// within one second).
	var limited reply
	for i := 0; limited.status != 429; i++ {
		limited = p.post(context.Background(), fmt.Sprintf("j%d", i))
		if limited.err != nil || (limited.status != 200 && limited.status != 429) {
			t.Fatalf("post: %d %v", limited.status, limited.err)
		}
	}
	if limited.retryAfter != "1" {
		t.Fatalf("Retry-After %q, want 1", limited.retryAfter)
	}
	testenv.WaitFor(t, 3*time.Second, "a send accepted once the window frees", func() bool {
		return p.post(context.Background(), "late").status == 200
	})
	if got := f.MaxInWindow(time.Second); got > 2 {
		t.Fatalf("MaxInWindow(1s) = %d over a contract of 2", got)
	}
}

func TestFakeInjections(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	f := testenv.FakeProvider(t, testenv.WithContract(100), testenv.WithClock(clk.Now))
	p := newPoster(t, f)

	f.FailNext(2, 503)
	p.expect("n1", 503)
	p.expect("n2", 503)
	p.expect("n3", 200)

	f.FailFor(time.Second, 400)
	r := p.expect("f1", 400)
	if !strings.Contains(r.body, "injected 400") {
		t.Errorf("400 body %q does not say it was injected", r.body)
	}
	clk.Advance(time.Second)
	p.expect("f2", 200)

	f.RateLimitFor(time.Second, "7")
	if r := p.expect("r1", 429); r.retryAfter != "7" {
		t.Errorf("Retry-After %q, want 7", r.retryAfter)
	}
	clk.Advance(time.Second)
	f.RateLimitFor(time.Second, "")
	if r := p.expect("r2", 429); r.retryAfter != "" {
		t.Errorf("Retry-After %q, want none", r.retryAfter)
	}
	f.Reset()
	p.expect("r3", 200)

	f.FailFor(time.Hour, 500)
	f.FailNext(1, 408)
	p.expect("x1", 408) // FailNext before FailFor
	p.expect("x2", 500)
	f.Reset()
	p.expect("x3", 200)

	if got, want := f.AcceptedIDs(), []string{"n3", "f2", "r3", "x3"}; !slices.Equal(got, want) {
		t.Errorf("AcceptedIDs = %v, want %v", got, want)
	}
	if got, want := f.Count(503)+f.Count(400)+f.Count(429)+f.Count(408)+f.Count(500), 7; got != want {
		t.Errorf("injected failures answered: %d, want %d", got, want)
	}
}

func TestFakeSlowAndHang(t *testing.T) {
	t.Parallel()
	f := testenv.FakeProvider(t)
	p := newPoster(t, f)

	const latency = 200 * time.Millisecond
	f.SlowFor(time.Hour, latency)
	start := time.Now()
	p.expect("slow", 200)
	if took := time.Since(start); took < latency {
		t.Errorf("slow answer after %s, want at least %s", took, latency)
	}

	// A slow request whose client gives up is still accepted by the
	// provider: the ambiguous case idempotency keys exist for.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	r := p.post(ctx, "gave-up")
	cancel()
	if !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("slow post with a short deadline: %v, want deadline exceeded", r.err)
	}
	f.Reset()

	f.HangFor(time.Hour)
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	r = p.post(ctx, "hung")
	cancel()
	if !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("hung post: %v, want deadline exceeded", r.err)
	}
	f.Reset()
	p.expect("after", 200)

	if got := f.Count(0); got != 1 {
		t.Errorf("Count(0) (held) = %d, want 1", got)
	}
	if got, want := f.AcceptedIDs(), []string{"slow", "gave-up", "after"}; !slices.Equal(got, want) {
		t.Errorf("AcceptedIDs = %v, want %v", got, want)
	}
}

// TestFakeAcceptThenHang: the request is accepted and recorded, and its
// answer never comes; the client cannot tell it from a lost request.
func TestFakeAcceptThenHang(t *testing.T) {
	t.Parallel()
	clk := newFakeClock() // the contract's window does not move while the client waits
	f := testenv.FakeProvider(t, testenv.WithContract(1), testenv.WithClock(clk.Now))
	p := newPoster(t, f)
	f.AcceptThenHang(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	r := p.post(ctx, "taken")
	cancel()
	if !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("accepted, then held: %v, want deadline exceeded", r.err)
	}
	if got := f.AcceptedIDs(); !slices.Equal(got, []string{"taken"}) {
		t.Errorf("AcceptedIDs = %v, want [taken]", got)
	}
	if f.Count(200) != 1 || f.Count(0) != 0 || f.MaxInWindow(time.Second) != 1 {
		t.Errorf("Count(200) = %d, Count(0) = %d, MaxInWindow = %d: want it counted as accepted",
			f.Count(200), f.Count(0), f.MaxInWindow(time.Second))
	}
	f.Reset()
	// It counted toward the contract of 1 per second.
	p.expect("over", 429)
}

func TestFakeHangEndsWhenClosed(t *testing.T) {
	t.Parallel()
	f := testenv.FakeProvider(t)
	p := newPoster(t, f)
	f.HangFor(time.Hour)
	done := make(chan reply, 1)
	go func() { done <- p.post(context.Background(), "held") }()
	testenv.WaitFor(t, 5*time.Second, "the request to arrive", func() bool { return len(f.Requests()) == 1 })
	f.Close()
	if r := <-done; r.err == nil {
		t.Fatalf("held request answered %d after Close, want a connection error", r.status)
	}
	if r := p.post(context.Background(), "after-close"); !errors.Is(r.err, syscall.ECONNREFUSED) {
		t.Fatalf("post after Close: %v, want connection refused", r.err)
	}
}

func TestFakeRecordsRequests(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	f := testenv.FakeProvider(t, testenv.WithClock(clk.Now))
	p := newPoster(t, f)

	p.expect("job-1", 200)
	clk.Advance(time.Minute)
	// No Idempotency-Key: the id comes from the body.
	req, _ := http.NewRequest(http.MethodPost, f.URL(), strings.NewReader(`{"id":"job-2"}`))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	if r := p.do(req); r.status != 200 {
		t.Fatalf("post without Idempotency-Key: %d %v", r.status, r.err)
	}
	p.expect("job-1", 200)

	// Protocol violations are answered and recorded, never accepted.
	get, _ := http.NewRequest(http.MethodGet, f.URL(), nil)
	text, _ := http.NewRequest(http.MethodPost, f.URL(), strings.NewReader(`{"id":"t"}`))
	text.Header.Set("Content-Type", "text/plain")
	bad, _ := http.NewRequest(http.MethodPost, f.URL(), strings.NewReader(`{"id":`))
	bad.Header.Set("Content-Type", "application/json")
	huge, _ := http.NewRequest(http.MethodPost, f.URL(), bytes.NewReader(make([]byte, 2<<20)))
	huge.Header.Set("Content-Type", "application/json")
	for req, want := range map[*http.Request]int{get: 405, text: 415, bad: 400, huge: 413} {
		if r := p.do(req); r.status != want {
			t.Errorf("%s %s: status %d %v, want %d", req.Method, req.Header.Get("Content-Type"), r.status, r.err, want)
		}
	}

	reqs := f.Requests()
	if len(reqs) != 7 {
		t.Fatalf("Requests() has %d, want 7", len(reqs))
	}
	first := reqs[0]
	if first.ID != "job-1" || first.Method != "POST" || first.Path != "/send" || first.Status != 200 ||
		!first.At.Equal(newFakeClock().Now()) || first.Header.Get("Idempotency-Key") != "job-1" ||
		!strings.Contains(string(first.Body), `"to":"+447700900123"`) {
		t.Errorf("first request recorded as %+v", first)
	}
	if reqs[1].ID != "job-2" || !reqs[1].At.Equal(newFakeClock().Now().Add(time.Minute)) {
		t.Errorf("second request: id %q at %s, want job-2 a minute later", reqs[1].ID, reqs[1].At)
	}
	if got := len(f.Accepted()); got != 3 {
		t.Errorf("Accepted() has %d, want 3", got)
	}
	if got := f.Duplicates(); !slices.Equal(got, []string{"job-1"}) {
		t.Errorf("Duplicates() = %v, want [job-1]", got)
	}
}

func TestFakeMaxInWindow(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	f := testenv.FakeProvider(t, testenv.WithClock(clk.Now))
	p := newPoster(t, f)
	// Accepted at 0, 0.5, 0.9, 1.0, 1.4 s.
	for i, step := range []time.Duration{0, 500, 400, 100, 400} {
		clk.Advance(step * time.Millisecond)
		p.expect(fmt.Sprint(i), 200)
	}
	for window, want := range map[time.Duration]int{
		time.Second:            4, // 0.5 0.9 1.0 1.4
		900 * time.Millisecond: 3, // 0.5 0.9 1.0 (1.4-0.5 = 0.9 is not inside [0.5, 1.4))
		time.Millisecond:       1,
		time.Hour:              5,
		0:                      0,
	} {
		if got := f.MaxInWindow(window); got != want {
			t.Errorf("MaxInWindow(%s) = %d, want %d", window, got, want)
		}
	}
}

// TestFakeArrivalsCountEveryAnswer: every request past the protocol checks
// is an arrival, whatever it was answered; protocol refusals are not.
// MaxInWindow, which counts only accepted requests, cannot see the requests
// the contract refused.
func TestFakeArrivalsCountEveryAnswer(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	start := clk.Now()
	f := testenv.FakeProvider(t, testenv.WithContract(3), testenv.WithClock(clk.Now))
	p := newPoster(t, f)

	// Protocol refusals: no send attempt, no arrival.
	req, _ := http.NewRequest(http.MethodGet, f.URL(), nil)
	if r := p.do(req); r.status != 405 {
		t.Fatalf("GET: %d %v", r.status, r.err)
	}
	req, _ = http.NewRequest(http.MethodPost, f.URL(), strings.NewReader("not json"))
	req.Header.Set("Content-Type", "application/json")
	if r := p.do(req); r.status != 400 {
		t.Fatalf("bad body: %d %v", r.status, r.err)
	}

	for i := range 3 {
		p.expect(fmt.Sprintf("a%d", i), 200)
	}
	p.expect("over", 429) // the contract's refusal
	f.FailNext(1, 503)
	p.expect("failed", 503)
	clk.Advance(100 * time.Millisecond)
	f.HangFor(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if r := p.post(ctx, "held"); r.err == nil {
		t.Fatalf("held request answered %d", r.status)
	}
	cancel()
	f.Reset()

	want := []time.Time{start, start, start, start, start, start.Add(100 * time.Millisecond)}
	if got := f.Arrivals(); !slices.Equal(got, want) {
		t.Errorf("Arrivals = %v, want %v", got, want)
	}
	if got := f.MaxInWindow(time.Second); got != 3 {
		t.Errorf("MaxInWindow(1s) = %d, want 3 (accepted only)", got)
	}
	for _, c := range []struct {
		window, budget time.Duration
		want           int
	}{
		{time.Second, 0, 6},
		{time.Second, 899 * time.Millisecond, 6}, // [0, 101 ms) holds the held one at 100 ms too
		{time.Second, 900 * time.Millisecond, 5}, // [0, 100 ms) is half-open: it does not
		{time.Second, time.Second, 0},            // an empty window
		{time.Second, 2 * time.Second, 0},        // a negative one
		{200 * time.Millisecond, 0, 6},           // the window, not the contract's 1 s, is what counts
	} {
		if got := f.MaxArrivalsInWindow(c.window, c.budget); got != c.want {
			t.Errorf("MaxArrivalsInWindow(%s, %s) = %d, want %d", c.window, c.budget, got, c.want)
		}
	}
}

// TestFakeMaxArrivalsInWindowSeesWhatTheContractRefused is the pacing check
// the accepted-only count could not fail: five sends inside one second to a
// fake enforcing 4/s are one over the contract, and only the arrivals say
// so. A jitter budget forgives exactly the lateness it allows: slots 250 ms
// apart, the first arriving 20 ms late, fit the contract in every window
// shortened by 20 ms, and not by 19 ms.
func TestFakeMaxArrivalsInWindowSeesWhatTheContractRefused(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	f := testenv.FakeProvider(t, testenv.WithContract(4), testenv.WithClock(clk.Now))
	p := newPoster(t, f)

	// Slots at 0, 250, 500, 750 and 1000 ms; the first arrives 20 ms late,
	// so the fifth arrives 980 ms after it and the fake refuses it.
	start := clk.Now()
	for i, at := range []time.Duration{20, 250, 500, 750, 1000} {
		clk.Advance(start.Add(at * time.Millisecond).Sub(clk.Now()))
		want := 200
		if i == 4 {
			want = 429
		}
		p.expect(fmt.Sprint("s", i), want)
	}
	if got := f.MaxInWindow(time.Second); got != 4 {
		t.Errorf("MaxInWindow(1s) = %d, want 4: the refused fifth is not counted", got)
	}
	if got := f.MaxArrivalsInWindow(time.Second, 0); got != 5 {
		t.Errorf("MaxArrivalsInWindow(1s, 0) = %d, want 5: the refused fifth arrived", got)
	}
	if got := f.MaxArrivalsInWindow(time.Second, 20*time.Millisecond); got != 4 {
		t.Errorf("MaxArrivalsInWindow(1s, 20ms) = %d, want 4: a 20 ms budget covers 20 ms of lateness", got)
	}
	if got := f.MaxArrivalsInWindow(time.Second, 19*time.Millisecond); got != 5 {
		t.Errorf("MaxArrivalsInWindow(1s, 19ms) = %d, want 5: a 19 ms budget does not", got)
	}
}

func TestFakeConcurrentUse(t *testing.T) {
	t.Parallel()
	f := testenv.FakeProvider(t)
	p := newPoster(t, f)
	const workers, each = 16, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if r := p.post(context.Background(), fmt.Sprintf("w%d-%d", w, i)); r.status != 200 {
					t.Errorf("post: %d %v", r.status, r.err)
				}
			}
		})
	}
	wg.Go(func() { // queries and injections while requests arrive
		for range 50 {
			f.Requests()
			f.MaxInWindow(time.Second)
			f.Duplicates()
			f.Count(200)
			f.SlowFor(0, 0)
			f.Reset()
		}
	})
	wg.Wait()
	ids := f.AcceptedIDs()
	if len(ids) != workers*each {
		t.Fatalf("accepted %d, want %d", len(ids), workers*each)
	}
	if d := f.Duplicates(); len(d) != 0 {
		t.Fatalf("duplicates %v", d)
	}
	reqs := f.Requests()
	for i := 1; i < len(reqs); i++ {
		if reqs[i].At.Before(reqs[i-1].At) {
			t.Fatalf("arrival times out of order at %d", i)
		}
	}
}
