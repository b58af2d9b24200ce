package providers

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"
)

// Options are what the registry needs from its surroundings. The zero value
// is ready to use.
type Options struct {
	// Getenv reads the environment variables that hold secrets; default
	// os.Getenv. Secrets are never read from the configuration file and
	// never printed.
	Getenv func(string) string
	// Version goes into the User-Agent, notifier/<Version>; default "dev".
	Version string
	// Logger receives one debug line per provider built; providers log
	// nothing while sending. Default: discard.
	Logger *slog.Logger
	// Stdout is where the log kind writes; default os.Stdout.
	Stdout io.Writer
	// HTTPClient, when set, is used by every HTTP provider instead of a
	// transport of its own (tests). Its redirect policy is kept as given;
	// the per-request timeout still comes from Config.Timeout.
	HTTPClient *http.Client
	// Now is the clock a Retry-After HTTP-date is measured against when
	// the response has no Date header; default time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// lookupSecret reads the environment variable env through opts.Getenv; the
// error names the variable (envShown), never a value.
func lookupSecret(opts Options, env string) (string, error) {
	v := opts.Getenv(env)
	if v == "" {
		return "", fmt.Errorf("environment variable %s is not set or empty", envShown(env))
	}
	return v, nil
}

// envShown is how an error shows what a *_env key holds: itself when it
// reads as an environment variable's name (upper case, digits and _, as
// such names are written), else only its length. A secret pasted into the
// key by mistake (sk_live_..., a password) would otherwise be printed in
// the error, at start and in every log that keeps it.
func envShown(name string) string {
	// A shell reference ($TOKEN, ${TOKEN}) is a name too, written the
	// shell's way: shown, so that the fix is plain.
	bare := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(name, "$"), "{"), "}")
	named := bare != "" && len(bare) <= 64
	for i, r := range bare {
		named = named && (r >= 'A' && r <= 'Z' || r == '_' || i > 0 && r >= '0' && r <= '9')
	}
	if !named {
		return fmt.Sprintf("(%d characters, not an UPPER_CASE name: is it the secret itself? name the variable that holds it)", len(name))
	}
	if bare != name {
		return fmt.Sprintf("%q", name)
	}
	return name
}

// Registry holds every configured provider, built once at start. It is
// read-only after NewRegistry and safe for concurrent use.
type Registry struct {
	entries  []registered
	byName   map[string]int
	defaults map[string]int
}

type registered struct {
	cfg Config
	p   Provider
}

// NewRegistry validates cfgs (each entry and the list as a whole; the
// errors are prefixed with EntryPath) and builds one provider per entry,
// each Config with its defaults applied. It fails, naming every problem, if
// the configuration is invalid, a secret's environment variable is unset,
// or a file an entry names (key_file, credentials_file, tls_ca_file) cannot
// be read or is not what it should be. Building connects to nothing.
func NewRegistry(cfgs []Config, opts Options) (*Registry, error) {
	opts = opts.withDefaults()
	var errs []error
	for i, c := range cfgs {
		if err := c.Validate(); err != nil {
			errs = append(errs, prefixErrors(EntryPath(i, c.Name)+".", err)...)
		}
	}
	if err := ValidateAll(cfgs); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("providers: invalid configuration: %w", errors.Join(errs...))
	}

	r := &Registry{byName: map[string]int{}, defaults: map[string]int{}}
	for i, c := range cfgs {
		c = c.WithDefaults()
		p, err := build(c, opts)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", EntryPath(i, c.Name), err))
			continue
		}
		opts.Logger.Debug("provider ready", "provider", c.Name, "kind", c.Kind, "channel", c.Channel,
			"rate", c.Rate, "unit", c.Unit)
		r.byName[c.Name] = len(r.entries)
		if c.Default {
			r.defaults[c.Channel] = len(r.entries)
		}
		r.entries = append(r.entries, registered{cfg: c, p: p})
	}
	if len(errs) > 0 {
		_ = r.Close()
		return nil, fmt.Errorf("providers: %w", errors.Join(errs...))
	}
	return r, nil
}

// build makes the provider of c, an entry that passed Validate with its
// defaults applied, with its kind's build.
func build(c Config, opts Options) (Provider, error) {
	k, ok := kindNamed(c.Kind)
	if !ok {
		return nil, fmt.Errorf("kind %q: no such kind", c.Kind)
	}
	return k.build(c, opts)
}

// prefixErrors splits a joined error and prefixes each part.
func prefixErrors(prefix string, err error) []error {
	var parts []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts = j.Unwrap()
	} else {
		parts = []error{err}
	}
	out := make([]error, len(parts))
	for i, p := range parts {
		out[i] = fmt.Errorf("%s%w", prefix, p)
	}
	return out
}

// Get returns the provider named name and its configuration (defaults
// applied).
func (r *Registry) Get(name string) (Provider, Config, bool) {
	i, ok := r.byName[name]
	if !ok {
		return nil, Config{}, false
	}
	return r.entries[i].p, r.entries[i].cfg, true
}

// Default returns the default provider of channel and its configuration.
func (r *Registry) Default(channel string) (Provider, Config, bool) {
	i, ok := r.defaults[channel]
	if !ok {
		return nil, Config{}, false
	}
	return r.entries[i].p, r.entries[i].cfg, true
}

// All returns every provider's configuration (defaults applied) in the
// order of the configuration file. The slice is the caller's.
func (r *Registry) All() []Config {
	out := make([]Config, len(r.entries))
	for i, e := range r.entries {
		out[i] = e.cfg
	}
	return out
}

// Close releases every provider's resources (idle HTTP connections, idle
// SMTP sessions). Call it after the last Send.
func (r *Registry) Close() error {
	var errs []error
	for _, e := range r.entries {
		if c, ok := e.p.(io.Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close provider %s: %w", e.cfg.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}
