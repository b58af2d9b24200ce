package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/userlimit"
)

// EnvPrefix prefixes every environment override: NOTIFIER_ + the key path in
// upper case with _ for . (NOTIFIER_REDIS_ADDRS, NOTIFIER_NATS_URL).
const EnvPrefix = "NOTIFIER"

// Load reads path (YAML), applies NOTIFIER_* environment overrides,
// fills defaults and validates. getenv is os.Getenv in production. A
// configuration that cannot be used returns a *Error listing every
// problem.
func Load(path string, getenv func(string) string) (Config, error) {
	yaml, err := readFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return Config{}, &Error{File: path, Problems: []error{fmt.Errorf("cannot read the file: %w", err)}}
	}
	return parseConfig(yaml, path, getenv)
}

// MaxFileSize bounds the configuration file. A configuration is
// kilobytes (the gateway's most, 10,000 keys and 10,000 tenant buckets,
// about 3 MB); read whole, `--config /dev/zero` or a log given by
// mistake allocated until the machine ran out of memory.
const MaxFileSize = 16 << 20

// readFile reads the file at path, at most MaxFileSize bytes of it.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("larger than %d MiB: a configuration is kilobytes (is it the right file?)", MaxFileSize>>20)
	}
	return b, nil
}

// NATSOnly is the configuration of a command that needs only NATS
// and was given its URL (publish --nats), read from no file: nats.url is
// url, the other nats keys come from their NOTIFIER_NATS_* variables (the
// secrets too), every other key takes its default. Problems are a
// *Error, as Load's.
func NATSOnly(url string, getenv func(string) string) (Config, error) {
	const source = "(--nats, no file)"
	v := viper.New()
	setFromEnv(v, "nats.", getenv)
	v.Set("nats.url", url)
	var nc queue.Config
	dec, err := newDecoder(&nc)
	if err != nil {
		return Config{}, err
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
	setFromEnv(v, "", getenv)
	var cfg Config
	var problems []error
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
		dec, err := newDecoder(&cfg)
		if err != nil {
			return Config{}, err
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

// setFromEnv sets in v each key of the schema under prefix ("" for all;
// envKeys) whose NOTIFIER_ variable getenv finds set (not empty): the key
// path in upper case with _ for . after EnvPrefix.
func setFromEnv(v *viper.Viper, prefix string, getenv func(string) string) {
	for _, k := range envKeys() {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if val := getenv(EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(k, ".", "_"))); val != "" {
			v.Set(k, val)
		}
	}
}

// newDecoder decodes viper's settings into result as the file is read:
// unknown keys refused, values through decodeHook, no weak typing.
func newDecoder(result any) (*mapstructure.Decoder, error) {
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result:           result,
		ErrorUnused:      true,
		WeaklyTypedInput: false,
		DecodeHook:       decodeHook,
		TagName:          "mapstructure",
	})
	if err != nil {
		return nil, fmt.Errorf("build config decoder: %w", err)
	}
	return dec, nil
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
	// int and int64 alike (durations are handled above): an int64 left to
	// mapstructure had a fraction truncated in silence (a
	// max_stream_depth of 0.5 became 0, no bound) and its environment
	// override refused as the wrong type.
	case isWholeKind(to.Kind()) && isString:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || to.Kind() == reflect.Int && int64(int(n)) != n {
			return nil, fmt.Errorf("must be a whole number, got %q", s)
		}
		return n, nil
	case isWholeKind(to.Kind()) && from.Kind() == reflect.Float64:
		// -2^63 <= f < 2^63: a float outside converts to whatever the
		// platform makes of it.
		f := data.(float64)
		if f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 || to.Kind() == reflect.Int && float64(int(f)) != f {
			return nil, fmt.Errorf("must be a whole number, got %v", f)
		}
		return int64(f), nil
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
				// The list as given, each entry redacted: redis.addrs'
				// user:password@host:port would show the password.
				return nil, fmt.Errorf("entry %d of the comma-separated list %q is empty", i+1, redactList(s))
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

// isWholeKind reports a kind the decode hook reads as a whole number
// (time.Duration, an int64, is read as a duration before it).
func isWholeKind(k reflect.Kind) bool { return k == reflect.Int || k == reflect.Int64 }

// redactList is a comma-separated list with the user information of each
// entry (user:password@) replaced, as redis.addrs' problems show it.
func redactList(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = queue.RedactAddr(p)
	}
	return strings.Join(parts, ",")
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
	// A cap's limit or window given as zero: Cap.Own reads a channel cap
	// that is all zeros as none, so `sms: {limit: 0, marketing: {...}}`
	// would leave the channel uncapped rather than be refused (found in
	// review).
	caps, _ := settings["user_limits"].(map[string]any)
	for _, ch := range slices.Sorted(maps.Keys(caps)) {
		for _, key := range []string{"limit", "window"} { // (a category's cap is checked whole: Rule.Validate)
			if v, ok := lookupKeyPath(mapOf(caps[ch]), key); ok && isZeroValue(v) {
				out = append(out, fmt.Errorf("user_limits.%s.%s: %v is not allowed: a cap's limit is at least 1 and its window at least %s; leave the cap out for none",
					ch, key, v, text.Duration(userlimit.MinWindow)))
			}
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
		kind, _ := m["kind"].(string)
		for key, r := range zeroRefusedKind[kind] {
			if v, ok := lookupKeyPath(m, key); ok && isZeroValue(v) {
				out = append(out, zero(providerPath(i, name)+"."+key, v, r))
			}
		}
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

// mapOf is v as a mapping, nil when it is none.
func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
