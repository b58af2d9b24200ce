package dispatch

import (
	"sync"
	"time"
)

// rolling counts events per key over the last seconds, in one-second
// buckets, for the fleet heartbeat (what `notifier status` shows). Safe for
// concurrent use.
type rolling struct {
	mu   sync.Mutex
	keys map[rollKey]*ring
}

// rollKey names what is counted: sends of a provider, or an outcome of a
// channel. A struct, so that counting a job builds no string.
type rollKey struct{ provider, channel, outcome, tenant string }

// rollingSpan is the buckets kept: a minute of whole seconds and the
// second under way.
const rollingSpan = 61

type ring struct {
	sec   [rollingSpan]int64
	count [rollingSpan]int64
}

// add counts one event of key at now.
func (r *rolling) add(key rollKey, now time.Time) {
	s := now.Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = map[rollKey]*ring{}
	}
	g := r.keys[key]
	if g == nil {
		g = &ring{}
		r.keys[key] = g
	}
	i := s % rollingSpan
	if g.sec[i] != s {
		g.sec[i], g.count[i] = s, 0
	}
	g.count[i]++
}

// sums is every key's count over the last window (whole seconds, at most
// a minute) of whole seconds before now's: the second under way is left
// out, since it has only counted part of its events (counting it, a steady
// rate read 5–10 % low).
func (r *rolling) sums(now time.Time, window time.Duration) map[rollKey]int64 {
	s := now.Unix()
	n := min(int64(window/time.Second), rollingSpan-1)
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[rollKey]int64, len(r.keys))
	for k, g := range r.keys {
		var total int64
		for i := range g.sec {
			if age := s - g.sec[i]; age >= 1 && age <= n {
				total += g.count[i]
			}
		}
		out[k] = total
	}
	return out
}
