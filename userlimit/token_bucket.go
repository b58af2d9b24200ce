package userlimit

// tokenBucket is the in-memory twin of token_bucket.lua: GCRA on the
// instants jobs are admitted for, exact in whatever order they are
// decided. One token every T = ceil(window/limit) µs, burst = limit·T; the
// log holds the admissions of the last window (in time order), tat the
// GCRA state of those folded out of it in time order. A job is allowed for
// x when L + R + T <= burst (see pressure). A job in the log is allowed
// again without a token, or moved: it leaves the log (its token goes back
// exactly) and is decided anew.
func (st *memState) tokenBucket(d decision) outcome {
	interval := (d.window + d.limit - 1) / d.limit
	burst := d.limit * interval
	i := 0
	for i < len(st.log) && st.log[i].t <= d.now-d.window {
		st.tat = max(st.tat, st.log[i].t) + interval
		delete(st.ids, st.log[i].id)
		i++
	}
	if i == len(st.log) {
		st.log = nil
	} else {
		st.log = st.log[i:]
	}
	defer func() {
		st.expire = st.tat
		if n := len(st.log); n > 0 {
			st.expire = max(st.expire, st.log[n-1].t+d.window)
		}
	}()

	if had, ok := st.ids[d.job]; ok {
		if !d.move || had == d.at {
			l, r := pressure(st.log, st.tat, d.now, interval)
			return allow(floorDiv(burst-l-r, interval), had)
		}
		st.remove(d.job, had)
	}
	l, r := pressure(st.log, st.tat, d.at, interval)
	if l+r+interval > burst {
		g := st.tat
		for _, e := range st.log {
			g = max(g, e.t) + interval
		}
		y := g + interval - burst
		if n := len(st.log); n > 0 {
			y = max(y, st.log[n-1].t)
		}
		return deny(max(y-d.now, 1))
	}
	st.insert(logEntry{t: d.at, id: d.job})
	return allow(floorDiv(burst-l-interval-r, interval), d.at)
}

// pressure is token_bucket.lua's: for an instant x, L is the most, over
// the stretches [a, x] of admissions ending at x, of c·T − (x − a) (c: the
// admissions in it; 0 for the empty stretch), the folded ones counting as
// tat − x + T·(admissions of the log up to x); R the same over the
// stretches (x, b].
func pressure(log []logEntry, tat, x, interval int64) (l, r int64) {
	k := len(log)
	for k > 0 && log[k-1].t > x {
		k--
	}
	var c int64
	for i := k - 1; i >= 0; i-- {
		c++
		l = max(l, c*interval-(x-log[i].t))
	}
	if tat > 0 {
		l = max(l, tat-x+c*interval)
	}
	c = 0
	for i := k; i < len(log); i++ {
		c++
		r = max(r, c*interval-(log[i].t-x))
	}
	return l, r
}
