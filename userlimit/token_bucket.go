package userlimit

// tokenBucket is the in-memory twin of token_bucket.lua, a GCRA: one token
// every T = ceil(window/limit) µs, at most limit tokens; the state is the
// theoretical arrival time tat, and the bucket is full when tat <= now. A job
// with an unlapsed marker is allowed again without taking a token.
func (st *memState) tokenBucket(now, window, limit int64, job string) (allowed bool, remaining, retry int64) {
	interval := (window + limit - 1) / limit
	burst := limit * interval
	tat := max(st.tat, now)
	if st.marker(job, now) {
		return true, max(floorDiv(burst-(tat-now), interval), 0), 0
	}
	next := tat + interval
	if next-now > burst {
		return false, 0, next - now - burst
	}
	st.tat = next
	st.mark(job, now, now+window)
	st.expire = max(next, st.jobsMax)
	return true, floorDiv(burst-(next-now), interval), 0
}
