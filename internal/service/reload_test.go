package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/dispatch"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
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
	changes := map[string]func(*config.Config){
		"suppression":   func(c *config.Config) { c.Suppression.TTL = &zero },
		"tenants.lanes": func(c *config.Config) { c.Tenants.Lanes = 64 },
		"tracing":       func(c *config.Config) { c.Tracing.SampleRatio = &half },
		"redis":         func(c *config.Config) { c.Redis.KeyPrefix = "moved:" },
		"nats":          func(c *config.Config) { c.NATS.Stream = "MOVED" },
		"workers":       func(c *config.Config) { c.Workers = 7 },
		"metrics":       func(c *config.Config) { c.Metrics.Listen = "off" },
		"dedup_ttl":     func(c *config.Config) { c.DedupTTL = time.Hour },
		"retry":         func(c *config.Config) { c.Retry.MaxAttempts = 3 },
	}
	for key, change := range changes {
		next := base
		change(&next)
		if got := restartKeys(base, next); !slices.Contains(got, key) {
			t.Errorf("%s changed: restart keys %v, want it named", key, got)
		}
	}
	// What the process runs on after such a reload is what it started
	// with (inForce), so /status and /explain read what it writes.
	all := base
	for _, change := range changes {
		change(&all)
	}
	if got := restartKeys(base, inForce(base, all)); len(got) != 0 {
		t.Errorf("in force after a reload of every start-only key: %v changed, want none", got)
	}
	next := base
	next.Tenants.Weights = map[string]float64{"acme": 3}
	if got := restartKeys(base, next); len(got) != 0 {
		t.Errorf("tenants.weights changed: restart keys %v, want none (they apply at once)", got)
	}
}

// TestReloadLetsGoOfReplacedRegistries: each reload kept the registry it
// replaced in a list for good, closed after the grace but never let go,
// so every save of the file (a config manager's, every few minutes) grew
// the process by a registry's providers and clients, without bound (found
// in review). Once closed, a replaced registry is dropped.
func TestReloadLetsGoOfReplacedRegistries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	getenv := func(string) string { return "" }
	log := slog.New(slog.DiscardHandler)
	path := filepath.Join(t.TempDir(), "config.yaml")
	yaml := fmt.Sprintf("nats: {url: %q}\nproviders:\n  - { name: sms-gw, channel: sms, default: true, kind: log, rate: 10 }\n", testenv.NATS(t).URL())
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, getenv)
	if err != nil {
		t.Fatal(err)
	}
	nc, js, cons, err := Connect(ctx, cfg, "reload test", log)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	popts := providers.Options{Version: "test", Getenv: getenv, Stdout: io.Discard}
	reg, err := providers.NewRegistry(cfg.Providers, popts)
	if err != nil {
		t.Fatal(err)
	}
	set, err := limits.Memory(cfg.Limits(), 1)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(dispatch.Options{Source: cons, DeadLetters: queue.NewPublisher(js), Providers: reg, Limits: set,
		Metrics: dispatch.NewMetrics(prometheus.NewRegistry()), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	r := newReloader(path, cfg, reg, popts, getenv, log)
	defer r.close()
	for range 50 {
		r.reload(d, "test", time.Millisecond)
	}
	testenv.WaitFor(t, 5*time.Second, "the 50 replaced registries closed and dropped", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.old) == 0
	})
}
