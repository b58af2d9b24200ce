// Package globallimit is the fleet-wide worker-protection token bucket: a
// rate and a burst shared by every process through Redis. Over it, workers
// stop taking work and the backlog waits in JetStream, not in worker memory.
//
// It is also the repository's one token bucket: the same script
// (take.lua) and the same Go maths (MemoryStore, its twin) take a batch
// from many buckets at once, all or nothing (Batcher.TakeAll), which is
// how the gateway takes a request's jobs from its key's, its tenant's and
// the intake's buckets.
//
// # The maths
//
// The bucket holds at most Burst tokens and refills at Rate tokens per
// second. Its state is one instant, tat (microseconds on the Redis clock):
// the bucket is full when tat <= now, and tat − now is the time the missing
// tokens take to refill. With em(k) = ⌈k × 10⁶ / Rate⌉ µs, the time k tokens
// take, a Take of up to n tokens at now computes
//
//	base    = max(tat, now)
//	room    = now + em(Burst) − base          (µs of tokens available)
//	granted = the largest g <= n with em(g) <= room
//	tat     = base + em(granted)
//	wait    = tat + em(1) − em(Burst) − now   (when granted < n: the next token is due then)
//
// so over any interval of length t the store grants at most Burst + Rate·t
// tokens (Burst + Rate·t + 1 µs of rounding per grant, in the bucket's
// favour: every grant rounds its time up). Time is integer microseconds and
// every float operation is one multiplication or division followed by
// rounding, so Go (MemoryStore) and Lua (RedisStore) compute bit-identical
// answers.
//
// # Ranges
//
// Rate is from 1/86400 (a token a day) to 10⁶ (a token a µs, the
// resolution of tat), Burst from 1 to 10⁶, and em(Burst), the refill of an
// empty bucket, at most MaxRefill (24 h): every value take.lua computes is
// then an integer below 2^53 (k × 10⁶ ≤ 10¹², tat ≤ now + 8.64 × 10¹⁰), and
// the key lives at most a day and a second. Config.Validate refuses
// anything else, and so does take.lua, before it writes (an error naming
// the argument); it reads a tat more than MaxRefill ahead, which no valid
// Config writes, as no state.
//
// # Redis key
//
// One key, {<prefix>g} (the key is its own hash tag), a string holding tat.
// It expires a second after tat, when the bucket is full again: a missing
// key and a full bucket are the same state. Losing the key (restart,
// failover) lets the fleet take one burst early; that is the bucket's
// definition of an idle fleet, so nothing more is done about it.
//
// # Batches
//
// TakeAll takes n tokens from every bucket of a list, or none: granted
// only when em(n) <= room in every bucket, and then each bucket's tat
// moves to base + em(n). It answers each bucket's State: the whole tokens
// left, the wait until it holds n tokens (0 when granted), and the reset,
// until it is full (tat − now); n = 0 only reads. Its buckets' limits are
// not this package's Config but the caller's, so out-of-range values are
// clamped, not refused: a rate slower than burst per window (WithWindow,
// default MaxRefill) is taken as that, and a state further ahead than the
// bucket's refill (written under a larger burst, or corrupt) is read, and
// written back, as an empty bucket, where Take keeps a state as time owed
// up to MaxRefill (the table "configuration changes apply to the same
// state" of globallimittest). Every key of one TakeAll must share a hash
// tag on Redis Cluster.
//
// # Leasing
//
// A Bucket (one per process) takes up to L tokens per Redis call and hands
// them out locally, so a busy process makes one round trip per L jobs.
// Leased tokens that are not used within the lease TTL (default 1 s) expire,
// so a quiet process does not hoard them. The price is over-admission: the
// tokens a process holds when a window starts were taken before it, so in
// any window of length t the fleet admits at most
//
//	Burst + Rate·t + P·L    (P processes)
//
// LeaseSize picks L = max(1, min(⌊Rate × 10 ms⌋, ⌊Burst / 50⌋)), so the
// extra P·L is at most P × 2 % of Burst and at most P × 10 ms worth of
// Rate: with the default rate 2000/s and burst 500 (L = 10), 3 processes
// over-admit at most 30 tokens in any window, 1.2 % over 1 s (2500 tokens)
// and 0.5 % over 3 s. Set WithLeaseSize(1) for an exact fleet bucket at one
// round trip per job.
//
// # Concurrency
//
// MemoryStore, RedisStore and Bucket are safe for concurrent use. Bucket.Wait
// starts no goroutine: the waiters of a process elect one of themselves to
// call the Store (one Take in flight per process, never a herd of them); the
// others wait for its result, and when the store says the next token is due
// in d, the caller sleeps d (through the injectable sleeper) instead of
// polling. A cancelled ctx ends a Wait at once with ctx.Err().
package globallimit
