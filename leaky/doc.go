// Package leaky is a provider's leaky bucket: a bounded virtual queue, shared
// by every worker of the fleet, that drains at the provider's contract rate.
// Bursts of jobs become latency, never a burst at the provider.
//
// # The maths (GCRA, virtual scheduling)
//
// The whole state of a provider's queue is one instant, tat (the theoretical
// arrival time): when the queue will have drained. A reservation of cost k
// units at time now takes
//
//	slot  = max(now, tat, pause end)
//	full  if slot − now > max_queue_delay   (RetryAfter = slot − now − max_queue_delay)
//	else  tat = slot + k·interval            (Delay = slot − now)
//
// and the worker sleeps Delay, then sends. Successive slots are therefore at
// least one interval per unit apart, however many workers and processes
// reserve: the queue holds at most Rate × MaxQueueDelay units, and its depth
// now is (tat − now) / interval units. There is no burst tolerance: after an
// idle gap slot = now, so an idle provider never receives a burst.
//
// # Units
//
// Time is integer microseconds. Backends return durations (Delay,
// RetryAfter), never instants, so a worker's clock skew cannot matter; the
// Redis backend reads the one Redis clock (TIME) for every decision.
// Reservation.Slot is the slot as microseconds since the Unix epoch on the
// backend's clock, for tests and tracing only. interval is per unit:
//
//	interval = 1 / (Rate × (1 − headroom)) seconds
//
// and a reservation of cost k advances tat by ⌈k × interval⌉ µs (rounded up
// once per reservation, so pacing never runs over the contract; above about
// 10 000 units/s the rounding makes it run noticeably under).
//
// # Headroom
//
// Go timers wake about ±1 ms late under load, so workers that sleep exactly
// to their slots would put 101 sends into some 1 s windows of a 100/s
// contract. The queue therefore paces a little under the contract: by
// default 1.5 % (DefaultHeadroom, WithHeadroom), i.e. a 100/s contract is
// paced at 98.5/s, one send every 10.153 ms.
//
// # Many reservations at once
//
// Redis.ReserveGroup reserves the slots of several jobs in one script run
// (one EVALSHA, one read of the clock, of the state and of the failover
// guard's run_id), answering exactly as that many Reserve calls at one
// instant, in order; the dispatcher reserves all the slots one of its
// pipelines carries that way.
//
// # Adaptive rate
//
// A contract with Adaptive paces at an effective rate, kept in Redis beside
// the queue so that every process paces on it at once. Its state is the
// last backoff: the rate r0 it set at t0 and its target tg, just under
// where the provider's limit was met. Without one the effective rate is
// Rate; else, at t, with d = t − t0 − Quiet and climb(x) = IncreasePerS ×
// max(0, x),
//
//	eff(t) = r0                                          while d ≤ 0 (quiet)
//	eff(t) = min(tg, r0 + climb(d))                      the ramp back to the target, held there
//	       + climb(d − H) × (1 + (d − H)/AdaptiveConvex)  from H = AdaptiveHold on: the probe
//
// clamped to [MinRate, Rate] (on every read, so a Rate lowered by a reload
// caps it at once). Backoff, on a 429 or a provider's explicit throttling,
// is Pause plus, when no pause was in force at the call (the workers that
// met the same 429 act once, since the first one's pause is in force for
// the others), a new state at t0 = now. The throttled sends were paced at
// e = eff(te), te = now − AdaptiveLag − the queue's depth (tat − now: the
// slot sent at the 429 was reserved that long before; scaled by eff(now)/e
// when e is lower, as the queue held as many slots then), not before the
// last t0:
//
//   - during a probe (at te or now), the provider took the target for the
//     whole hold and refused the climb above it: r0 = tg = max(tg, e ×
//     AdaptiveKeep), held again from now;
//   - during the ramp, the limit lies about e: r0 = tg = e × AdaptiveKeep;
//   - otherwise (a rate held, or none yet), the limit fell somewhere below
//     e: r0 = e × Decrease (or × AdaptiveEase, when gentler, if the state
//     held a target a ramp or a probe had found: a drift) and tg = e ×
//     AdaptiveKeep, which the ramp from below finds the limit on its way to.
//
// So the fleet returns to just under a limit it found quickly, holds it (its
// sends paced AdaptiveKeep × (1 − headroom) of the rate the 429 came at: as
// far under the provider's limit as the headroom keeps a contract under its
// rate), and probes above it once per Quiet + AdaptiveHold, slowly past the
// old limit and faster beyond, as TCP CUBIC grows toward and past its last
// maximum; the leaky package's simulation tests (adaptive_sim_test.go) hold
// the figures: 57/s of a real 60/s behind a 100/s contract, a raised limit
// found within 30 s. A state written before targets (tg absent) climbs to
// Rate as the additive increase did. Resume leaves the state as it is.
// A reservation's interval comes from eff at its now, with the headroom:
// at the full rate exactly a plain contract's, below it
//
//	inc = max(plain inc, ⌈cost × 10¹² / pace⌉ µs),  pace = max(1, ⌊eff × (1 − headroom)⌋)
//
// with rates in quanta of 10⁻⁶ units/s: Rate and MinRate rounded to the
// nearest quantum, IncreasePerS to the nearest quantum per second (at least
// one), the climbs floored to whole quanta (the probe's factor applied to
// the climb floored by AdaptiveConvex in ms), e × Decrease, e × AdaptiveKeep,
// e × AdaptiveEase and eff × (1 − headroom) floored (each one IEEE-754
// double multiplication), and the depth's scaling floored (a double
// multiplication and division), each correctly rounded in Go and Lua
// alike. All else is integer arithmetic below 2^53, so Memory and the
// scripts agree exactly; that bounds an adaptive contract to
// MaxAdaptiveRate, MaxIncreasePerS and costs up to MaxAdaptiveCost. Shape
// reads the effective rate and the target (for a gauge or a status page).
//
// # Quotas
//
// Contract.Quotas count units per window beside the rate, exactly and
// fleet-wide: at most Limit units get slots in each window of length Per,
// windows aligned to the Unix epoch on the backend's clock (24h is a UTC
// day, 1m a clock minute). A reservation whose slot s falls in a quota's
// window k = ⌊s / Per⌋ with used_k + cost > Limit moves to the start of
// window k+1, and every quota (and the pause) is checked again; past
// max_queue_delay it is refused with Reservation.Quota naming the last quota
// that moved it and RetryAfter running to when that slot comes within
// max_queue_delay. Otherwise its units count in each quota's window of its
// final slot. Slots never go back (tat only moves back to the slot of a
// cancelled reservation that nothing followed, or on Resume to no earlier
// than the last slot granted), so one (window, used) pair per quota holds
// the count; a cancel that gives a reservation back gives its units back
// too. A cost above a quota's limit is refused (an error), as it never fits.
// Changing a quota's Per starts its count afresh.
//
// # Redis keys
//
// Every key of a provider shares one hash tag, so each script touches a
// single Redis Cluster slot:
//
//	{<prefix>p:<provider>}:tat    hash: tat (µs), seq (write counter), node (run_id of the writer);
//	                              shaped contracts add r0, t0, tg (the last backoff: rate quanta, µs, target quanta)
//	                              and q<j>s, q<j>u (quota j's window start, µs, and its units)
//	{<prefix>p:<provider>}:pause  string: the pause end (µs)
//
// The state key expires when it has been idle for the queue's drain time plus
// max_queue_delay plus the idle TTL (WithIdleTTL, default 24 h), and never
// before the quota windows it counts in end and the adaptive climb is back
// at Rate; the pause key shortly after the pause ends. A plain contract
// (no Adaptive, no Quotas) reads and writes exactly what it did before them,
// in the same one script run. No expiry is past luapre.MaxTTL (735 days),
// and every script checks its arguments before it writes: one out of what
// Contract and the options allow is an error naming it, nothing written.
//
// # Cold start and loss of state
//
// Slots handed out before Redis lost its state are still pending: workers are
// sleeping towards them. The last of them can be as late as now +
// max_queue_delay and still owes its interval. A provider whose state is
// missing therefore starts as if its queue were full:
//
//	tat = now + max_queue_delay + maxCost·interval
//
// (maxCost is WithMaxCost, default 1). The cost: the first send after a cold
// start waits max_queue_delay + interval, and reservations in between are
// refused (queue full) for one interval. Redis cannot tell a lost state from
// a provider it has never seen, nor from one idle for longer than the idle
// TTL, so those would pay this too. A caller that knows better says so with
// Contract.ColdStart: the dispatcher keeps how far ahead the fleet handed out
// each provider's slots outside Redis (a JetStream KV bucket, which a Redis
// wipe does not touch), and passes 0 on a first start, or the time to the
// last slot handed out when the fleet has been idle. WithIdleTTL(0) expires
// the state as soon as its queue has drained.
//
// A Redis that lost only the latest writes is worse than an empty one: a
// Redis Cluster or Sentinel failover promotes a replica, and replication is
// asynchronous, so the replica's tat may be older than slots already handed
// out; a restart from an RDB or AOF file reloads an old tat the same way.
// Each write therefore stores the run_id of the Redis server that made it
// (INFO server), and a state written by another server, or by an earlier run
// of this one, is treated as cold: tat = max(tat, now + max_queue_delay +
// maxCost·interval). No WAIT is needed. The cost is one INFO call inside the
// reserve script (and in cancel, when it would give a slot back): about 7 µs
// of Redis CPU per call (redis-benchmark: a script doing only that INFO tops
// out near 115 000/s against 600 000/s for a trivial one), 5–25 % of a
// reserve's throughput in the loopback benchmarks, and one cold start per
// provider after every failover, restart or slot migration. Cancel refuses to give back a
// slot on such a state. A Redis that cannot come back with an old state (no
// replicas, no persistence) can drop the guard with WithoutFailoverGuard.
//
// Residual risks: (1) a reservation of cost k > maxCost made just before a
// loss may overlap the first slot after it by (k − maxCost) intervals, so set
// WithMaxCost to the largest cost you reserve (SMS segments); (2) the Redis
// host's clock stepping forward by x (an NTP step rather than a slew) lets
// new slots start up to x early against slots already handed out — run
// Redis hosts with a slewing clock; (3) a 429 pause recorded before the loss
// is forgotten (the cold start covers pauses no longer than max_queue_delay;
// a longer one ends early and the provider's next 429 sets it again); (4) a
// quota's current window starts again from 0 after a Redis wipe (or from a
// replica's older count after a failover), so up to one Limit more may go in
// that window — a count the fleet did not keep elsewhere cannot be restored;
// (5) a lowered adaptive rate is forgotten, so pacing resumes at Rate until
// the provider's next 429 lowers it again; a cold start's lead, too, is one
// interval at Rate, not at the rate the lost state had lowered it to (the
// contract holds; the provider's lower limit may answer 429 once more).
//
// # Pause
//
// Pause(d), after a provider's 429, pushes every later slot past now + d
// (tat = max(tat, now + d)) and records the pause end, so that a worker
// already sleeping towards an earlier slot sees it with PausedFor before it
// sends, and reserves again instead of sending into the pause.
//
// # Concurrency
//
// Memory and Redis are safe for concurrent use by any number of goroutines;
// Redis is also safe across processes, since every operation is one atomic
// Lua script. The Memory backend keeps its state in the process: it starts a
// provider at now (it cannot lose its state while the process lives), never
// expires it, and suits tests, the demo and a single process.
package leaky
