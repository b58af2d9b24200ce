package dispatch

import "math"

// fairQueue shares picks between tenants in proportion to their weights:
// weighted fair queueing with start and finish tags, one pick at a time.
// A tenant that starts waiting gets the start tag max(V, its last finish),
// where V, the virtual time, is the start tag of the pick made last; each
// pick goes to the waiting tenant with the smallest finish tag, start +
// 1/weight, and its next start is that finish. So:
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
// It is not safe for concurrent use; the fetch loop owns it.
type fairQueue struct {
	start   map[string]float64 // start tag of each waiting tenant's next pick
	finish  map[string]float64 // finish tag of each tenant's last pick
	waiting map[string]bool    // who waited at the last pick
	v       float64
}

func newFairQueue() *fairQueue {
	return &fairQueue{start: map[string]float64{}, finish: map[string]float64{}, waiting: map[string]bool{}}
}

// pick returns the tenant to serve next among waiting (in a fixed order:
// ties go to the first), charging it one pick; "" when none waits (or when
// the default tenant, "", is picked: the caller knows which waited). weight
// gives each tenant's weight (> 0).
func (q *fairQueue) pick(waiting []string, weight func(string) float64) string {
	now := make(map[string]bool, len(waiting))
	for _, t := range waiting {
		now[t] = true
		if !q.waiting[t] {
			q.start[t] = max(q.v, q.finish[t])
		}
	}
	for t := range q.waiting {
		if !now[t] {
			delete(q.start, t)
		}
	}
	q.waiting = now
	best, bestF, found := "", math.Inf(1), false
	for _, t := range waiting {
		if f := q.start[t] + 1/weight(t); f < bestF {
			best, bestF, found = t, f, true
		}
	}
	if !found {
		return ""
	}
	q.v = q.start[best]
	q.finish[best], q.start[best] = bestF, bestF
	// Forget the finish tags of idle tenants behind V: they restart at V
	// anyway.
	if len(q.finish) > 2*len(waiting)+64 {
		for t, f := range q.finish {
			if !now[t] && f <= q.v {
				delete(q.finish, t)
			}
		}
	}
	return best
}
