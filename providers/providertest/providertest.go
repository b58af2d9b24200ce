// Package providertest is the conformance suite every HTTP provider kind
// passes: Run points the provider under test at a local server that answers
// each scenario (success, each error class, Retry-After forms, timeouts,
// refused and reset connections, malformed and huge bodies, cancellation)
// and checks that Send maps it to the right class with a safe, one-line
// error text, that a failure is Ambiguous exactly when the request reached
// the server whole and no answer came back (or a gateway's 502 or 504
// did), that under retry_on_timeout: false the transport never resends a
// request, and that only the kind's dead-recipient answers match
// ErrRecipientGone.
//
// The suite speaks plain HTTP statuses; what is particular to a kind's wire
// format (its success body, its refusal body, its own rate-limit codes) is
// given in Target or tested beside the kind. Kinds that speak HTTP/2 over
// TLS only (apns) set Target.ServerTLS. RunSMTP is the same suite for SMTP
// kinds, on a scripted SMTP server.
package providertest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/notifier/notifier/providers"
)

// Reply is one answer of the test server.
type Reply struct {
	Status int
	Header http.Header
	Body   string
}

// Target describes the provider kind under test.
type Target struct {
	// New builds the provider under test, sending to baseURL (the suite's
	// server: every path of it answers the scenario) with the given
	// per-request timeout. It registers its own cleanup.
	New func(t *testing.T, baseURL string, timeout time.Duration) providers.Provider
	// Message returns a fresh message the provider can send.
	Message func() *providers.Message
	// Accepted is the kind's success answer; default 200 with "{}".
	Accepted Reply
	// Refusal is a permanent refusal in the kind's own error format, whose
	// reason RefusalReason must appear in the error text.
	Refusal       Reply
	RefusalReason string
	// Secrets are the credentials New configured: they must never appear
	// in an error text.
	Secrets []string
	// SenderStatuses are the statuses of the suite's permanent refusals
	// (400, 401, 403, 404, 410, 413, 422, with a plain body) the kind
	// classes as ErrSender whatever the body: twilio's 401, its credentials
	// refused. The others must be ErrPermanent.
	SenderStatuses []int
	// ServerTLS, when set, makes every server of the suite speak HTTPS with
	// this configuration, HTTP/2 offered first; New then gets an https base
	// URL and must trust the configuration's certificate.
	ServerTLS *tls.Config
	// NoRetryOnTimeout builds the provider as New does, with
	// retry_on_timeout: false. Nil skips the scenario that needs it.
	NoRetryOnTimeout func(t *testing.T, baseURL string, timeout time.Duration) providers.Provider
	// Gone is the kind's answer naming the recipient as dead, in its own
	// format (an APNs 410 Unregistered, FCM's UNREGISTERED, Twilio's
	// 21610): ErrPermanent and ErrRecipientGone. Nil (Status 0) skips it.
	Gone Reply
	// MinRetry is the least Error.RetryAfter the kind gives a 5xx, as its
	// provider documents how long to wait before retrying (apns: 15
	// minutes); 0 for none.
	MinRetry time.Duration
	// GoneStatuses are the statuses of the suite's permanent refusals
	// (with a plain body) the kind reads as the recipient gone whatever the
	// body: a webhook's 410. No other refusal may match ErrRecipientGone.
	GoneStatuses []int
}

// Run runs the conformance suite against target. Subtests run in parallel,
// each with its own server.
func Run(t *testing.T, target Target) {
	t.Helper()
	if target.Accepted.Status == 0 {
		target.Accepted = Reply{Status: 200, Body: "{}"}
	}
	s := &suite{target: target, tls: target.ServerTLS}
	t.Run("Accepted", s.accepted)
	t.Run("AcceptedWhateverTheBody", s.acceptedBodies)
	t.Run("Permanent", s.permanent)
	t.Run("PermanentCarriesReason", s.permanentReason)
	t.Run("PermanentOddBodies", s.permanentOddBodies)
	t.Run("NoLeakInDetail", s.noLeak)
	t.Run("Transient", s.transient)
	t.Run("RateLimited", s.rateLimited)
	t.Run("Timeout", s.timeout)
	t.Run("ConnectionRefused", s.refused)
	t.Run("ConnectionReset", s.reset)
	t.Run("ContextCanceled", s.canceled)
	t.Run("AmbiguousAfterWrite", s.ambiguous)
	t.Run("NoReplayWithoutRetryOnTimeout", s.noReplay)
	t.Run("RecipientGone", s.gone)
	t.Run("Concurrent", s.concurrent)
}

type suite struct {
	target Target
	tls    *tls.Config // nil: plain HTTP/1.1
}

// server starts a test server answering every request with h and counts the
// requests. Requests' contexts end when the test does, so handlers that hold
// a request never block the server's shutdown.
func (s *suite) server(t *testing.T, h http.HandlerFunc) (string, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h(w, r)
	}))
	ctx, cancel := context.WithCancel(context.Background())
	srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	if s.tls != nil {
		srv.EnableHTTP2 = true
		srv.TLS = s.tls.Clone()
		srv.TLS.NextProtos = []string{"h2", "http/1.1"}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(func() {
		cancel()
		srv.Close()
	})
	return srv.URL, &hits
}

func answer(r Reply) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for k, vs := range r.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(r.Status)
		_, _ = w.Write([]byte(r.Body))
	}
}

// send builds the provider against h and sends one message.
func (s *suite) send(t *testing.T, timeout time.Duration, h http.HandlerFunc) (*atomic.Int32, error) {
	t.Helper()
	url, hits := s.server(t, h)
	p := s.target.New(t, url, timeout)
	return hits, p.Send(context.Background(), s.target.Message())
}

var classes = map[string]error{
	"ErrPermanent":   providers.ErrPermanent,
	"ErrTransient":   providers.ErrTransient,
	"ErrRateLimited": providers.ErrRateLimited,
	"ErrSender":      providers.ErrSender,
}

// wantAmbiguous asserts err's Ambiguous flag: set only on a failure with
// no answer after the request was written whole.
func wantAmbiguous(t *testing.T, err error, want bool) {
	t.Helper()
	var pe *providers.Error
	got := errors.As(err, &pe) && pe.Ambiguous
	if got != want {
		t.Errorf("error %q: Ambiguous = %v, want %v", err, got, want)
	}
}

// checkError asserts err wraps exactly the class want and that its text is
// one printable line free of the recipient, the body and the secrets.
func (s *suite) checkError(t *testing.T, err error, want error) {
	t.Helper()
	if err == nil {
		t.Fatalf("Send returned nil, want %v", want)
	}
	t.Logf("%v: %v", want, err)
	var in []string
	for name, class := range classes {
		if errors.Is(err, class) {
			in = append(in, name)
		}
	}
	if len(in) != 1 || !errors.Is(err, want) {
		t.Fatalf("error %q wraps classes %v, want exactly %v", err, in, want)
	}
	text := err.Error()
	for _, r := range text {
		if !unicode.IsPrint(r) {
			t.Errorf("error text has the unprintable %U: %q", r, text)
			break
		}
	}
	if len(text) > 512 {
		t.Errorf("error text is %d bytes long, want a short line: %.80q…", len(text), text)
	}
	m := s.target.Message()
	leaks := append([]string{m.To, strings.TrimPrefix(m.To, "+"), m.Body}, s.target.Secrets...)
	for _, l := range leaks {
		if len(l) >= 4 && strings.Contains(text, l) {
			t.Errorf("error text %q leaks %q", text, l)
		}
	}
}

func wantStatus(t *testing.T, err error, status int) {
	t.Helper()
	got := 0
	var pe *providers.Error
	var rl *providers.RateLimitedError
	switch {
	case errors.As(err, &rl):
		got = rl.Status
	case errors.As(err, &pe):
		got = pe.Status
	}
	if got != status {
		t.Errorf("error %q carries status %d, want %d", err, got, status)
	}
	class := "error"
	if status != 0 {
		class = strconv.Itoa(status/100) + "xx"
	}
	if got := providers.StatusClass(err); got != class {
		t.Errorf("StatusClass(%q) = %q, want %q", err, got, class)
	}
}

func (s *suite) accepted(t *testing.T) {
	t.Parallel()
	for _, status := range []int{200, 201, 202, 204} {
		r := s.target.Accepted
		r.Status = status
		if status == 204 {
			r.Body = ""
		}
		hits, err := s.send(t, 5*time.Second, answer(r))
		if err != nil {
			t.Errorf("status %d: Send = %v, want nil", status, err)
		}
		if n := hits.Load(); n != 1 {
			t.Errorf("status %d: %d requests, want 1", status, n)
		}
		if got := providers.StatusClass(err); got != "2xx" {
			t.Errorf("StatusClass(nil) = %q, want 2xx", got)
		}
	}
}

func (s *suite) acceptedBodies(t *testing.T) {
	t.Parallel()
	bodies := map[string]string{
		"malformed": "\x00\xff{not json",
		"huge":      strings.Repeat("x", 8<<20),
	}
	for name, body := range bodies {
		if _, err := s.send(t, 5*time.Second, answer(Reply{Status: 200, Body: body})); err != nil {
			t.Errorf("200 with a %s body: Send = %v, want nil", name, err)
		}
	}
	// The status line arrived, then the connection died mid-body.
	_, err := s.send(t, 5*time.Second, s.cut(func(w http.ResponseWriter, rw *bufio.ReadWriter) {
		if rw == nil { // HTTP/2: the stream is reset after the headers
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"na`))
			_ = http.NewResponseController(w).Flush()
			return
		}
		_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{\"na")
		_ = rw.Flush()
	}))
	if err != nil {
		t.Errorf("200 with a truncated body: Send = %v, want nil", err)
	}
}

func (s *suite) permanent(t *testing.T) {
	t.Parallel()
	for _, status := range []int{400, 401, 403, 404, 410, 413, 422} {
		hits, err := s.send(t, 5*time.Second, answer(Reply{Status: status, Body: "nope"}))
		want := providers.ErrPermanent
		if slices.Contains(s.target.SenderStatuses, status) {
			want = providers.ErrSender
		}
		s.checkError(t, err, want)
		wantStatus(t, err, status)
		wantAmbiguous(t, err, false)
		if gone := errors.Is(err, providers.ErrRecipientGone); gone != slices.Contains(s.target.GoneStatuses, status) {
			t.Errorf("status %d with a plain body: recipient gone %v", status, gone)
		}
		if !strings.Contains(err.Error(), strconv.Itoa(status)) {
			t.Errorf("error %q does not name the status %d", err, status)
		}
		if n := hits.Load(); n != 1 {
			t.Errorf("status %d: %d requests, want 1 (no retry inside Send)", status, n)
		}
	}
}

// refusal sends once against a server answering r, the kind's own
// permanent refusal that Target names field, and checks that Send
// returns ErrPermanent; it skips the test when the target has none (Status
// 0).
func (s *suite) refusal(t *testing.T, r Reply, field string) error {
	t.Helper()
	if r.Status == 0 {
		t.Skip("target has no " + field)
	}
	_, err := s.send(t, 5*time.Second, answer(r))
	s.checkError(t, err, providers.ErrPermanent)
	return err
}

func (s *suite) permanentReason(t *testing.T) {
	t.Parallel()
	err := s.refusal(t, s.target.Refusal, "Refusal")
	if !strings.Contains(err.Error(), s.target.RefusalReason) {
		t.Errorf("error %q does not carry the provider's reason %q", err, s.target.RefusalReason)
	}
}

func (s *suite) permanentOddBodies(t *testing.T) {
	t.Parallel()
	bodies := map[string]string{
		"huge":       strings.Repeat("very long reason ", 1<<19),
		"binary":     "\x00\x01\x02\xff\xfe garbage \x1b[31m",
		"multi-line": "first line\nsecond line\r\nthird",
		"empty":      "",
	}
	for name, body := range bodies {
		_, err := s.send(t, 5*time.Second, answer(Reply{Status: 400, Body: body}))
		s.checkError(t, err, providers.ErrPermanent)
		if strings.Contains(err.Error(), "second line") {
			t.Errorf("%s body: error %q carries more than the first line", name, err)
		}
	}
}

func (s *suite) noLeak(t *testing.T) {
	t.Parallel()
	m := s.target.Message()
	echo := "invalid recipient " + m.To + " (" + strings.TrimPrefix(m.To, "+") + ") for message '" + m.Body + "'"
	for _, secret := range s.target.Secrets {
		echo += " with credentials " + secret
	}
	for _, r := range []Reply{
		{Status: 400, Body: echo},
		{Status: 400, Header: http.Header{"Content-Type": {"application/json"}}, Body: `{"message":` + strconv.Quote(echo) + `}`},
		{Status: 503, Body: echo},
		{Status: 429, Body: echo},
	} {
		_, err := s.send(t, 5*time.Second, answer(r))
		want := map[int]error{400: providers.ErrPermanent, 503: providers.ErrTransient, 429: providers.ErrRateLimited}[r.Status]
		s.checkError(t, err, want)
	}
}

func (s *suite) transient(t *testing.T) {
	t.Parallel()
	for _, status := range []int{408, 500, 502, 503, 504} {
		hits, err := s.send(t, 5*time.Second, answer(Reply{Status: status, Body: "try later"}))
		s.checkError(t, err, providers.ErrTransient)
		wantStatus(t, err, status)
		// An answer came back; but a 502 or 504 is a gateway's, which may
		// have passed the request, written whole, on to the provider
		// before its upstream failed or timed out.
		wantAmbiguous(t, err, status == 502 || status == 504)
		var pe *providers.Error
		if status >= 500 && errors.As(err, &pe) && pe.RetryAfter < s.target.MinRetry {
			t.Errorf("status %d: RetryAfter %s, want at least %s", status, pe.RetryAfter, s.target.MinRetry)
		}
		if n := hits.Load(); n != 1 {
			t.Errorf("status %d: %d requests, want 1 (no retry inside Send)", status, n)
		}
	}
	// An overloaded provider's Retry-After is kept as a hint, in both forms.
	for _, ra := range []struct {
		value    func() string
		min, max time.Duration
	}{
		{func() string { return "30" }, 30 * time.Second, 30 * time.Second},
		{func() string { return time.Now().Add(20 * time.Second).UTC().Format(http.TimeFormat) }, 18 * time.Second, 21 * time.Second},
	} {
		_, err := s.send(t, 5*time.Second, answer(Reply{Status: 503, Header: http.Header{"Retry-After": {ra.value()}}}))
		s.checkError(t, err, providers.ErrTransient)
		var pe *providers.Error
		if hi := max(ra.max, s.target.MinRetry); !errors.As(err, &pe) || pe.RetryAfter < ra.min || pe.RetryAfter > hi {
			t.Errorf("503 with Retry-After %s: %v, want a transient *Error with RetryAfter in [%s, %s]", ra.value(), err, ra.min, hi)
		}
	}
	// A malformed body on an error status: the status decides.
	_, err := s.send(t, 5*time.Second, answer(Reply{Status: 502, Header: http.Header{"Content-Type": {"application/json"}},
		Body: `{"error": {"code": 502, "message": "trunc`}))
	s.checkError(t, err, providers.ErrTransient)
}

func (s *suite) rateLimited(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name         string
		retryAfter   func() string
		min, max     time.Duration
		wantExplicit bool
	}{
		{"absent", nil, providers.DefaultRetryAfter, providers.DefaultRetryAfter, false},
		{"seconds", func() string { return "7" }, 7 * time.Second, 7 * time.Second, true},
		// A Retry-After shorter than the backoff (0, a past date) does
		// not shorten the pause of a provider-wide limit: the backoff's.
		{"zero", func() string { return "0" }, providers.DefaultRetryAfter, providers.DefaultRetryAfter, false},
		{"http-date", func() string { return time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat) },
			28 * time.Second, 31 * time.Second, true},
		{"rfc850-date", func() string {
			return time.Now().Add(30 * time.Second).UTC().Format("Monday, 02-Jan-06 15:04:05 GMT")
		}, 28 * time.Second, 31 * time.Second, true},
		{"past-date", func() string { return "Sun, 06 Nov 1994 08:49:37 GMT" }, providers.DefaultRetryAfter, providers.DefaultRetryAfter, false},
		{"garbage", func() string { return "soon, please" }, providers.DefaultRetryAfter, providers.DefaultRetryAfter, false},
		{"absurd", func() string { return "99999999999999999999" }, providers.MaxRetryAfter, providers.MaxRetryAfter, true},
	}
	for _, c := range cases {
		_, err := s.send(t, 5*time.Second, func(w http.ResponseWriter, _ *http.Request) {
			if c.retryAfter != nil {
				w.Header().Set("Retry-After", c.retryAfter())
			}
			w.WriteHeader(http.StatusTooManyRequests)
		})
		s.checkError(t, err, providers.ErrRateLimited)
		wantStatus(t, err, 429)
		var rl *providers.RateLimitedError
		if !errors.As(err, &rl) {
			t.Fatalf("%s: error %q is not a *RateLimitedError", c.name, err)
		}
		if rl.RetryAfter < c.min || rl.RetryAfter > c.max || rl.Explicit != c.wantExplicit {
			t.Errorf("%s: RetryAfter %s explicit %v, want [%s, %s] explicit %v",
				c.name, rl.RetryAfter, rl.Explicit, c.min, c.max, c.wantExplicit)
		}
	}
}

// hang answers nothing until the client gives up or the test ends.
func hang(w http.ResponseWriter, r *http.Request) {
	// Reading the whole body lets the server notice the client leaving.
	_, _ = io.Copy(io.Discard, r.Body)
	<-r.Context().Done()
}

func (s *suite) timeout(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	var read atomic.Bool
	start := time.Now()
	_, err := s.send(t, timeout, func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err == nil {
			read.Store(true)
		}
		<-r.Context().Done()
	})
	took := time.Since(start)
	s.checkError(t, err, providers.ErrTransient)
	wantStatus(t, err, 0)
	if read.Load() { // else a loaded machine let the timeout come before the request went out
		wantAmbiguous(t, err, true) // the server read the whole request
	}
	if !strings.Contains(err.Error(), "timeout") {
		t.Errorf("error %q does not say it timed out", err)
	}
	// Not a performance bound: a Send that ignored its timeout would hang
	// until the test ends.
	if took < timeout || took > timeout+10*time.Second {
		t.Errorf("Send returned after %s with a timeout of %s", took, timeout)
	}
}

func (s *suite) refused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	if s.tls != nil {
		url = "https://" + l.Addr().String()
	}
	_ = l.Close()
	p := s.target.New(t, url, 5*time.Second)
	err = p.Send(context.Background(), s.target.Message())
	s.checkError(t, err, providers.ErrTransient)
	wantStatus(t, err, 0)
	wantAmbiguous(t, err, false) // nothing was sent
}

// ambiguous: the server reads the whole request, then the connection is
// lost without an answer. The provider may have acted on it: transient and
// Ambiguous.
func (s *suite) ambiguous(t *testing.T) {
	t.Parallel()
	hits, err := s.send(t, 5*time.Second, func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		panic(http.ErrAbortHandler)
	})
	s.checkError(t, err, providers.ErrTransient)
	wantStatus(t, err, 0)
	wantAmbiguous(t, err, true)
	if n := hits.Load(); n != 1 {
		t.Errorf("%d requests, want 1 (no retry inside Send)", n)
	}
}

// noReplay: under retry_on_timeout: false the transport never resends a
// request on its own. The server answers the first request of each
// connection and, on the second, reads it whole and closes the connection
// without an answer: net/http would otherwise send it again on a new
// connection when it deems it replayable (a POST carrying
// Idempotency-Key), and the provider would get it twice. Here it gets it
// once, and the failure is ambiguous (it may have acted on it).
func (s *suite) noReplay(t *testing.T) {
	t.Parallel()
	if s.target.NoRetryOnTimeout == nil {
		t.Skip("target has no NoRetryOnTimeout")
	}
	if s.tls != nil {
		t.Skip("an HTTP/1 scenario: HTTP/2 resends only streams the server did not process")
	}
	url, requests := DropSecondRequest(t, s.target.Accepted)
	p := s.target.NoRetryOnTimeout(t, url, 5*time.Second)
	if err := p.Send(context.Background(), s.target.Message()); err != nil {
		t.Fatalf("first send: %v", err)
	}
	err := p.Send(context.Background(), s.target.Message()) // on the pooled connection
	s.checkError(t, err, providers.ErrTransient)
	wantAmbiguous(t, err, true)
	if n := requests.Load(); n != 2 {
		t.Errorf("the provider got %d requests for 2 sends: the transport resent one", n)
	}
}

// DropSecondRequest starts a plain HTTP/1.1 server on a loopback port that
// answers the first request of each connection with accepted and, on the
// second, reads it whole and closes the connection without an answer: the
// case in which net/http sends a request it deems replayable (a POST
// carrying Idempotency-Key, with GetBody) again on a new connection. It
// returns the server's URL and a count of the requests it read whole. The
// server stops when the test ends.
func DropSecondRequest(t *testing.T, accepted Reply) (string, *atomic.Int32) {
	t.Helper()
	if accepted.Status == 0 {
		accepted = Reply{Status: 200, Body: "{}"}
	}
	var requests atomic.Int32
	url := (&suite{}).rawServer(t, func(c net.Conn) {
		defer c.Close()
		r := bufio.NewReader(c)
		for n := 0; ; n++ {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			req, err := http.ReadRequest(r)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			requests.Add(1)
			if n > 0 {
				return // the request arrived whole; no answer
			}
			_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
				accepted.Status, http.StatusText(accepted.Status), len(accepted.Body), accepted.Body)
		}
	})
	return url, &requests
}

// gone: the kind's answer naming the recipient as dead is a permanent
// refusal that also matches ErrRecipientGone; its plain refusal does not.
func (s *suite) gone(t *testing.T) {
	t.Parallel()
	err := s.refusal(t, s.target.Gone, "Gone")
	var pe *providers.Error
	if !errors.Is(err, providers.ErrRecipientGone) || !errors.As(err, &pe) || !pe.RecipientGone {
		t.Errorf("%d %s: %v, want ErrRecipientGone", s.target.Gone.Status, s.target.Gone.Body, err)
	}
	if s.target.Refusal.Status != 0 {
		_, err := s.send(t, 5*time.Second, answer(s.target.Refusal))
		if errors.Is(err, providers.ErrRecipientGone) {
			t.Errorf("the kind's refusal %s: %v, want no ErrRecipientGone", s.target.Refusal.Body, err)
		}
	}
}

// cut lets f write part of an answer, then kills the exchange: over
// HTTP/1 it takes the connection over (f gets its buffered writer) and
// closes it; over HTTP/2, where a connection cannot be taken over, f writes
// through w (rw is nil) and the stream is reset.
func (s *suite) cut(f func(w http.ResponseWriter, rw *bufio.ReadWriter)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 {
			f(w, nil)
			panic(http.ErrAbortHandler)
		}
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		defer c.Close()
		f(w, rw)
	}
}

// rawServer accepts connections on a loopback port (TLS when the suite
// speaks it) and hands each to f, which must close it.
func (s *suite) rawServer(t *testing.T, f func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	scheme := "http://"
	if s.tls != nil {
		scheme = "https://"
		cfg := s.tls.Clone()
		cfg.NextProtos = []string{"h2", "http/1.1"}
		l = tls.NewListener(l, cfg)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { f(c) })
		}
	})
	return scheme + l.Addr().String()
}

func (s *suite) reset(t *testing.T) {
	t.Parallel()
	// The connection is reset once the request has arrived.
	url := s.rawServer(t, func(c net.Conn) {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Read(make([]byte, 1024))
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST rather than FIN
		} else if tc, ok := c.(*tls.Conn); ok {
			if raw, ok := tc.NetConn().(*net.TCPConn); ok {
				_ = raw.SetLinger(0)
			}
		}
		_ = c.Close()
	})
	p := s.target.New(t, url, 5*time.Second)
	err := p.Send(context.Background(), s.target.Message())
	s.checkError(t, err, providers.ErrTransient)
	wantStatus(t, err, 0)

	// The server answers something that is not HTTP (not HTTP/2 either).
	url = s.rawServer(t, func(c net.Conn) {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Read(make([]byte, 1024))
		_, _ = c.Write([]byte("this is not HTTP\r\n\r\n"))
		_ = c.Close()
	})
	p = s.target.New(t, url, 5*time.Second)
	err = p.Send(context.Background(), s.target.Message())
	s.checkError(t, err, providers.ErrTransient)
	wantStatus(t, err, 0)
}

func (s *suite) canceled(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	url, _ := s.server(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		hang(w, r)
	})
	p := s.target.New(t, url, 30*time.Second)
	s.sendCanceled(t, p, s.target.Message, arrived)
}

// sendCanceled sends with p twice, with a context canceled before the send
// and with one canceled once the request has arrived (a receive on
// arrived), and checks that both fail as transient, wrapping
// context.Canceled. It returns the two errors.
func (s *suite) sendCanceled(t *testing.T, p providers.Provider, msg func() *providers.Message, arrived <-chan struct{}) (before, inFlight error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before = p.Send(ctx, msg())
	s.checkError(t, before, providers.ErrTransient)
	if !errors.Is(before, context.Canceled) {
		t.Errorf("Send with a canceled context: %q does not wrap context.Canceled", before)
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-arrived:
			cancel()
		case <-ctx.Done():
		}
	}()
	inFlight = p.Send(ctx, msg())
	s.checkError(t, inFlight, providers.ErrTransient)
	if !errors.Is(inFlight, context.Canceled) {
		t.Errorf("Send canceled in flight: %q does not wrap context.Canceled", inFlight)
	}
	return before, inFlight
}

func (s *suite) concurrent(t *testing.T) {
	t.Parallel()
	url, hits := s.server(t, answer(s.target.Accepted))
	const n = 32
	sendConcurrently(t, s.target.New(t, url, 5*time.Second), s.target.Message, n)
	if got := hits.Load(); got != n {
		t.Errorf("%d requests for %d sends", got, n)
	}
}

// sendConcurrently makes n sends with p at once and fails t for each one
// refused.
func sendConcurrently(t *testing.T, p providers.Provider, msg func() *providers.Message, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := p.Send(context.Background(), msg()); err != nil {
				t.Errorf("concurrent Send: %v", err)
			}
		})
	}
	wg.Wait()
}
