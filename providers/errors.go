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
	// *RateLimitedError carrying how long to pause.
	ErrRateLimited = errors.New("provider rate limit")
)

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
	Class    error  // ErrPermanent or ErrTransient
	Status   int    // the HTTP status (smtp: the reply code) answered, 0 when no answer was received
	Detail   string // one line, safe to log and to put in Notifier-Detail
	Err      error  // the underlying cause (transport error, context error), or nil
	// RetryAfter is, for a transient failure whose answer carried a
	// Retry-After header (a 503 of an overloaded provider), how long the
	// provider asked us to wait; 0 when it did not say. A hint for the
	// retry's delay: unlike a rate limit it does not pause the provider.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Provider + ": " + e.Detail }

// Unwrap exposes the class and the cause to errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Class}
	}
	return []error{e.Class, e.Err}
}

// RateLimitedError is the error of a Send the provider answered with 429 (or
// an equivalent rate-limit answer of its protocol). errors.Is(err,
// ErrRateLimited) is true for it.
type RateLimitedError struct {
	Provider string
	Status   int // the HTTP status answered (429)
	// RetryAfter is how long the provider asked us to wait: the parsed
	// Retry-After header (capped at MaxRetryAfter, 0 for a date in the past),
	// or DefaultRetryAfter when the header was absent or unreadable.
	RetryAfter time.Duration
	// Explicit reports whether RetryAfter came from the provider's header
	// rather than DefaultRetryAfter.
	Explicit bool
	Detail   string // one line, safe to log and to put in Notifier-Detail
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
