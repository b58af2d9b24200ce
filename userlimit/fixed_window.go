package userlimit

// fixedWindow is the in-memory twin of fixed_window.lua: one counter per
// window [k·window, (k+1)·window) of Unix time; a job with an unlapsed marker
// is allowed again without counting; when denied, the job is allowed when
// the window ends.
func (st *memState) fixedWindow(now, window, limit int64, job string) (allowed bool, remaining, retry int64) {
	idx := floorDiv(now, window)
	end := (idx + 1) * window
	var n int64
	if st.w == idx {
		n = st.c
	}
	if st.marker(job, now) {
		return true, max(limit-n, 0), 0
	}
	if n >= limit {
		return false, 0, end - now
	}
	st.w, st.c = idx, n+1
	st.mark(job, now, now+window)
	st.expire = max(end, st.jobsMax)
	return true, limit - n - 1, 0
}
