package userlimit

import "math"

// slidingWindow is the in-memory twin of sliding_window.lua. With c the count
// of the current fixed window, p the previous one's and e how far into the
// current window now is, the estimate is c + p·(window−e)/window, and a job
// is allowed when the estimate with it is at most limit. The floating-point
// operations are the script's, in the script's order (and each rounded to
// float64, so never fused), so both backends decide alike to the last bit.
func (st *memState) slidingWindow(now, window, limit int64, job string) (allowed bool, remaining, retry int64) {
	idx := floorDiv(now, window)
	e := now - idx*window
	var c, p int64
	switch st.w {
	case idx:
		c, p = st.c, st.p
	case idx - 1:
		p = st.c
	}
	if st.marker(job, now) {
		return true, swRemaining(c, p, e, window, limit), 0
	}
	if swAllows(c, p, e, window, limit) {
		c++
		st.w, st.c, st.p = idx, c, p
		st.mark(job, now, now+window)
		st.expire = max((idx+2)*window, st.jobsMax)
		return true, swRemaining(c, p, e, window, limit), 0
	}
	// Denied: the first instant a job would be allowed, by binary search.
	// The estimate never rises while nothing is admitted, and two windows on
	// the state is empty.
	allowedAt := func(d int64) bool {
		t := now + d
		i := floorDiv(t, window)
		et := t - i*window
		switch i {
		case idx:
			return swAllows(c, p, et, window, limit)
		case idx + 1:
			return swAllows(0, c, et, window, limit)
		}
		return true
	}
	lo, hi := int64(0), (idx+2)*window-now
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if allowedAt(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return false, 0, hi
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
