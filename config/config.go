package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/notifier/notifier/dispatch"
	"github.com/notifier/notifier/gateway"
	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/suppress"
	"github.com/notifier/notifier/userlimit"
)

// Config is the whole YAML file of SPEC §4. Each section is the owning
// package's own config type; this file only reads, merges the environment,
// fills defaults and collects every problem.
type Config struct {
	NATS       queue.Config         `mapstructure:"nats"`
	Redis      Redis                `mapstructure:"redis"`
	Workers    int                  `mapstructure:"workers"`
	Metrics    Metrics              `mapstructure:"metrics"`
	DedupTTL   time.Duration        `mapstructure:"dedup_ttl"`
	Retry      dispatch.RetryConfig `mapstructure:"retry"`
	Global     *globallimit.Config  `mapstructure:"global"`
	UserLimits map[string]Cap       `mapstructure:"user_limits"`
	// Categories are the channels' categories: what a job without one on a
	// channel's normal lane is (left out: transactional).
	Categories map[string]queue.Category `mapstructure:"categories"`
	Tenants    Tenants                   `mapstructure:"tenants"`
	// Suppression is YAML suppression: the list of recipients providers
	// refused as gone (left out: kept for DefaultSuppressionTTL).
	Suppression Suppression        `mapstructure:"suppression"`
	Providers   []providers.Config `mapstructure:"providers"`
	Tracing     Tracing            `mapstructure:"tracing"`
	// Gateway is read by `notifier gateway` only (nil: left out); `check`
	// and every command validate it when present.
	Gateway *gateway.Config `mapstructure:"gateway"`
}

// Cap is YAML user_limits.<channel>: the channel's per-user cap
// (limit, window, ...; left out: none) and, under transactional: and
// marketing:, a cap of its own for that category's jobs, which they take
// instead of the channel's, counted apart.
type Cap struct {
	userlimit.Rule `mapstructure:",squash"`
	Transactional  *userlimit.Rule `mapstructure:"transactional"`
	Marketing      *userlimit.Rule `mapstructure:"marketing"`
}

// Own reports whether the entry sets a cap for the channel itself.
func (c Cap) Own() bool { return c.Rule != (userlimit.Rule{}) }

// Category is the entry's cap of category cat, or nil.
func (c Cap) Category(cat queue.Category) *userlimit.Rule {
	switch cat {
	case queue.Transactional:
		return c.Transactional
	case queue.Marketing:
		return c.Marketing
	}
	return nil
}

// ChannelCaps are the channels' own caps (user_limits.<channel>).
func (c Config) ChannelCaps() map[string]userlimit.Rule {
	out := map[string]userlimit.Rule{}
	for ch, cc := range c.UserLimits {
		if cc.Own() {
			out[ch] = cc.Rule
		}
	}
	return out
}

// CategoryCaps are the categories' caps (user_limits.<channel>.<category>).
func (c Config) CategoryCaps() map[limits.CategoryCap]userlimit.Rule {
	out := map[limits.CategoryCap]userlimit.Rule{}
	for ch, cc := range c.UserLimits {
		for _, cat := range queue.Categories {
			if r := cc.Category(cat); r != nil {
				out[limits.CategoryCap{Channel: ch, Category: cat}] = *r
			}
		}
	}
	return out
}

// Caps are the per-user caps and the channels' categories as the
// dispatcher takes them: one way to ask which cap a job has
// (limits.Caps.CapFor), for run, reload, explain and top alike.
func (c Config) Caps() limits.Caps {
	return limits.Caps{Channels: c.ChannelCaps(), Categories: c.CategoryCaps(), Defaults: c.Categories}
}

// Tenants is YAML tenants:.
type Tenants struct {
	// Weights are the tenants' shares of a provider's contract while
	// several have jobs waiting; a tenant left out (and the default
	// tenant) weighs 1. File only: no environment variable sets it.
	Weights map[string]float64 `mapstructure:"weights"`
	// Lanes is the number of fair lanes per channel and lane kind that the
	// tenants' jobs share (queue.DefaultFairLanes; 1 to
	// queue.MaxFairLanes). Every process, gateway and publisher of a fleet
	// should use the same number.
	Lanes int `mapstructure:"lanes"`
}

// Suppression is YAML suppression:.
type Suppression struct {
	// TTL is how long a recipient a provider refused as gone stays on the
	// fleet's suppression list, its jobs suppressed unsent; 0 keeps no
	// list; left out: DefaultSuppressionTTL.
	TTL *time.Duration `mapstructure:"ttl"`
}

// DefaultSuppressionTTL is suppression.ttl's default: 30 days.
const DefaultSuppressionTTL = 720 * time.Hour

// SuppressTTL is suppression.ttl as the dispatcher takes it (0: no list).
func (c Config) SuppressTTL() time.Duration {
	if c.Suppression.TTL == nil {
		return DefaultSuppressionTTL
	}
	return *c.Suppression.TTL
}

// maxTenantWeight is the largest weight tenants.weights allows: a weight
// is a share against the default 1, and a thousandfold share is already
// all of a contract to any tenant it competes with.
const maxTenantWeight = 1000

// Metrics is YAML metrics:.
type Metrics struct {
	Listen string `mapstructure:"listen"` // host:port of /metrics, /healthz, /readyz; "off" disables
}

// EnvPrefix prefixes every environment override: NOTIFIER_ + the key path in
// upper case with _ for . (NOTIFIER_REDIS_ADDRS, NOTIFIER_NATS_URL).
const EnvPrefix = "NOTIFIER"

// WithDefaults fills every key left out with SPEC §4's value.
func (c Config) WithDefaults() Config {
	c.NATS = c.NATS.WithDefaults()
	c.Redis = c.Redis.WithDefaults()
	if c.Workers == 0 {
		c.Workers = 32
	}
	if c.Tenants.Lanes == 0 {
		c.Tenants.Lanes = queue.DefaultFairLanes
	}
	if c.Metrics.Listen == "" {
		c.Metrics.Listen = "127.0.0.1:9464"
	}
	if c.DedupTTL == 0 {
		c.DedupTTL = 24 * time.Hour
	}
	c.Retry = c.Retry.WithDefaults()
	c.Tracing = c.Tracing.WithDefaults()
	for ch, cc := range c.UserLimits {
		if cc.Own() {
			cc.Rule = cc.Rule.WithDefaults()
		}
		for _, r := range []**userlimit.Rule{&cc.Transactional, &cc.Marketing} {
			if *r != nil {
				d := (**r).WithDefaults()
				*r = &d
			}
		}
		c.UserLimits[ch] = cc
	}
	for i := range c.Providers {
		c.Providers[i] = c.Providers[i].WithDefaults()
	}
	if c.Gateway != nil {
		g := c.Gateway.WithDefaults()
		c.Gateway = &g
	}
	return c
}

// Validate reports every problem at once, each naming its YAML key.
func (c Config) Validate() error {
	var errs []error
	add := func(prefix string, err error) {
		for _, e := range Problems(err) {
			errs = append(errs, fmt.Errorf("%s%w", prefix, e))
		}
	}
	add("nats.", c.NATS.Validate())
	add("redis.", c.Redis.Validate())
	if c.Workers < 1 || c.Workers > 4096 {
		errs = append(errs, fmt.Errorf("workers: %s, got %d", zeroRefused["workers"].rng, c.Workers))
	}
	if c.Metrics.Listen != "off" {
		if _, port, err := net.SplitHostPort(c.Metrics.Listen); err != nil || !validPort(port) {
			errs = append(errs, fmt.Errorf("metrics.listen: must be host:port (port 0 picks a free one) or \"off\", got %q", c.Metrics.Listen))
		}
	}
	if c.DedupTTL < minDedupTTL || c.DedupTTL > maxDedupTTL {
		errs = append(errs, fmt.Errorf("dedup_ttl: %s, got %s", zeroRefused["dedup_ttl"].rng, text.Duration(c.DedupTTL)))
	}
	add("retry.", c.Retry.Validate())
	errs = append(errs, retryRanges(c.Retry, c.DedupTTL, errs)...)
	add("tracing.", c.Tracing.Validate())
	if c.Global != nil {
		add("global.", c.Global.Validate())
	}
	for _, ch := range sortedKeys(c.UserLimits) {
		if !queue.IsChannel(ch) {
			errs = append(errs, fmt.Errorf("user_limits.%s: %q is not a channel; use one of %s", ch, ch, strings.Join(queue.Channels, ", ")))
			continue
		}
		cc := c.UserLimits[ch]
		if !cc.Own() && cc.Transactional == nil && cc.Marketing == nil {
			errs = append(errs, fmt.Errorf("user_limits.%s: empty: give the channel's cap (limit, window, ...) or a category's (transactional: or marketing:)", ch))
			continue
		}
		if cc.Own() {
			add("user_limits."+ch+".", cc.Rule.Validate())
		}
		for _, cat := range queue.Categories {
			if r := cc.Category(cat); r != nil {
				add("user_limits."+ch+"."+string(cat)+".", r.Validate())
			}
		}
	}
	for _, ch := range sortedKeys(c.Categories) {
		switch cat := c.Categories[ch]; {
		case !queue.IsChannel(ch):
			errs = append(errs, fmt.Errorf("categories.%s: %q is not a channel; use one of %s", ch, ch, strings.Join(queue.Channels, ", ")))
		case !queue.ValidCategory(cat):
			errs = append(errs, fmt.Errorf("categories.%s: %q is not one of transactional, marketing", ch, cat))
		}
	}
	for _, t := range sortedKeys(c.Tenants.Weights) {
		w := c.Tenants.Weights[t]
		if !queue.ValidTenant(t) {
			errs = append(errs, fmt.Errorf("%s: %q is not a tenant name: a tenant is 1 to %d characters of A-Z a-z 0-9 . _ -",
				tenantPath(t), t, queue.MaxTenantLen))
		}
		if math.IsNaN(w) || math.IsInf(w, 0) || w <= 0 || w > maxTenantWeight {
			errs = append(errs, fmt.Errorf("%s: must be a number greater than 0 and at most %d (a tenant left out weighs 1), got %v",
				tenantPath(t), maxTenantWeight, w))
		}
	}
	if t := c.Suppression.TTL; t != nil && (*t < 0 || *t > suppress.MaxTTL || *t > 0 && *t < time.Minute) {
		errs = append(errs, fmt.Errorf("suppression.ttl: must be 0 (no list) or from 1m to %s (366 days), got %s", text.Duration(suppress.MaxTTL), text.Duration(*t)))
	}
	if c.Tenants.Lanes < 1 || c.Tenants.Lanes > queue.MaxFairLanes {
		errs = append(errs, fmt.Errorf("tenants.lanes: must be a whole number from 1 to %d, got %d (each lane is 12 consumers on the job stream: %d lanes, %d consumers)",
			queue.MaxFairLanes, c.Tenants.Lanes, c.Tenants.Lanes, queue.Consumers(c.Tenants.Lanes)))
	}
	if len(c.Providers) == 0 {
		errs = append(errs, errors.New("providers: required: at least one provider"))
	}
	for i, p := range c.Providers {
		add(providerPath(i, p.Name)+".", p.Validate())
	}
	add("", providers.ValidateAll(c.Providers))
	if c.Gateway != nil {
		add("gateway.", c.Gateway.Validate())
	}
	return errors.Join(errs...)
}

// tenantPath is the key path of a tenant's weight: tenants.weights.<name>,
// the name quoted when it is not a tenant name (spaces, quotes).
func tenantPath(name string) string {
	if queue.ValidTenant(name) {
		return "tenants.weights." + name
	}
	return "tenants.weights." + strconv.Quote(name)
}

func providerPath(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("providers[%d]", i)
	}
	return providers.EntryPath(i, name)
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 0 && n <= 65535
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Problems unwraps errors.Join trees into their leaves.
func Problems(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, Problems(e)...)
		}
		return out
	}
	return []error{err}
}

// Error is a configuration that cannot be used: every problem found,
// one per line. The command line maps it to exit code 2.
type Error struct {
	File     string
	Problems []error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "configuration %s: %d problem", e.File, len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p.Error())
	}
	return b.String()
}

// Load reads path (YAML), applies NOTIFIER_* environment overrides,
// fills defaults and validates. getenv is os.Getenv in production. A
// configuration that cannot be used returns a *Error listing every
// problem.
func Load(path string, getenv func(string) string) (Config, error) {
	yaml, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return Config{}, &Error{File: path, Problems: []error{fmt.Errorf("cannot read the file: %w", err)}}
	}
	return parseConfig(yaml, path, getenv)
}

// NATSOnly is the configuration of a command that needs only NATS
// and was given its URL (publish --nats), read from no file: nats.url is
// url, the other nats keys come from their NOTIFIER_NATS_* variables (the
// secrets too), every other key takes its default. Problems are a
// *Error, as Load's.
func NATSOnly(url string, getenv func(string) string) (Config, error) {
	const source = "(--nats, no file)"
	v := viper.New()
	for _, k := range envKeys() {
		if !strings.HasPrefix(k, "nats.") {
			continue
		}
		if val := getenv(EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(k, ".", "_"))); val != "" {
			v.Set(k, val)
		}
	}
	v.Set("nats.url", url)
	var nc queue.Config
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result: &nc, ErrorUnused: true, DecodeHook: decodeHook, TagName: "mapstructure",
	})
	if err != nil {
		return Config{}, fmt.Errorf("build config decoder: %w", err)
	}
	if err := dec.Decode(v.Get("nats")); err != nil {
		return Config{}, &Error{File: source, Problems: prefixed("nats.", decodeProblems(err))}
	}
	cfg := Config{NATS: nc}.WithDefaults()
	if err := cfg.NATS.Validate(); err != nil {
		return cfg, &Error{File: source, Problems: prefixed("nats.", Problems(err))}
	}
	return cfg, nil
}

// prefixed is each problem with prefix (a key path) before it.
func prefixed(prefix string, problems []error) []error {
	out := make([]error, len(problems))
	for i, p := range problems {
		out[i] = fmt.Errorf("%s%w", prefix, p)
	}
	return out
}

// Parse is Load for YAML held in memory (tests, fuzzing).
func Parse(yaml []byte, getenv func(string) string) (Config, error) {
	return parseConfig(yaml, "(memory)", getenv)
}

func parseConfig(yaml []byte, file string, getenv func(string) string) (Config, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(yaml)); err != nil {
		return Config{}, &Error{File: file, Problems: []error{fmt.Errorf("not valid YAML: %w", err)}}
	}
	return decodeConfig(v, yaml, file, getenv)
}

func decodeConfig(v *viper.Viper, yaml []byte, file string, getenv func(string) string) (Config, error) {
	// Environment overrides: viper looks a key up in the environment only if
	// it knows the key, so bind every scalar key of the schema.
	for _, k := range envKeys() {
		env := EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(k, ".", "_"))
		if val := getenv(env); val != "" {
			v.Set(k, val)
		}
	}
	var cfg Config
	var problems []error
	dc := &mapstructure.DecoderConfig{
		Result:           &cfg,
		ErrorUnused:      true,
		WeaklyTypedInput: false,
		DecodeHook:       decodeHook,
		TagName:          "mapstructure",
	}
	// A value the decoder refuses (a bare-number duration, a word for a
	// number) ends mapstructure's pass early and hides every problem after
	// it, misspelt keys included; so each refused value is taken out and
	// the rest decoded again, until nothing new is found.
	settings := v.AllSettings()
	// Viper lower-cases every key; tenant names are not: the weights and
	// the gateway's tenant buckets are taken as the file spells them.
	for _, path := range tenantMappings {
		if t, ok := settings[path[0]].(map[string]any); ok {
			if _, ok := t[path[1]]; ok {
				if w, ok := mappingAsWritten(yaml, path[0], path[1]); ok {
					t[path[1]] = w
				}
			}
		}
	}
	for range 8 {
		dec, err := mapstructure.NewDecoder(dc)
		if err != nil {
			return Config{}, fmt.Errorf("build config decoder: %w", err)
		}
		cfg = Config{}
		err = dec.Decode(settings)
		if err == nil {
			break
		}
		removed := false
		for _, p := range decodeProblems(err) {
			if reportedKey(problems, p) || containsProblem(problems, p) {
				continue
			}
			problems = append(problems, p)
			if path := problemKey(p); path != "" && (deleteKeyPath(settings, path) || deleteTenantWeight(settings, path)) {
				removed = true
			}
		}
		if !removed {
			break
		}
	}
	problems = append(problems, explicitZeros(settings)...)
	cfg = cfg.WithDefaults()
	// Validate too, so every problem shows at once; a key that could not
	// be decoded is not reported a second time for its default value.
	for _, p := range Problems(cfg.Validate()) {
		if !reportedKey(problems, p) {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		sortProblems(problems)
		return cfg, &Error{File: file, Problems: problems}
	}
	return cfg, nil
}

// tenantMappings are the mappings keyed by tenant names: tenants.weights
// and gateway.tenants.
var tenantMappings = [][2]string{{"tenants", "weights"}, {"gateway", "tenants"}}

// mappingAsWritten reads the mapping section.key (tenants.weights,
// gateway.tenants) from the YAML itself, each tenant named as written
// (viper lower-cases keys, and tenant names are case-sensitive: "Acme" and
// "acme" are two tenants). ok is false when the file has no such mapping
// or spells it in a way only viper reads (a key that is an alias, a merge
// or not a scalar): viper's reading stands then.
func mappingAsWritten(src []byte, section, key string) (map[string]any, bool) {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(src, &doc); err != nil || doc.Kind != yamlv3.DocumentNode || len(doc.Content) == 0 {
		return nil, false
	}
	find := func(m *yamlv3.Node, key string) *yamlv3.Node {
		if m.Kind != yamlv3.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			if k := m.Content[i]; k.Kind == yamlv3.ScalarNode && strings.EqualFold(k.Value, key) {
				return m.Content[i+1]
			}
		}
		return nil
	}
	tenants := find(doc.Content[0], section)
	if tenants == nil {
		return nil, false
	}
	weights := find(tenants, key)
	if weights == nil || weights.Kind != yamlv3.MappingNode {
		return nil, false
	}
	out := map[string]any{}
	for i := 0; i+1 < len(weights.Content); i += 2 {
		k, val := weights.Content[i], weights.Content[i+1]
		if k.Kind != yamlv3.ScalarNode || k.Tag == "!!merge" {
			return nil, false
		}
		var x any
		if err := val.Decode(&x); err != nil {
			return nil, false
		}
		out[k.Value] = x
	}
	return out, true
}

// reportedKey reports whether p is about a key already in problems.
func reportedKey(problems []error, p error) bool {
	key, _, _ := strings.Cut(p.Error(), ": ")
	for _, q := range problems {
		if k, _, _ := strings.Cut(q.Error(), ": "); k == key {
			return true
		}
	}
	return false
}

func sortProblems(ps []error) {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Error() < ps[j].Error() })
}

// envKeys lists every key path an environment variable may override: the
// scalar and list keys of every section, and those of user_limits.<channel>
// for each channel. Entries of the providers list and tenants.weights are
// set in the file; the providers' secrets come from the variables their
// *_env keys name.
func envKeys() []string {
	var keys []string
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			opts := strings.Split(f.Tag.Get("mapstructure"), ",")
			tag := opts[0]
			if f.Anonymous && len(opts) > 1 && opts[1] == "squash" {
				walk(prefix, f.Type) // its keys are the section's own
				continue
			}
			if tag == "" || tag == "-" || !f.IsExported() {
				continue
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			switch {
			case ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Time{}):
				walk(prefix+tag+".", ft)
			case prefix+tag == "gateway.tenants":
				// keyed by tenant names, file only (as tenants.weights)
			case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
				for _, ch := range queue.Channels {
					walk(prefix+tag+"."+ch+".", ft.Elem())
				}
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				// list of sections (providers): file only
			case ft.Kind() == reflect.Map:
				// a mapping of names chosen in the file (tenants.weights):
				// file only, as a variable's name cannot spell them
				// (tenant names are case-sensitive and may hold '.' or '-')
			default:
				keys = append(keys, prefix+tag)
			}
		}
	}
	walk("", reflect.TypeOf(Config{}))
	return keys
}

var (
	durationType = reflect.TypeOf(time.Duration(0))
	weightsType  = reflect.TypeOf(map[string]float64(nil))
)

// decodeHook turns YAML and environment strings into the schema's types with
// messages that say what is allowed. A bare number is refused for a
// duration: 30 would be 30 nanoseconds.
func decodeHook(from, to reflect.Type, data any) (any, error) {
	if data == nil {
		return data, nil
	}
	s, isString := data.(string)
	switch {
	case to == durationType:
		switch d := data.(type) {
		case string:
			v, err := time.ParseDuration(strings.TrimSpace(d))
			if err != nil {
				return nil, fmt.Errorf("must be a duration such as 500ms, 30s, 5m or 24h, got %q", d)
			}
			return v, nil
		case int, int64, float64:
			if reflect.ValueOf(d).IsZero() {
				return time.Duration(0), nil
			}
			return nil, fmt.Errorf("must be a duration with a unit, such as 30s or 5m, got the bare number %v", d)
		}
	case to.Kind() == reflect.Int && isString:
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("must be a whole number, got %q", s)
		}
		return n, nil
	case to.Kind() == reflect.Int && from.Kind() == reflect.Float64:
		f := data.(float64)
		if f != float64(int(f)) {
			return nil, fmt.Errorf("must be a whole number, got %v", f)
		}
		return int(f), nil
	case to.Kind() == reflect.Float64 && isString:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return nil, fmt.Errorf("must be a number, got %q", s)
		}
		return f, nil
	case to.Kind() == reflect.Float64 && from.Kind() == reflect.Int:
		return float64(data.(int)), nil
	case to.Kind() == reflect.Bool && isString:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("must be true or false, got %q", s)
		}
		return b, nil
	case to == weightsType:
		if from.Kind() != reflect.Map {
			return nil, fmt.Errorf("must be a mapping of tenant names to weights, such as {acme: 3, bank: 1}, got a %s", kindWord(from.Kind()))
		}
	case to.Kind() == reflect.Slice && to.Elem().Kind() == reflect.String && isString:
		var out []string
		for i, part := range strings.Split(s, ",") {
			if part = strings.TrimSpace(part); part == "" {
				return nil, fmt.Errorf("entry %d of the comma-separated list %q is empty", i+1, s)
			}
			out = append(out, part)
		}
		return out, nil
	case to.Kind() == reflect.String && from.Kind() != reflect.String && from.Kind() != reflect.Interface:
		switch from.Kind() {
		case reflect.Map, reflect.Slice:
			return nil, fmt.Errorf("must be a single value, got a %s", kindWord(from.Kind()))
		}
		return fmt.Sprint(data), nil // a number or boolean where text is expected (a port, a project id)
	}
	return data, nil
}

func kindWord(k reflect.Kind) string {
	switch k {
	case reflect.Map:
		return "mapping"
	case reflect.Slice:
		return "list"
	case reflect.Int, reflect.Int64, reflect.Float64:
		return "number"
	}
	return k.String()
}

var rootTypeName = reflect.TypeOf(Config{}).String()

// zeroRule is what an explicit zero of a key with a default is told: the
// key's range, in the words its own problem uses for any other value out
// of it (Validate's, here or in the section's package), and the default.
type zeroRule struct{ rng, def string }

// zeroRefused are the keys whose default replaces a zero value: a zero
// written in the file (or the environment) would silently become the
// default, so it is refused with what the key allows.
var zeroRefused = map[string]zeroRule{
	"workers":            {"must be a whole number from 1 to 4096", "32"},
	"dedup_ttl":          {"must be from " + text.Duration(minDedupTTL) + " to " + text.Duration(maxDedupTTL) + " (366 days)", "24h"},
	"nats.ack_wait":      {"must be from 1s to 1h", "30s"},
	"retry.max_attempts": {"must be a whole number from 1 to 1000", "8"},
	"retry.base_delay":   {"must be from 1ms to " + text.Duration(maxBaseDelay), "1s"},
	"retry.max_delay":    {"must be from base_delay to " + text.Duration(maxMaxDelay) + " and at most half of dedup_ttl", "5m"},
	"tenants.lanes":      {"must be a whole number from 1 to " + strconv.Itoa(queue.MaxFairLanes), strconv.Itoa(queue.DefaultFairLanes)},

	"gateway.auth_failures.limit":       {"must be a whole number from 1 to 1000000", "10"},
	"gateway.auth_failures.window":      {"must be from 1s to 24h", "1m"},
	"gateway.publish_timeout":           {"must be from 100ms to 1m", "5s"},
	"gateway.read_timeout":              {"must be from 1s to 5m", "30s"},
	"gateway.header_timeout":            {"must be from 1s to 1m", "5s"},
	"gateway.idle_timeout":              {"must be from 1s to 1h", "2m"},
	"gateway.idempotency_ttl":           {"must be from 2m to 720h", "24h"},
	"gateway.shed.max_conns":            {"must be a whole number from 1 to 1000000", "10000"},
	"gateway.shed.max_conns_per_ip":     {"must be a whole number from 1 to 1000000", "100"},
	"gateway.shed.max_in_flight":        {"must be a whole number from 1 to 100000", "1024"},
	"gateway.shed.max_in_flight_per_ip": {"must be a whole number from 1 to 100000", "256"},
	"gateway.shed.max_publish_latency":  {"must be from 10ms to publish_timeout", "1s"},
}

// zeroRefusedProvider is zeroRefused for the keys of a providers entry.
var zeroRefusedProvider = map[string]zeroRule{
	"max_queue_delay": {providers.RangeText(providers.MinQueueDelay, providers.MaxQueueDelayLimit), "5s"},
	"timeout":         {providers.RangeText(providers.MinTimeout, providers.MaxTimeout), "5s"},
	"probe_interval":  {providers.RangeText(providers.MinProbeInterval, providers.MaxProbeInterval), "30s"},
	"max_pause":       {providers.RangeText(providers.MinPause, providers.MaxRetryAfter), "5m"},
	"jitter_budget":   {providers.RangeText(providers.MinJitterBudget, providers.MaxJitterBudget), "15ms"},
	// adaptive's keys default from the rate (min_rate rate/10,
	// increase_per_s rate/20)
	"adaptive.min_rate":       {"must be from 1/86400 (one a day) to rate", "rate/10"},
	"adaptive.decrease":       {"must be greater than 0 and less than 1", "0.7"},
	"adaptive.increase_per_s": {"must be greater than 0 and at most 9000", "rate/20"},
	"adaptive.quiet":          {providers.RangeText(time.Millisecond, providers.MaxQuiet), "2s"},
}

// explicitZeros reports the keys of zeroRefused given as zero in settings
// (viper's merged file and environment).
func explicitZeros(settings map[string]any) []error {
	var out []error
	zero := func(path string, v any, r zeroRule) error {
		return fmt.Errorf("%s: %v is not allowed: %s; leave the key out for the default, %s", path, v, r.rng, r.def)
	}
	for path, r := range zeroRefused {
		if v, ok := lookupKeyPath(settings, path); ok && isZeroValue(v) {
			out = append(out, zero(path, v, r))
		}
	}
	list, _ := settings["providers"].([]any)
	for i, e := range list {
		m, _ := e.(map[string]any)
		name, _ := m["name"].(string)
		for key, r := range zeroRefusedProvider {
			if v, ok := lookupKeyPath(m, key); ok && isZeroValue(v) {
				out = append(out, zero(providerPath(i, name)+"."+key, v, r))
			}
		}
	}
	return out
}

// Ranges of the keys of the file's own (SPEC §4 says why).
const (
	minDedupTTL  = time.Minute
	maxDedupTTL  = 366 * 24 * time.Hour
	maxBaseDelay = time.Hour
	maxMaxDelay  = 24 * time.Hour
)

// retryRanges are the bounds of retry: dispatch.RetryConfig.Validate does
// not check (its upper ones, and max_delay against dedup_ttl), for the
// keys it found nothing wrong with (errs, its problems): the ledger keeps
// a job's failures dedup_ttl after the last, so a backoff longer than
// half of it could forget them, and a job would be retried forever.
func retryRanges(r dispatch.RetryConfig, dedup time.Duration, errs []error) []error {
	flagged := func(key string) bool {
		for _, e := range errs {
			if strings.HasPrefix(e.Error(), "retry."+key+": ") {
				return true
			}
		}
		return false
	}
	var out []error
	if !flagged("base_delay") && r.BaseDelay > maxBaseDelay {
		out = append(out, fmt.Errorf("retry.base_delay: %s, got %s", zeroRefused["retry.base_delay"].rng, text.Duration(r.BaseDelay)))
	}
	dedupOK := dedup >= minDedupTTL && dedup <= maxDedupTTL
	if !flagged("max_delay") && (r.MaxDelay > maxMaxDelay || dedupOK && r.MaxDelay > dedup/2) {
		half := ""
		if dedupOK {
			half = " (" + text.Duration(dedup/2) + ": the ledger keeps a job's failures for dedup_ttl after the last)"
		}
		out = append(out, fmt.Errorf("retry.max_delay: %s%s, got %s", zeroRefused["retry.max_delay"].rng, half, text.Duration(r.MaxDelay)))
	}
	return out
}

// lookupKeyPath finds a dotted key in viper's nested settings.
func lookupKeyPath(settings map[string]any, path string) (any, bool) {
	var cur any = settings
	for _, part := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// isZeroValue reports a number 0 or a text that reads as 0 or a zero
// duration ("0", "0s", "0ms").
func isZeroValue(v any) bool {
	switch x := v.(type) {
	case int:
		return x == 0
	case int64:
		return x == 0
	case float64:
		return x == 0
	case string:
		x = strings.TrimSpace(x)
		if n, err := strconv.ParseFloat(x, 64); err == nil {
			return n == 0
		}
		d, err := time.ParseDuration(x)
		return err == nil && d == 0
	}
	return false
}

// problemKey is the key path a problem names ("nats.ack_wait",
// "providers[0].rate"): the text before its first ": ", when that reads as
// a path.
func problemKey(p error) string {
	k, _, ok := strings.Cut(p.Error(), ": ")
	if !ok || strings.ContainsAny(k, " \t") {
		return ""
	}
	return k
}

// containsProblem reports whether problems already has one with p's text.
func containsProblem(problems []error, p error) bool {
	for _, q := range problems {
		if q.Error() == p.Error() {
			return true
		}
	}
	return false
}

// deleteKeyPath removes the key at path ("a.b", "providers[2].rate") from
// settings (viper's lower-cased nested maps and lists), reporting whether
// it was there.
func deleteKeyPath(settings map[string]any, path string) bool {
	var cur any = settings
	parts := strings.Split(path, ".")
	for i, part := range parts {
		name, idx := part, -1
		if j := strings.IndexByte(part, '['); j > 0 && strings.HasSuffix(part, "]") {
			n, err := strconv.Atoi(part[j+1 : len(part)-1])
			if err != nil {
				return false
			}
			name, idx = part[:j], n
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		last := i == len(parts)-1 && idx < 0
		if last {
			if _, ok := m[name]; !ok {
				return false
			}
			delete(m, name)
			return true
		}
		next, ok := m[name]
		if !ok {
			return false
		}
		if idx >= 0 {
			list, ok := next.([]any)
			if !ok || idx >= len(list) {
				return false
			}
			next = list[idx]
			if i == len(parts)-1 {
				return false // a whole entry: leave it
			}
		}
		cur = next
	}
	return false
}

// deleteTenantWeight removes the weight of tenants.weights that path
// names (tenantPath: a tenant's name may hold '.', which deleteKeyPath
// would read as a path), reporting whether it was there.
func deleteTenantWeight(settings map[string]any, path string) bool {
	name, ok := strings.CutPrefix(path, "tenants.weights.")
	if !ok {
		return false
	}
	if q, err := strconv.Unquote(name); err == nil {
		name = q
	}
	t, _ := settings["tenants"].(map[string]any)
	w, _ := t["weights"].(map[string]any)
	if _, ok := w[name]; !ok {
		return false
	}
	delete(w, name)
	return true
}

// decodeProblems rewrites mapstructure's errors as "key: problem" lines,
// with a suggestion for a misspelt key.
func decodeProblems(err error) []error {
	var out []error
	for _, e := range Problems(err) {
		var de *mapstructure.DecodeError
		if !errors.As(e, &de) {
			out = append(out, e)
			continue
		}
		name := de.Name()
		if name == rootTypeName {
			name = "" // mapstructure ≥ 2.5 names the root by its type
		}
		if t, ok := strings.CutPrefix(name, "tenants.weights["); ok && strings.HasSuffix(t, "]") {
			name = tenantPath(strings.TrimSuffix(t, "]")) // as Validate names it
		}
		if ch, rest, ok := strings.Cut(strings.TrimPrefix(name, "user_limits["), "]"); ok && strings.HasPrefix(name, "user_limits[") {
			name = "user_limits." + ch + rest // a squashed cap is named as a map entry
		}
		inner := de.Unwrap()
		msg := inner.Error()
		if rest, ok := strings.CutPrefix(msg, "has invalid keys: "); ok {
			for _, k := range strings.Split(rest, ", ") {
				full := k
				if name != "" {
					full = name + "." + k
				}
				hint := ""
				if s := suggest(k, knownKeysAt(name)); s != "" {
					hint = fmt.Sprintf(" (did you mean %q?)", s)
				}
				out = append(out, fmt.Errorf("%s: unknown key%s; a misspelt key would silently fall back to its default, so it is refused", full, hint))
			}
			continue
		}
		var inner2 *mapstructure.DecodeError
		if errors.As(inner, &inner2) {
			out = append(out, decodeProblems(inner)...)
			continue
		}
		if name == "" {
			out = append(out, inner)
			continue
		}
		// mapstructure's own type errors: say what the key wants.
		var ute *mapstructure.UnconvertibleTypeError
		if errors.As(inner, &ute) {
			msg = "has the wrong type: " + msg
		}
		out = append(out, fmt.Errorf("%s: %s", name, msg))
	}
	return out
}

// knownKeysAt returns the keys allowed under a decoded path such as
// "redis.tls", "user_limits.push" or "providers[2]".
func knownKeysAt(path string) []string {
	t := reflect.TypeOf(Config{})
	if path != "" {
		for _, seg := range strings.Split(path, ".") {
			name, _, indexed := strings.Cut(seg, "[")
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			if t.Kind() == reflect.Map {
				t = t.Elem() // the segment is a map key (a channel)
				continue
			}
			f, ok := fieldByTag(t, name)
			if !ok {
				return nil
			}
			t = f.Type
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			if indexed && (t.Kind() == reflect.Slice || t.Kind() == reflect.Map) {
				t = t.Elem()
			}
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Map {
		return nil
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	return structKeys(t)
}

// structKeys are the keys of struct t, those of a squashed embedded
// struct (Cap's rule) among them.
func structKeys(t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		opts := strings.Split(f.Tag.Get("mapstructure"), ",")
		switch {
		case f.Anonymous && len(opts) > 1 && opts[1] == "squash":
			keys = append(keys, structKeys(f.Type)...)
		case opts[0] != "" && opts[0] != "-":
			keys = append(keys, opts[0])
		}
	}
	return keys
}

func fieldByTag(t reflect.Type, tag string) (reflect.StructField, bool) {
	if t.Kind() != reflect.Struct {
		return reflect.StructField{}, false
	}
	for i := 0; i < t.NumField(); i++ {
		if strings.Split(t.Field(i).Tag.Get("mapstructure"), ",")[0] == tag {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

// suggest returns the known key closest to k when it is close enough to be
// a typo (edit distance at most 2, or a third of the key).
func suggest(k string, known []string) string {
	best, bestD := "", 1<<30
	for _, c := range known {
		if d := editDistance(k, c); d < bestD {
			best, bestD = c, d
		}
	}
	if best != "" && (bestD <= 2 || bestD*3 <= len(k)) {
		return best
	}
	return ""
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
