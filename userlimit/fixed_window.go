package userlimit

// fixedWindow is the in-memory twin of fixed_window.lua: one counter per
// window [k·window, (k+1)·window) of Unix time, counting the jobs admitted
// for instants in it; a job with an unlapsed marker is allowed again
// without counting, or moved (withdrawn and decided anew) when decided for
// another instant; when denied, the job is allowed from the start of the
// next window with room.
func (st *memState) fixedWindow(d decision) outcome {
	cur := floorDiv(d.now, d.window)
	last := st.trimWindows(cur, cur)
	idx := floorDiv(d.at, d.window)
	if mk, ok := st.admitted(d.job, d); ok {
		if !d.move || mk.at == d.at {
			return allow(d.limit-st.count(idx), mk.at)
		}
		if w := st.wins[floorDiv(mk.at, d.window)]; w != nil && w.n > 0 {
			w.n--
		}
		delete(st.jobs, d.job)
	}
	n := st.count(idx)
	if n < d.limit {
		st.window(idx).n = n + 1
		last = max(last, idx)
		st.mark(d.job, d.now, memMarker{at: d.at, lapse: d.at + d.window})
		st.expire = max((last+1)*d.window, st.jobsMax)
		return allow(d.limit-n-1, d.at)
	}
	j := idx + 1
	for st.count(j) >= d.limit {
		j++
	}
	return deny(j*d.window - d.now)
}
