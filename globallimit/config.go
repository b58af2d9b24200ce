package globallimit

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/notifier/notifier/internal/text"
)

// Config is the fleet bucket's configuration (the YAML key global).
type Config struct {
	Rate  float64 `mapstructure:"rate"`  // tokens per second (> 0)
	Burst int     `mapstructure:"burst"` // bucket size (>= 1)
	// ShadowRate, when > 0, is a rate to try without enforcing it: a second
	// bucket of ShadowRate and Burst is asked beside this one (TryTake, no
	// waiting) and the jobs it finds empty are counted, never held. This
	// package only carries it; Store.Take does not read it.
	ShadowRate float64 `mapstructure:"shadow_rate"`
}

// Shadow is the configuration of the shadow bucket (Rate: ShadowRate, the
// same Burst), and false when there is none.
func (c Config) Shadow() (Config, bool) {
	if c.ShadowRate <= 0 {
		return Config{}, false
	}
	return Config{Rate: c.ShadowRate, Burst: c.Burst}, true
}

// The ranges of a Config (SPEC §4), so that take.lua's arithmetic stays
// exact and its key's life short: em(k) = ⌈k × 10⁶ / Rate⌉ µs is a whole
// µs per token at MaxRate, k × 10⁶ stays far below 2^53 at MaxBurst, and
// em(Burst), the bucket's refill and its key's life, is at most MaxRefill.
const (
	// MinRate is one token a day; slower, the bucket stops the fleet
	// rather than protects it (1e-15/s is one job in 31 million years).
	MinRate = 1.0 / 86400
	// MaxRate is one token a microsecond, the resolution of the bucket's
	// time: above it em(1) is still 1 µs, so the rate would not be kept.
	MaxRate = 1_000_000
	// MaxBurst is a million tokens.
	MaxBurst = 1_000_000
	// MaxRefill bounds Burst / Rate, how long an empty bucket takes to
	// fill and so how long its key lives (em(Burst) + 1 s): a state
	// further ahead than this was not written under any valid Config.
	MaxRefill = 24 * time.Hour
)

// Validate returns every problem of c, joined with errors.Join; each
// message starts with the key relative to the config block and names the
// value and the range, e.g. "rate: must be a number of tokens per second
// from 1/86400 (one a day) to 1000000, got -5".
func (c Config) Validate() error {
	var errs []error
	rateOK := validRate(c.Rate)
	if !rateOK {
		errs = append(errs, fmt.Errorf("rate: must be a number of tokens per second from 1/86400 (one a day) to %d, got %v", MaxRate, c.Rate))
	}
	shadowOK := c.ShadowRate == 0 || validRate(c.ShadowRate)
	if !shadowOK {
		errs = append(errs, fmt.Errorf("shadow_rate: must be 0 (none) or a number of tokens per second from 1/86400 (one a day) to %d, got %v", MaxRate, c.ShadowRate))
	}
	burstOK := c.Burst >= 1 && c.Burst <= MaxBurst
	if !burstOK {
		errs = append(errs, fmt.Errorf("burst: must be a whole number from 1 to %d, got %d", MaxBurst, c.Burst))
	}
	if burstOK && rateOK && !refillsInTime(c.Burst, c.Rate) {
		errs = append(errs, fmt.Errorf("burst: %d tokens at rate %v take %s to refill, more than %s (the bucket's state would outlive a day): "+
			"raise rate to at least %v or lower burst to at most %d", c.Burst, c.Rate, refillTime(c.Burst, c.Rate), text.Duration(MaxRefill),
			minRateFor(c.Burst), maxBurstFor(c.Rate)))
	}
	if burstOK && shadowOK && c.ShadowRate > 0 && !refillsInTime(c.Burst, c.ShadowRate) {
		errs = append(errs, fmt.Errorf("shadow_rate: burst %d at shadow_rate %v takes %s to refill, more than %s: raise shadow_rate to at least %v",
			c.Burst, c.ShadowRate, refillTime(c.Burst, c.ShadowRate), text.Duration(MaxRefill), minRateFor(c.Burst)))
	}
	return errors.Join(errs...)
}

func validRate(r float64) bool { return r >= MinRate && r <= MaxRate } // NaN: false

// refillsInTime reports whether em(burst) at rate, as take.lua computes
// it, is within MaxRefill.
func refillsInTime(burst int, rate float64) bool {
	return em(burst, rate) <= MaxRefill.Microseconds()
}

// refillTime is em(burst) at rate, to the second (in hours past what a
// time.Duration holds).
func refillTime(burst int, rate float64) string {
	us := em(burst, rate)
	if us > math.MaxInt64/1000 {
		return fmt.Sprintf("%.0fh", float64(us)/3.6e9)
	}
	return text.Duration((time.Duration(us) * time.Microsecond).Round(time.Second))
}

// minRateFor is the smallest rate at which burst refills within MaxRefill.
func minRateFor(burst int) float64 {
	r := float64(burst) / MaxRefill.Seconds()
	for !refillsInTime(burst, r) {
		r = math.Nextafter(r, math.Inf(1))
	}
	return r
}

// maxBurstFor is the largest burst that refills within MaxRefill at rate.
func maxBurstFor(rate float64) int {
	b := min(MaxBurst, int(rate*MaxRefill.Seconds())+1)
	for b > 1 && !refillsInTime(b, rate) {
		b--
	}
	return b
}
