package dispatch

import (
	"sync"
	"time"
)

// clockSync maps the limit backend's clock (the Redis TIME every slot is
// computed on) to this process's clock, so that a worker knows when its
// slot is.
//
// Turning a reply's Delay into "now + Delay" at the moment the reply is read
// is wrong by however long the reply waited to be read: a worker stalled
// for 50 ms (a busy machine, a GC pause) would place its slot 50 ms late and
// send on top of the slots of other workers. Instead every reply gives a
// sample: local receive time − backend time at the decision (Slot − Delay).
// That is the clock offset plus this reply's delay, and never less than
// the offset plus the fastest delay; the smallest sample over the last few
// seconds is therefore the offset to within a fast round trip, and a
// stalled reply cannot move it. Slots are then placed at Slot + offset.
type clockSync struct {
	mu      sync.Mutex
	buckets [clockBuckets]clockBucket // per-second minima, a ring
}

const clockBuckets = 8 // seconds of samples; clocks drift far less than this in 8 s

type clockBucket struct {
	sec int64 // the local second the bucket holds, 0: empty
	min int64 // the smallest sample of that second, µs
}

// sample records a reply received at recv about a decision at backend time
// decidedUs (µs since the Unix epoch on the backend's clock).
func (c *clockSync) sample(recv time.Time, decidedUs int64) {
	s := recv.UnixMicro() - decidedUs
	sec := recv.Unix()
	c.mu.Lock()
	defer c.mu.Unlock()
	b := &c.buckets[sec%clockBuckets]
	if b.sec != sec {
		*b = clockBucket{sec: sec, min: s}
		return
	}
	b.min = min(b.min, s)
}

// offset is the estimated local − backend clock offset in µs, from samples
// of the last clockBuckets seconds as of now; ok is false with none.
func (c *clockSync) offset(now time.Time) (us int64, ok bool) {
	sec := now.Unix()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.buckets {
		if b.sec == 0 || sec-b.sec >= clockBuckets {
			continue
		}
		if !ok || b.min < us {
			us, ok = b.min, true
		}
	}
	return us, ok
}

// slotTime places a reservation received at recv on this process's clock:
// the backend's slot moved by the clock offset, or recv + Delay when the
// reservation carries no slot.
func (c *clockSync) slotTime(recv time.Time, slotUs int64, delay time.Duration) time.Time {
	if slotUs == 0 {
		return recv.Add(delay)
	}
	c.sample(recv, slotUs-delay.Microseconds())
	off, _ := c.offset(recv)
	return time.UnixMicro(slotUs + off)
}
