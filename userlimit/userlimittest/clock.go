package userlimittest

import (
	"sync"
	"time"
)

// Start is where every clock of the suite starts: midnight UTC, a multiple of
// every whole-second window since the Unix epoch, so fixed windows of the
// step tables begin exactly there.
var Start = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// Clock is a fake clock for limiters under test. It moves only when told.
// Safe for concurrent use; the zero value reads as the zero time.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
