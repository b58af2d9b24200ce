package dispatch

import (
	"testing"
	"time"
)

// TestClockSyncIgnoresStalledReplies: the slot time follows the fastest
// replies, so a reply read late does not move its slot late.
func TestClockSyncIgnoresStalledReplies(t *testing.T) {
	t.Parallel()
	var c clockSync
	base := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	const skew = 7 * time.Millisecond // local clock ahead of the backend's
	backend := func(t time.Time) int64 { return t.Add(-skew).UnixMicro() }
	// Prompt replies (200µs each way) establish the offset.
	for i := 0; i < 20; i++ {
		decided := base.Add(time.Duration(i) * 10 * time.Millisecond)
		recv := decided.Add(200 * time.Microsecond)
		slot := backend(decided) + 30_000 // 30ms ahead
		got := c.slotTime(recv, slot, 30*time.Millisecond)
		want := decided.Add(30 * time.Millisecond)
		if d := got.Sub(want); d < 0 || d > 300*time.Microsecond {
			t.Fatalf("prompt reply %d: slot off by %s", i, d)
		}
	}
	// A reply read 50ms late is placed where its slot really is.
	decided := base.Add(300 * time.Millisecond)
	recv := decided.Add(50 * time.Millisecond)
	got := c.slotTime(recv, backend(decided)+30_000, 30*time.Millisecond)
	if d := got.Sub(decided.Add(30 * time.Millisecond)); d < 0 || d > 300*time.Microsecond {
		t.Fatalf("stalled reply: slot off by %s (now+Delay would be off by 50ms)", d)
	}
	// Old samples age out: after the ring's span only new ones count.
	later := base.Add(clockBuckets * time.Second * 2)
	c.sample(later, later.Add(-skew-time.Millisecond).UnixMicro())
	if off, ok := c.offset(later); !ok || off != (skew+time.Millisecond).Microseconds() {
		t.Fatalf("offset after the ring turned = %d µs, %v", off, ok)
	}
}

func TestClockSyncWithoutSlot(t *testing.T) {
	t.Parallel()
	var c clockSync
	now := time.Now()
	if got := c.slotTime(now, 0, time.Second); !got.Equal(now.Add(time.Second)) {
		t.Fatalf("no slot: %s, want recv + delay", got)
	}
}
