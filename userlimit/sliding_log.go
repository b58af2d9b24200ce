package userlimit

import "sort"

// slidingLog is the in-memory twin of sliding_log.lua: a job admitted at t
// counts while now < t+window; an id still in the log is allowed again
// without counting; when denied, the job is allowed once the entry that
// brings the count below limit leaves the window.
func (st *memState) slidingLog(now, window, limit int64, job string) (allowed bool, remaining, retry int64) {
	i := 0
	for i < len(st.log) && st.log[i].t <= now-window {
		delete(st.ids, st.log[i].id)
		i++
	}
	if i == len(st.log) {
		st.log = nil
	} else {
		st.log = st.log[i:] // the next append that grows the log copies only live entries
	}
	count := int64(len(st.log))

	if _, ok := st.ids[job]; ok {
		return true, max(limit-count, 0), 0
	}
	if count < limit {
		st.insert(logEntry{t: now, id: job})
		st.expire = st.log[len(st.log)-1].t + window
		return true, limit - count - 1, 0
	}
	return false, 0, st.log[count-limit].t + window - now
}

// insert adds e in time order (after entries of the same time). Time only
// goes backwards if the clock does; then the entry still lands in order.
func (st *memState) insert(e logEntry) {
	if st.ids == nil {
		st.ids = make(map[string]int64)
	}
	st.ids[e.id] = e.t
	n := len(st.log)
	if n == 0 || st.log[n-1].t <= e.t {
		st.log = append(st.log, e)
		return
	}
	at := sort.Search(n, func(i int) bool { return st.log[i].t > e.t })
	st.log = append(st.log, logEntry{})
	copy(st.log[at+1:], st.log[at:])
	st.log[at] = e
}
