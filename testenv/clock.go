package testenv

import (
	"sync"
	"time"
)

// Clock is a fake clock for tests: it reads the time it was set to and
// moves only when told. Safe for concurrent use; pass its Now wherever code
// takes a clock.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock stopped at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
