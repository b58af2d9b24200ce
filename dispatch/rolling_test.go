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

// TestRollingRateIsNotUnderReported: a steady 50 events/s, read at any
// point of a second, is 500 over the last 10 s (not 9.x seconds' worth
// divided by 10, which read 5–10 % low in `notifier status`).
func TestRollingRateIsNotUnderReported(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(2_000_000, 0)
	k := rollKey{provider: "p"}
	for _, into := range []time.Duration{10 * time.Millisecond, 500 * time.Millisecond, 990 * time.Millisecond} {
		now := t0.Add(29*time.Second + into)
		var r rolling
		for at := t0; !at.After(now); at = at.Add(20 * time.Millisecond) {
			r.add(k, at)
		}
		if got := r.sums(now, 10*time.Second)[k]; got != 500 {
			t.Errorf("read %s into a second: %d over the last 10 s, want 500 (50/s)", into, got)
		}
	}
}
