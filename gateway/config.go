package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/notifier/notifier/queue"
)

// Defaults of the YAML keys under gateway:.
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultAuthFailLimit     = 10
	DefaultAuthFailWindow    = time.Minute
	DefaultPublishTimeout    = 5 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultHeaderTimeout     = 5 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultIdempotencyTTL    = 24 * time.Hour
	DefaultMaxConns          = 10_000
	DefaultMaxConnsPerIP     = 100 // DefaultMaxConns / 100: it takes 100 addresses to hold every connection
	DefaultMaxInFlight       = 1_024
	DefaultMaxInFlightPerIP  = 256
	DefaultMaxPublishLatency = time.Second
	unauthenticatedLabel     = "unauthenticated"
	keyNameAllowedInWords    = "1 to 64 characters of A-Z a-z 0-9 . _ -"
	sha256HexLen             = 2 * sha256.Size
	authorizationBearer      = "Bearer "
	defaultClientIPHeader    = ""
	problemContentType       = "application/problem+json"
	jsonContentType          = "application/json"
	maxIdempotencyKeyBatch   = 123 // a batch's ids are <key>-<index>, index < 1000: 123 + 4 = 127 ≤ 128
)

// The ranges of the gateway's keys (SPEC §9), and what each bound protects.
const (
	// MinRate and MaxRate bound a bucket's rate (jobs per second). At
	// most 10^6 a token costs at least 1 µs, the unit of globallimit's take.lua's
	// clock, so every rate is exact; at least 0.001 (one job in 1000 s).
	MinRate = 0.001
	MaxRate = 1_000_000
	// MaxBurst bounds a bucket's size.
	MaxBurst = 1_000_000
	// MaxWindow bounds burst/rate, the time an empty bucket takes to fill:
	// a bucket's state (its theoretical arrival time, µs) is at most this
	// far ahead of now, so it stays an exact integer in Lua's doubles
	// (now + 7 days ≈ 1.8e15 µs, far below 2^53 ≈ 9.0e15) and its key's
	// expiry stays a week at most. globallimit's take.lua (TakeAll, with
	// WithWindow(MaxWindow)) clamps every state it reads
	// or writes to it, so no configuration, old or corrupt, can leave a
	// key with a longer expiry.
	MaxWindow = 7 * 24 * time.Hour

	maxPublishTimeout     = time.Minute
	maxAuthFailuresWindow = 24 * time.Hour
	maxAuthFailuresLimit  = 1_000_000
	maxKeys               = 10_000
	maxTenants            = 10_000
	minReadTimeout        = time.Second
	maxReadTimeout        = 5 * time.Minute
	minHeaderTimeout      = time.Second
	maxHeaderTimeout      = time.Minute
	minIdleTimeout        = time.Second
	maxIdleTimeout        = time.Hour
	// The idempotency records outlive the stream's duplicate window (2
	// minutes: a shorter record would let a reused id with another body
	// be dropped by JetStream as a duplicate, answered 202) and last at
	// most 30 days (the memory they hold in Redis).
	minIdempotencyTTL   = 2 * time.Minute
	maxIdempotencyTTL   = 30 * 24 * time.Hour
	maxConnsBound       = 1_000_000
	maxInFlightBound    = 100_000
	minPublishLatency   = 10 * time.Millisecond
	maxStreamDepthBound = 1_000_000_000_000
)

// Key is one API key of gateway.keys. The key itself is never configured:
// only its SHA-256, in lower-case hex (`notifier gateway hash-key`).
type Key struct {
	Name   string  `mapstructure:"name"`   // the metric label and log name; 1–64 of A-Z a-z 0-9 . _ -
	Tenant string  `mapstructure:"tenant"` // the tenant of every job sent with it; "" the default tenant
	SHA256 string  `mapstructure:"sha256"` // hex SHA-256 of the key
	Rate   float64 `mapstructure:"rate"`   // jobs per second (token refill)
	Burst  int     `mapstructure:"burst"`  // bucket size: the most jobs at once
	// Priority allows ?priority=high (the priority lane); without it such
	// a request is answered 403.
	Priority bool `mapstructure:"priority"`
}

// Limit is a token bucket's rate and size: gateway.capacity, an entry of
// gateway.tenants.
type Limit struct {
	Rate  float64 `mapstructure:"rate"`  // jobs per second
	Burst int     `mapstructure:"burst"` // the most jobs at once
}

// Shed is gateway.shed: the bounds past which requests are refused at
// once (503 overloaded) rather than queued behind a slow platform.
type Shed struct {
	// MaxConns bounds the open connections; at the bound the connection
	// idle the longest is closed for a new one, and without an idle one
	// the new one is answered 503. Lowered at start to what the process
	// may open (RLIMIT_NOFILE less FDReserve).
	MaxConns int `mapstructure:"max_conns"`
	// MaxConnsPerIP bounds the open connections of one peer address
	// (the load balancer's, behind one: raise it to at least its pool):
	// the same, answered 429. The default, MaxConns/100, makes it take
	// 100 addresses to hold every connection.
	MaxConnsPerIP int `mapstructure:"max_conns_per_ip"`
	// MaxInFlight bounds the requests being handled at once, and
	// MaxInFlightPerIP those of one client IP (client_ip_header's when
	// set). A request with a key counts once its body is read.
	MaxInFlight      int `mapstructure:"max_in_flight"`
	MaxInFlightPerIP int `mapstructure:"max_in_flight_per_ip"`
	// MaxPublishLatency: while JetStream's acknowledgements take longer
	// (a moving average of the acks, or the oldest publish still waiting),
	// requests are refused and /readyz is not ready.
	MaxPublishLatency time.Duration `mapstructure:"max_publish_latency"`
	// MaxStreamDepth: while the job stream holds more jobs, requests are
	// refused. 0: no bound.
	MaxStreamDepth int64 `mapstructure:"max_stream_depth"`
}

// AuthFailures is gateway.auth_failures: at most Limit failed
// authentications per client IP in a fixed Window; beyond it every request
// from that IP is answered 429 until the window ends.
type AuthFailures struct {
	Limit  int           `mapstructure:"limit"`
	Window time.Duration `mapstructure:"window"`
}

// Config is the YAML block gateway: (SPEC §9). The zero value with
// WithDefaults applied is valid except for Keys, of which one is required.
type Config struct {
	Listen       string       `mapstructure:"listen"` // host:port of the API, /healthz, /readyz, /metrics, /openapi.json
	Keys         []Key        `mapstructure:"keys"`
	AuthFailures AuthFailures `mapstructure:"auth_failures"`
	// LegacyHeaders adds X-RateLimit-Limit, -Remaining and -Reset beside
	// the draft's RateLimit-Policy and RateLimit.
	LegacyHeaders bool `mapstructure:"legacy_headers"`
	// PublishTimeout bounds the wait for JetStream's acknowledgement of a
	// request's jobs; past it the answer is 503.
	PublishTimeout time.Duration `mapstructure:"publish_timeout"`
	// ClientIPHeader names a header set by a trusted load balancer that
	// holds the client's address (X-Forwarded-For: its last entry); ""
	// uses the connection's peer address. Set it only behind a proxy
	// that overwrites or appends it: a client can write any header.
	ClientIPHeader string `mapstructure:"client_ip_header"`
	// Capacity is the whole intake's bucket, shared by every key and every
	// instance (zero: none): past it every request is refused, 503
	// over-capacity.
	Capacity Limit `mapstructure:"capacity"`
	// Tenants are buckets each shared by a tenant's keys (named tenants
	// only), beside each key's own.
	Tenants map[string]Limit `mapstructure:"tenants"`
	// Shed bounds connections, requests in flight, and the platform's
	// slowness.
	Shed Shed `mapstructure:"shed"`
	// HeaderTimeout bounds the arrival of a request's headers, from the
	// connection's opening or, on a kept-alive one, from the request's
	// first byte (408 past it, and the connection closed): a connection
	// that trickles its headers is busy, never closed for a new one, so
	// this is what frees it. ReadTimeout bounds the arrival of the body,
	// from the end of the headers (408 past it); IdleTimeout closes a
	// connection idle that long between requests.
	HeaderTimeout time.Duration `mapstructure:"header_timeout"`
	ReadTimeout   time.Duration `mapstructure:"read_timeout"`
	IdleTimeout   time.Duration `mapstructure:"idle_timeout"`
	// IdempotencyTTL is how long the gateway remembers a job id chosen by
	// the client (Idempotency-Key or the body's id) with its content, per
	// tenant: within it the same id with another content is answered 409.
	IdempotencyTTL time.Duration `mapstructure:"idempotency_ttl"`
}

// WithDefaults fills the keys left out.
func (c Config) WithDefaults() Config {
	orDefault(&c.Listen, DefaultListen)
	orDefault(&c.AuthFailures.Limit, DefaultAuthFailLimit)
	orDefault(&c.AuthFailures.Window, DefaultAuthFailWindow)
	orDefault(&c.PublishTimeout, DefaultPublishTimeout)
	orDefault(&c.ReadTimeout, DefaultReadTimeout)
	orDefault(&c.HeaderTimeout, DefaultHeaderTimeout)
	orDefault(&c.IdleTimeout, DefaultIdleTimeout)
	orDefault(&c.IdempotencyTTL, DefaultIdempotencyTTL)
	orDefault(&c.Shed.MaxConns, DefaultMaxConns)
	orDefault(&c.Shed.MaxConnsPerIP, DefaultMaxConnsPerIP)
	orDefault(&c.Shed.MaxInFlight, DefaultMaxInFlight)
	orDefault(&c.Shed.MaxInFlightPerIP, DefaultMaxInFlightPerIP)
	orDefault(&c.Shed.MaxPublishLatency, min(DefaultMaxPublishLatency, c.PublishTimeout))
	return c
}

// orDefault sets *v to def when it is the zero value.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate returns every problem of c joined with errors.Join, each
// naming its key relative to gateway: ("keys[0].sha256: ...").
func (c Config) Validate() error {
	var errs []error
	if _, port, err := net.SplitHostPort(c.Listen); err != nil || !validPort(port) {
		errs = append(errs, fmt.Errorf("listen: must be host:port (port 0 picks a free one), got %q", c.Listen))
	}
	if len(c.Keys) == 0 {
		errs = append(errs, errors.New("keys: required: at least one key ({name, tenant, sha256, rate, burst})"))
	}
	if len(c.Keys) > maxKeys {
		errs = append(errs, fmt.Errorf("keys: at most %d keys, got %d", maxKeys, len(c.Keys)))
	}
	names := map[string]int{}
	hashes := map[string]int{}
	for i, k := range c.Keys {
		p := keyPath(i, k.Name)
		switch {
		case k.Name == "":
			errs = append(errs, fmt.Errorf("%s.name: required: %s", p, keyNameAllowedInWords))
		case !validName(k.Name):
			errs = append(errs, fmt.Errorf("%s.name: %q is not a key name: %s", p, k.Name, keyNameAllowedInWords))
		case k.Name == unauthenticatedLabel:
			errs = append(errs, fmt.Errorf("%s.name: %q is reserved (the label of requests without a valid key)", p, k.Name))
		default:
			if j, dup := names[k.Name]; dup {
				errs = append(errs, fmt.Errorf("%s.name: %q is also the name of keys[%d]: names must be unique", p, k.Name, j))
			}
			names[k.Name] = i
		}
		if k.Tenant != "" && !queue.ValidTenant(k.Tenant) {
			errs = append(errs, fmt.Errorf("%s.tenant: %q is not a tenant name: 1 to 64 characters of A-Z a-z 0-9 . _ - (leave it out for the default tenant)", p, k.Tenant))
		}
		h := strings.ToLower(k.SHA256)
		switch {
		case k.SHA256 == "":
			errs = append(errs, fmt.Errorf("%s.sha256: required: the hex SHA-256 of the key (echo -n KEY | notifier gateway hash-key)", p))
		case len(h) != sha256HexLen || !isHex(h):
			errs = append(errs, fmt.Errorf("%s.sha256: must be %d hex digits (the SHA-256 of the key, never the key), got %d characters", p, sha256HexLen, len(k.SHA256)))
		default:
			if j, dup := hashes[h]; dup {
				errs = append(errs, fmt.Errorf("%s.sha256: the same as keys[%d]'s: one key cannot be two", p, j))
			}
			hashes[h] = i
		}
		errs = append(errs, Limit{Rate: k.Rate, Burst: k.Burst}.validate(p)...)
	}
	if c.Capacity != (Limit{}) {
		errs = append(errs, c.Capacity.validate("capacity")...)
	}
	if len(c.Tenants) > maxTenants {
		errs = append(errs, fmt.Errorf("tenants: at most %d tenants, got %d", maxTenants, len(c.Tenants)))
	}
	keyTenants := map[string]bool{}
	for _, k := range c.Keys {
		keyTenants[k.Tenant] = true
	}
	for _, t := range slices.Sorted(maps.Keys(c.Tenants)) {
		p := tenantPath(t)
		if !queue.ValidTenant(t) {
			errs = append(errs, fmt.Errorf("%s: %q is not a tenant name: 1 to 64 characters of A-Z a-z 0-9 . _ - (the default tenant has no bucket of its own)", p, t))
			continue
		}
		if !keyTenants[t] {
			errs = append(errs, fmt.Errorf("%s: no key of gateway.keys has tenant %q: a bucket no request can reach (a misspelt name?)", p, t))
		}
		errs = append(errs, c.Tenants[t].validate(p)...)
	}
	errs = append(errs, intRange("auth_failures.limit", c.AuthFailures.Limit, 1, maxAuthFailuresLimit)...)
	errs = append(errs, durRange("auth_failures.window", c.AuthFailures.Window, time.Second, maxAuthFailuresWindow)...)
	errs = append(errs, durRange("publish_timeout", c.PublishTimeout, 100*time.Millisecond, maxPublishTimeout)...)
	errs = append(errs, durRange("read_timeout", c.ReadTimeout, minReadTimeout, maxReadTimeout)...)
	errs = append(errs, durRange("header_timeout", c.HeaderTimeout, minHeaderTimeout, maxHeaderTimeout)...)
	errs = append(errs, durRange("idle_timeout", c.IdleTimeout, minIdleTimeout, maxIdleTimeout)...)
	errs = append(errs, durRange("idempotency_ttl", c.IdempotencyTTL, minIdempotencyTTL, maxIdempotencyTTL)...)
	s := c.Shed
	errs = append(errs, intRange("shed.max_conns", s.MaxConns, 1, maxConnsBound)...)
	errs = append(errs, intRange("shed.max_conns_per_ip", s.MaxConnsPerIP, 1, maxConnsBound)...)
	errs = append(errs, intRange("shed.max_in_flight", s.MaxInFlight, 1, maxInFlightBound)...)
	errs = append(errs, intRange("shed.max_in_flight_per_ip", s.MaxInFlightPerIP, 1, maxInFlightBound)...)
	if s.MaxPublishLatency < minPublishLatency || s.MaxPublishLatency > c.PublishTimeout {
		// The oldest publish waits publish_timeout at most: a threshold
		// past it would only ever see the timeouts.
		errs = append(errs, fmt.Errorf("shed.max_publish_latency: must be from %s to publish_timeout (%s), got %s", fmtDur(minPublishLatency), c.PublishTimeout, s.MaxPublishLatency))
	}
	if s.MaxStreamDepth < 0 || s.MaxStreamDepth > maxStreamDepthBound {
		errs = append(errs, fmt.Errorf("shed.max_stream_depth: must be a whole number of jobs from 0 (no bound) to %d, got %d", int64(maxStreamDepthBound), s.MaxStreamDepth))
	}
	if c.ClientIPHeader != "" && http.CanonicalHeaderKey(c.ClientIPHeader) != http.CanonicalHeaderKey(strings.TrimSpace(c.ClientIPHeader)) || strings.ContainsAny(c.ClientIPHeader, " :\t") {
		errs = append(errs, fmt.Errorf("client_ip_header: must be a header name such as X-Forwarded-For, got %q", c.ClientIPHeader))
	}
	return errors.Join(errs...)
}

// HashKey is the hex SHA-256 of an API key, as gateway.keys[].sha256 holds it.
func HashKey(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:])
}

func keyPath(i int, _ string) string { return fmt.Sprintf("keys[%d]", i) }

// tenantPath is the key path of a tenant's bucket: tenants.<name>, the
// name quoted when it is not a tenant name.
func tenantPath(name string) string {
	if queue.ValidTenant(name) {
		return "tenants." + name
	}
	return "tenants." + strconv.Quote(name)
}

// validate checks a bucket's rate and burst (the ranges of MinRate,
// MaxRate, MaxBurst and MaxWindow), naming them under path.
func (l Limit) validate(path string) []error {
	var errs []error
	rateOK := !math.IsNaN(l.Rate) && l.Rate >= MinRate && l.Rate <= MaxRate
	if !rateOK {
		errs = append(errs, fmt.Errorf("%s.rate: must be a number of jobs per second from %g to %d, got %v", path, MinRate, MaxRate, l.Rate))
	}
	burstOK := l.Burst >= 1 && l.Burst <= MaxBurst
	if !burstOK {
		errs = append(errs, fmt.Errorf("%s.burst: must be a whole number from 1 to %d, got %d", path, MaxBurst, l.Burst))
	}
	if rateOK && burstOK && l.window() > MaxWindow {
		errs = append(errs, fmt.Errorf("%s.burst: %d at rate %g takes %s to refill (burst/rate): at most %s (7 days) is allowed; lower the burst or raise the rate",
			path, l.Burst, l.Rate, fmtDur(l.window().Round(time.Second)), fmtDur(MaxWindow)))
	}
	return errs
}

// window is burst/rate, the time an empty bucket takes to fill.
func (l Limit) window() time.Duration {
	return time.Duration(float64(l.Burst) / l.Rate * float64(time.Second))
}

func intRange(path string, v, lo, hi int) []error {
	if v < lo || v > hi {
		return []error{fmt.Errorf("%s: must be a whole number from %d to %d, got %d", path, lo, hi, v)}
	}
	return nil
}

func durRange(path string, v, lo, hi time.Duration) []error {
	if v < lo || v > hi {
		return []error{fmt.Errorf("%s: must be from %s to %s, got %s", path, fmtDur(lo), fmtDur(hi), v)}
	}
	return nil
}

// fmtDur writes a bound as a YAML duration without trailing zero units
// (24h, not 24h0m0s).
func fmtDur(d time.Duration) string {
	s := d.String()
	for _, z := range []string{"m0s", "h0m"} {
		if strings.HasSuffix(s, z) {
			s = strings.TrimSuffix(s, z[1:])
		}
	}
	return s
}

// validName is the rule of a key's name: a tenant name's (1–64 of A-Z a-z
// 0-9 . _ -), safe as a metric label and in a Redis key.
func validName(s string) bool { return queue.ValidTenant(s) }

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 0 && n <= 65535
}
