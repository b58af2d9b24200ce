package providers

import (
	"sync"
	"sync/atomic"
	"time"
)

// throttle backs off exponentially over a run of a provider's rate limits:
// the least pause of each provider-wide one, whatever it says (a 429
// without Retry-After, or with one shorter: "0", a past date), and of those
// whose documentation asks for more than they say (FCM's QUOTA_EXCEEDED:
// "use exponential backoff with a minimum initial delay of 1 minute"). The first
// rate limit of a run pauses for the kind's floor, each later one twice the
// pause before, up to MaxRetryAfter; a request sent after the last pause
// ended and accepted ends the run, and so does a quiet time: a rate limit
// answered longer after the last pause ended than that pause lasted starts
// a new run (with no request accepted meanwhile, a rate limit hours later
// would otherwise go on doubling the old run).
//
// A run counts episodes, not answers: the requests already on their way
// when the provider started refusing (sent before the pause they cause
// ends) belong to the episode that paused it, and do not double the pause
// again. The state is this process's: every process of the fleet doubles
// its own run, and the fleet pauses for the longest any asks (the
// dispatcher's pause only grows). Safe for concurrent use; the zero value
// is ready.
type throttle struct {
	// running is step > 0, readable without mu: an acceptance with no run
	// going (nearly every one) takes no lock.
	running atomic.Bool

	mu    sync.Mutex
	step  int           // episodes in the current run; 0: none
	until time.Time     // when the current episode's pause ends
	last  time.Duration // the current episode's pause
}

// maxThrottleStep bounds the doubling: floor << 32 is past MaxRetryAfter
// for any floor of a millisecond or more.
const maxThrottleStep = 32

// pause is the pause of a rate limit answered at now to a request sent at
// start, for a kind whose least pause is floor: the current episode's for
// a request sent before its pause ended, else the next episode's.
func (t *throttle) pause(floor time.Duration, start, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.step > 0 && start.Before(t.until) {
		return max(t.last, floor)
	}
	if t.step > 0 && now.Sub(t.until) > t.last {
		t.step = 0 // the run aged out
	}
	t.step = min(t.step+1, maxThrottleStep)
	d := min(floor<<(t.step-1), MaxRetryAfter)
	if d <= 0 { // an overflow of a huge floor
		d = MaxRetryAfter
	}
	t.last, t.until = d, now.Add(d)
	t.running.Store(true)
	return d
}

// accepted notes that a request sent at start was accepted: after the
// current episode's pause, that ends the run. Without a run it takes no
// lock (a run starting meanwhile is one this request cannot end: it was
// sent before that run's pause ended).
func (t *throttle) accepted(start time.Time) {
	if !t.running.Load() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.step > 0 && !start.Before(t.until) {
		t.step = 0
		t.running.Store(false)
	}
}
