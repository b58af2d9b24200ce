// Package worker is `notifier run` as a library: Run builds a dispatcher
// from the configuration (providers, NATS consumers, limits shared through
// Redis with the fallback redis.on_failure asks for, the fleet's
// heartbeat, tracing) and runs it with its metrics port (/metrics,
// /healthz, /readyz, the /status page, /explain and the providers'
// delivery callbacks) and its reloader (SIGHUP and changes of the file),
// until its context ends.
//
// Dispatch is the part `notifier dev` shares: a dispatcher on limits the
// caller built, with the same metrics port.
package worker
