package providers

import (
	"testing"
	"time"
)

// TestThrottle: a run of rate limits without a word of how long doubles
// the pause from the floor; the answers to requests sent before the pause
// ended belong to its episode; an acceptance of a request sent after it
// ends the run; the doubling stops at MaxRetryAfter.
func TestThrottle(t *testing.T) {
	var th throttle
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for i, c := range []struct {
		start, answer int // seconds after t0: the request's start, its answer
		accepted      bool
		want          int // the pause, seconds
	}{
		{0, 0, false, 1},
		{0, 0, false, 1},  // sent before the 1 s pause ended: the same episode
		{1, 1, false, 2},  // after it: the next
		{2, 3, false, 2},  // sent at 2 s, during the 2 s pause (until 3 s)
		{3, 3, false, 4},  // sent at 3 s: the next
		{5, 6, true, 0},   // accepted, but sent during the pause (until 7 s): the run goes on
		{7, 7, false, 8},  // so the next is 8 s
		{15, 15, true, 0}, // accepted, sent after the pause: the run ends
		{16, 16, false, 1},
	} {
		if c.accepted {
			th.accepted(at(c.start))
			continue
		}
		if got := th.pause(time.Second, at(c.start), at(c.answer)); got != time.Duration(c.want)*time.Second {
			t.Errorf("step %d: pause %s, want %ds", i, got, c.want)
		}
	}
	var long throttle
	now := t0
	for range 40 {
		d := long.pause(DefaultRetryAfter, now, now)
		if d > MaxRetryAfter || d <= 0 {
			t.Fatalf("pause %s out of (0, %s]", d, MaxRetryAfter)
		}
		now = now.Add(d) // the next rate limit as the pause ends: the run goes on
	}
	if d := long.pause(DefaultRetryAfter, now, now); d != MaxRetryAfter {
		t.Errorf("after 41 episodes: %s, want %s", d, MaxRetryAfter)
	}
}

// TestThrottleFloor: the run doubles from the kind's floor, whatever it
// is: a 250 ms floor pauses 250 ms, 500 ms, 1 s; a 3 s floor 3, 6, 12 s
// (TestThrottle's 1 s floor alone would pass a formula that ignored it);
// the requests sent during a pause are answered its pause, not the floor.
func TestThrottleFloor(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, floor := range []time.Duration{250 * time.Millisecond, 3 * time.Second} {
		var th throttle
		now := t0
		for i, want := range []time.Duration{floor, 2 * floor, 4 * floor} {
			if got := th.pause(floor, now, now); got != want {
				t.Errorf("floor %s, episode %d: pause %s, want %s", floor, i+1, got, want)
			}
			if got := th.pause(floor, now, now.Add(want/2)); got != want {
				t.Errorf("floor %s, episode %d, a request sent during the pause: %s, want %s", floor, i+1, got, want)
			}
			now = now.Add(want)
		}
		th.accepted(now)
		if got := th.pause(floor, now, now); got != floor {
			t.Errorf("floor %s, after an acceptance: pause %s, want the floor", floor, got)
		}
	}
}

// TestThrottleAgesOut: a run ends when no rate limit came for as long
// after its last pause ended as that pause lasted, even with no request
// accepted meanwhile (none was sent): the next rate limit pauses the
// floor, not twice the last pause of a run long over.
func TestThrottleAgesOut(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var th throttle
	for i, c := range []struct {
		at   int // ms after t0: the request's start and its answer
		want time.Duration
	}{
		{0, time.Second},        // until 1 s
		{2000, 2 * time.Second}, // 1 s after the 1 s pause ended, not more: the run goes on; until 4 s
		{6001, time.Second},     // 2.001 s after the 2 s pause ended: a new run; until 7.001 s
		{7001, 2 * time.Second}, // as it ends: the next episode of the new run
		{86400000, time.Second}, // a day later
	} {
		if got := th.pause(time.Second, at(c.at), at(c.at)); got != c.want {
			t.Errorf("step %d (%d ms): pause %s, want %s", i, c.at, got, c.want)
		}
	}
}

// TestThrottleAcceptedTakesNoLockWithoutARun: an acceptance with no run
// going (every 2xx of a provider that is not rate limiting) does not take
// the throttle's lock; with a run, it still ends it.
func TestThrottleAcceptedTakesNoLockWithoutARun(t *testing.T) {
	var th throttle
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	accepted := func(start time.Time) bool { // false: it waited on the lock
		th.mu.Lock()
		done := make(chan struct{})
		go func() {
			th.accepted(start)
			close(done)
		}()
		defer func() {
			th.mu.Unlock()
			<-done
		}()
		select {
		case <-done:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	}
	if !accepted(t0) {
		t.Error("an acceptance without a run waited on the lock")
	}
	th.pause(time.Second, t0, t0)
	th.accepted(t0.Add(time.Second)) // after the pause: the run ends
	if th.running.Load() {
		t.Error("the run did not end")
	}
	if !accepted(t0.Add(2 * time.Second)) {
		t.Error("an acceptance after the run ended waited on the lock")
	}
	if d := th.pause(time.Second, t0.Add(2*time.Second), t0.Add(2*time.Second)); d != time.Second {
		t.Errorf("after the run: pause %s, want the floor", d)
	}
}
