package providers

import (
	"errors"
	"fmt"
	"time"
)

// Error classes. Every error Send returns wraps exactly one of them, so
// callers branch with errors.Is.
var (
	// ErrPermanent: the provider refused the message for good (a 4xx other
	// than 408 and 429). Sending it again cannot succeed; dead-letter it with
	// reason "rejected".
	ErrPermanent = errors.New("permanent provider refusal")
	// ErrTransient: the attempt failed in a way a later attempt may not (5xx,
	// 408, timeout, connection error, the caller's context ending). Retry
	// with backoff; it counts as an attempt.
	ErrTransient = errors.New("transient provider failure")
	// ErrRateLimited: the provider answered 429. The error is a
	// *RateLimitedError carrying how long to pause, and what: the whole
	// provider, or one recipient (Scope).
	ErrRateLimited = errors.New("provider rate limit")
	// ErrSender: the provider refused the sender, not the message: its
	// credentials are wrong, expired or revoked, the account is suspended,
	// the sender id is not allowed. No job can be sent until that is fixed,
	// and none is at fault: pause the provider fleet-wide and keep the jobs
	// (never dead-letter them), until the credentials are reloaded, an
	// operator resumes it, or a probe after the pause goes through.
	ErrSender = errors.New("provider refused the sender")
)

// ErrRecipientGone marks, among permanent refusals, those in which the
// provider names the recipient itself as dead, whatever the message: an
// APNs 410 (Unregistered, ExpiredToken), FCM's UNREGISTERED, Twilio's 21610
// (the number replied STOP), 21211 and 21614 (not a valid, not a mobile
// number), an SMTP 5.1.1 (no such mailbox), a webhook receiver's 410 Gone.
// It is not a class of its own: an error that matches it with errors.Is is
// an *Error with Class ErrPermanent and RecipientGone set, so it matches
// ErrPermanent too. A caller that keeps a list of dead recipients (issue 28's
// suppression list) adds the recipient on it and dead-letters the job as
// any permanent refusal; one that does not can ignore it.
var ErrRecipientGone = errors.New("the provider says the recipient is gone")

// DefaultRetryAfter is the pause a RateLimitedError carries when the
// provider's 429 had no usable Retry-After header. SPEC §6 asks for 1 s with
// jitter; the jitter is the caller's, who knows the fleet.
const DefaultRetryAfter = time.Second

// Error is a permanent or transient failure of one Send. Its text is one
// line: the provider name and the detail (HTTP status, the provider's own
// reason or the kind of transport failure), never the recipient, the body or
// a secret.
type Error struct {
	Provider string // the provider's configured name
	Class    error  // ErrPermanent, ErrTransient or ErrSender
	Status   int    // the HTTP status (smtp: the reply code) answered, 0 when no answer was received
	Detail   string // one line, safe to log and to put in Notifier-Detail
	Err      error  // the underlying cause (transport error, context error), or nil
	// RetryAfter is, for a transient failure whose answer carried a
	// Retry-After header (a 503 of an overloaded provider), how long the
	// provider asked us to wait; 0 when it did not say. A hint for the
	// retry's delay: unlike a rate limit it does not pause the provider.
	RetryAfter time.Duration
	// Ambiguous reports, for a transient failure, that the request reached
	// the provider whole and no answer came back (a timeout or a connection
	// lost after the request was written; for SMTP, after the message's
	// final dot): the provider may have accepted it, so a retry may deliver
	// the message twice.
	Ambiguous bool
	// RecipientGone reports, for a permanent refusal, that the provider
	// named the recipient as dead (see ErrRecipientGone, which the error
	// then matches): every later message to it would be refused too.
	RecipientGone bool
}

func (e *Error) Error() string { return e.Provider + ": " + e.Detail }

// Unwrap exposes the class, ErrRecipientGone when RecipientGone is set, and
// the cause to errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	errs := []error{e.Class}
	if e.RecipientGone {
		errs = append(errs, ErrRecipientGone)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// RateLimitedError is the error of a Send the provider answered with 429 (or
// an equivalent rate-limit answer of its protocol). errors.Is(err,
// ErrRateLimited) is true for it.
type RateLimitedError struct {
	Provider string
	Status   int // the HTTP status answered (429)
	// RetryAfter is how long to wait: the parsed Retry-After header
	// (capped at MaxRetryAfter; 0 for a date in the past), or the kind's
	// backoff (DefaultRetryAfter, doubled over a run) when the header was
	// absent or unreadable. A provider-wide limit (ScopeProvider) waits at
	// least the backoff: a shorter header, "0" or a past date among them,
	// gives the backoff.
	RetryAfter time.Duration
	// Explicit reports whether RetryAfter came from the provider (its
	// header, or what its documentation asks for) rather than the kind's
	// backoff.
	Explicit bool
	Detail   string // one line, safe to log and to put in Notifier-Detail
	// Scope is what the provider throttled: the whole provider (the zero
	// value: pause it fleet-wide) or this one recipient (defer this job
	// alone by RetryAfter; the provider goes on for everyone else).
	Scope Scope
}

// Scope is what a rate limit applies to.
type Scope int

const (
	// ScopeProvider: the provider, project or account is over its rate.
	ScopeProvider Scope = iota
	// ScopeRecipient: one recipient (an APNs or FCM device token) got too
	// many messages; other recipients are not affected.
	ScopeRecipient
)

// String names the scope ("provider", "recipient").
func (s Scope) String() string {
	if s == ScopeRecipient {
		return "recipient"
	}
	return "provider"
}

func (e *RateLimitedError) Error() string {
	how := "default"
	if e.Explicit {
		how = "Retry-After"
	}
	return fmt.Sprintf("%s: %s, retry after %s (%s)", e.Provider, e.Detail, e.RetryAfter, how)
}

// Is makes errors.Is(err, ErrRateLimited) true.
func (e *RateLimitedError) Is(target error) bool { return target == ErrRateLimited }

// StatusClass names the outcome of a Send for the
// notifier_provider_requests_total status label: "2xx" for nil, "4xx" or
// "5xx" (or "1xx", "3xx") for an error carrying an HTTP status or SMTP reply
// code, and "error" when no answer was received.
func StatusClass(err error) string {
	if err == nil {
		return "2xx"
	}
	status := 0
	var pe *Error
	var rl *RateLimitedError
	switch {
	case errors.As(err, &rl):
		status = rl.Status
	case errors.As(err, &pe):
		status = pe.Status
	}
	if status < 100 || status > 599 {
		return "error"
	}
	return fmt.Sprintf("%dxx", status/100)
}
