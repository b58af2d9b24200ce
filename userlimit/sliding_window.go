package userlimit

import "math"

// slidingWindow is the in-memory twin of sliding_window.lua. With e how far
// into its fixed window the instant decided for is, c that window's count
// and p the previous one's, the estimate is c + p·(window−e)/window, and a
// job is allowed when the estimate with it is at most limit and the jobs
// already admitted for the next window (instants ahead) stay within limit
// too. The floating-point operations are the script's, in the script's
// order (and each rounded to float64, so never fused), so both backends
// decide alike to the last bit.
func (st *memState) slidingWindow(d decision) outcome {
	cur := floorDiv(d.now, d.window)
	last := st.trimWindows(cur-1, cur)
	window, limit := d.window, d.limit
	// fitsNext: one more job in window j keeps window j+1's within limit.
	fitsNext := func(j, cj int64) bool {
		next := st.wins[j+1]
		if next == nil || next.n == 0 {
			return true
		}
		return float64(float64(next.n)+swWeight(cj+1, max(next.emin, 0), window)) <= float64(limit)
	}

	idx := floorDiv(d.at, window)
	e := d.at - idx*window
	if mk, ok := st.admitted(d.job, d); ok {
		if !d.move || mk.at == d.at {
			return allow(swRemaining(st.count(idx), st.count(idx-1), e, window, limit), mk.at)
		}
		if w := st.wins[floorDiv(mk.at, window)]; w != nil && w.n > 0 {
			w.n--
		}
		delete(st.jobs, d.job)
	}

	n, p := st.count(idx), st.count(idx-1)
	if swAllows(n, p, e, window, limit) && fitsNext(idx, n) {
		w := st.window(idx)
		w.n = n + 1
		if w.emin < 0 || e < w.emin {
			w.emin = e
		}
		last = max(last, idx)
		st.mark(d.job, d.now, memMarker{at: d.at, lapse: d.at + window})
		st.expire = max((last+2)*window, st.jobsMax)
		return allow(swRemaining(n+1, p, e, window, limit), d.at)
	}
	// Denied: window by window from at's, the first offset allowed (the
	// estimate only falls as the offset grows).
	for j := idx; j <= last+2; j++ {
		cj, pj := st.count(j), st.count(j-1)
		lo := int64(0)
		if j == idx {
			lo = e
		}
		if !fitsNext(j, cj) || !swAllows(cj, pj, window-1, window, limit) {
			continue
		}
		if j > idx && swAllows(cj, pj, 0, window, limit) {
			return deny(j*window - d.now)
		}
		hi := window - 1
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if swAllows(cj, pj, mid, window, limit) {
				hi = mid
			} else {
				lo = mid
			}
		}
		return deny(j*window + hi - d.now)
	}
	return deny((last+3)*window - d.now)
}

// swWeight is p·(window−e)/window: the previous window's count weighted by
// the part of it the sliding window still covers.
func swWeight(p, e, window int64) float64 {
	return float64(float64(p)*float64(window-e)) / float64(window)
}

// swAllows reports whether one more job keeps the estimate at most limit.
func swAllows(c, p, e, window, limit int64) bool {
	return float64(float64(c)+1)+swWeight(p, e, window) <= float64(limit)
}

// swRemaining is how many more jobs the estimate has room for.
func swRemaining(c, p, e, window, limit int64) int64 {
	return max(int64(math.Floor(float64(float64(limit)-float64(c))-swWeight(p, e, window))), 0)
}
