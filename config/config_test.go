package config

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// minimal is the smallest valid configuration: only providers is required.
const minimal = `
providers:
  - name: sms-gateway
    channel: sms
    default: true
    kind: webhook
    url: http://127.0.0.1:8080/send
    rate: 100
`

func noEnv(string) string { return "" }

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestMinimalConfigTakesSpecDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(minimal), noEnv)
	if err != nil {
		t.Fatalf("minimal config refused: %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"nats.url", cfg.NATS.URL, "nats://127.0.0.1:4222"},
		{"nats.stream", cfg.NATS.Stream, "NOTIFY"},
		{"nats.dead_stream", cfg.NATS.DeadStream, "NOTIFY_DEAD"},
		{"nats.ack_wait", cfg.NATS.AckWait, 30 * time.Second},
		{"redis.addrs", strings.Join(cfg.Redis.Addrs, ","), "127.0.0.1:6379"},
		{"redis.key_prefix", cfg.Redis.KeyPrefix, "notifier:"},
		{"redis.on_failure", cfg.Redis.OnFailure, "hold"},
		{"workers", cfg.Workers, 32},
		{"metrics.listen", cfg.Metrics.Listen, "127.0.0.1:9464"},
		{"dedup_ttl", cfg.DedupTTL, 24 * time.Hour},
		{"retry.max_attempts", cfg.Retry.MaxAttempts, 8},
		{"retry.base_delay", cfg.Retry.BaseDelay, time.Second},
		{"retry.max_delay", cfg.Retry.MaxDelay, 5 * time.Minute},
		{"global (left out: no fleet bucket)", cfg.Global == nil, true},
		{"user_limits (left out: no cap)", len(cfg.UserLimits), 0},
		{"providers[0].unit", cfg.Providers[0].Unit, "messages"},
		{"providers[0].max_queue_delay", cfg.Providers[0].MaxQueueDelay, 5 * time.Second},
		{"providers[0].timeout", cfg.Providers[0].Timeout, 5 * time.Second},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestRootConfigYAMLIsValid(t *testing.T) {
	t.Parallel()
	cfg, err := Load(filepath.Join("..", "config.yaml"), noEnv)
	if err != nil {
		t.Fatalf("config.yaml at the root must be a working example: %v", err)
	}
	if cfg.Global == nil || len(cfg.UserLimits) != 3 || len(cfg.Providers) < 3 {
		t.Fatalf("config.yaml should show every section: global=%v user_limits=%d providers=%d",
			cfg.Global, len(cfg.UserLimits), len(cfg.Providers))
	}
}

// TestConfigMistakes has one row per kind of mistake; each must be reported
// with its key, its bad value and what is allowed.
func TestConfigMistakes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		yaml string
		want []string // substrings of the report
	}{
		{"missing providers", "workers: 4\n", []string{"providers: required"}},
		{"missing provider key", `
providers:
  - name: p
    channel: sms
    default: true
    kind: webhook
    rate: 10
`, []string{"providers[0] (p).url"}},
		{"bad duration", minimal + "dedup_ttl: 5 seconds\n", []string{"dedup_ttl: must be a duration", `"5 seconds"`}},
		{"bare number duration", minimal + "nats:\n  ack_wait: 30\n", []string{"nats.ack_wait: must be a duration with a unit", "30"}},
		{"unknown algorithm", minimal + "user_limits:\n  sms: { limit: 3, window: 10m, algorithm: leaky }\n",
			[]string{"user_limits.sms.algorithm", `"leaky"`, "sliding_log"}},
		{"unknown top-level key", minimal + "wrokers: 4\n", []string{"wrokers: unknown key", `did you mean "workers"`}},
		{"unknown nested key", minimal + "redis:\n  adrs: [\"x:1\"]\n", []string{"redis.adrs: unknown key", `did you mean "addrs"`}},
		{"unknown provider key", `
providers:
  - name: p
    channel: sms
    default: true
    kind: webhook
    url: http://x/
    rate: 10
    rat: 5
`, []string{"providers[0].rat: unknown key", `did you mean "rate"`}},
		{"duplicate provider name", minimal + `
  - name: sms-gateway
    channel: sms
    kind: webhook
    url: http://127.0.0.1:8081/send
    rate: 50
`, []string{"providers[1] (sms-gateway).name", "already used by providers[0]"}},
		{"no default provider for a channel", `
providers:
  - name: a
    channel: sms
    kind: webhook
    url: http://x/
    rate: 10
`, []string{"default"}},
		{"negative rate", strings.Replace(minimal, "rate: 100", "rate: -5", 1), []string{"providers[0] (sms-gateway).rate", "-5"}},
		{"user limit on an unknown channel", minimal + "user_limits:\n  fax: { limit: 3, window: 10m }\n", []string{"user_limits.fax", "not a channel"}},
		{"bad on_failure", minimal + "redis:\n  on_failure: panic\n", []string{"redis.on_failure", `"panic"`, "hold, local"}},
		{"bad workers", minimal + "workers: 0x\n", []string{"workers: must be a whole number", `"0x"`}},
		{"negative global rate", minimal + "global:\n  rate: -1\n  burst: 10\n", []string{"global.rate", "-1"}},
		{"sentinel password without master name", minimal + "redis:\n  sentinel_password: x\n", []string{"redis.sentinel_password", "master_name"}},
		{"tracing endpoint not a URL", minimal + "tracing:\n  otlp_endpoint: collector:4318\n", []string{"tracing.otlp_endpoint", "http://"}},
		{"tracing sample ratio over 1", minimal + "tracing:\n  sample_ratio: 2\n", []string{"tracing.sample_ratio", "from 0 to 1"}},
		{"brace in key prefix", minimal + "redis:\n  key_prefix: \"{x}\"\n", []string{"redis.key_prefix", "hash tags"}},
		{"not yaml", "providers: [\n", []string{"not valid YAML"}},
		{"wrong shape", "providers: 5\n", []string{"providers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), noEnv)
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("want a *Error, got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("report lacks %q:\n%s", w, err)
				}
			}
		})
	}
}

func TestConfigReportsEveryProblemAtOnce(t *testing.T) {
	t.Parallel()
	y := strings.Replace(minimal, "rate: 100", "rate: -5", 1) + "workers: -3\nredis:\n  on_failure: x\nretry:\n  max_attempts: 0\n  base_delay: 2s\n  max_delay: 1s\n"
	_, err := Parse([]byte(y), noEnv)
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("want *Error, got %v", err)
	}
	if len(ce.Problems) < 4 {
		t.Fatalf("want at least 4 problems reported together, got %d:\n%s", len(ce.Problems), err)
	}
	for _, w := range []string{"workers:", "redis.on_failure:", "retry.max_delay:", "providers[0] (sms-gateway).rate:"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("report lacks %q:\n%s", w, err)
		}
	}
}

// TestConfigBareNumberHidesNothing: a value the decoder refuses (a
// bare-number duration) used to end the pass and hide every other problem,
// misspelt keys included, until it was fixed.
func TestConfigBareNumberHidesNothing(t *testing.T) {
	t.Parallel()
	y := "wrokers: 3\nnats:\n  ack_wait: 30\n" + strings.Replace(minimal, "rate: 100", "rat: 5\n    rate: 100\n    max_queue_delay: 30", 1)
	_, err := Parse([]byte(y), noEnv)
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("want *Error, got %v", err)
	}
	for _, w := range []string{
		"nats.ack_wait: must be a duration with a unit",
		"max_queue_delay: must be a duration with a unit",
		"rat: unknown key (did you mean \"rate\"?)",
		"wrokers: unknown key (did you mean \"workers\"?)",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("report lacks %q:\n%s", w, err)
		}
	}
}

// TestConfigExplicitZeroIsRefused: an explicit zero (in the file or the
// environment) used to be replaced by the default in silence (workers: 0
// ran 32 workers); it is refused with what the key allows. An empty entry
// of a comma-separated list (NOTIFIER_REDIS_ADDRS=",,,", which connected to
// 127.0.0.1:6379) is refused too.
func TestConfigExplicitZeroIsRefused(t *testing.T) {
	t.Parallel()
	y := "workers: 0\nnats:\n  ack_wait: 0s\nretry:\n  max_attempts: 0\n" +
		strings.Replace(minimal, "rate: 100", "rate: 100\n    max_queue_delay: 0s\n    timeout: 0s", 1)
	_, err := Parse([]byte(y), noEnv)
	for _, w := range []string{
		"workers: 0 is not allowed: must be a whole number from 1 to 4096; leave the key out for the default, 32",
		"nats.ack_wait: 0s is not allowed",
		"retry.max_attempts: 0 is not allowed",
		"providers[0] (sms-gateway).max_queue_delay: 0s is not allowed",
		"providers[0] (sms-gateway).timeout: 0s is not allowed",
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("report lacks %q:\n%v", w, err)
		}
	}
	_, err = Parse([]byte(minimal), envOf(map[string]string{"NOTIFIER_WORKERS": "0", "NOTIFIER_REDIS_ADDRS": ",,,"}))
	for _, w := range []string{"workers: 0 is not allowed", `redis.addrs: entry 1 of the comma-separated list ",,," is empty`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("environment: report lacks %q:\n%v", w, err)
		}
	}
	// Left out, each key takes its default.
	cfg, err := Parse([]byte(minimal), noEnv)
	if err != nil || cfg.Workers != 32 || cfg.Retry.MaxAttempts != 8 || cfg.Providers[0].Timeout != 5*time.Second {
		t.Fatalf("defaults: %v, workers %d, max_attempts %d, timeout %s", err, cfg.Workers, cfg.Retry.MaxAttempts, cfg.Providers[0].Timeout)
	}
}

func TestEnvironmentOverrides(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(minimal+"workers: 4\n"), envOf(map[string]string{
		"NOTIFIER_WORKERS":                   "12",
		"NOTIFIER_REDIS_ADDRS":               "10.0.0.1:7000, 10.0.0.2:7000,10.0.0.3:7000",
		"NOTIFIER_NATS_URL":                  "nats://a:4222,nats://b:4222",
		"NOTIFIER_NATS_ACK_WAIT":             "45s",
		"NOTIFIER_REDIS_PASSWORD":            "pw-from-env",
		"NOTIFIER_NATS_TOKEN":                "tok-from-env",
		"NOTIFIER_GLOBAL_RATE":               "300",
		"NOTIFIER_GLOBAL_BURST":              "50",
		"NOTIFIER_USER_LIMITS_SMS_LIMIT":     "2",
		"NOTIFIER_USER_LIMITS_SMS_WINDOW":    "1m",
		"NOTIFIER_USER_LIMITS_SMS_ON_EXCEED": "defer",
		"NOTIFIER_REDIS_TLS_ENABLED":         "false",
	}))
	if err != nil {
		t.Fatalf("config with environment overrides refused: %v", err)
	}
	if cfg.Workers != 12 {
		t.Errorf("workers = %d, want 12 from NOTIFIER_WORKERS over the file's 4", cfg.Workers)
	}
	if got := strings.Join(cfg.Redis.Addrs, "|"); got != "10.0.0.1:7000|10.0.0.2:7000|10.0.0.3:7000" {
		t.Errorf("redis.addrs = %s", got)
	}
	if cfg.NATS.URL != "nats://a:4222,nats://b:4222" || cfg.NATS.AckWait != 45*time.Second {
		t.Errorf("nats = %s %s", cfg.NATS.URL, cfg.NATS.AckWait)
	}
	if cfg.Redis.Password != "pw-from-env" || cfg.NATS.Token != "tok-from-env" {
		t.Errorf("secrets from the environment not applied")
	}
	if cfg.Global == nil || cfg.Global.Rate != 300 || cfg.Global.Burst != 50 {
		t.Errorf("global = %+v, want rate 300 burst 50 from the environment", cfg.Global)
	}
	if r := cfg.UserLimits["sms"]; r.Limit != 2 || r.Window != time.Minute || r.OnExceed != "defer" {
		t.Errorf("user_limits.sms = %+v", r)
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	t.Parallel()
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), noEnv)
	var ce *Error
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "cannot read the file") {
		t.Fatalf("missing file: %v", err)
	}
}

// TestLoadBoundsTheFile: the file was read whole, however large: `check
// --config /dev/zero` (or a log file given by mistake) allocated until the
// machine ran out of memory (found in review). A file past 16 MiB is
// refused at once, saying so; a directory is refused as before.
func TestLoadBoundsTheFile(t *testing.T) {
	t.Parallel()
	big := filepath.Join(t.TempDir(), "big.yaml")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxFileSize + 1); err != nil { // sparse: no disk
		t.Fatal(err)
	}
	f.Close()
	// /dev/zero never ends: refused at all, it was read no further than
	// the bound.
	for _, path := range []string{big, "/dev/zero"} {
		_, err := Load(path, noEnv)
		var ce *Error
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "cannot read the file: larger than 16 MiB") {
			t.Fatalf("%s: %v, want it refused as larger than 16 MiB", path, err)
		}
	}
	_, err = Load(t.TempDir(), noEnv)
	if err == nil || !strings.Contains(err.Error(), "cannot read the file: is a directory") {
		t.Errorf("a directory: %v", err)
	}
}

func TestEnvKeysCoverTheSchema(t *testing.T) {
	t.Parallel()
	keys := strings.Join(envKeys(), " ")
	for _, k := range []string{"nats.url", "nats.token", "nats.tls.ca_file", "redis.addrs", "redis.password", "redis.master_name", "redis.sentinel_password", "tracing.otlp_endpoint", "tracing.sample_ratio", "redis.tls.enabled",
		"workers", "metrics.listen", "dedup_ttl", "retry.max_attempts", "global.rate", "user_limits.push.limit", "user_limits.email.on_exceed"} {
		if !strings.Contains(" "+keys+" ", " "+k+" ") {
			t.Errorf("envKeys lacks %s", k)
		}
	}
}

// FuzzParseConfig feeds arbitrary YAML (and a seed corpus in
// testdata/fuzz/FuzzParse): the loader must never panic, and a
// configuration it accepts must validate again and be within SPEC §4's
// ranges (inRanges).
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	if b, err := os.ReadFile(filepath.Join("..", "config.yaml")); err == nil {
		f.Add(b)
	}
	f.Add([]byte("providers: [{name: a, channel: sms, default: true, kind: webhook, url: 'http://x', rate: 1e309}]"))
	f.Add([]byte("user_limits: {push: {limit: 99999999999999999999, window: -1h}}"))
	f.Add([]byte("workers: [1,2]\nnats: 7\nretry: {base_delay: 1h, max_delay: 1ns}"))
	f.Add([]byte("user_limits: {sms: {marketing: {limit: 1, window: 1h}, transactional: 3}}\ncategories: {email: marketing, sms: [x]}"))
	// issue 26: absurd rates, bursts and durations were accepted
	f.Add([]byte(issue26))
	f.Add([]byte(minimal + "global: {rate: 1e12, burst: 1e12, shadow_rate: 5e-324}\ndedup_ttl: 2562047h\nnats: {ack_wait: 2562047h}\n" +
		"retry: {base_delay: 1ns, max_delay: 2562047h}\nuser_limits: {push: {limit: 1000000000, window: 8784h, algorithm: sliding_window}}\n"))
	f.Fuzz(func(t *testing.T, y []byte) {
		cfg, err := Parse(y, noEnv)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error is not a *Error: %v", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted config does not validate again: %v", err)
		}
		if err := inRanges(cfg); err != nil {
			t.Fatalf("accepted config is out of SPEC §4's ranges: %v", err)
		}
	})
}

// TestTenantWeights: tenants.weights is read with each tenant named as the
// file spells it (viper lower-cases keys; tenant names are case-sensitive),
// every bad name and weight is reported with its key, its value and what is
// allowed, and no environment variable sets it.
func TestTenantWeights(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(minimal+"tenants:\n  weights: {acme: 3, Acme: 2, Bank.eu: 0.5, x_y-z: 1000}\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"acme": 3, "Acme": 2, "Bank.eu": 0.5, "x_y-z": 1000}
	if !maps.Equal(cfg.Tenants.Weights, want) {
		t.Fatalf("weights %v, want %v", cfg.Tenants.Weights, want)
	}
	if cfg, err := Parse([]byte(minimal), noEnv); err != nil || cfg.Tenants.Weights != nil {
		t.Fatalf("left out: %v %v, want no weights (every tenant 1)", cfg.Tenants.Weights, err)
	}

	_, err = Parse([]byte(minimal+`tenants:
  weights:
    "bad name": 2
    ok: 0
    neg: -1
    big: 1001
    nan: .nan
    inf: .inf
    tiny: 1e-300
    word: three
    list: [1]
    dur: 3s
    Fine: 1
`), noEnv)
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("want a *Error, got %v", err)
	}
	for _, w := range []string{
		`tenants.weights."bad name": "bad name" is not a tenant name: a tenant is 1 to 64 characters of A-Z a-z 0-9 . _ -`,
		"tenants.weights.ok: must be a number from 0.001 to 1000 (a tenant left out weighs 1), got 0",
		"tenants.weights.neg: must be a number from 0.001 to 1000 (a tenant left out weighs 1), got -1",
		"tenants.weights.big: must be a number from 0.001 to 1000 (a tenant left out weighs 1), got 1001",
		"tenants.weights.nan: must be a number from 0.001 to 1000 (a tenant left out weighs 1), got NaN",
		"tenants.weights.inf: must be a number from 0.001 to 1000 (a tenant left out weighs 1), got +Inf",
		"tenants.weights.tiny: must be a number from 0.001 to 1000 (a tenant left out weighs 1), got 1e-300",
		`tenants.weights.word: must be a number, got "three"`,
		"tenants.weights.list: has the wrong type",
		`tenants.weights.dur: must be a number, got "3s"`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("report lacks %q:\n%s", w, err)
		}
	}
	if len(ce.Problems) != 10 || strings.Contains(err.Error(), "Fine") {
		t.Errorf("want the 10 problems alone, got %d:\n%s", len(ce.Problems), err)
	}
	for y, w := range map[string]string{
		"tenants:\n  weights: 5\n":        "tenants.weights: must be a mapping of tenant names to weights, such as {acme: 3, bank: 1}, got a number",
		"tenants:\n  weights: [a, b]\n":   "tenants.weights: must be a mapping of tenant names to weights",
		"tenants:\n  weight: {acme: 2}\n": `tenants.weight: unknown key (did you mean "weights"?)`,
	} {
		if _, err := Parse([]byte(minimal+y), noEnv); err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("%q: report lacks %q:\n%v", y, w, err)
		}
	}

	// File only: a variable cannot spell a tenant's name.
	if slices.Contains(envKeys(), "tenants.weights") {
		t.Errorf("envKeys offers tenants.weights")
	}
	cfg, err = Parse([]byte(minimal+"tenants:\n  weights: {acme: 3}\n"), envOf(map[string]string{"NOTIFIER_TENANTS_WEIGHTS": "x", "NOTIFIER_TENANTS_WEIGHTS_ACME": "5"}))
	if err != nil || !maps.Equal(cfg.Tenants.Weights, map[string]float64{"acme": 3}) {
		t.Fatalf("with NOTIFIER_TENANTS_WEIGHTS*: %v %v, want the file's", cfg.Tenants.Weights, err)
	}
}

// TestSuppressionTTL: left out, the suppression list is kept 30 days; 0
// keeps none (not the default: an explicit zero says off here); a value
// out of range is refused with the range.
func TestSuppressionTTL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		yaml string
		want time.Duration
		err  string
	}{
		{"", 720 * time.Hour, ""},
		{"suppression: {ttl: 0s}\n", 0, ""},
		{"suppression: {ttl: 48h}\n", 48 * time.Hour, ""},
		{"suppression: {ttl: 30s}\n", 0, "suppression.ttl: must be 0 (no list) or from 1m to 8784h"},
		{"suppression: {ttl: 9000h}\n", 0, "suppression.ttl: must be 0 (no list) or from 1m to 8784h"},
		{"suppression: {ttl: -1h}\n", 0, "suppression.ttl"},
	} {
		cfg, err := Parse([]byte(minimal+tc.yaml), func(string) string { return "" })
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.yaml, err)
		case tc.err == "" && cfg.SuppressTTL() != tc.want:
			t.Errorf("%q: ttl %s, want %s", tc.yaml, cfg.SuppressTTL(), tc.want)
		}
	}
}
