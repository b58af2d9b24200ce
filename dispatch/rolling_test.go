package dispatch

import (
	"testing"
	"time"
)

func TestRollingCounts(t *testing.T) {
	t.Parallel()
	var r rolling
	t0 := time.Unix(1_000_000, 0)
	for i := 0; i < 70; i++ { // one event a second for 70 s
		r.add(rollKey{provider: "a"}, t0.Add(time.Duration(i)*time.Second))
	}
	now := t0.Add(69 * time.Second)
	if got := r.sums(now, 10*time.Second)[rollKey{provider: "a"}]; got != 10 {
		t.Fatalf("last 10s: %d, want 10", got)
	}
	if got := r.sums(now, time.Minute)[rollKey{provider: "a"}]; got != 60 {
		t.Fatalf("last 60s: %d, want 60 (older buckets reused)", got)
	}
	if got := r.sums(now.Add(30*time.Second), 10*time.Second)[rollKey{provider: "a"}]; got != 0 {
		t.Fatalf("after 30 quiet seconds: %d, want 0", got)
	}
}
