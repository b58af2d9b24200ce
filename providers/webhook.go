package providers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/propagation"
)

// Webhook is the webhook provider (SPEC §7): each Send is one
// `POST <url>` whose body is the Message as JSON, with the headers
// Content-Type: application/json, Idempotency-Key: the message's key
// (Message.Key, else its id) as a structured-field String (a quoted string, as
// draft-ietf-httpapi-idempotency-key-header defines the field),
// User-Agent: notifier/<version>, traceparent (and tracestate) when the
// context carries a trace (the job's, see dispatch), Authorization: Bearer
// <token> when credentials_env is set, and, when signing_secret_env is set,
// the Standard Webhooks signature headers webhook-id, webhook-timestamp and
// webhook-signature (see WebhookID and docs/providers.md, "Signed
// webhooks").
//
// A 2xx is accepted; 429 is a *RateLimitedError backing off exponentially
// from DefaultRetryAfter over a run, or its Retry-After when longer;
// 408, 5xx, other unexpected statuses (redirects are not followed),
// timeouts and connection errors are ErrTransient (a Retry-After on them is
// kept in Error.RetryAfter); a 401 is ErrSender, with a bearer token
// configured or not: it is about the request's authentication, never about
// one message; 410 Gone is ErrPermanent with RecipientGone (the receiver
// says the recipient is no more); any other 4xx is ErrPermanent with the
// provider's reason in the detail. A timeout or a lost connection after the
// request was written whole, and a 502 or 504 (a gateway that may have
// passed the request on), are Error.Ambiguous: the receiver may have acted
// on it (its Idempotency-Key or webhook-id lets it drop the retry, if it
// honours one). A Webhook is safe for concurrent use; its connections are
// pooled and kept alive until Close.
type Webhook struct {
	httpBase
	url    string
	auth   *credential    // nil without credentials_env
	signer *webhookSigner // nil without signing_secret_env
}

var _ Provider = (*Webhook)(nil)

// credential holds a secret behind a pointer so that printing a provider
// with %v or %+v shows an address, never the secret.
type credential struct{ value string }

// webhookKind is the webhook entry of kinds: any channel.
var webhookKind = kind{
	name:     "webhook",
	keys:     []string{"url", "credentials_env", "tls_ca_file", "signing_secret_env"},
	validate: func(c Config, p *problems) { p.requiredURL(c.URL) },
	build:    builder(newWebhook),
}

// NewWebhook builds a webhook provider from a kind webhook entry, reading the
// bearer token (if credentials_env is set) and the signing secrets (if
// signing_secret_env is set) through opts.Getenv.
func NewWebhook(cfg Config, opts Options) (*Webhook, error) {
	return newChecked(cfg, opts, "webhook", "webhook", newWebhook)
}

// newWebhook is NewWebhook for an entry already checked (kind webhook,
// defaults applied, valid): NewRegistry checks every entry first.
func newWebhook(cfg Config, opts Options) (*Webhook, error) {
	opts = opts.withDefaults()
	w := &Webhook{url: cfg.URL}
	if cfg.CredentialsEnv != "" {
		token, err := lookupSecret(opts, cfg.CredentialsEnv)
		if err != nil {
			return nil, fmt.Errorf("new webhook %s: credentials_env: %w", cfg.Name, err)
		}
		w.auth = &credential{"Bearer " + token}
	}
	if cfg.SigningSecretEnv != "" {
		v, err := lookupSecret(opts, cfg.SigningSecretEnv)
		if err != nil {
			return nil, fmt.Errorf("new webhook %s: signing_secret_env: %w", cfg.Name, err)
		}
		if w.signer, err = newWebhookSigner(v); err != nil {
			return nil, fmt.Errorf("new webhook %s: signing_secret_env %s: %w", cfg.Name, cfg.SigningSecretEnv, err)
		}
	}
	base, err := newHTTPBase(cfg, opts, false)
	if err != nil {
		return nil, fmt.Errorf("new webhook %s: %w", cfg.Name, err)
	}
	w.httpBase = base
	return w, nil
}

// Name returns the configured name.
func (w *Webhook) Name() string { return w.name }

// String describes the provider without its secret.
func (w *Webhook) String() string { return "webhook " + w.name }

// Close releases the provider's idle connections. Send still works after
// Close, opening new connections.
func (w *Webhook) Close() error {
	w.closeIdle()
	return nil
}

// Send posts m to the webhook once. See Webhook for how answers map to
// error classes.
func (w *Webhook) Send(ctx context.Context, m *Message) error {
	s := w.scrubber(m)
	if m == nil {
		return &Error{Provider: w.name, Class: ErrPermanent, Detail: "nil message"}
	}
	// The job's own encoding (queue.Job.JSON: the fields it has, data keys
	// sorted, times in UTC), which a reflecting encoder took 3 % of a
	// worker's CPU to make.
	body, err := m.Job.JSON()
	if err != nil {
		return &Error{Provider: w.name, Class: ErrPermanent, Detail: "encode message: " + causeDetail(err, s), Err: err}
	}
	header := http.Header{"Content-Type": jsonContentType} // shared: nothing changes a request's header in place
	header.Set("Idempotency-Key", IdempotencyKey(m.key()))
	if w.auth != nil {
		header.Set("Authorization", w.auth.value)
	}
	if w.signer != nil {
		id, ts := WebhookID(m.key()), strconv.FormatInt(w.now().Unix(), 10)
		header.Set("webhook-id", id)
		header.Set("webhook-timestamp", ts)
		header.Set("webhook-signature", w.signer.sign(id, ts, body))
	}
	// The job's trace context (the dispatcher's send span, or the job's
	// own traceparent when tracing is off), so the receiver can join the
	// trace. Nothing is added for a context without one.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(header))
	return w.post(ctx, w.url, header, body, s, w.readAnswer)
}

// jsonContentType is the Content-Type header's value of a JSON body.
var jsonContentType = []string{"application/json"}

// readAnswer reads a webhook's error answer by the webhook rules: a 401
// refuses the request's authentication (the bearer token, or, without one,
// whatever the receiver expected: a signature, an allow-listed address),
// which is the sender's, not the job's (ErrSender); a 410 Gone says the
// recipient is gone (ErrPermanent, RecipientGone).
func (w *Webhook) readAnswer(status int, body []byte) answer {
	a := answer{reason: responseReason(body)}
	switch {
	case status == http.StatusUnauthorized && w.auth != nil:
		a.class, a.note = ErrSender, "the bearer token was refused"
	case status == http.StatusUnauthorized:
		a.class, a.note = ErrSender, "the receiver refused the request's authentication"
	case status == http.StatusGone:
		a.gone = true
	}
	return a
}

func (w *Webhook) scrubber(m *Message) scrubber {
	var secrets []string
	if w.auth != nil {
		secrets = append(secrets, w.auth.value, w.auth.value[len("Bearer "):])
	}
	if w.signer != nil {
		secrets = append(secrets, w.signer.raw...)
	}
	return newScrubber(m, secrets...)
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

// IdempotencyKey is the Idempotency-Key header of the message with id: a
// structured-field String, as draft-ietf-httpapi-idempotency-key-header-07
// §2.1 defines the field ("Idempotency-Key is an Item Structured Header
// [RFC8941]. Its value MUST be a String (Section 3.3.3 of [RFC8941])"):
// the id in double quotes, a backslash before any '"' or '\'. An id that a String
// cannot hold (a character outside printable ASCII: job ids never have one,
// SPEC §2) is sent as its version-5 UUID (see APNsID), quoted.
func IdempotencyKey(id string) string {
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return `"` + jobUUID(id) + `"`
		}
	}
	var b strings.Builder
	b.Grow(len(id) + 2)
	b.WriteByte('"')
	for i := 0; i < len(id); i++ {
		if id[i] == '"' || id[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(id[i])
	}
	b.WriteByte('"')
	return b.String()
}
