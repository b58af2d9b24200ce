package dispatch

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// RetryConfig is the policy for transient provider failures (YAML retry:).
// Only such failures count toward MaxAttempts; deferrals never do.
type RetryConfig struct {
	MaxAttempts int           `mapstructure:"max_attempts"` // provider failures before dead-lettering (default 8)
	BaseDelay   time.Duration `mapstructure:"base_delay"`   // first backoff ceiling (default 1s)
	MaxDelay    time.Duration `mapstructure:"max_delay"`    // backoff cap (default 5m)
}

// WithDefaults fills the keys left out.
func (c RetryConfig) WithDefaults() RetryConfig {
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 8
	}
	if c.BaseDelay == 0 {
		c.BaseDelay = time.Second
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = 5 * time.Minute
	}
	return c
}

// Validate reports every problem, each naming the key relative to retry:.
func (c RetryConfig) Validate() error {
	var errs []error
	if c.MaxAttempts < 1 || c.MaxAttempts > 1000 {
		errs = append(errs, fmt.Errorf("max_attempts: must be a whole number from 1 to 1000, got %d", c.MaxAttempts))
	}
	if c.BaseDelay < time.Millisecond {
		errs = append(errs, fmt.Errorf("base_delay: must be at least 1ms, got %s", c.BaseDelay))
	}
	if c.MaxDelay < c.BaseDelay {
		errs = append(errs, fmt.Errorf("max_delay: must be at least base_delay (%s), got %s", c.BaseDelay, c.MaxDelay))
	}
	return errors.Join(errs...)
}

// Backoff is the delay before retry number attempt (1 = after the first
// failure): exponential with full jitter, uniform in [0, min(max, base·2^(attempt−1))].
// rnd returns a float in [0, 1); nil uses math/rand/v2.
func (c RetryConfig) Backoff(attempt int, rnd func() float64) time.Duration {
	if rnd == nil {
		rnd = rand.Float64
	}
	ceiling := c.MaxDelay
	if attempt < 1 {
		attempt = 1
	}
	// base·2^(attempt−1) when it is under the cap: tested against the cap
	// shifted down, as the product itself can wrap round in int64 (and a
	// wrapped positive value would pass for a ceiling below the cap).
	if shift := attempt - 1; shift < 63 && c.BaseDelay > 0 && c.BaseDelay <= ceiling>>shift {
		ceiling = c.BaseDelay << shift
	}
	return time.Duration(rnd() * float64(ceiling))
}
