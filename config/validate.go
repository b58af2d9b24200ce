package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/notifier/notifier/dispatch"
	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/limits/suppress"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
)

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
	for _, ch := range slices.Sorted(maps.Keys(c.UserLimits)) {
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
	for _, ch := range slices.Sorted(maps.Keys(c.Categories)) {
		switch cat := c.Categories[ch]; {
		case !queue.IsChannel(ch):
			errs = append(errs, fmt.Errorf("categories.%s: %q is not a channel; use one of %s", ch, ch, strings.Join(queue.Channels, ", ")))
		case !queue.ValidCategory(cat):
			errs = append(errs, fmt.Errorf("categories.%s: %q is not one of transactional, marketing", ch, cat))
		}
	}
	for _, t := range slices.Sorted(maps.Keys(c.Tenants.Weights)) {
		w := c.Tenants.Weights[t]
		if !queue.ValidTenant(t) {
			errs = append(errs, fmt.Errorf("%s: %q is not a tenant name: a tenant is 1 to %d characters of A-Z a-z 0-9 . _ -",
				tenantPath(t), t, queue.MaxTenantLen))
		}
		if math.IsNaN(w) || math.IsInf(w, 0) || w < minTenantWeight || w > maxTenantWeight {
			errs = append(errs, fmt.Errorf("%s: must be a number from %g to %d (a tenant left out weighs 1), got %v",
				tenantPath(t), minTenantWeight, maxTenantWeight, w))
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

// maxTenantWeight is the largest weight tenants.weights allows: a weight
// is a share against the default 1, and a thousandfold share is already
// all of a contract to any tenant it competes with.
const maxTenantWeight = 1000

// minTenantWeight is the smallest: a millionth of the largest. The fair
// queue's tags grow by 1/weight a pick, and a tenant of weight 1e-300 made
// them so large that the others' increments were lost in rounding (the
// first of them took every pick: found in review).
const minTenantWeight = 0.001

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
	"nats.replicas":      {"must be from 1 to 5 (3 on a JetStream cluster)", "1"},
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

// zeroRefusedKind is zeroRefusedProvider for the keys of one kind.
var zeroRefusedKind = map[string]map[string]zeroRule{
	"smtp": {"port": {"must be between 1 and 65535", "587"}},
	"apns": {"priority": {"must be 10, 5 or 1", "10 (5 for push_type background)"}},
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
