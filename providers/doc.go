// Package providers sends notifications to the outside world: the Provider
// interface, the error classes every provider returns (permanent and
// perhaps naming the recipient as gone, transient and perhaps ambiguous,
// rate limited with a Retry-After and a scope, the sender refused), the provider configuration with its defaults and
// validation, SMS segment counting for segment-priced contracts, a masking
// helper for logs and error details, a Registry that builds every
// configured provider, and the handler of Twilio's delivery status
// callbacks (Registry.TwilioCallbacks).
//
// Providers know nothing of NATS or Redis: the dispatcher builds a Message
// from a queue job, waits for its leaky-bucket slot and calls Send. Send is
// one attempt: a provider never retries on its own and never logs on the hot
// path; the caller decides what an error means for the job from its class:
//
//	err := p.Send(ctx, m)
//	var rl *providers.RateLimitedError
//	var pe *providers.Error
//	switch {
//	case err == nil:
//		// sent
//	case errors.As(err, &rl) && rl.Scope == providers.ScopeRecipient:
//		// 429 for this one recipient: defer this job alone by rl.RetryAfter
//	case errors.As(err, &rl):
//		// 429: pause the provider fleet-wide for rl.RetryAfter (plus
//		// jitter unless rl.Explicit: then it is the kind's backoff)
//	case errors.Is(err, providers.ErrSender):
//		// the provider refused the sender (credentials, account, its
//		// configuration): pause the provider fleet-wide, keep the job,
//		// let one job through every cfg.ProbeInterval as a probe
//	case errors.Is(err, providers.ErrRecipientGone):
//		// a permanent refusal naming the recipient as dead: suppress the
//		// recipient, then dead-letter with reason "rejected"
//	case errors.Is(err, providers.ErrPermanent):
//		// dead-letter with reason "rejected"
//	case errors.As(err, &pe) && pe.Ambiguous && !cfg.RetriesOnTimeout():
//		// the provider may have taken it: dead-letter with reason "ambiguous"
//	default:
//		// providers.ErrTransient: retry with backoff, counting an attempt,
//		// and not before pe.RetryAfter when it is set
//	}
//
// Error texts are one line and never carry the recipient's address, the
// message body or a secret, so they can go straight into the
// Notifier-Detail header of a dead letter.
//
// Kinds (SPEC §7), each a client of the real protocol whose base URL or
// host is configurable, so tests point it at a fake (testenv):
//
//	kind     type     protocol                                      secret
//	webhook  Webhook  POST <url>, the job as JSON                   credentials_env (optional bearer token), signing_secret_env (optional)
//	twilio   Twilio   Twilio Programmable Messaging, form + basic   credentials_env (auth token)
//	fcm      FCM      Firebase Cloud Messaging HTTP v1, bearer      credentials_env (token) or credentials_file (service account)
//	apns     APNs     APNs over HTTP/2, ES256 provider JWT          key_file (.p8 key)
//	smtp     SMTP     SMTP submission, STARTTLS + AUTH PLAIN        password_env
//	log      Log      one JSON line per send on stdout              -
//
// Each type's documentation gives its error mapping; docs/providers.md has
// the keys, secrets and mapping of every kind in one place. A secret is read
// once, when the provider is built, and is never in a Config, an error, a
// log line or the provider's printed form. Building a provider connects to
// nothing: the first Send opens the connection (and, for fcm with a service
// account, fetches the first access token), so it arrives somewhat later
// than the slot it left on.
//
// The conformance suites in providertest (Run for HTTP kinds, RunSMTP for
// smtp) hold every kind to the same mapping of answers onto classes.
package providers
