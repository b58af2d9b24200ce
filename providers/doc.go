// Package providers sends notifications to the outside world: the Provider
// interface, the error classes every provider returns (permanent, transient,
// rate limited with a Retry-After), the provider configuration with its
// defaults and validation, SMS segment counting for segment-priced
// contracts, a masking helper for logs and error details, and a Registry
// that builds every configured provider.
//
// Providers know nothing of NATS or Redis: the dispatcher builds a Message
// from a queue job, waits for its leaky-bucket slot and calls Send. Send is
// one attempt: a provider never retries on its own and never logs on the hot
// path; the caller decides what an error means for the job from its class:
//
//	err := p.Send(ctx, m)
//	var rl *providers.RateLimitedError
//	switch {
//	case err == nil:
//		// sent
//	case errors.As(err, &rl):
//		// 429: pause the provider fleet-wide for rl.RetryAfter
//	case errors.Is(err, providers.ErrPermanent):
//		// dead-letter with reason "rejected"
//	default:
//		// providers.ErrTransient: retry with backoff, counting an attempt
//	}
//
// Error texts are one line and never carry the recipient's address, the
// message body or a secret, so they can go straight into the
// Notifier-Detail header of a dead letter.
//
// Kinds built in this version: webhook (SPEC §7) and log. The twilio, fcm,
// apns and smtp kinds are configured and validated here, but NewRegistry
// refuses them until their clients are built.
package providers
