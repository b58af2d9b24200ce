package dispatch

import (
	"strings"
	"testing"
	"time"
)

func TestBackoffFullJitterBounds(t *testing.T) {
	t.Parallel()
	c := RetryConfig{MaxAttempts: 8, BaseDelay: time.Second, MaxDelay: 5 * time.Minute}
	almostOne := func() float64 { return 0.999999999 }
	zero := func() float64 { return 0 }
	for _, tc := range []struct {
		attempt int
		ceiling time.Duration
	}{
		{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {9, 256 * time.Second},
		{10, 5 * time.Minute}, {64, 5 * time.Minute}, {1000, 5 * time.Minute}, {0, time.Second},
	} {
		if got := c.Backoff(tc.attempt, almostOne); got > tc.ceiling || got < tc.ceiling*99/100 {
			t.Errorf("attempt %d: top of range %s, want just under %s", tc.attempt, got, tc.ceiling)
		}
		if got := c.Backoff(tc.attempt, zero); got != 0 {
			t.Errorf("attempt %d: bottom of range %s, want 0 (full jitter)", tc.attempt, got)
		}
	}
	for i := 0; i < 1000; i++ {
		if d := c.Backoff(3, nil); d < 0 || d >= 4*time.Second {
			t.Fatalf("Backoff(3) = %s outside [0, 4s)", d)
		}
	}
}

// TestBackoffCeilingNeverWrapsBelowTheCap: with a base delay whose
// doublings pass int64 before attempt 40, the ceiling still grows to the
// cap and stays there (base_delay 137439ms: attempt 28's ceiling wrapped to
// 1h44m under a 24h cap; found in review).
func TestBackoffCeilingNeverWrapsBelowTheCap(t *testing.T) {
	t.Parallel()
	r := RetryConfig{MaxAttempts: 1000, BaseDelay: 137439 * time.Millisecond, MaxDelay: 24 * time.Hour}
	top := func() float64 { return 1 - 1e-9 }
	prev := time.Duration(0)
	for attempt := 1; attempt <= 1000; attempt++ {
		got := r.Backoff(attempt, top)
		if got < prev {
			t.Fatalf("attempt %d: ceiling %s, below attempt %d's %s", attempt, got, attempt-1, prev)
		}
		prev = got
	}
	if prev < 24*time.Hour*99/100 {
		t.Errorf("the ceiling ends at %s, want the cap, 24h", prev)
	}
}

func TestRetryConfigValidate(t *testing.T) {
	t.Parallel()
	if err := (RetryConfig{}).WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	err := RetryConfig{MaxAttempts: -1, BaseDelay: 0, MaxDelay: -time.Second}.Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{"max_attempts: ", "got -1", "base_delay: ", "max_delay: "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
