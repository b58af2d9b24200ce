package providers

import "fmt"

// checkedEntry is how the kinds' exported constructors (NewWebhook,
// NewTwilio, …) start: it returns cfg with its defaults applied, after
// checking that it is a valid entry of kind kind. what names the provider
// in the errors, "new <what> <name>: …".
func checkedEntry(cfg Config, kind, what string) (Config, error) {
	cfg = cfg.WithDefaults()
	if cfg.Kind != kind {
		return cfg, fmt.Errorf("new %s %s: kind is %q, not %s", what, cfg.Name, cfg.Kind, kind)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("new %s %s: %w", what, cfg.Name, err)
	}
	return cfg, nil
}
