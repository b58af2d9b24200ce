package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/notifier/notifier/queue"
)

// Defaults of the YAML keys under gateway:.
const (
	DefaultListen          = "127.0.0.1:8080"
	DefaultAuthFailLimit   = 10
	DefaultAuthFailWindow  = time.Minute
	DefaultPublishTimeout  = 5 * time.Second
	maxPublishTimeout      = time.Minute
	maxAuthFailuresWindow  = 24 * time.Hour
	maxBurst               = 1_000_000
	maxRate                = 1_000_000
	maxKeys                = 10_000
	unauthenticatedLabel   = "unauthenticated"
	keyNameAllowedInWords  = "1 to 64 characters of A-Z a-z 0-9 . _ -"
	sha256HexLen           = 2 * sha256.Size
	authorizationBearer    = "Bearer "
	defaultClientIPHeader  = ""
	problemContentType     = "application/problem+json"
	jsonContentType        = "application/json"
	maxIdempotencyKeyBatch = 123 // a batch's ids are <key>-<index>, index < 1000: 123 + 4 = 127 ≤ 128
)

// Key is one API key of gateway.keys. The key itself is never configured:
// only its SHA-256, in lower-case hex (`notifier gateway hash-key`).
type Key struct {
	Name   string  `mapstructure:"name"`   // the metric label and log name; 1–64 of A-Z a-z 0-9 . _ -
	Tenant string  `mapstructure:"tenant"` // the tenant of every job sent with it; "" the default tenant
	SHA256 string  `mapstructure:"sha256"` // hex SHA-256 of the key
	Rate   float64 `mapstructure:"rate"`   // jobs per second (token refill)
	Burst  int     `mapstructure:"burst"`  // bucket size: the most jobs at once
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
}

// WithDefaults fills the keys left out.
func (c Config) WithDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.AuthFailures.Limit == 0 {
		c.AuthFailures.Limit = DefaultAuthFailLimit
	}
	if c.AuthFailures.Window == 0 {
		c.AuthFailures.Window = DefaultAuthFailWindow
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	return c
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
		switch {
		case math.IsNaN(k.Rate) || math.IsInf(k.Rate, 0) || k.Rate <= 0 || k.Rate > maxRate:
			errs = append(errs, fmt.Errorf("%s.rate: must be a number of jobs per second greater than 0 and at most %d, got %v", p, maxRate, k.Rate))
		}
		if k.Burst < 1 || k.Burst > maxBurst {
			errs = append(errs, fmt.Errorf("%s.burst: must be a whole number from 1 to %d, got %d", p, maxBurst, k.Burst))
		}
	}
	if c.AuthFailures.Limit < 1 {
		errs = append(errs, fmt.Errorf("auth_failures.limit: must be at least 1, got %d", c.AuthFailures.Limit))
	}
	if c.AuthFailures.Window < time.Second || c.AuthFailures.Window > maxAuthFailuresWindow {
		errs = append(errs, fmt.Errorf("auth_failures.window: must be from 1s to 24h, got %s", c.AuthFailures.Window))
	}
	if c.PublishTimeout < 100*time.Millisecond || c.PublishTimeout > maxPublishTimeout {
		errs = append(errs, fmt.Errorf("publish_timeout: must be from 100ms to 1m, got %s", c.PublishTimeout))
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
