package globallimit

import (
	"errors"
	"fmt"
	"math"
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

// Validate returns every problem of c, joined with errors.Join; each
// message starts with the key relative to the config block, e.g.
// "rate: must be greater than 0, got -5".
func (c Config) Validate() error {
	var errs []error
	switch {
	case math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		errs = append(errs, fmt.Errorf("rate: must be a finite number, got %v", c.Rate))
	case c.Rate <= 0:
		errs = append(errs, fmt.Errorf("rate: must be greater than 0, got %v", c.Rate))
	}
	switch {
	case math.IsNaN(c.ShadowRate) || math.IsInf(c.ShadowRate, 0):
		errs = append(errs, fmt.Errorf("shadow_rate: must be a finite number, got %v", c.ShadowRate))
	case c.ShadowRate < 0:
		errs = append(errs, fmt.Errorf("shadow_rate: must be 0 (none) or more, got %v", c.ShadowRate))
	}
	if c.Burst < 1 {
		errs = append(errs, fmt.Errorf("burst: must be at least 1, got %d", c.Burst))
	}
	return errors.Join(errs...)
}
