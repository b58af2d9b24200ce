// Package inspect answers an operator's "why" from the fleet's live state:
// why a user's next job would wait or be dropped, why a provider's jobs
// wait, and what became of a job. It reads Redis (and, for jobs, the
// dead-letter stream) through the dispatcher's own limit set
// (limits.Redis), so every answer is read by the code that will
// decide, and it changes nothing: per-user caps are asked with
// userlimit's Peek (the algorithm's own script with its writes dropped),
// provider queues with leaky's read-only scripts, the ledger with plain
// reads.
//
// Three questions, one method each, each returning a value with JSON
// tags (never printing):
//
//   - Inspector.User: a (channel, user)'s cap: the rule, the window used and
//     left, when its next job would be allowed, and the cap's denials of the
//     user over the last hour and day (the counts `notifier top` reads);
//   - Inspector.Provider: a provider's contract and effective rate, its
//     queue's depth and delay, the next free send slot, a pause and its
//     reason, each live instance's circuit breaker and the tenants with jobs
//     waiting (from the instances' heartbeats);
//   - Inspector.Job: a job's ledger record (lease, sent, attempts, and how it
//     ended when it was not sent) and its dead letters, if any, without its
//     recipient, body, title or data.
//
// Times are on the Redis clock, the one every limit decides on. An answer
// is for the instant it was read: a job published then meets the same
// state, unless other jobs take the room first.
//
// `notifier explain` and the metrics port's /explain are built on it.
package inspect
