package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/propagation"
)

// Webhook is the webhook provider (SPEC §7): each Send is one
// `POST <url>` whose body is the Message as JSON, with the headers
// Content-Type: application/json, Idempotency-Key: <message id>,
// User-Agent: notifier/<version>, traceparent (and tracestate) when the
// context carries a trace (the job's, see dispatch) and, when
// credentials_env is set, Authorization: Bearer <token>.
//
// A 2xx is accepted; 429 is a *RateLimitedError honouring Retry-After; 408,
// 5xx, other unexpected statuses (redirects are not followed), timeouts and
// connection errors are ErrTransient (a Retry-After on them is kept in
// Error.RetryAfter); any other 4xx is ErrPermanent with the provider's reason
// in the detail. A timeout or a lost connection after the request was
// written whole is Error.Ambiguous: the receiver may have acted on it (its
// Idempotency-Key lets it drop the retry, if it honours one). A Webhook is
// safe for concurrent use; its connections are pooled and kept alive until
// Close.
type Webhook struct {
	name      string
	url       string
	timeout   time.Duration
	userAgent string
	auth      *credential // nil without credentials_env
	client    *http.Client
	transport *http.Transport // nil when Options.HTTPClient was given
	now       func() time.Time
}

var _ Provider = (*Webhook)(nil)

// credential holds a secret behind a pointer so that printing a provider
// with %v or %+v shows an address, never the secret.
type credential struct{ value string }

// webhookKind is the webhook entry of kinds: any channel.
var webhookKind = kind{
	name:     "webhook",
	keys:     []string{"url", "credentials_env", "tls_ca_file"},
	validate: func(c Config, p *problems) { p.requiredURL(c.URL) },
	build:    builder(newWebhook),
}

// NewWebhook builds a webhook provider from a kind webhook entry, reading the
// bearer token (if credentials_env is set) through opts.Getenv.
func NewWebhook(cfg Config, opts Options) (*Webhook, error) {
	cfg, err := checkedEntry(cfg, "webhook", "webhook")
	if err != nil {
		return nil, err
	}
	return newWebhook(cfg, opts)
}

// newWebhook is NewWebhook for an entry already checked (kind webhook,
// defaults applied, valid): NewRegistry checks every entry first.
func newWebhook(cfg Config, opts Options) (*Webhook, error) {
	opts = opts.withDefaults()
	w := &Webhook{
		name:      cfg.Name,
		url:       cfg.URL,
		timeout:   cfg.Timeout,
		userAgent: "notifier/" + opts.Version,
		client:    opts.HTTPClient,
		now:       opts.Now,
	}
	if cfg.CredentialsEnv != "" {
		token, err := lookupSecret(opts, cfg.CredentialsEnv)
		if err != nil {
			return nil, fmt.Errorf("new webhook %s: credentials_env: %w", cfg.Name, err)
		}
		w.auth = &credential{"Bearer " + token}
	}
	if w.client == nil {
		tlsConfig, err := clientTLS(cfg.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("new webhook %s: %w", cfg.Name, err)
		}
		w.transport = newTransport(tlsConfig)
		w.client = newClient(w.transport)
	}
	return w, nil
}

// Name returns the configured name.
func (w *Webhook) Name() string { return w.name }

// String describes the provider without its secret.
func (w *Webhook) String() string { return "webhook " + w.name }

// Close releases the provider's idle connections. Send still works after
// Close, opening new connections.
func (w *Webhook) Close() error {
	if w.transport != nil {
		w.transport.CloseIdleConnections()
	}
	return nil
}

// Send posts m to the webhook once. See Webhook for how answers map to
// error classes.
func (w *Webhook) Send(ctx context.Context, m *Message) error {
	s := w.scrubber(m)
	if m == nil {
		return &Error{Provider: w.name, Class: ErrPermanent, Detail: "nil message"}
	}
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return &Error{Provider: w.name, Class: ErrPermanent, Detail: "encode message: " + causeDetail(err, s), Err: err}
	}

	rctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, w.url, bytes.NewReader(body.Bytes()))
	if err != nil {
		return &Error{Provider: w.name, Class: ErrPermanent, Detail: "build request: " + causeDetail(err, s), Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", m.ID)
	req.Header.Set("User-Agent", w.userAgent)
	if w.auth != nil {
		req.Header.Set("Authorization", w.auth.value)
	}
	// The job's trace context (the dispatcher's send span, or the job's
	// own traceparent when tracing is off), so the receiver can join the
	// trace. Nothing is added for a context without one.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))

	req, wrote := traceWrite(req)
	resp, err := w.client.Do(req)
	if err != nil {
		e := transportError(ctx, w.name, w.timeout, err, s)
		e.Ambiguous = ambiguous(wrote.Load(), err)
		return e
	}
	reportBudget(ctx, resp.Header, w.now)
	return classifyResponse(w.name, resp, s, w.now, w.readAnswer)
}

// readAnswer reads a webhook's error answer by the webhook rules; with a
// bearer token configured, a 401 says the token was refused: the sender,
// not the job (ErrSender).
func (w *Webhook) readAnswer(status int, body []byte) answer {
	a := answer{reason: responseReason(body)}
	if status == http.StatusUnauthorized && w.auth != nil {
		a.class, a.note = ErrSender, "the bearer token was refused"
	}
	return a
}

func (w *Webhook) scrubber(m *Message) scrubber {
	if w.auth == nil {
		return newScrubber(m)
	}
	return newScrubber(m, w.auth.value, w.auth.value[len("Bearer "):])
}

// transportError classifies a failed round trip: all are transient, told
// apart in the detail (the caller's context ended, the request timed out,
// the connection was refused, anything else). The caller sets Ambiguous.
func transportError(parent context.Context, provider string, timeout time.Duration, err error, s scrubber) *Error {
	cause := err
	var ue *url.Error
	if errors.As(err, &ue) {
		cause = ue.Err // its text would repeat the URL, which may hold a secret
	}
	e := &Error{Provider: provider, Class: ErrTransient, Err: cause}
	var ne net.Error
	switch {
	case parent.Err() != nil:
		e.Detail = "gave up: " + causeDetail(parent.Err(), s)
		e.Err = parent.Err()
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		e.Detail = "timeout after " + timeout.String()
	case errors.Is(err, syscall.ECONNREFUSED):
		e.Detail = "connection refused"
	default:
		e.Detail = "request error: " + causeDetail(cause, s)
	}
	return e
}
