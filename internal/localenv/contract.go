package localenv

import "time"

// ContractWait is how a strict provider enforces a contract of n requests
// in any trailing second, given the times it accepted requests at (in
// order): 0 when a request arriving at now may be accepted, else how long
// until the window (now−1s, now] frees a place. The window is full when
// the n-th most recent acceptance is less than 1 s old. n <= 0 is no
// contract.
func ContractWait(accepted []time.Time, n int, now time.Time) time.Duration {
	if n <= 0 || len(accepted) < n {
		return 0
	}
	return max(0, accepted[len(accepted)-n].Add(time.Second).Sub(now))
}

// MostInWindow is the most of ts (in non-decreasing order) that lie in
// some window of length w, [t, t+w) or, the same count, (t−w, t] as a
// provider counts a trailing window; 0 when w <= 0.
func MostInWindow(ts []time.Time, w time.Duration) int {
	if w <= 0 {
		return 0
	}
	best, i := 0, 0
	for j := range ts {
		for ts[j].Sub(ts[i]) >= w {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}
