package providers

import (
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
)

// kinds is every provider kind, one entry each, in the order messages list
// them ("kind: … is not one of webhook, twilio, …", "used by twilio, smtp").
// Each entry is declared in its kind's file, beside the client. Adding a
// kind is that file and one line here (docs/providers.md, "Adding a
// provider kind").
var kinds = []kind{
	webhookKind,
	twilioKind,
	fcmKind,
	apnsKind,
	smtpKind,
	logKind,
}

// kind is what the package needs of one provider kind besides its client:
// what Validate, WithDefaults and NewRegistry do for an entry of the kind.
type kind struct {
	// name is the value of the entry's kind key.
	name string
	// channel is the one channel the kind sends on; "" for any.
	channel string
	// keys are the kind-specific keys the kind takes, spelled as in the
	// file (Config's mapstructure tags). A key that some kind lists is
	// refused on an entry of a kind that does not list it; a key no kind
	// lists (name, rate, …) is one every kind takes.
	keys []string
	// defaults fills in the kind's keys left out; nil for none.
	// WithDefaults calls it after the defaults every kind shares.
	defaults func(c *Config)
	// validate adds the problems of the kind's own keys to p; nil for none.
	// Validate calls it on the entry with its defaults applied, after
	// checking the keys every kind takes and refusing other kinds' keys.
	validate func(c Config, p *problems)
	// build makes the provider of an entry that passed Validate, its
	// defaults applied. It must not call Validate or WithDefaults (they
	// read kinds: an initialization cycle); the kind's exported
	// constructor does, through newChecked, before calling the same
	// function.
	build func(c Config, opts Options) (Provider, error)
}

// urlDefault is the defaults of a kind whose one default is its url.
func urlDefault(url string) func(c *Config) {
	return func(c *Config) {
		if c.URL == "" {
			c.URL = url
		}
	}
}

// kindNamed returns the entry of kinds named name.
func kindNamed(name string) (kind, bool) {
	i := slices.IndexFunc(kinds, func(k kind) bool { return k.name == name })
	if i < 0 {
		return kind{}, false
	}
	return kinds[i], true
}

// kindNames lists the kinds for a message: "webhook, twilio, …".
func kindNames() string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.name
	}
	return strings.Join(names, ", ")
}

// kindsTaking returns the kinds whose keys include key, in the order of
// kinds; none for a key every kind takes.
func kindsTaking(key string) []string {
	var names []string
	for _, k := range kinds {
		if slices.Contains(k.keys, key) {
			names = append(names, k.name)
		}
	}
	return names
}

// refuseOtherKeys reports every key set in c (a value other than the zero
// value) that other kinds take and k does not, in the order of Config's
// fields.
func (k kind) refuseOtherKeys(c Config, p *problems) {
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		key := v.Type().Field(i).Tag.Get("mapstructure")
		if slices.Contains(k.keys, key) || v.Field(i).IsZero() {
			continue
		}
		if users := kindsTaking(key); len(users) > 0 {
			p.add(key, "not used by kind %s (used by %s)", k.name, strings.Join(users, ", "))
		}
	}
}

// builder turns a kind's constructor into a kind.build: a constructor's
// error comes with a nil Provider, never a nil pointer in one.
func builder[P Provider](newP func(Config, Options) (P, error)) func(Config, Options) (Provider, error) {
	return func(c Config, opts Options) (Provider, error) {
		p, err := newP(c, opts)
		if err != nil {
			return nil, err
		}
		return p, nil
	}
}

// problems collects what Validate finds in one entry: one error per
// problem, each message starting with the key relative to the entry.
type problems struct {
	kind string // the entry's kind, for "required for kind …"
	errs []error
}

// add reports a problem with key.
func (p *problems) add(key, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
}

// required reports key as missing when value is empty.
func (p *problems) required(key, value string) {
	if value == "" {
		p.add(key, "required for kind %s", p.kind)
	}
}

// requiredURL reports the url key as missing, or as not an absolute http
// or https URL.
func (p *problems) requiredURL(raw string) {
	if raw == "" {
		p.add("url", "required for kind %s", p.kind)
		return
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.add("url", "must be an absolute http(s) URL, got %q", raw)
	}
}

// newChecked is the kinds' exported constructors (NewWebhook, NewTwilio,
// …): it applies cfg's defaults, checks that it is a valid entry of kind
// kind, then builds the provider with newP. what names the provider in
// the errors, "new <what> <name>: …".
func newChecked[P any](cfg Config, opts Options, kind, what string, newP func(Config, Options) (P, error)) (P, error) {
	var none P
	cfg = cfg.WithDefaults()
	if cfg.Kind != kind {
		return none, fmt.Errorf("new %s %s: kind is %q, not %s", what, cfg.Name, cfg.Kind, kind)
	}
	if err := cfg.Validate(); err != nil {
		return none, fmt.Errorf("new %s %s: %w", what, cfg.Name, err)
	}
	return newP(cfg, opts)
}
