package service

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/notifier/notifier/config"
	"github.com/notifier/notifier/dispatch"
	"github.com/notifier/notifier/providers"
)

// reloader re-reads the configuration on SIGHUP and when its file changes,
// and hands the parts that can change without a restart to the dispatcher:
// provider contracts and endpoints, per-user caps, the fleet bucket and
// the tenants' weights. A configuration with problems is refused, each
// problem logged, and the one in force is kept. Changes to keys that need
// a restart are logged.
type reloader struct {
	path   string
	popts  providers.Options
	getenv func(string) string
	log    *slog.Logger

	mu  sync.Mutex
	cfg config.Config
	reg *providers.Registry
	old []*providers.Registry // replaced registries, closed by close
}

func newReloader(path string, cfg config.Config, reg *providers.Registry, popts providers.Options, getenv func(string) string, log *slog.Logger) *reloader {
	return &reloader{path: path, cfg: cfg, reg: reg, popts: popts, getenv: getenv, log: log}
}

// current is the configuration in force.
func (r *reloader) current() config.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg
}

// run waits for SIGHUP or a change of the file until ctx ends. Replaced
// provider registries are closed grace after the reload (jobs already under
// way keep using theirs until then).
func (r *reloader) run(ctx context.Context, d *dispatch.Dispatcher, grace time.Duration) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	changed := make(chan struct{}, 1)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		r.log.Warn("cannot watch the configuration file; reload with SIGHUP", "err", err)
	} else {
		defer w.Close()
		// Watch the directory: editors and config managers replace the file
		// (write a new one, rename it over), which a watch on the file loses.
		if err := w.Add(filepath.Dir(r.path)); err != nil {
			r.log.Warn("cannot watch the configuration file; reload with SIGHUP", "err", err)
		}
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		events, errs = w.Events, w.Errors
	}
	var debounce *time.Timer
	defer func() {
		if debounce != nil {
			debounce.Stop()
		}
	}()
	base := filepath.Clean(r.path)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			r.reload(d, "SIGHUP", grace)
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if filepath.Clean(ev.Name) != base || ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename) == 0 {
				continue
			}
			// A save is often several events; reload once it settles.
			if debounce != nil {
				debounce.Stop()
			}
			debounce = time.AfterFunc(250*time.Millisecond, func() {
				select {
				case changed <- struct{}{}:
				default:
				}
			})
		case <-changed:
			if _, err := os.Stat(r.path); err != nil {
				continue // removed for a moment by a rename; the Create follows
			}
			r.reload(d, "file changed", grace)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			r.log.Warn("watch configuration file", "err", err)
		}
	}
}

// reload reads the file again and applies it, or refuses it.
func (r *reloader) reload(d *dispatch.Dispatcher, why string, grace time.Duration) {
	cfg, err := config.Load(r.path, r.getenv)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			for _, p := range ce.Problems {
				r.log.Error("configuration reload refused; keeping the one in force", "trigger", why, "problem", p.Error())
			}
		} else {
			r.log.Error("configuration reload refused; keeping the one in force", "trigger", why, "err", err)
		}
		return
	}
	reg, err := providers.NewRegistry(cfg.Providers, r.popts)
	if err != nil {
		r.log.Error("configuration reload refused; keeping the one in force", "trigger", why, "err", err)
		return
	}
	if err := d.Reload(ReloadOf(cfg, reg)); err != nil {
		_ = reg.Close()
		r.log.Error("configuration reload refused; keeping the one in force", "trigger", why, "err", err)
		return
	}
	r.mu.Lock()
	prev := r.cfg
	oldReg := r.reg
	r.cfg, r.reg = inForce(prev, cfg), reg
	r.old = append(r.old, oldReg)
	r.mu.Unlock()
	// Closed and dropped after the grace: kept for good, every save of the
	// file grew the process by a registry.
	time.AfterFunc(grace, func() {
		r.mu.Lock()
		i := slices.Index(r.old, oldReg)
		if i >= 0 {
			r.old = slices.Delete(r.old, i, i+1)
		}
		r.mu.Unlock()
		if i >= 0 { // else close has closed it
			_ = oldReg.Close()
		}
	})
	for _, k := range restartKeys(prev, cfg) {
		r.log.Warn("configuration key changed but needs a restart to apply", "key", k)
	}
	r.log.Info("configuration reloaded", "trigger", why, "providers", len(cfg.Providers), "user_limits", len(cfg.UserLimits), "global", cfg.Global != nil,
		"tenant_weights", len(cfg.Tenants.Weights))
}

// ReloadOf is the part of cfg a reload hands to the dispatcher, with reg
// the providers built from it.
func ReloadOf(cfg config.Config, reg *providers.Registry) dispatch.Reload {
	caps := cfg.Caps()
	return dispatch.Reload{UserLimits: caps.Channels, CategoryLimits: caps.Categories, Categories: caps.Defaults,
		Providers: reg, Global: cfg.Global, TenantWeights: cfg.Tenants.Weights}
}

// startOnly are the sections that apply only at start, each by its key
// and where it lies in a Config: restartKeys names those an edit changed,
// and inForce keeps them as the process runs them. One table, so that the
// two cannot disagree.
var startOnly = []struct {
	key string
	at  func(c *config.Config) any // a pointer to the section
}{
	{"nats", func(c *config.Config) any { return &c.NATS }},
	{"redis", func(c *config.Config) any { return &c.Redis }},
	{"workers", func(c *config.Config) any { return &c.Workers }},
	{"metrics", func(c *config.Config) any { return &c.Metrics }},
	{"dedup_ttl", func(c *config.Config) any { return &c.DedupTTL }},
	{"retry", func(c *config.Config) any { return &c.Retry }},
	{"tenants.lanes", func(c *config.Config) any { return &c.Tenants.Lanes }},
	{"suppression", func(c *config.Config) any { return &c.Suppression }},
	{"tracing", func(c *config.Config) any { return &c.Tracing }},
}

// inForce is next as the process runs it: the start-only sections kept
// from cur, the configuration in force. current() hands it to /status and
// /explain, which read a reloaded redis.key_prefix (and nats streams)
// while the dispatcher wrote under the old ones until the restart.
func inForce(cur, next config.Config) config.Config {
	for _, s := range startOnly {
		reflect.ValueOf(s.at(&next)).Elem().Set(reflect.ValueOf(s.at(&cur)).Elem())
	}
	return next
}

// restartKeys lists the start-only sections that differ between a and b.
func restartKeys(a, b config.Config) []string {
	var out []string
	for _, s := range startOnly {
		if !reflect.DeepEqual(s.at(&a), s.at(&b)) {
			out = append(out, s.key)
		}
	}
	return out
}

// close closes the registries in force and replaced.
func (r *reloader) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.reg.Close()
	for _, o := range r.old {
		_ = o.Close()
	}
	r.old = nil
}
