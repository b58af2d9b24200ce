package dispatch

import "math"

// fairQueue shares picks between tenants in proportion to their weights:
// start-time fair queueing (SFQ), one pick at a time. Each tenant has the
// virtual finish time of its last pick; a pick goes to the waiting tenant
// whose next pick would finish first, max(V, its last finish) + 1/weight,
// where V, the virtual time, is the start of the pick made last. So:
//
//   - tenants that all wait get picks in proportion to their weights (3 and
//     1: three picks in four to the first);
//   - it is work-conserving: any waiting tenant can be picked, and a tenant
//     with nothing waiting is skipped, its share going to the others;
//   - a tenant that comes back after waiting for nothing starts at V: idle
//     time earns no credit, so it cannot take a burst that starves the
//     others;
//   - none starves: a waiting tenant of weight w is picked at least once in
//     every ⌈W/w⌉+1 picks, W the sum of the waiting tenants' weights.
//
// It is not safe for concurrent use; the fetch loop owns it.
type fairQueue struct {
	finish map[string]float64
	v      float64
}

func newFairQueue() *fairQueue { return &fairQueue{finish: map[string]float64{}} }

// pick returns the tenant to serve next among waiting (in a fixed order:
// ties go to the first), charging it one pick; "" when none waits. weight
// gives each tenant's weight (> 0).
func (q *fairQueue) pick(waiting []string, weight func(string) float64) string {
	best, bestF := "", math.Inf(1)
	for _, t := range waiting {
		if f := max(q.v, q.finish[t]) + 1/weight(t); f < bestF {
			best, bestF = t, f
		}
	}
	if best == "" {
		return ""
	}
	q.v = bestF - 1/weight(best)
	q.finish[best] = bestF
	// Forget tenants far behind V: they restart at V anyway.
	if len(q.finish) > 4*len(waiting)+64 {
		for t, f := range q.finish {
			if f <= q.v {
				delete(q.finish, t)
			}
		}
	}
	return best
}
