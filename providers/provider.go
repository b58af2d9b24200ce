package providers

import (
	"context"

	"github.com/notifier/notifier/queue"
)

// Message is what a provider sends: the job (queue.Job, SPEC §2), whose
// fields it carries as its own, and the key the dispatcher made unique
// across tenants. A field added to the job reaches every provider with no
// change here, and the webhook body, the Message as JSON, is the job as
// JSON.
type Message struct {
	queue.Job
	// Key is the job's id made unique across tenants (a job id is unique
	// only within its tenant; queue.MsgID of the tenant the job was
	// delivered for: the id itself for the default tenant, "<tenant>/<id>"
	// for another): the idempotency key. What a receiver, a provider or a
	// device de-duplicates on is derived from it (Idempotency-Key,
	// webhook-id, apns-id, apns-collapse-id, the mail's Message-ID); it
	// falls back to ID when empty. It is in no body.
	Key string `json:"-"`
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
