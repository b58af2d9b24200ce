// Package worker is `notifier run` as a library: Run builds a dispatcher
// from the configuration (providers, NATS consumers, limits shared through
// Redis with the fallback redis.on_failure asks for, the fleet's
// heartbeat, tracing) and runs it with its metrics port (/metrics,
// /healthz, /readyz, the /status page, /explain and the providers'
// delivery callbacks) and its reloader (SIGHUP and changes of the file),
// until its context ends.
//
// Dev is `notifier dev` (a JetStream server on a kept directory, sandbox
// providers, limits in memory) through the same Dispatch, and Gateway the
// server of `notifier gateway`.
package service
