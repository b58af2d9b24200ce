package config

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/internal/luapre"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/userlimit"
)

// issue26 has the values issue 26 found accepted: a fleet rate of 1e-15
// (one job in 31 million years, whose script overflowed and left keys
// expiring in ~9e18 ms), a fleet rate and burst of 1e12, a provider's rate
// of 1e12.
var issue26 = strings.Replace(minimal, "rate: 100", "rate: 1e12", 1) + `  - name: push
    channel: push
    default: true
    kind: log
    rate: 100
    adaptive: { increase_per_s: 1e-15, min_rate: 1 }
global:
  rate: 1e-15
  burst: 10
`

// TestIssue26RatesAreRefused: every absurd rate and burst is refused, all
// at once, each problem naming its key, the value and the range.
func TestIssue26RatesAreRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		yaml string
		want []string
	}{
		{issue26, []string{
			"global.rate: must be a number of tokens per second from 1/86400 (one a day) to 1000000, got 1e-15",
			"providers[0] (sms-gateway).rate: must be a number of units per second from 1/86400 (one a day) to 1000000 (one a µs: the queue's interval is whole µs), got 1e+12",
			"providers[1] (push).adaptive.increase_per_s: must be at least (rate − min_rate) / 86400 = 0.0011458333333333333, so the climb from min_rate back to rate takes at most 24h",
		}},
		{minimal + "global: {rate: 1e12, burst: 1e12}\n", []string{
			"global.rate: must be a number of tokens per second from 1/86400 (one a day) to 1000000, got 1e+12",
			"global.burst: must be a whole number from 1 to 1000000, got 1000000000000",
		}},
		{minimal + "global: {rate: 0.001, burst: 500, shadow_rate: 1e-15}\n", []string{
			"global.burst: 500 tokens at rate 0.001 take 138h53m20s to refill, more than 24h (the bucket's state would outlive a day): raise rate to at least 0.005787037037037037 or lower burst to at most 86",
			"global.shadow_rate: must be 0 (none) or a number of tokens per second from 1/86400 (one a day) to 1000000, got 1e-15",
		}},
		{minimal + "dedup_ttl: 100000h\nretry: {base_delay: 2h, max_delay: 48h}\nnats: {ack_wait: 2h}\n", []string{
			"dedup_ttl: must be from 1m to 8784h (366 days), got 100000h",
			"retry.base_delay: must be from 1ms to 1h, got 2h",
			"retry.max_delay: must be from base_delay to 24h and at most half of dedup_ttl, got 48h",
			"nats.ack_wait: must be from 1s to 1h, got 2h",
		}},
		{minimal + "dedup_ttl: 5m\n", []string{
			"retry.max_delay: must be from base_delay to 24h and at most half of dedup_ttl (2m30s: the ledger keeps a job's failures for dedup_ttl after the last), got 5m",
		}},
		{minimal + "user_limits: {sms: {limit: 3, window: 9000h}}\n", []string{
			"user_limits.sms.window: must be from 1ms to 8784h (366 days), got 9000h",
		}},
	} {
		_, err := Parse([]byte(c.yaml), noEnv)
		var ce *Error
		if !errors.As(err, &ce) {
			t.Fatalf("%s: want a *Error, got %v", c.yaml, err)
		}
		if len(ce.Problems) != len(c.want) {
			t.Errorf("%s: %d problems, want %d:\n%s", c.yaml, len(ce.Problems), len(c.want), err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("report lacks %q:\n%s", w, err)
			}
		}
	}
}

// gatewayBlock is a valid gateway: block, for the gateway's keys.
const gatewayBlock = `
gateway:
  listen: 127.0.0.1:0
  keys:
    - {name: acme-app, tenant: acme, sha256: "8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4", rate: 50, burst: 20}
`

// TestZeroAndRangeSayTheSame: a key whose default replaces a zero is told
// the same range whether it is written 0 or out of range the other way
// (max_pause: 0s was "must be greater than 0" and max_pause: 2h "must be
// between 0 (the default, 5m) and 1h"; dedup_ttl: 0s "greater than 0"
// and dedup_ttl: 1s "at least 1m").
func TestZeroAndRangeSayTheSame(t *testing.T) {
	t.Parallel()
	out := map[string]string{
		"workers": "5000", "dedup_ttl": "9000h", "nats.ack_wait": "2h", "nats.replicas": "6", "retry.max_attempts": "1001",
		"retry.base_delay": "2h", "retry.max_delay": "48h", "tenants.lanes": "65",
		"gateway.auth_failures.limit": "-1", "gateway.auth_failures.window": "48h", "gateway.publish_timeout": "2m",
		"gateway.read_timeout": "10m", "gateway.header_timeout": "2m", "gateway.idle_timeout": "2h", "gateway.idempotency_ttl": "1m",
		"gateway.shed.max_conns": "-1", "gateway.shed.max_conns_per_ip": "2000000", "gateway.shed.max_in_flight": "200000",
		"gateway.shed.max_in_flight_per_ip": "-5", "gateway.shed.max_publish_latency": "1ms",
	}
	outProvider := map[string]string{
		"max_queue_delay": "48h", "timeout": "1h", "max_pause": "2h", "jitter_budget": "1s", "probe_interval": "2h",
		"adaptive.min_rate": "1e9", "adaptive.decrease": "2", "adaptive.increase_per_s": "1e6", "adaptive.quiet": "2h",
	}
	if len(out) != len(zeroRefused) || len(outProvider) != len(zeroRefusedProvider) {
		t.Fatalf("a key of zeroRefused or zeroRefusedProvider has no value out of range here")
	}
	// yamlWith sets path (a.b.c) to v in a file with a gateway block.
	yamlWith := func(path, v string) string {
		parts := strings.Split(path, ".")
		if parts[0] == "gateway" {
			return strings.TrimSuffix(minimal+gatewayBlock, "\n") + "\n  " + strings.Join(parts[1:], ": {") + ": " + v + strings.Repeat("}", len(parts)-2) + "\n"
		}
		return minimal + gatewayBlock + strings.Join(parts, ": {") + ": " + v + strings.Repeat("}", len(parts)-1) + "\n"
	}
	providerWith := func(key, v string) string {
		parts := strings.Split(key, ".")
		line := "    " + strings.Join(parts, ": {") + ": " + v + strings.Repeat("}", len(parts)-1)
		return strings.Replace(minimal, "    rate: 100\n", "    rate: 100\n"+line+"\n", 1)
	}
	problem := func(y, key string) string {
		_, err := Parse([]byte(y), noEnv)
		var ce *Error
		if !errors.As(err, &ce) {
			t.Fatalf("%s: want a *Error, got %v", y, err)
		}
		for _, p := range ce.Problems {
			if k, _, _ := strings.Cut(p.Error(), ": "); k == key {
				return p.Error()
			}
		}
		t.Fatalf("no problem of %s in:\n%s\n%s", key, y, err)
		return ""
	}
	check := func(key string, r zeroRule, zeroYAML, outYAML string) {
		zero, far := problem(zeroYAML, key), problem(outYAML, key)
		if !strings.HasSuffix(zero, ": "+r.rng+"; leave the key out for the default, "+r.def) {
			t.Errorf("%s written 0: %q, want it to say %q and the default", key, zero, r.rng)
		}
		if !strings.Contains(far, ": "+r.rng) {
			t.Errorf("%s out of range: %q, want the range its zero is told, %q", key, far, r.rng)
		}
	}
	for key, r := range zeroRefused {
		zero := "0"
		if !strings.Contains(key, "workers") && !strings.Contains(key, "limit") && !strings.Contains(key, "attempts") && !strings.Contains(key, "lanes") && !strings.Contains(key, "replicas") &&
			!strings.Contains(key, "max_conns") && !strings.Contains(key, "max_in_flight") {
			zero = "0s"
		}
		check(key, r, yamlWith(key, zero), yamlWith(key, out[key]))
	}
	for key, r := range zeroRefusedProvider {
		zero := "0s"
		if strings.Contains(key, "rate") || strings.Contains(key, "decrease") || strings.Contains(key, "increase") {
			zero = "0"
		}
		check("providers[0] (sms-gateway)."+key, r, providerWith(key, zero), providerWith(key, outProvider[key]))
	}
}

// inRanges checks cfg against SPEC §4's table of ranges, independently of
// Validate: FuzzParse asks it of every configuration Parse accepts.
func inRanges(cfg Config) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	dur := func(key string, d, lo, hi time.Duration) {
		if d < lo || d > hi {
			bad("%s %v outside [%v, %v]", key, d, lo, hi)
		}
	}
	rate := func(key string, r, lo, hi float64) {
		if !(r >= lo && r <= hi) {
			bad("%s %v outside [%v, %v]", key, r, lo, hi)
		}
	}
	if cfg.Workers < 1 || cfg.Workers > 4096 {
		bad("workers %d", cfg.Workers)
	}
	dur("dedup_ttl", cfg.DedupTTL, time.Minute, 366*24*time.Hour)
	dur("nats.ack_wait", cfg.NATS.AckWait, time.Second, time.Hour)
	dur("retry.base_delay", cfg.Retry.BaseDelay, time.Millisecond, time.Hour)
	dur("retry.max_delay", cfg.Retry.MaxDelay, cfg.Retry.BaseDelay, min(24*time.Hour, cfg.DedupTTL/2))
	if g := cfg.Global; g != nil {
		rate("global.rate", g.Rate, 1.0/86400, 1e6)
		if g.ShadowRate != 0 {
			rate("global.shadow_rate", g.ShadowRate, 1.0/86400, 1e6)
		}
		if g.Burst < 1 || g.Burst > 1e6 {
			bad("global.burst %d", g.Burst)
		}
		for _, r := range []float64{g.Rate, g.ShadowRate} {
			if r > 0 && math.Ceil(float64(g.Burst)*1e6/r) > 86400e6 {
				bad("global burst %d at %v refills in more than a day", g.Burst, r)
			}
		}
	}
	for _, r := range cfg.Caps().Channels {
		dur("a cap's window", r.Window, time.Millisecond, 366*24*time.Hour)
	}
	for _, r := range cfg.Caps().Categories {
		dur("a category cap's window", r.Window, time.Millisecond, 366*24*time.Hour)
	}
	for _, p := range cfg.Providers {
		rate("providers rate", p.Rate, 1.0/86400, 1e6)
		dur("max_queue_delay", p.MaxQueueDelay, time.Millisecond, 24*time.Hour)
		dur("timeout", p.Timeout, time.Millisecond, 10*time.Minute)
		dur("max_pause", p.MaxPause, time.Second, time.Hour)
		if p.JitterBudget != 0 {
			dur("jitter_budget", p.JitterBudget, time.Millisecond, 250*time.Millisecond)
		}
		if a := p.Adaptive; a != nil {
			rate("adaptive.min_rate", a.MinRate, 1.0/86400, p.Rate)
			rate("adaptive.increase_per_s", a.IncreasePerS, (p.Rate-a.MinRate)/86400, 9000)
			dur("adaptive.quiet", a.Quiet, time.Millisecond, time.Hour)
		}
		for _, q := range p.Quotas {
			if q.Limit < 1 || q.Limit > 1e15 {
				bad("quota limit %d", q.Limit)
			}
			dur("quota per", q.Per, time.Second, 31*24*time.Hour)
		}
	}
	return errors.Join(errs...)
}

// TestRangesWithinMaxTTL: the worst case of the ranges, the longest a
// script's key must live, is within luapre.MaxTTL, the clamp of every
// expiry the scripts build.
func TestRangesWithinMaxTTL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		what string
		life time.Duration
	}{
		{"a per-user cap (sliding_window: two windows past an instant MaxAhead ahead)", userlimit.MaxAhead + 2*userlimit.MaxWindow + time.Second},
		{"the fleet bucket (its refill)", globallimit.MaxRefill + time.Second},
		{"a provider's queue (max_queue_delay, a unit at one a day at the largest cost, the idle TTL)", 2*providers.MaxQueueDelayLimit + 10*24*time.Hour + 24*time.Hour},
		{"a provider's quota window", providers.MaxQueueDelayLimit + 31*24*time.Hour},
		{"an adaptive climb", providers.MaxQuiet + providers.MaxClimb + time.Second},
		{"a job's ledger record", maxDedupTTL},
	} {
		if c.life > luapre.MaxTTL {
			t.Errorf("%s lives %v, past luapre.MaxTTL %v: the clamp would cut it short", c.what, c.life, luapre.MaxTTL)
		}
	}
}

// TestACapOfLimitZeroIsRefused: a channel cap's limit or window given as
// zero is refused, beside a category's cap too (all zeros read as no
// channel cap, and the channel went uncapped; found in review), from the
// file and from the environment.
func TestACapOfLimitZeroIsRefused(t *testing.T) {
	t.Parallel()
	const provider = `
providers:
  - { name: sms-gw, channel: sms, default: true, kind: log, rate: 10 }
`
	for _, c := range []struct {
		yaml string
		env  map[string]string
		want string
	}{
		{"user_limits:\n  sms: { limit: 0, marketing: { limit: 1, window: 24h } }\n", nil, "user_limits.sms.limit: 0 is not allowed"},
		{"user_limits:\n  sms: { limit: 0, window: 0s, marketing: { limit: 1, window: 24h } }\n", nil, "user_limits.sms.window: 0s is not allowed"},
		{"user_limits:\n  sms: { limit: 5, window: 1h, marketing: { limit: 0, window: 24h } }\n", nil, "user_limits.sms.marketing.limit: must be a whole number of at least 1"},
		{"user_limits:\n  sms: { limit: 5, window: 1h, marketing: { limit: 1, window: 24h } }\n", map[string]string{"NOTIFIER_USER_LIMITS_SMS_LIMIT": "0"}, "user_limits.sms.limit: 0 is not allowed"},
	} {
		_, err := Parse([]byte(c.yaml+provider), func(k string) string { return c.env[k] })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s%v: %v, want %q", c.yaml, c.env, err, c.want)
		}
	}
}

// TestInt64KeysAreWholeNumbers: providers[].quotas[].limit and
// gateway.shed.max_stream_depth are int64s, which the decode hook left to
// mapstructure: it truncated a fraction in silence (max_stream_depth 0.5
// became 0, no bound at all; a quota of 2.5 jobs a day became 2), and it
// refused every environment override of max_stream_depth, a number
// written as text, as "the wrong type" (found in review).
func TestInt64KeysAreWholeNumbers(t *testing.T) {
	t.Parallel()
	quota := func(v string) string {
		return strings.Replace(minimal, "    rate: 100\n", "    rate: 100\n    quotas: [{limit: "+v+", per: 24h}]\n", 1)
	}
	depth := func(v string) string { return minimal + gatewayBlock + "  shed: {max_stream_depth: " + v + "}\n" }
	for _, c := range []struct{ yaml, key string }{
		{quota("2.5"), "providers[0] (sms-gateway).quotas[0].limit"},
		{quota("1e300"), "providers[0] (sms-gateway).quotas[0].limit"},
		{depth("0.5"), "gateway.shed.max_stream_depth"},
		{depth("-0.5"), "gateway.shed.max_stream_depth"},
	} {
		_, err := Parse([]byte(c.yaml), noEnv)
		if err == nil || !strings.Contains(err.Error(), c.key+": must be a whole number") {
			t.Errorf("%s: %v, want %s refused as no whole number", c.yaml, err, c.key)
		}
	}
	cfg, err := Parse([]byte(quota("1e15")), noEnv)
	if err != nil || cfg.Providers[0].Quotas[0].Limit != 1e15 {
		t.Errorf("a quota of 1e15: %v, %+v", err, cfg.Providers)
	}
	cfg, err = Parse([]byte(minimal+gatewayBlock), envOf(map[string]string{"NOTIFIER_GATEWAY_SHED_MAX_STREAM_DEPTH": "250000"}))
	if err != nil || cfg.Gateway.Shed.MaxStreamDepth != 250000 {
		t.Errorf("NOTIFIER_GATEWAY_SHED_MAX_STREAM_DEPTH=250000: %v, max_stream_depth %v", err, cfg.Gateway)
	}
	_, err = Parse([]byte(minimal+gatewayBlock), envOf(map[string]string{"NOTIFIER_GATEWAY_SHED_MAX_STREAM_DEPTH": "lots"}))
	if err == nil || !strings.Contains(err.Error(), `gateway.shed.max_stream_depth: must be a whole number, got "lots"`) {
		t.Errorf("NOTIFIER_GATEWAY_SHED_MAX_STREAM_DEPTH=lots: %v", err)
	}
}

// TestSecretsInMalformedAddressesAreRedacted: a password written in an
// address that is refused stays out of the problem: a NATS URL whose
// password holds a '/' (base64 passwords do) was printed whole, its
// redaction looking for the '@' only before the first '/'; an OTLP
// endpoint that does not parse was printed as given; and a redis.addrs
// list with an empty entry (a trailing comma) was quoted whole, password
// and all (found in review).
func TestSecretsInMalformedAddressesAreRedacted(t *testing.T) {
	t.Parallel()
	const secret = "Ab3/xY+z"
	for _, c := range []struct {
		yaml string
		env  map[string]string
		key  string
	}{
		{minimal, map[string]string{"NOTIFIER_NATS_URL": "nats://svc:" + secret + "@nats:4222"}, "nats.url"},
		{minimal, map[string]string{"NOTIFIER_NATS_URL": "nats://127.0.0.1:4222,nats://svc:" + secret + "@nats:4222"}, "nats.url"},
		{minimal + "tracing: {otlp_endpoint: \"http://svc:" + secret + "@collector:4318/v1/traces\"}\n", nil, "tracing.otlp_endpoint"},
		{minimal, map[string]string{"NOTIFIER_REDIS_ADDRS": "default:" + secret + "@redis:6379,"}, "redis.addrs"},
	} {
		_, err := Parse([]byte(c.yaml), envOf(c.env))
		if err == nil || !strings.Contains(err.Error(), c.key+": ") {
			t.Errorf("%v %s: %v, want %s refused", c.env, c.yaml, err, c.key)
			continue
		}
		if strings.Contains(err.Error(), "xY+z") || strings.Contains(err.Error(), "Ab3") {
			t.Errorf("the problem shows the password:\n%v", err)
		}
	}
}

// TestExplicitZeroOfAKindsKeyIsRefused: SPEC §4 refuses an explicit zero
// rather than replace it by the default, and three keys took the default
// in silence: nats.replicas: 0 ran one replica, an smtp provider's port: 0
// sent on 587, an apns provider's priority: 0 (no APNs priority) sent at
// 10, immediate delivery (found in review).
func TestExplicitZeroOfAKindsKeyIsRefused(t *testing.T) {
	t.Parallel()
	const smtp = "  - { name: mail, channel: email, default: true, kind: smtp, rate: 10, host: smtp.example.com, from: a@example.com, port: 0 }\n"
	const apns = "  - { name: ios, channel: push, default: true, kind: apns, rate: 10, key_file: k.p8, key_id: K, team_id: T, topic: t, priority: 0 }\n"
	for _, c := range []struct {
		yaml string
		env  map[string]string
		want string
	}{
		{minimal + "nats: {replicas: 0}\n", nil, "nats.replicas: 0 is not allowed: must be from 1 to 5 (3 on a JetStream cluster); leave the key out for the default, 1"},
		{minimal, map[string]string{"NOTIFIER_NATS_REPLICAS": "0"}, "nats.replicas: 0 is not allowed"},
		{minimal + smtp, nil, "providers[1] (mail).port: 0 is not allowed: must be between 1 and 65535; leave the key out for the default, 587"},
		{minimal + apns, nil, "providers[1] (ios).priority: 0 is not allowed: must be 10, 5 or 1; leave the key out for the default, 10 (5 for push_type background)"},
	} {
		_, err := Parse([]byte(c.yaml), envOf(c.env))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s%v: %v\nwant %q", c.yaml, c.env, err, c.want)
		}
	}
}
