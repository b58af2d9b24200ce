package userlimit

import "time"

// SetNowForTest makes the scripts use now instead of the server's TIME (the
// optional trailing ARGV), so tests can drive Redis with a fake clock. Call
// it before the limiter is used.
func (r *Redis) SetNowForTest(now func() time.Time) { r.now = now }

// LenForTest is the number of keys a Memory holds state for.
func (m *Memory) LenForTest() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
