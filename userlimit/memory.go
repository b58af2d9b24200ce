package userlimit

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

// memShards is the number of independently locked parts of a Memory.
const memShards = 32

// sweepEvery is the fewest calls on a shard between two sweeps of its idle
// state.
const sweepEvery = 64

// Memory is a Limiter whose state lives in this process. It makes exactly the
// decisions the Redis backend makes for the same times (the arithmetic is the
// same, step for step), so it serves as the demo's limiter and as the
// fallback while Redis is unreachable; it is not shared between processes.
//
// Memory is safe for concurrent use; keys are spread over 32 independently
// locked shards. Memory stays bounded without a background goroutine: each
// call counts against its shard, and once a shard has had as many calls since
// its last sweep as that sweep left keys (at least 64), the call sweeps it,
// dropping every key whose state no longer matters (its window has passed).
// That costs O(1) per call amortised and keeps at most about twice the live
// keys, plus 64 per shard. Memory per key is that of
// the Redis backend: O(limit) for sliding_log, O(1) plus one marker per job
// admitted in the last window for the others. Use NewMemory; the zero value
// is not usable.
type Memory struct {
	now    func() time.Time
	seed   maphash.Seed
	shards [memShards]memShard
}

type memShard struct {
	mu   sync.Mutex
	m    map[memKey]*memState
	ops  int // calls since the last sweep
	next int // sweep once ops reaches this: max(sweepEvery, keys left by the last sweep)
}

type memKey struct {
	key Key
	alg Algorithm
}

// memState is one key's state for one algorithm. Times are Unix µs.
type memState struct {
	expire int64 // the state no longer matters once now >= expire

	// sliding_log: the window's admissions in time order, and their ids.
	log []logEntry
	ids map[string]int64

	// fixed_window: window index w and its count c. sliding_window: also
	// p, the count of window w-1. token_bucket: tat.
	w, c, p int64
	tat     int64

	// Markers of the O(1) algorithms: job id -> when it lapses.
	jobs     map[string]int64
	jobsMax  int64 // latest lapse of any marker
	pruneLen int   // prune lapsed markers once len(jobs) reaches this
}

type logEntry struct {
	t  int64
	id string
}

// NewMemory returns an empty in-memory limiter reading time from now
// (time.Now when nil). Only the Unix microseconds of now matter.
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	m := &Memory{now: now, seed: maphash.MakeSeed()}
	for i := range m.shards {
		m.shards[i].m = make(map[memKey]*memState)
	}
	return m
}

// Allow decides one job. See Limiter. It returns the context's error when
// ctx is already done.
func (m *Memory) Allow(ctx context.Context, key Key, jobID string, rule Rule) (Result, error) {
	rule, err := prepare(key, jobID, rule)
	if err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, wrapDecide(key, rule, err)
	}
	now := m.now().UnixMicro()
	mk := memKey{key: key, alg: rule.Algorithm}
	sh := &m.shards[maphash.Comparable(m.seed, mk)%memShards]

	sh.mu.Lock()
	defer sh.mu.Unlock()
	st := sh.m[mk]
	if st == nil {
		st = &memState{}
		sh.m[mk] = st
	}
	limit, window := int64(rule.Limit), rule.windowMicros()
	var allowed bool
	var remaining, retry int64
	switch rule.Algorithm {
	case SlidingLog:
		allowed, remaining, retry = st.slidingLog(now, window, limit, jobID)
	case SlidingWindow:
		allowed, remaining, retry = st.slidingWindow(now, window, limit, jobID)
	case FixedWindow:
		allowed, remaining, retry = st.fixedWindow(now, window, limit, jobID)
	case TokenBucket:
		allowed, remaining, retry = st.tokenBucket(now, window, limit, jobID)
	}
	sh.maybeSweep(now)
	return result(allowed, remaining, retry), nil
}

// maybeSweep drops the shard's idle state once enough calls have passed
// since the last sweep that the sweep costs O(1) per call.
func (sh *memShard) maybeSweep(now int64) {
	sh.ops++
	if sh.ops < max(sweepEvery, sh.next) {
		return
	}
	for k, st := range sh.m {
		if st.expire <= now {
			delete(sh.m, k)
		}
	}
	sh.ops, sh.next = 0, len(sh.m)
}

// marker reports whether job was admitted within its window.
func (st *memState) marker(job string, now int64) bool {
	lapse, ok := st.jobs[job]
	return ok && lapse > now
}

// mark records job as admitted until lapse, dropping lapsed markers when
// their number has doubled since the last prune.
func (st *memState) mark(job string, now, lapse int64) {
	if st.jobs == nil {
		st.jobs = make(map[string]int64)
	}
	if len(st.jobs) >= st.pruneLen {
		for id, l := range st.jobs {
			if l <= now {
				delete(st.jobs, id)
			}
		}
		st.pruneLen = max(16, 2*len(st.jobs))
	}
	st.jobs[job] = lapse
	st.jobsMax = max(st.jobsMax, lapse)
}

// floorDiv is floor(a / b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
