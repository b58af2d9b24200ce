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
	if c.Burst < 1 {
		errs = append(errs, fmt.Errorf("burst: must be at least 1, got %d", c.Burst))
	}
	return errors.Join(errs...)
}
