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
// the Redis backend: O(limit) for sliding_log and token_bucket, O(1) plus
// one marker per job admitted in the last window for the others. Use NewMemory; the zero value
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

	// sliding_log, token_bucket: the admissions in time order (instants may
	// lie ahead of now), and their ids.
	log []logEntry
	ids map[string]int64

	// fixed_window and sliding_window: per fixed window k, the jobs
	// admitted for instants in it (and, sliding_window, the earliest
	// offset of one). token_bucket: GCRA's tat over the admissions folded
	// out of the log (0: none).
	wins map[int64]*memWindow
	tat  int64

	// Markers of the O(1) algorithms: job id -> its admission.
	jobs     map[string]memMarker
	jobsMax  int64 // latest lapse of any marker
	pruneLen int   // prune lapsed markers once len(jobs) reaches this
}

// memWindow is one fixed window's count.
type memWindow struct {
	n    int64 // jobs admitted for instants in the window
	emin int64 // sliding_window: the earliest offset of one of them
}

// memMarker is an admitted job: the instant its admission stands at, when
// the marker lapses.
type memMarker struct {
	at, lapse int64
}

type logEntry struct {
	t  int64
	id string
}

// NewMemory returns an empty in-memory limiter; its clock is WithNow's,
// else time.Now.
func NewMemory(opts ...Option) *Memory {
	now := buildOptions(opts).now
	if now == nil {
		now = time.Now
	}
	m := &Memory{now: now, seed: maphash.MakeSeed()}
	for i := range m.shards {
		m.shards[i].m = make(map[memKey]*memState)
	}
	return m
}

// Allow decides one job for now. See Limiter. It returns the context's
// error when ctx is already done.
func (m *Memory) Allow(ctx context.Context, key Key, jobID string, rule Rule) (Result, error) {
	return m.decide(ctx, key, jobID, rule, time.Time{})
}

// AllowAt decides one job for the instant at. See Limiter.
func (m *Memory) AllowAt(ctx context.Context, key Key, jobID string, rule Rule, at time.Time) (Result, error) {
	if at.IsZero() {
		return Result{}, wrapDecide(key, rule.WithDefaults(), errZeroInstant)
	}
	return m.decide(ctx, key, jobID, rule, at)
}

func (m *Memory) decide(ctx context.Context, key Key, jobID string, rule Rule, atTime time.Time) (Result, error) {
	rule, err := prepare(key, jobID, rule)
	if err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, wrapDecide(key, rule, err)
	}
	now := m.now().UnixMicro()
	at, move := now, false
	if !atTime.IsZero() {
		at, move = max(atTime.UnixMicro(), now), true
		if at-now > MaxAhead.Microseconds() {
			return Result{}, wrapDecide(key, rule, errTooFarAhead)
		}
	}
	mk := memKey{key: key, alg: rule.Algorithm}
	sh := &m.shards[maphash.Comparable(m.seed, mk)%memShards]

	sh.mu.Lock()
	defer sh.mu.Unlock()
	st := sh.m[mk]
	if st == nil {
		st = &memState{}
		sh.m[mk] = st
	}
	d := decision{now: now, at: at, move: move, limit: int64(rule.Limit), window: rule.windowMicros(), job: jobID}
	o, _ := st.decide(rule.Algorithm, d) // prepare validated the algorithm
	sh.maybeSweep(now)
	return result(o.allowed, o.remaining, o.retry, o.stands), nil
}

// decide runs algorithm alg's decision d on st; false for an unknown
// algorithm.
func (st *memState) decide(alg Algorithm, d decision) (outcome, bool) {
	switch alg {
	case SlidingLog:
		return st.slidingLog(d), true
	case SlidingWindow:
		return st.slidingWindow(d), true
	case FixedWindow:
		return st.fixedWindow(d), true
	case TokenBucket:
		return st.tokenBucket(d), true
	}
	return outcome{}, false
}

// decision is one decision's arguments, as the scripts take them (µs).
type decision struct {
	now, at       int64
	move          bool // at was given: a job admitted at another instant is moved
	limit, window int64
	job           string
}

// outcome is one decision's answer, as the scripts return it (µs).
type outcome struct {
	allowed          bool
	remaining, retry int64
	stands           int64 // the instant the job's admission stands at
}

func allow(remaining, stands int64) outcome {
	return outcome{allowed: true, remaining: max(remaining, 0), stands: stands}
}

func deny(retry int64) outcome { return outcome{retry: retry} }

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

// admitted returns the job's unlapsed admission.
func (st *memState) admitted(job string, d decision) (memMarker, bool) {
	mk, ok := st.jobs[job]
	return mk, ok && mk.at+d.window > d.now
}

// mark records job as admitted, dropping lapsed markers when their number
// has doubled since the last prune.
func (st *memState) mark(job string, now int64, mk memMarker) {
	if st.jobs == nil {
		st.jobs = make(map[string]memMarker)
	}
	if len(st.jobs) >= st.pruneLen {
		for id, l := range st.jobs {
			if l.lapse <= now {
				delete(st.jobs, id)
			}
		}
		st.pruneLen = max(16, 2*len(st.jobs))
	}
	st.jobs[job] = mk
	st.jobsMax = max(st.jobsMax, mk.lapse)
}

// window returns the count of fixed window k, creating it.
func (st *memState) window(k int64) *memWindow {
	if st.wins == nil {
		st.wins = make(map[int64]*memWindow)
	}
	w := st.wins[k]
	if w == nil {
		w = &memWindow{emin: -1}
		st.wins[k] = w
	}
	return w
}

// count is the count of fixed window k (0 when it has none).
func (st *memState) count(k int64) int64 {
	if w := st.wins[k]; w != nil {
		return w.n
	}
	return 0
}

// trimWindows drops the windows before from, and returns the last window
// left (at least cur).
func (st *memState) trimWindows(from, cur int64) int64 {
	last := cur
	for k := range st.wins {
		if k < from {
			delete(st.wins, k)
		} else if k > last {
			last = k
		}
	}
	return last
}

// floorDiv is floor(a / b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
