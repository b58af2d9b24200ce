package providers

import (
	"context"
	"time"
)

// Message is what a provider sends. The dispatcher builds it from a queue
// job; its JSON field names are those of the job (SPEC §2), so the webhook
// body is the job as JSON.
type Message struct {
	ID string `json:"id"`
	// Key is the job's id made unique across tenants (a job id is unique
	// only within its tenant; queue.MsgID: the id itself for the default
	// tenant, "<tenant>/<id>" for another): the idempotency key. What a receiver, a provider or a
	// device de-duplicates on is derived from it (Idempotency-Key,
	// webhook-id, apns-id, apns-collapse-id, the mail's Message-ID); it
	// falls back to ID when empty. It is in no body.
	Key       string            `json:"-"`
	UserID    string            `json:"user_id"`
	Channel   string            `json:"channel"`
	To        string            `json:"to"`
	Body      string            `json:"body"`
	Title     string            `json:"title,omitempty"`
	Data      map[string]string `json:"data,omitempty"`
	Provider  string            `json:"provider,omitempty"`
	ExpiresAt *time.Time        `json:"expires_at,omitempty"`
	CreatedAt *time.Time        `json:"created_at,omitempty"`
}

// key is m's idempotency key: Key, or ID when Key is empty.
func (m *Message) key() string {
	if m.Key != "" {
		return m.Key
	}
	return m.ID
}

// Provider sends messages on one channel. Implementations are safe for
// concurrent use by many goroutines.
type Provider interface {
	// Name is the provider's configured name.
	Name() string
	// Send makes one attempt to hand m to the provider and returns nil when
	// it was accepted (a 2xx). Otherwise the error wraps exactly one of
	// ErrPermanent, ErrTransient, ErrRateLimited (a *RateLimitedError) or
	// ErrSender, and its text is one line without the recipient, body or
	// secrets. Send does not retry (one exception: apns sends once more with
	// a new provider token when APNs refused the first as expired, without
	// acting on it), and gives up after the configured timeout or when ctx
	// ends (ErrTransient, wrapping the context's error, and Error.Ambiguous
	// when the request had reached the provider whole).
	Send(ctx context.Context, m *Message) error
}
