package providers

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/notifier/notifier/internal/text"
)

// Channels and units accepted in a provider entry (the kinds are in kinds).
var (
	channelNames = []string{"sms", "push", "email"}
	unitNames    = []string{"messages", "segments"}
)

// Defaults applied by WithDefaults.
const (
	DefaultMaxQueueDelay = 5 * time.Second
	// MinRate is the slowest contract, one unit a day: the send interval
	// is kept in integer microseconds, exact in the Redis scripts' Lua
	// numbers, and below it a unit's interval overflows that range once
	// multiplied by a long SMS's segments (it must equal leaky.MinRate).
	MinRate = 1.0 / 86400
	// MaxRate is a unit a microsecond: the queue keeps a unit's interval
	// in whole µs, so above it the contract would be paced at 1e6/s, not
	// as written.
	MaxRate = 1_000_000
	// MinJitterBudget and MaxJitterBudget bound jitter_budget: 250 ms
	// paces 20 % under the contract.
	MinJitterBudget = time.Millisecond
	MaxJitterBudget = 250 * time.Millisecond
	// MaxReserve is the largest share reserve.transactional keeps:
	// marketing always gets a tenth of a contract nobody else wants.
	MaxReserve = 0.9
	// MinQueueDelay and MaxQueueDelayLimit bound max_queue_delay. The
	// longest is a day: a slot lies at most that far ahead, which is also
	// how far ahead a per-user cap is asked for it (userlimit.MaxAhead).
	MinQueueDelay      = time.Millisecond
	MaxQueueDelayLimit = 24 * time.Hour
	// MinTimeout and MaxTimeout bound timeout: a send holds a worker and
	// its job's lease (max_queue_delay + timeout + nats.ack_wait) for as
	// long.
	MinTimeout = time.Millisecond
	MaxTimeout = 10 * time.Minute
	// MinPause is the shortest max_pause: a Retry-After counts whole
	// seconds. The longest is MaxRetryAfter (1h).
	MinPause = time.Second
	// DefaultMaxPause caps the pause one 429 can set: one odd Retry-After
	// (a day, an hour) does not stop a channel for longer than this.
	DefaultMaxPause = 5 * time.Minute
	DefaultTimeout  = 5 * time.Second
)

// Probes of a provider paused because it refused the sender (ErrSender):
// probe_interval's default and range.
const (
	DefaultProbeInterval = 30 * time.Second
	MinProbeInterval     = time.Second
	MaxProbeInterval     = time.Hour
)

// Config is one entry of the YAML `providers:` list (SPEC §4). The command
// line decodes into []Config with mapstructure; Validate checks one entry and
// ValidateAll the list as a whole. Secrets are never in a Config: it names
// the environment variables that hold them, so printing a Config is safe.
type Config struct {
	// Name identifies the provider in jobs (`provider`), metrics and Redis
	// keys: 1-64 characters of [A-Za-z0-9._-].
	Name string `mapstructure:"name"`
	// Channel is sms, push or email.
	Channel string `mapstructure:"channel"`
	// Default marks the channel's default provider: exactly one per channel
	// that has providers.
	Default bool `mapstructure:"default"`
	// Kind is the wire protocol: webhook, twilio, fcm, apns, smtp or log.
	Kind string `mapstructure:"kind"`
	// URL is the endpoint (webhook, required) or the API base URL (twilio,
	// fcm, apns; defaults to the public service, tests point it at a fake).
	URL string `mapstructure:"url"`
	// Rate is the contract in units per second, fleet-wide: from MinRate
	// (1/86400) to MaxRate (1e6).
	Rate float64 `mapstructure:"rate"`
	// Unit is what Rate counts: messages (default) or segments (sms only:
	// SMS contracts often price each 160/70-character segment).
	Unit string `mapstructure:"unit"`
	// MaxQueueDelay bounds the leaky queue as time (depth = rate × delay);
	// 1ms to 24h, default 5s.
	MaxQueueDelay time.Duration `mapstructure:"max_queue_delay"`
	// Timeout bounds one request, connection to last response byte read;
	// 1ms to 10m, default 5s.
	Timeout time.Duration `mapstructure:"timeout"`
	// JitterBudget is how late after its send slot a request may reach the
	// provider (a stalled process, the HTTP path, the network) with the
	// contract still held in every 1 s window at the provider: the queue
	// paces b/(1+b) under the contract (b in seconds). 1ms to 250ms; 0
	// (left out): 15 ms (1.5 % under the contract).
	JitterBudget time.Duration `mapstructure:"jitter_budget"`
	// MaxPause caps the fleet-wide pause a 429's Retry-After sets (the
	// provider is asked again after it; another 429 pauses it again);
	// 1s to MaxRetryAfter (1h), default 5m.
	MaxPause time.Duration `mapstructure:"max_pause"`
	// RetryOnTimeout is what becomes of a send whose outcome is unknown
	// (Error.Ambiguous: a timeout or a lost connection after the request
	// reached the provider whole, so the provider may have delivered it):
	// true, the default (nil), retries it like any transient failure, at the
	// risk of a second delivery; false dead-letters it with reason
	// "ambiguous", at the risk of none. Every kind takes it; read it with
	// RetriesOnTimeout.
	RetryOnTimeout *bool `mapstructure:"retry_on_timeout"`
	// ProbeInterval is, while the provider is paused because it refused the
	// sender (ErrSender: credentials, account, sender id, a configuration
	// fault), how often the fleet lets one job through as a probe: one for
	// the whole fleet, with jitter; its success resumes the provider
	// fleet-wide, its ErrSender keeps the pause (the dispatcher's, SPEC §6).
	// Default 30s, from 1s to 1h. Every kind takes it.
	ProbeInterval time.Duration `mapstructure:"probe_interval"`
	// Fallback names another provider of the same channel that takes a
	// job this one cannot send in time: its breaker is open, a quota of its
	// is spent, or its queue has no slot before the job's expires_at. The
	// job goes through the fallback's own contract; the ledger still sends
	// it once.
	Fallback string `mapstructure:"fallback"`
	// Reserve keeps a share of the provider's sends for the transactional
	// jobs of its channel (reserve: {transactional: 0.3}): while
	// transactional jobs wait, marketing jobs hold at most 1 − that share
	// of the channel's jobs under way, and transactional jobs go first;
	// with none waiting, marketing takes everything. The only key is
	// transactional, from 0 to 0.9 (left out: 0, no reserve).
	Reserve map[string]float64 `mapstructure:"reserve"`
	// Adaptive, when set, lets the fleet pace below Rate after the
	// provider throttles, fleet-wide: a 429 returns it to just under the
	// rate the provider throttled at (at once after a climb; after a drop
	// by Decrease and a climb of IncreasePerS a second from Quiet on, after
	// a rate held), where it holds and, once per Quiet +
	// leaky.AdaptiveHold, probes above; never below MinRate nor above
	// Rate (leaky.Adaptive).
	Adaptive *AdaptiveConfig `mapstructure:"adaptive"`
	// Quotas are counts per window beside Rate (a daily or per-minute
	// quota), each exact and fleet-wide; windows are aligned to the Unix
	// epoch (a 24h quota is a UTC day).
	Quotas []QuotaConfig `mapstructure:"quotas"`
	// ProjectID is the Firebase project (fcm, required).
	ProjectID string `mapstructure:"project_id"`
	// CredentialsEnv names the environment variable holding the secret:
	// the bearer token of a webhook (optional) or of fcm (this or
	// CredentialsFile is required), the auth token of twilio (required).
	CredentialsEnv string `mapstructure:"credentials_env"`
	// SigningSecretEnv names the environment variable holding the secret a
	// webhook is signed with, as Standard Webhooks does (webhook, optional):
	// whsec_ and the base64 of 24 to 64 random bytes; during a rotation,
	// several space-separated, each of which signs every webhook.
	SigningSecretEnv string `mapstructure:"signing_secret_env"`
	// CredentialsFile is the path of a Google service-account JSON key
	// (fcm, instead of CredentialsEnv): the provider exchanges it for OAuth
	// access tokens at the key's token_uri and caches each until shortly
	// before it expires. The file is a secret; only its path is configured.
	CredentialsFile string `mapstructure:"credentials_file"`
	// TLSCAFile is a PEM file of CA certificates that replaces the system
	// roots when verifying the provider's server (webhook, twilio, fcm, apns,
	// smtp): for a private CA or a test server. Verification is never off.
	TLSCAFile string `mapstructure:"tls_ca_file"`

	// AccountSID is the Twilio account (twilio, required; basic-auth user and
	// part of the API path).
	AccountSID string `mapstructure:"account_sid"`
	// From is the sender: for twilio (this or MessagingServiceSID is
	// required) a phone number in E.164, a short code (5-6 digits) or an
	// alphanumeric sender id (1-11 characters of A-Z a-z 0-9, space, + - _
	// and &, at least one letter; the countries that take one are Twilio's
	// business); for smtp an address (required).
	From string `mapstructure:"from"`
	// MessagingServiceSID sends through a Twilio Messaging Service (MG and
	// 32 hex digits) instead of a From number (twilio).
	MessagingServiceSID string `mapstructure:"messaging_service_sid"`
	// StatusCallbackURL is where Twilio posts the delivery status of each
	// message (twilio, optional): an absolute http or https URL without a
	// query string, at which Registry.TwilioCallbacks is served. Each Send
	// asks for <url>?provider=<name>&job=<job id>.
	StatusCallbackURL string `mapstructure:"status_callback_url"`

	// KeyFile is the path of the APNs .p8 signing key (apns, required).
	KeyFile string `mapstructure:"key_file"`
	// KeyID is the 10-character id of that key (apns, required).
	KeyID string `mapstructure:"key_id"`
	// TeamID is the Apple developer team id (apns, required).
	TeamID string `mapstructure:"team_id"`
	// Topic is the apns-topic header, usually the app's bundle id (apns,
	// required).
	Topic string `mapstructure:"topic"`
	// PushType is the apns-push-type header (apns, default alert).
	PushType string `mapstructure:"push_type"`
	// Priority is the apns-priority header: 10 (immediate, default), 5 or 1
	// (apns). Push type background requires 5, its default.
	Priority int `mapstructure:"priority"`

	// Host is the SMTP server (smtp, required).
	Host string `mapstructure:"host"`
	// Port is the SMTP submission port (smtp, default 587). The session
	// always upgrades with STARTTLS before AUTH and mail; a server that does
	// not offer it is refused (implicit TLS on 465 is not supported).
	Port int `mapstructure:"port"`
	// Username is the SMTP AUTH user (smtp, optional).
	Username string `mapstructure:"username"`
	// PasswordEnv names the environment variable holding the SMTP AUTH
	// password (smtp, required with Username).
	PasswordEnv string `mapstructure:"password_env"`
}

// AdaptiveConfig is providers[].adaptive.
type AdaptiveConfig struct {
	MinRate      float64       `mapstructure:"min_rate"`       // floor of the effective rate (default Rate/10)
	Decrease     float64       `mapstructure:"decrease"`       // factor on a throttle met at a rate held, in (0, 1) (default 0.7)
	IncreasePerS float64       `mapstructure:"increase_per_s"` // units/s regained per second of quiet, to 9000, a climb of at most 24h (default Rate/20)
	Quiet        time.Duration `mapstructure:"quiet"`          // no climb for this long after a throttle, 1ms to 1h (default 2s)
}

// QuotaConfig is one entry of providers[].quotas.
type QuotaConfig struct {
	Limit int64         `mapstructure:"limit"` // units per window, 1 to 1e15
	Per   time.Duration `mapstructure:"per"`   // the window: whole seconds, 1s to 31 days
}

// WithDefaults fills the keys left out for a contract of rate: min_rate
// rate/10, decrease 0.7, increase_per_s rate/20 (at most 9000), quiet 2s.
func (a AdaptiveConfig) WithDefaults(rate float64) AdaptiveConfig {
	if a.MinRate == 0 {
		a.MinRate = rate / 10
	}
	if a.Decrease == 0 {
		a.Decrease = DefaultAdaptiveDecrease
	}
	if a.IncreasePerS == 0 {
		a.IncreasePerS = min(rate/20, maxIncreasePerS)
	}
	if a.Quiet == 0 {
		a.Quiet = DefaultAdaptiveQuiet
	}
	return a
}

// Adaptive defaults.
const (
	DefaultAdaptiveDecrease = 0.7
	DefaultAdaptiveQuiet    = 2 * time.Second
	maxQuotas               = 4
	maxQuotaPer             = 31 * 24 * time.Hour
	maxQuotaLimit           = 1_000_000_000_000_000 // the units' sums stay exact in reserve.lua (leaky allows 2^51)
	maxIncreasePerS         = 9000                  // leaky.MaxIncreasePerS
	maxSegmentsCost         = 10                    // the largest cost the queues leave room for (cli's segmentsMaxCost)
	// MaxClimb bounds an adaptive contract's climb from min_rate back to
	// rate, (rate − min_rate) / increase_per_s: the state lives until the
	// climb ends. MaxQuiet bounds quiet for the same reason.
	MaxClimb = 24 * time.Hour
	MaxQuiet = time.Hour
)

// WithDefaults returns c with every zero-valued key that has a default
// filled in. Negative or otherwise invalid values are kept for Validate to
// report.
func (c Config) WithDefaults() Config {
	if c.Unit == "" {
		c.Unit = "messages"
	}
	if c.MaxQueueDelay == 0 {
		c.MaxQueueDelay = DefaultMaxQueueDelay
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxPause == 0 {
		c.MaxPause = DefaultMaxPause
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if a := c.Adaptive; a != nil {
		d := a.WithDefaults(c.Rate)
		c.Adaptive = &d
	}
	if k, ok := kindNamed(c.Kind); ok && k.defaults != nil {
		k.defaults(&c)
	}
	return c
}

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	envRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Validate checks one provider entry after applying WithDefaults (so keys
// left out are fine where they have a default). It returns nil or
// errors.Join of one error per problem, each message starting with the key
// relative to the entry, e.g.
//
//	rate: must be greater than 0, got -5
//	kind: "carrier-pigeon" is not one of webhook, twilio, fcm, apns, smtp, log
//
// The caller prefixes the entry's position ("providers[2] (sms-gateway).").
// Validate checks the file only: whether the environment variables it names
// are set, and whether the files it names (key_file, credentials_file,
// tls_ca_file) can be read and hold what they should, is checked by
// NewRegistry.
func (c Config) Validate() error {
	c = c.WithDefaults()
	p := &problems{kind: c.Kind}

	switch {
	case c.Name == "":
		p.add("name", "required")
	case !nameRE.MatchString(c.Name):
		p.add("name", "must be 1-64 characters of A-Z a-z 0-9 . _ -, got %q", c.Name)
	}
	switch {
	case c.Channel == "":
		p.add("channel", "required, one of %s", strings.Join(channelNames, ", "))
	case !slices.Contains(channelNames, c.Channel):
		p.add("channel", "%q is not one of %s", c.Channel, strings.Join(channelNames, ", "))
	}
	k, kindOK := kindNamed(c.Kind)
	switch {
	case c.Kind == "":
		p.add("kind", "required, one of %s", kindNames())
	case !kindOK:
		p.add("kind", "%q is not one of %s", c.Kind, kindNames())
	}
	if kindOK && k.channel != "" && slices.Contains(channelNames, c.Channel) && c.Channel != k.channel {
		p.add("channel", "kind %s sends %s only, got %q", c.Kind, k.channel, c.Channel)
	}
	rateOK := c.Rate >= MinRate && c.Rate <= MaxRate // NaN: false
	if !rateOK {
		p.add("rate", "must be a number of units per second from 1/86400 (one a day) to %d (one a µs: the queue's interval is whole µs), got %g", MaxRate, c.Rate)
	}
	switch {
	case !slices.Contains(unitNames, c.Unit):
		p.add("unit", "%q is not one of %s", c.Unit, strings.Join(unitNames, ", "))
	case c.Unit == "segments" && c.Channel != "sms":
		p.add("unit", "segments is only for channel sms, got channel %q", c.Channel)
	}
	if c.MaxQueueDelay < MinQueueDelay || c.MaxQueueDelay > MaxQueueDelayLimit {
		p.add("max_queue_delay", "%s, got %s", RangeText(MinQueueDelay, MaxQueueDelayLimit), text.Duration(c.MaxQueueDelay))
	}
	if c.MaxPause < MinPause || c.MaxPause > MaxRetryAfter {
		p.add("max_pause", "%s, got %s", RangeText(MinPause, MaxRetryAfter), text.Duration(c.MaxPause))
	}
	// 0 is the key left out (15ms); written as 0 it is refused by the
	// command line, with the same range.
	if c.JitterBudget != 0 && (c.JitterBudget < MinJitterBudget || c.JitterBudget > MaxJitterBudget) {
		p.add("jitter_budget", "%s, got %s", RangeText(MinJitterBudget, MaxJitterBudget), text.Duration(c.JitterBudget))
	}
	if c.Timeout < MinTimeout || c.Timeout > MaxTimeout {
		p.add("timeout", "%s, got %s", RangeText(MinTimeout, MaxTimeout), text.Duration(c.Timeout))
	}
	if c.ProbeInterval < MinProbeInterval || c.ProbeInterval > MaxProbeInterval {
		p.add("probe_interval", "%s, got %s", RangeText(MinProbeInterval, MaxProbeInterval), text.Duration(c.ProbeInterval))
	}
	if c.Fallback != "" && c.Fallback == c.Name {
		p.add("fallback", "must name another provider, got its own name %q", c.Fallback)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Reserve)) {
		switch v := c.Reserve[k]; {
		case k != "transactional":
			p.add("reserve."+k, "%q is not a category a share can be reserved for; use transactional", k)
		case math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxReserve:
			p.add("reserve."+k, "must be a share from 0 to %g, got %v", MaxReserve, v)
		}
	}
	if a := c.Adaptive; a != nil {
		minOK := a.MinRate >= MinRate && (!rateOK || a.MinRate <= c.Rate) // NaN: false
		if !minOK {
			p.add("adaptive.min_rate", "must be from 1/86400 (one a day) to rate (%g), got %g", c.Rate, a.MinRate)
		}
		if !(a.Decrease > 0 && a.Decrease < 1) {
			p.add("adaptive.decrease", "must be greater than 0 and less than 1, got %g", a.Decrease)
		}
		switch {
		case !(a.IncreasePerS > 0 && a.IncreasePerS <= maxIncreasePerS):
			p.add("adaptive.increase_per_s", "must be greater than 0 and at most %d, got %g", maxIncreasePerS, a.IncreasePerS)
		case rateOK && minOK && (c.Rate-a.MinRate)/a.IncreasePerS > MaxClimb.Seconds():
			p.add("adaptive.increase_per_s", "must be at least (rate − min_rate) / 86400 = %g, so the climb from min_rate back to rate takes at most %s (the state lives until it ends), got %g",
				(c.Rate-a.MinRate)/MaxClimb.Seconds(), text.Duration(MaxClimb), a.IncreasePerS)
		}
		if a.Quiet < time.Millisecond || a.Quiet > MaxQuiet {
			p.add("adaptive.quiet", "%s, got %s", RangeText(time.Millisecond, MaxQuiet), text.Duration(a.Quiet))
		}
	}
	if len(c.Quotas) > maxQuotas {
		p.add("quotas", "at most %d, got %d", maxQuotas, len(c.Quotas))
	}
	for i, q := range c.Quotas {
		key := fmt.Sprintf("quotas[%d]", i)
		switch {
		case q.Limit < 1 || q.Limit > maxQuotaLimit:
			p.add(key+".limit", "must be a whole number from 1 to %d, got %d", int64(maxQuotaLimit), q.Limit)
		case c.Unit == "segments" && q.Limit < maxSegmentsCost:
			p.add(key+".limit", "must be at least %d with unit segments (a long SMS takes that many at once), got %d", maxSegmentsCost, q.Limit)
		}
		if q.Per < time.Second || q.Per > maxQuotaPer || q.Per%time.Second != 0 {
			p.add(key+".per", "must be whole seconds from 1s to %s (31 days), got %s", text.Duration(maxQuotaPer), text.Duration(q.Per))
		}
	}
	if c.CredentialsEnv != "" && !envRE.MatchString(c.CredentialsEnv) {
		p.add("credentials_env", "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*), got %s", envShown(c.CredentialsEnv))
	}
	if c.PasswordEnv != "" && !envRE.MatchString(c.PasswordEnv) {
		p.add("password_env", "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*), got %s", envShown(c.PasswordEnv))
	}
	if c.SigningSecretEnv != "" && !envRE.MatchString(c.SigningSecretEnv) {
		p.add("signing_secret_env", "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*), got %s", envShown(c.SigningSecretEnv))
	}
	if !kindOK {
		return errors.Join(p.errs...)
	}
	k.refuseOtherKeys(c, p)
	if k.validate != nil {
		k.validate(c, p)
	}
	return errors.Join(p.errs...)
}

// RangeText is how a duration's range reads in a problem: "must be from
// 1s to 1h". The command line's refusal of an explicit zero says the same.
func RangeText(lo, hi time.Duration) string {
	return "must be from " + text.Duration(lo) + " to " + text.Duration(hi)
}

// ValidateAll checks what no single entry can: that there is at least one
// provider, that names are unique, and that every channel with providers has
// exactly one default. It does not repeat Validate's per-entry checks. Its
// messages name the entry the way the command line prefixes Validate's:
//
//	providers[2] (sms-b).name: "sms-b" is already used by providers[0]
//	providers: channel sms has no default provider; set default: true on one of sms-a, sms-b
func ValidateAll(cfgs []Config) error {
	if len(cfgs) == 0 {
		return errors.New("providers: at least one provider is required")
	}
	var errs []error
	byName := map[string]int{}
	defaults := map[string]int{}
	var channels []string
	names := map[string][]string{}
	for i, c := range cfgs {
		if c.Name != "" {
			if j, dup := byName[c.Name]; dup {
				errs = append(errs, fmt.Errorf("%s.name: %q is already used by providers[%d]", EntryPath(i, c.Name), c.Name, j))
			} else {
				byName[c.Name] = i
			}
		}
		if c.Channel == "" {
			continue
		}
		if _, seen := names[c.Channel]; !seen {
			channels = append(channels, c.Channel)
		}
		names[c.Channel] = append(names[c.Channel], c.Name)
		if !c.Default {
			continue
		}
		if j, dup := defaults[c.Channel]; dup {
			errs = append(errs, fmt.Errorf("%s.default: channel %s already has default providers[%d] (%s)",
				EntryPath(i, c.Name), c.Channel, j, cfgs[j].Name))
		} else {
			defaults[c.Channel] = i
		}
	}
	for i, c := range cfgs {
		if c.Fallback == "" || c.Fallback == c.Name {
			continue // the entry's own Validate reports a self-reference
		}
		j, ok := byName[c.Fallback]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s.fallback: no provider is named %q", EntryPath(i, c.Name), c.Fallback))
		case cfgs[j].Channel != c.Channel:
			errs = append(errs, fmt.Errorf("%s.fallback: %q sends %s, not %s", EntryPath(i, c.Name), c.Fallback, cfgs[j].Channel, c.Channel))
		}
	}
	for _, ch := range channels {
		if _, ok := defaults[ch]; !ok {
			errs = append(errs, fmt.Errorf("providers: channel %s has no default provider; set default: true on one of %s",
				ch, strings.Join(names[ch], ", ")))
		}
	}
	return errors.Join(errs...)
}

// EntryPath is how messages name entry i of `providers:`:
// "providers[2] (sms-gateway)". The command line prefixes Validate's errors
// with it and a dot.
// A name with a control or other unprintable character is quoted, so a
// message never writes it raw to a terminal.
func EntryPath(i int, name string) string {
	if strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Sprintf("providers[%d] (%q)", i, name)
	}
	return fmt.Sprintf("providers[%d] (%s)", i, name)
}

// TransactionalReserve is reserve.transactional (0: none).
func (c Config) TransactionalReserve() float64 { return c.Reserve["transactional"] }

// OverQuota reports a quota of c whose window cannot hold cost units at
// all, its index, and ok: such a job could never be reserved a slot (a
// long SMS of more segments than a segments quota's limit).
func (c Config) OverQuota(cost int) (i int, limit int64, ok bool) {
	for i, q := range c.Quotas {
		if int64(cost) > q.Limit {
			return i, q.Limit, true
		}
	}
	return 0, 0, false
}

// RetriesOnTimeout reports whether an ambiguous send (Error.Ambiguous) is
// retried: retry_on_timeout, true when it is not set.
func (c Config) RetriesOnTimeout() bool { return c.RetryOnTimeout == nil || *c.RetryOnTimeout }

// Cost is how many leaky-bucket units m takes under c's contract: 1 for unit
// messages, the SMS segment count of the body (see Segments) for unit
// segments. It is always at least 1.
func (c Config) Cost(m *Message) int {
	if c.Unit == "segments" && m != nil {
		return Segments(m.Body)
	}
	return 1
}
