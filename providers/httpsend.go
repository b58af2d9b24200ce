package providers

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"
)

// httpBase is what the HTTP kinds (twilio, fcm, apns) share: one pooled
// transport, the per-request timeout and the mapping of answers onto the
// error classes. It is safe for concurrent use.
type httpBase struct {
	name      string
	timeout   time.Duration
	userAgent string
	client    *http.Client
	transport *http.Transport // nil when Options.HTTPClient was given
	now       func() time.Time
}

// newHTTPBase builds the transport of cfg (trusting tls_ca_file when set).
// With http2Only the transport speaks HTTP/2 over TLS and nothing else.
// opts must have its defaults applied.
func newHTTPBase(cfg Config, opts Options, http2Only bool) (httpBase, error) {
	b := httpBase{name: cfg.Name, timeout: cfg.Timeout, userAgent: "notifier/" + opts.Version, now: opts.Now}
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
func (b *httpBase) post(ctx context.Context, url string, header http.Header, body []byte, s scrubber, read readAnswer) error {
	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return &Error{Provider: b.name, Class: ErrPermanent, Detail: "build request: " + causeDetail(err, s), Err: err}
	}
	req.Header = header
	req.Header.Set("User-Agent", b.userAgent)
	req, wrote := traceWrite(req)
	resp, err := b.client.Do(req)
	if err != nil {
		e := transportError(ctx, b.name, b.timeout, err, s)
		e.Ambiguous = ambiguous(wrote.Load(), err)
		return e
	}
	reportBudget(ctx, resp.Header, b.now)
	return classifyResponse(b.name, resp, s, b.now, read)
}

// traceWrite returns req with a client trace that reports whether the
// request was written whole to its connection (headers and body, no write
// error: httptrace's WroteRequest) in the last attempt the transport made
// (it may make another on a new connection, for one that cannot have been
// acted on: a pooled connection the server had closed, an HTTP/2 stream
// refused; GetConn starts each attempt). A failure after that, with no
// response, is ambiguous: the provider may have received the request and
// acted on it. A failure before it (dial, TLS, a write error) is not: the
// provider cannot have acted on a request it did not receive whole.
func traceWrite(req *http.Request) (*http.Request, *atomic.Bool) {
	wrote := new(atomic.Bool)
	trace := &httptrace.ClientTrace{
		GetConn: func(string) { wrote.Store(false) },
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				wrote.Store(true)
			}
		},
	}
	return req.WithContext(httptrace.WithClientTrace(req.Context(), trace)), wrote
}

// ambiguous reports whether a round trip that failed with err after the
// trace of traceWrite saw wrote is ambiguous. net/http's "server closed
// idle connection" is not: the server closed the pooled connection before
// the request reached it (its FIN crossed the request on the wire).
func ambiguous(wrote bool, err error) bool {
	return wrote && !strings.Contains(err.Error(), "http: server closed idle connection")
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
	// (FCM's QUOTA_EXCEEDED: a minute). The pause is then explicit.
	minPause time.Duration
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

// classifyResponse maps a response to nil (2xx) or the error of its class,
// and always drains (bounded) and closes the body. A Retry-After header is
// honoured on a rate limit (RetryAfter, default DefaultRetryAfter) and kept
// as a hint on a transient error.
func classifyResponse(provider string, resp *http.Response, s scrubber, now func() time.Time, read readAnswer) error {
	status := resp.StatusCode
	if status >= 200 && status <= 299 {
		drainClose(resp.Body)
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
	retryAfter, explicit := retryAfterOf(resp, now)
	switch class {
	case ErrRateLimited:
		rl := &RateLimitedError{Provider: provider, Status: status, Detail: detail, RetryAfter: DefaultRetryAfter, Scope: a.scope}
		if explicit {
			rl.RetryAfter, rl.Explicit = retryAfter, true
		}
		if a.minPause > 0 && rl.RetryAfter < a.minPause {
			rl.RetryAfter, rl.Explicit = a.minPause, true
		}
		return rl
	case ErrTransient, ErrSender:
		e := &Error{Provider: provider, Class: class, Status: status, Detail: detail}
		if explicit {
			e.RetryAfter = retryAfter
			e.Detail += ", retry after " + retryAfter.String()
		}
		return e
	}
	return &Error{Provider: provider, Class: ErrPermanent, Status: status, Detail: detail}
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
