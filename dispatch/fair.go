package dispatch

// fairQueue shares picks between tenants in proportion to their weights:
// weighted fair queueing with virtual finish tags, one pick at a time.
// Picking tenant t (weight w) gives it the start tag s = max(V, finish[t])
// and the finish tag s + 1/w, and V, the virtual time, becomes s. The
// scheduler picks, among the tenants that have a job it can take, the one
// whose pick would finish first (tag). So:
//
//   - tenants that all wait get picks in proportion to their weights (3 and
//     1: three picks in four to the first);
//   - it is work-conserving: a tenant with nothing waiting is skipped, its
//     share going to the others, and someone is picked whenever anyone
//     waits;
//   - a tenant that comes back after waiting for nothing starts at V: idle
//     time earns no credit, so it cannot take a burst that starves the
//     others;
//   - none starves: a waiting tenant of weight w is picked at least once in
//     every ⌈W/w⌉+n picks, W the sum of the n waiting tenants' weights.
//
// Its state is a finish tag per tenant picked lately, whatever the queue a
// pick took a job from: a tenant's jobs on several lanes (its two fair
// lanes, its priority lane) share one share. The tags of tenants long
// behind V are dropped (they would restart at V anyway), so its size is
// bounded by the tenants picked lately, not by all that ever were.
//
// It is not safe for concurrent use; the fetch loop owns it.
type fairQueue struct {
	finish map[string]float64 // each tenant's last finish tag
	// start is the start tag of a waiting tenant's next pick, fixed while
	// it waits (it is a candidate at every pick); seen is the pick at
	// which it was last a candidate.
	start     map[string]float64
	seen      map[string]uint64
	picks     uint64
	v         float64
	pruneNext int // prune when this many tags are kept
}

// maxFairTags bounds the tags kept: past it, the tags within one pick of V
// are dropped too (a credit of less than one pick each).
const maxFairTags = 1 << 16

func newFairQueue() *fairQueue {
	return &fairQueue{finish: map[string]float64{}, start: map[string]float64{}, seen: map[string]uint64{}, pruneNext: 1024}
}

// tag is the finish tag a pick of tenant t, of weight w (> 0), would get
// now; asking marks t a candidate of this pick. A tenant that was not a
// candidate at the previous pick starts waiting now: at max(V, its last
// finish).
func (q *fairQueue) tag(t string, w float64) float64 {
	s, ok := q.start[t]
	if !ok || q.seen[t] < q.picks {
		s = max(q.v, q.finish[t])
		q.start[t] = s
	}
	q.seen[t] = q.picks + 1
	return s + 1/w
}

// peek is tag without marking t a candidate.
func (q *fairQueue) peek(t string, w float64) float64 {
	if s, ok := q.start[t]; ok && q.seen[t] >= q.picks {
		return s + 1/w
	}
	return max(q.v, q.finish[t]) + 1/w
}

// charge picks t for n jobs (n ≥ 1) at once: its finish tag is its
// start + n/w, which is its next start while it waits; V is the start of
// the last of the n.
func (q *fairQueue) charge(t string, w float64, n int) {
	s := q.tag(t, w) - 1/w
	q.finish[t] = s + float64(n)/w
	q.start[t] = q.finish[t]
	q.v = s + float64(n-1)/w
	q.picks++
	q.maybePrune()
}

// chargeEach picks n jobs charged to t each as if to a tenant of its own
// picked now (a guess standing for tenants not seen yet): V does not move
// past their start. Their charges move to their real tenants as they come
// (transfer).
func (q *fairQueue) chargeEach(t string, w float64, n int) {
	s := q.tag(t, w) - 1/w
	q.finish[t] = s + float64(n)/w
	q.start[t] = q.finish[t]
	q.v = s
	q.picks++
	q.maybePrune()
}

// transfer moves one pick charged to from (weight wf), a guess, to to
// (weight wt), the tenant whose job it took: from gets its tags back, to
// is charged as if it had been picked (V does not move).
func (q *fairQueue) transfer(from string, wf float64, to string, wt float64) {
	if from == to {
		return
	}
	q.refund(from, wf)
	s := max(q.v, q.finish[to])
	if st, ok := q.start[to]; ok && q.seen[to] >= q.picks {
		s = st // waiting: its start is fixed
	}
	q.finish[to] = s + 1/wt
	q.start[to] = q.finish[to]
	if _, ok := q.seen[to]; !ok {
		q.seen[to] = 0 // kept, and pruned, with the others (never a candidate)
	}
	q.maybePrune()
}

// refund gives back one pick charged to t (a guess whose job did not come).
func (q *fairQueue) refund(t string, w float64) {
	if f, ok := q.finish[t]; ok {
		q.finish[t] = f - 1/w
		q.start[t] = q.finish[t]
	}
}

// maybePrune prunes once the tags kept have doubled since the last time:
// every way a tag is written (charge, chargeEach, transfer: the many
// tenants behind one fair lane come in through the last two) ends here.
func (q *fairQueue) maybePrune() {
	if len(q.seen) < q.pruneNext {
		return
	}
	q.prune()
	q.pruneNext = max(1024, 2*len(q.seen))
}

// prune drops the tags that no longer matter: those of tenants not
// waiting whose finish is at or behind V (they restart at V), and when
// too many remain those within one pick of it. A tenant is in seen if it
// is in start or finish (tag marks every candidate), so seen is walked.
func (q *fairQueue) prune() {
	drop := func(ahead float64) {
		for t, at := range q.seen {
			if at < q.picks && q.finish[t] <= q.v+ahead {
				delete(q.finish, t)
				delete(q.start, t)
				delete(q.seen, t)
			}
		}
	}
	drop(0)
	if len(q.seen) > maxFairTags {
		drop(1)
	}
}
