// Package userlimit is the per-(channel, user) cap of the notifier: at most
// Rule.Limit jobs per user on a channel in any Rule.Window ("nobody gets 200
// pushes"). A Limiter decides one job at a time; the dispatcher drops or
// defers what it refuses (Rule.OnExceed).
//
// There are two backends with one behaviour, checked by one conformance suite
// (package userlimittest) and a property test that drives both with the same
// clock and requires the same decision at every step:
//
//   - Redis: state shared by every process through Redis or Redis Cluster.
//     Each decision is one atomic Lua script (EVALSHA, EVAL when the server
//     lost its script cache) that reads the server's TIME, so no worker's
//     clock matters. Redis.AllowCmd queues a decision on a pipeline, and a
//     Group makes the decisions of many jobs in one script run (the same
//     answers as one call each at one instant).
//   - Memory: state in this process, with an injectable clock; for the demo
//     and as the fallback while Redis is unreachable.
//
// # Choosing an algorithm
//
//   - sliding_log (the default): exact. At most limit jobs in every interval
//     of one window, whatever the timing. Keeps one entry per job of the
//     window, so limits above 100000 are refused.
//   - sliding_window: approximate, O(1) counting state for any limit. Counts
//     jobs in fixed windows aligned to the Unix epoch and estimates the
//     sliding window as c + p·(window−e)/window (c: this fixed window's count,
//     p: the previous one's, e: time since this fixed window began). A job is
//     allowed when the estimate with it is at most limit. Use it for large
//     limits.
//   - fixed_window: one counter per epoch-aligned window. Cheapest to reason
//     about, but up to 2×limit pass in a short time across a boundary
//     (limit at the end of one window, limit at the start of the next).
//   - token_bucket: limit is the burst, and limit tokens refill per window
//     (one every window/limit, rounded up to a whole microsecond, so never
//     faster than limit per window). Smooths sends instead of counting them.
//     GCRA, kept exact for instants decided out of order by keeping the
//     window's admissions; limits up to 1,000.
//
// # The error bound of sliding_window
//
// The estimate assumes the previous window's p jobs were spread evenly. At
// each admission the true count of the trailing window is at most
// limit + ⌊p·e/window⌋, so never more than 2·limit−1, reached only when all
// of the previous window's jobs came at its very end. It can also admit fewer
// than limit when they came early. Inside a single fixed window (p = 0) it is
// exact. The Redis and in-memory backends compute the estimate with the same
// float64 operations in the same order and agree to the bit.
//
// # Instants: counting a job when it is sent
//
// A decision is for an instant. Allow decides for now; AllowAt for a given
// instant, the time the job will really be sent. The dispatcher decides
// every job for now when it takes it and, when the job's send slot in its
// provider's queue lies further off, moves the job's admission to the slot
// with AllowAt. So the cap counts each job where the user feels it: a job
// admitted now and sent 3 s later from a queue counts 3 s later, and two
// jobs admitted a window apart but sent together are never both let
// through. Instants may be decided in any order (a job's slot may lie
// behind another's decided earlier), and each algorithm keeps its bound
// over the instants admitted:
//
//   - sliding_log counts, for an instant t, every entry after t − window,
//     those ahead of t too: no window ever holds more than limit;
//   - fixed_window keeps a counter per fixed window: at most limit in each;
//   - sliding_window keeps a counter (and the earliest offset admitted) per
//     fixed window; an admission must also keep the jobs already admitted
//     for the next window within their estimate, so the bound below holds;
//   - token_bucket is GCRA on the instants: at most limit + d/T in any
//     stretch of length d, in whatever order they are decided.
//
// TestPropertySendsKeepTheBound checks these bounds under random decisions
// and moves made the way the dispatcher makes them.
//
// # Idempotency
//
// Allow takes the job id. The same job id decided again for now within the
// window after it was admitted (a JetStream redelivery) is allowed again
// without counting twice, for every algorithm, where its admission stands
// (Result.At): sliding_log and token_bucket find the id in their log; the
// others keep a marker per admitted job under the same hash tag that lapses
// one window after the admission. Decided with AllowAt for another instant,
// the job's admission is withdrawn and the job decided anew, so it still
// counts once; denied there, it holds no admission. Every algorithm
// withdraws exactly, whatever was admitted since: token_bucket keeps the
// window's admissions (not only GCRA's one instant of state, which cannot
// give one job's token back once another was admitted after it, and denied
// two of three jobs of a burst moved to their send slots). A denied
// decision counts nothing and leaves no marker, and an id decided again
// after its window is a new job.
//
// # Memory per key
//
// Measured on Redis 7.0 with 20-character job ids: sliding_log about 40 bytes
// per job of the window while the log is small (up to 128 entries), about 116
// above, and token_bucket the same plus one string; the other algorithms
// about 100 bytes of counting state plus about 120 bytes per job admitted in
// the last window (the markers). So every algorithm's memory grows with the
// jobs admitted per window; only sliding_window and fixed_window take large
// limits without refusing them (sliding_log refuses limits above 100,000,
// token_bucket above 1,000: a decision for an instant before its newest
// admission reads the whole log).
// Memory keeps the same state in Go maps. Every key expires one second after
// its state stops mattering (end of window, bucket full again, marker
// lapsed), and Memory drops idle keys in an amortised sweep.
//
// # Keys and hash tags
//
// Every key of one decision starts with Tag(prefix, key) =
// "{<prefix>u:<channel>:<user>}", so one decision touches one Redis Cluster
// slot and the scripts run unchanged on a Cluster. Keys lists them. '%', '{'
// and '}' in any part, and ':' in the channel, are percent-encoded, so a user
// id may hold anything. Each algorithm has its own keys: switching a channel
// to another algorithm starts it from empty state.
//
// # Concurrency
//
// Redis and Memory are safe for concurrent use. Redis decisions are atomic on
// the server: any number of goroutines and processes share one exact count.
//
// # Units
//
// Windows are time.Duration of at least 1ms and at most 366 days, used to the
// microsecond; limits are whole jobs. The scripts keep time as integer Unix
// microseconds and return integers (retry-after in µs); Result.RetryAfter is
// a time.Duration, exact to the microsecond: after waiting it, a job is
// allowed if nothing else was admitted meanwhile.
//
// When Redis restarts without persistence the state is gone and every user
// starts with a full limit again; a Limiter returns an error while Redis is
// unreachable and works again by itself when it is back.
package userlimit
