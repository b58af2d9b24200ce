package userlimit

import "sort"

// slidingLog is the in-memory twin of sliding_log.lua: a job admitted for t
// counts while now < t+window; a decision for at counts every entry after
// at−window (those ahead of at too); an id still in the log is allowed
// again without counting, or moved when decided for another instant; when
// denied, the job is allowed once the entry that brings the count below
// limit leaves the window.
func (st *memState) slidingLog(d decision) outcome {
	i := 0
	for i < len(st.log) && st.log[i].t <= d.now-d.window {
		delete(st.ids, st.log[i].id)
		i++
	}
	if i == len(st.log) {
		st.log = nil
	} else {
		st.log = st.log[i:] // the next append that grows the log copies only live entries
	}

	if had, ok := st.ids[d.job]; ok {
		if !d.move || had == d.at {
			return allow(d.limit-int64(len(st.log)), had)
		}
		st.remove(d.job, had)
	}
	// The entries after at−window: the log is in time order.
	from := sort.Search(len(st.log), func(i int) bool { return st.log[i].t > d.at-d.window })
	count := int64(len(st.log) - from)
	if count < d.limit {
		st.insert(logEntry{t: d.at, id: d.job})
		st.expire = st.log[len(st.log)-1].t + d.window
		return allow(d.limit-count-1, d.at)
	}
	return deny(st.log[from+int(count-d.limit)].t + d.window - d.now)
}

// insert adds e in time order (after entries of the same time).
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

// remove drops job's entry at t.
func (st *memState) remove(job string, t int64) {
	delete(st.ids, job)
	for i := sort.Search(len(st.log), func(i int) bool { return st.log[i].t >= t }); i < len(st.log) && st.log[i].t == t; i++ {
		if st.log[i].id == job {
			st.log = append(st.log[:i:i], st.log[i+1:]...)
			return
		}
	}
}
