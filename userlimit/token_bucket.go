package userlimit

// tokenBucket is the in-memory twin of token_bucket.lua, a GCRA: one token
// every T = ceil(window/limit) µs, at most limit tokens; the state is the
// theoretical arrival time tat, and the bucket is full when tat <= now. A
// job is allowed for at when max(tat, at) + T − at <= limit·T. A job with an
// unlapsed marker is allowed again without taking a token; moved to another
// instant it gives its token back when nothing was admitted since, and is
// decided anew.
func (st *memState) tokenBucket(d decision) outcome {
	interval := (d.window + d.limit - 1) / d.limit
	burst := d.limit * interval
	tat := max(st.tat, d.now)
	if mk, ok := st.admitted(d.job, d); ok {
		if !d.move || mk.at == d.at {
			return allow(floorDiv(burst-(tat-d.now), interval), mk.at)
		}
		if mk.after != 0 && st.tat == mk.after {
			// Nothing admitted since: give the token back.
			if mk.before > d.now {
				st.tat = mk.before
			} else {
				st.tat = 0
			}
			tat = max(st.tat, d.now)
		}
		delete(st.jobs, d.job)
	}
	next := max(tat, d.at) + interval
	if next-d.at > burst {
		return deny(next - burst - d.now)
	}
	before := st.tat
	st.tat = next
	st.mark(d.job, d.now, memMarker{at: d.at, lapse: d.at + d.window, before: before, after: next})
	st.expire = max(next, st.jobsMax)
	return allow(floorDiv(burst-(next-d.at), interval), d.at)
}
