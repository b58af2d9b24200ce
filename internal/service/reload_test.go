package service

import (
	"slices"
	"testing"
	"time"

	"github.com/notifier/notifier/config"
)

// TestReloadNamesEveryKeyItDoesNotApply: a reload that changes a key it
// does not apply logs it as needing a restart: suppression.ttl,
// tenants.lanes and tracing were read once at start, and a change of them
// was logged as "configuration reloaded" with no word of it (found in
// review); tenants.weights apply at once and are not named.
func TestReloadNamesEveryKeyItDoesNotApply(t *testing.T) {
	t.Parallel()
	base, err := config.Parse([]byte(`
providers:
  - { name: sms-gw, channel: sms, default: true, kind: log, rate: 10 }
`), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	zero, half := time.Duration(0), 0.5
	for key, change := range map[string]func(*config.Config){
		"suppression":   func(c *config.Config) { c.Suppression.TTL = &zero },
		"tenants.lanes": func(c *config.Config) { c.Tenants.Lanes = 64 },
		"tracing":       func(c *config.Config) { c.Tracing.SampleRatio = &half },
	} {
		next := base
		change(&next)
		if got := restartKeys(base, next); !slices.Contains(got, key) {
			t.Errorf("%s changed: restart keys %v, want it named", key, got)
		}
	}
	next := base
	next.Tenants.Weights = map[string]float64{"acme": 3}
	if got := restartKeys(base, next); len(got) != 0 {
		t.Errorf("tenants.weights changed: restart keys %v, want none (they apply at once)", got)
	}
}
