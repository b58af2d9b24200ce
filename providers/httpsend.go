package providers

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"time"
)

// httpBase is what the HTTP kinds (webhook, twilio, fcm, apns) share: one
// pooled transport, the per-request timeout, the mapping of answers onto
// the error classes and the backoff of rate limits that do not say how long
// to wait. It is safe for concurrent use.
type httpBase struct {
	name      string
	timeout   time.Duration
	userAgent string
	// userAgentValue is the User-Agent header's value, made once.
	userAgentValue []string
	client         *http.Client
	transport      *http.Transport // nil when Options.HTTPClient was given
	now            func() time.Time
	// strict is retry_on_timeout: false: no request is ever resent by the
	// transport, and a failure without an answer after the request was
	// written whole is ambiguous whatever it is (see post).
	strict bool
	// floor is the pause of the first rate limit of a run that says
	// nothing of how long to wait; throttle doubles it over the run.
	floor    time.Duration
	throttle *throttle
}

// newHTTPBase builds the transport of cfg (trusting tls_ca_file when set).
// With http2Only the transport speaks HTTP/2 over TLS and nothing else.
// opts must have its defaults applied. The rate-limit floor is
// DefaultRetryAfter; a kind that documents another sets its own.
func newHTTPBase(cfg Config, opts Options, http2Only bool) (httpBase, error) {
	b := httpBase{name: cfg.Name, timeout: cfg.Timeout, userAgent: "notifier/" + opts.Version, now: opts.Now,
		strict: !cfg.RetriesOnTimeout(), floor: DefaultRetryAfter, throttle: new(throttle)}
	b.userAgentValue = []string{b.userAgent}
	if opts.HTTPClient != nil {
		b.client = opts.HTTPClient
		return b, nil
	}
	tlsConfig, err := clientTLS(cfg.TLSCAFile)
	if err != nil {
		return b, err
	}
	b.transport = newTransport(tlsConfig)
	if http2Only {
		var p http.Protocols
		p.SetHTTP2(true)
		b.transport.Protocols = &p
		// Ping a connection that has been silent for a while, so a dead one
		// is noticed before a send waits on it.
		b.transport.HTTP2 = &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 10 * time.Second}
	}
	b.client = newClient(b.transport)
	return b, nil
}

// closeIdle releases the idle connections. Sends still work afterwards,
// opening new connections.
func (b *httpBase) closeIdle() {
	if b.transport != nil {
		b.transport.CloseIdleConnections()
	}
}

// post makes one POST of body to url with header, bounded by the timeout,
// and maps the answer: nil for a 2xx, else the error of its class, read by
// read (nil: the webhook rules) and scrubbed by s.
//
// Under retry_on_timeout: false (strict) the request has no GetBody, so
// net/http's transport can never resend it on a new connection: it
// otherwise does so, by itself and unseen, for a request it deems
// replayable (a POST carrying Idempotency-Key: Request.isReplayable) whose
// reused connection failed after the request was written, and for an
// HTTP/2 stream the server refused. The failure then comes back here, and
// is ambiguous when the request had been written whole.
func (b *httpBase) post(ctx context.Context, url string, header http.Header, body []byte, s scrubber, read readAnswer) error {
	start := b.now()
	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	wrote := newWriteTrace(body)
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(rctx, &wrote.trace), http.MethodPost, url, &wrote.body)
	if err != nil {
		return &Error{Provider: b.name, Class: ErrPermanent, Detail: "build request: " + causeDetail(err, s), Err: err}
	}
	req.ContentLength = int64(len(body))
	if len(body) == 0 {
		req.Body = http.NoBody
	}
	// NewRequest gave a *bytes.Reader body a GetBody of its own: strict
	// takes it away, else the transport may resend the request on a new
	// connection (see above) with the body again, its end noted as the
	// first's.
	req.GetBody = nil
	if !b.strict {
		req.GetBody = func() (io.ReadCloser, error) { return wrote.again(), nil }
	}
	req.Header = header
	req.Header["User-Agent"] = b.userAgentValue // shared: nothing changes a request's header in place
	resp, err := b.client.Do(req)
	if err != nil {
		e := transportError(ctx, b.name, b.timeout, err, s)
		e.Ambiguous = ambiguous(wrote.whole(), err, b.strict)
		return e
	}
	if resp.StatusCode < 200 {
		// A 101 (the only 1xx net/http returns): its body is the raw
		// connection, which neither the timeout nor ctx governs. Read
		// nothing of it: a transient error (classByStatus).
		_ = resp.Body.Close()
		resp.Body = http.NoBody
	}
	reportBudget(ctx, resp.Header, b.now)
	return b.classify(resp, s, read, start, wrote.whole)
}

// writeTrace is a client trace that reports whether the request was
// written whole to its connection (headers and body, no write error:
// httptrace's WroteRequest) in the last attempt the transport made (it may
// make another on a new connection, for one that cannot have been acted
// on: a pooled connection the server had closed, an HTTP/2 stream
// refused; GetConn starts each attempt). A failure after that, with no
// response, is ambiguous: the provider may have received the request and
// acted on it. A failure before it (dial, TLS, a write error) is not: the
// provider cannot have acted on a request it did not receive whole. It is
// one allocation, set on the request's context from the start (no copy of
// the request).
//
// The body is read from a plain *bytes.Reader, which net/http knows to be
// in memory: it then writes the headers and the body in one write to the
// connection. A reader of another type makes it send the headers first,
// in a write of their own (transferWriter.FlushHeaders): two syscalls and
// two TCP segments a request, measured at 2.0 writes per send in a fleet
// under load. Whether the transport read the attempt's body to its end is
// read off the reader's Len when it reports the write, in the goroutine
// that read it.
type writeTrace struct {
	trace httptrace.ClientTrace
	raw   []byte       // the request's body
	body  bytes.Reader // the first attempt's reader of raw

	mu        sync.Mutex
	cur       *bytes.Reader // the last attempt's reader: body, or again's
	connected bool          // the attempt's GotConn came: its write will be reported
	reported  bool          // the attempt's WroteRequest came
	written   bool          // ... and said the request was written whole
	wait      chan struct{} // closed by WroteRequest for whole, which waits
}

func newWriteTrace(body []byte) *writeTrace {
	w := &writeTrace{raw: body}
	w.body.Reset(body)
	w.cur = &w.body
	w.trace.GetConn = w.getConn
	w.trace.GotConn = w.gotConn
	w.trace.WroteRequest = w.wroteRequest
	return w
}

func (w *writeTrace) getConn(string) {
	w.mu.Lock()
	w.connected, w.reported, w.written = false, false, false
	w.mu.Unlock()
}

// again is the body of a resent request: the same bytes, read anew by a
// reader of their own, whose end is then the one that counts.
func (w *writeTrace) again() io.ReadCloser {
	r := bytes.NewReader(w.raw)
	w.mu.Lock()
	w.cur = r
	w.mu.Unlock()
	return io.NopCloser(r)
}

func (w *writeTrace) gotConn(httptrace.GotConnInfo) {
	w.mu.Lock()
	w.connected = true
	w.mu.Unlock()
}

func (w *writeTrace) wroteRequest(info httptrace.WroteRequestInfo) {
	w.mu.Lock()
	// HTTP/2 stops writing a request's body once the server has answered
	// ("aborting request body write"), and reports that, also when every
	// byte of the body was already read and sent and only the stream's
	// end was still to go: a server that reads the whole body answers
	// then. The request counts as written whole when the transport had
	// read all of its body.
	bodyRead := w.cur.Len() == 0 // read by this goroutine, the attempt's writer
	w.reported, w.written = true, info.Err == nil || (bodyRead && isBodyWriteStopped(info.Err))
	if w.wait != nil {
		close(w.wait)
		w.wait = nil
	}
	w.mu.Unlock()
}

// isBodyWriteStopped says whether err is HTTP/2's report of a request body
// write it stopped because the server had answered (net/http's
// unexported errStopReqBodyWrite, told by its text).
func isBodyWriteStopped(err error) bool {
	return err.Error() == "http2: aborting request body write"
}

// writeReportWait bounds how long whole waits for the transport's report:
// far more than the moment between a response's arrival and the writer's
// report, which is all it waits for (an HTTP/2 stream cancelled before its
// headers went out is never reported: it was not written).
const writeReportWait = 250 * time.Millisecond

// whole says whether the last attempt's request was written whole, once
// the round trip has returned. The transport may return before it reports
// the write: HTTP/2 writes a request from a goroutine of its own, and a
// response (or a failure) can come back before that goroutine says it
// finished. whole waits for the report then, up to writeReportWait, when
// the attempt had its connection (before that, nothing was written; a
// transport that traces nothing, such as a test's RoundTripper, is not
// waited for). Called only where the answer matters (a failure, a 502 or
// a 504), so a send that succeeds never waits.
func (w *writeTrace) whole() bool {
	w.mu.Lock()
	if w.reported || !w.connected {
		defer w.mu.Unlock()
		return w.written
	}
	ch := make(chan struct{})
	w.wait = ch
	w.mu.Unlock()
	t := time.NewTimer(writeReportWait)
	select {
	case <-ch:
	case <-t.C:
	}
	t.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reported && w.written
}

// Errors after which the server cannot have acted on a request, whatever
// was written: an HTTP/2 stream the server refused (RFC 9113 §8.7,
// REFUSED_STREAM) or that lay past the last stream its GOAWAY said it
// would process: net/http's text for such a stream after a GOAWAY with
// NO_ERROR, and for the connection's first stream after one with an error
// code (h2_bundle.go, setGoAway: only streams past LastStreamID; a stream
// the server took whose connection then closes reads "server sent GOAWAY
// and closed the connection", which stays ambiguous). net/http resends
// them itself when it can (GetBody set).
var unprocessed = []string{"REFUSED_STREAM", "http2: Transport received Server's graceful shutdown GOAWAY",
	"http2: Transport received GOAWAY from server ErrCode"}

// ambiguous reports whether a round trip that failed with err after the
// trace of writeTrace saw wrote is ambiguous. An HTTP/2 stream the server
// says it did not process is not. Otherwise, unless strict, net/http's
// "server closed idle connection" is not either: the server closed the
// pooled connection before the request reached it (its FIN crossed the
// request on the wire), which is by far its likeliest cause. Strict
// (retry_on_timeout: false) takes no such bet: the same EOF also follows a
// server that read the request, acted on it and died before answering.
func ambiguous(wrote bool, err error, strict bool) bool {
	if !wrote {
		return false
	}
	msg := err.Error()
	for _, u := range unprocessed {
		if strings.Contains(msg, u) {
			return false
		}
	}
	return strict || !strings.Contains(msg, "http: server closed idle connection")
}

// answer is a kind's reading of an error response.
type answer struct {
	// reason is the provider's own reason, unscrubbed ("" for none).
	reason string
	// class overrides the class the HTTP status implies: ErrPermanent,
	// ErrTransient, ErrRateLimited or ErrSender; nil keeps the status's
	// class.
	class error
	// note is appended to the detail after scrubbing, in parentheses: text
	// the kind built itself from the answer and knows to be safe (APNs's
	// 410 timestamp, which the scrubber would take for a phone number).
	note string
	// scope is what a rate limit applies to (ScopeProvider by default).
	scope Scope
	// minPause, when set, is the least RetryAfter of a rate limit: the
	// provider documents a minimum backoff longer than its header may say
	// (FCM's QUOTA_EXCEEDED: a minute). The pause is then explicit, and for
	// a provider-wide limit doubles over a run (throttle).
	minPause time.Duration
	// minRetry, when set, is the least RetryAfter of a transient failure:
	// the provider documents how long to wait before retrying it (APNs's
	// 5xx: 15 minutes).
	minRetry time.Duration
	// gone marks a permanent refusal that names the recipient as dead
	// (Error.RecipientGone).
	gone bool
}

// readAnswer reads a kind's error body; body is at most reasonLimit bytes
// and may be anything (truncated, binary, not the documented format).
type readAnswer func(status int, body []byte) answer

// classByStatus is the class an HTTP status implies (SPEC §7 webhook):
// 429 rate limited; 408, 5xx and anything unexpected (1xx, 3xx) transient;
// other 4xx permanent.
func classByStatus(status int) error {
	switch {
	case status == http.StatusTooManyRequests:
		return ErrRateLimited
	case status == http.StatusRequestTimeout, status >= 500:
		return ErrTransient
	case status >= 400:
		return ErrPermanent
	}
	return ErrTransient
}

// classify maps a response to nil (2xx) or the error of its class, and
// always drains (bounded) and closes the body. start is when the request
// was made, wrote says whether it was written whole (asked only of a 502
// or a 504). A Retry-After header is
// honoured on a rate limit and kept as a hint on a transient error; a
// provider-wide rate limit pauses for the throttle's backoff from the
// kind's floor, or its Retry-After when that is longer (never shorter: a
// Retry-After of 0 or a past date pauses the backoff). A 502 or 504 to a request written whole is
// ambiguous: a gateway answered, and may have passed the request on before
// its upstream failed or timed out.
func (b *httpBase) classify(resp *http.Response, s scrubber, read readAnswer, start time.Time, wrote func() bool) error {
	status := resp.StatusCode
	if status >= 200 && status <= 299 {
		drainClose(resp.Body)
		b.throttle.accepted(start)
		return nil
	}
	body := readReason(resp.Body)
	var a answer
	if read != nil {
		a = read(status, body)
	} else {
		a.reason = responseReason(body)
	}
	class := a.class
	if class == nil {
		class = classByStatus(status)
	}
	detail := reasonDetail(status, a.reason, s)
	if a.note != "" {
		detail += " (" + a.note + ")"
	}
	if status >= 300 && status <= 399 {
		detail += " (redirects are not followed)"
	}
	retryAfter, explicit := retryAfterOf(resp, b.now)
	switch class {
	case ErrRateLimited:
		rl := &RateLimitedError{Provider: b.name, Status: status, Detail: detail, RetryAfter: DefaultRetryAfter, Scope: a.scope}
		if explicit {
			rl.RetryAfter, rl.Explicit = retryAfter, true
		}
		switch {
		case a.minPause > 0:
			least := a.minPause
			if a.scope == ScopeProvider {
				least = b.throttle.pause(a.minPause, start, b.now())
			}
			if rl.RetryAfter < least {
				rl.RetryAfter, rl.Explicit = least, true
			}
		case a.scope == ScopeProvider:
			// At least the throttle's backoff: a Retry-After may lengthen
			// the pause, never shorten it (a "0" or a past date would send
			// the fleet straight back into the rate limit, as often as it
			// answers).
			least := b.throttle.pause(b.floor, start, b.now())
			if !explicit || rl.RetryAfter < least {
				rl.RetryAfter, rl.Explicit = least, false
			}
		}
		return rl
	case ErrTransient, ErrSender:
		e := &Error{Provider: b.name, Class: class, Status: status, Detail: detail}
		if explicit {
			e.RetryAfter = retryAfter
		}
		if class == ErrTransient && a.minRetry > e.RetryAfter {
			e.RetryAfter = a.minRetry
		}
		if e.RetryAfter > 0 {
			e.Detail += ", retry after " + e.RetryAfter.String()
		}
		if class == ErrTransient && (status == http.StatusBadGateway || status == http.StatusGatewayTimeout) && wrote() {
			e.Ambiguous = true
			e.Detail += " (a gateway may have passed the request on)"
		}
		return e
	}
	return &Error{Provider: b.name, Class: ErrPermanent, Status: status, Detail: detail, RecipientGone: a.gone}
}

// retryAfterOf reads the response's Retry-After header. An HTTP-date is
// relative to the provider's own clock: its Date header, when readable,
// removes the skew between the clocks.
func retryAfterOf(resp *http.Response, now func() time.Time) (time.Duration, bool) {
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	ref := now()
	if date, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		ref = date
	}
	return ParseRetryAfter(v, ref)
}

// basicAuth is the Authorization header value of HTTP basic auth.
func basicAuth(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// trimSlash drops the trailing slashes of a base URL.
func trimSlash(base string) string { return strings.TrimRight(base, "/") }

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
