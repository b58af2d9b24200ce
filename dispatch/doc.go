// Package dispatch is the worker that joins the job queue, the three rate
// limits and the providers (SPEC §1, §6).
//
// A Dispatcher runs a fixed pool of workers in one process. It pulls no more
// jobs from JetStream than it has free workers (the high lane first), and
// takes each job through:
//
//	decode ─invalid─► dead
//	provider lookup ─unknown─► dead
//	expires_at passed ─► suppressed (expired)
//	ledger claim ─already sent─► duplicate (ack)      ─busy─► wait
//	per-user cap ─over, drop─► suppressed (user_limit) ─over, defer─► later
//	global bucket ─empty─► wait
//	leaky queue reservation ─full─► wait; then sleep until the slot
//	provider pause? ─yes─► reserve again
//	send ─2xx─► (settler) ledger sent, ack
//	     ─429─► pause the provider fleet-wide, reserve again (no attempt used)
//	     ─5xx/408/timeout─► count an attempt in the ledger; retry after backoff or dead (max_attempts)
//	     ─other 4xx─► dead (rejected)
//
// The Redis work of a job goes in two exchanges, neither of them alone:
// before the send one pipeline carries its ledger claim, per-user cap and
// send slot (speculatively reserved), and after it the settler records it
// sent and then acknowledges it, off the worker's path. Every process's
// workers share their pipelines (a group commit, pipeBatcher), which also
// runs the claims, cap decisions and reservations of one pipeline as one
// script each; so a busy dispatcher makes a fraction of a round trip per
// job, and an idle one sends each request at once.
//
// While a job waits (a full leaky queue, an empty global bucket, a provider
// pause, a lease held by another worker, Redis down) its worker holds it and
// keeps it alive with InProgress: the backlog stays in JetStream and a NAK
// never burns a delivery. Waits longer than Options.MaxHold (a per-user
// deferral of minutes, a provider backoff) are handed back to JetStream with
// NakWithDelay instead, so a worker is never parked for long; the ledger, not
// the delivery count, is the retry budget.
//
// Shutdown (cancelling Run's context) stops fetching, releases every job that
// is still waiting (Nak without delay, so another process takes it at once)
// and lets the sends already at a provider finish, up to Options.StopTimeout.
package dispatch
