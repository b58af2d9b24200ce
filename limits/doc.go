// Package limits is the dispatcher's limit backend: one Set bundles the
// job ledger, the per-user caps, the fleet bucket, the providers' leaky
// queues, the suppression list, the digests and the pause reasons, either
// shared by the fleet in Redis (Redis) or in this process's memory (Memory:
// the demo, and the fallback of redis.on_failure: local).
//
// The dispatcher asks a Set through one interface whatever it runs on:
// Admit (a job's claim, suppression check, cap and speculative send slot),
// AllowAt (the cap moved to the send slot) and RecordSent. On Redis each of
// these rides on a pipeline shared with the process's other workers (a
// group commit: one script run per kind of decision for all of them); in
// memory the same decisions are made one after another. Package inspect
// reads the same Set, so an operator's answer is read by the code that
// decides.
package limits
