package providers_test

import (
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/providers"
)

// TestProbeInterval: probe_interval, every kind's key, is how often the
// fleet probes a provider paused because it refused the sender: 30s when
// left out, from 1s to 1h.
func TestProbeInterval(t *testing.T) {
	t.Parallel()
	base := providers.Config{Name: "sms", Channel: "sms", Kind: "log", Rate: 10}
	if got := base.WithDefaults().ProbeInterval; got != 30*time.Second {
		t.Errorf("default probe_interval %s, want 30s", got)
	}
	for _, d := range []time.Duration{time.Second, 10 * time.Second, time.Hour} {
		c := base
		c.ProbeInterval = d
		if err := c.Validate(); err != nil || c.WithDefaults().ProbeInterval != d {
			t.Errorf("probe_interval %s: %v", d, err)
		}
	}
	for _, d := range []time.Duration{-time.Second, time.Millisecond, 999 * time.Millisecond, time.Hour + time.Second} {
		c := base
		c.ProbeInterval = d
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "probe_interval: must be from 1s to 1h, got") {
			t.Errorf("probe_interval %s: %v, want a range error", d, err)
		}
	}
}
