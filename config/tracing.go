package config

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
)

// Tracing is YAML tracing:. Tracing is off unless otlp_endpoint is
// set; off, jobs' traceparent headers still reach webhook providers.
type Tracing struct {
	// OTLPEndpoint is the OTLP/HTTP traces URL of a collector, path
	// included (http://otel-collector:4318/v1/traces); http:// sends
	// without TLS.
	OTLPEndpoint string `mapstructure:"otlp_endpoint"`
	// ServiceName is the service.name of the spans (default notifier).
	ServiceName string `mapstructure:"service_name"`
	// SampleRatio is the share of new traces recorded (default 1); a job
	// whose publisher sampled its trace, or did not, follows that choice.
	SampleRatio *float64 `mapstructure:"sample_ratio"`
}

// WithDefaults fills the keys left out.
func (c Tracing) WithDefaults() Tracing {
	if c.ServiceName == "" {
		c.ServiceName = "notifier"
	}
	if c.SampleRatio == nil {
		one := 1.0
		c.SampleRatio = &one
	}
	return c
}

// Validate reports every problem, keys relative to tracing:.
func (c Tracing) Validate() error {
	var errs []error
	if c.OTLPEndpoint != "" {
		u, err := url.Parse(c.OTLPEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("otlp_endpoint: must be an http:// or https:// URL of an OTLP/HTTP collector (e.g. http://otel-collector:4318/v1/traces), got %q", RedactURL(c.OTLPEndpoint)))
		}
	}
	if r := c.SampleRatio; r != nil && (math.IsNaN(*r) || *r < 0 || *r > 1) {
		errs = append(errs, fmt.Errorf("sample_ratio: must be from 0 to 1, got %v", *r))
	}
	return errors.Join(errs...)
}

// RedactURL drops a URL's user information (a collector's credentials).
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		// One that does not parse (a password holding a '/') is shown
		// without anything up to its last '@' after the scheme.
		scheme, rest, ok := strings.Cut(s, "://")
		if at := strings.LastIndexByte(rest, '@'); ok && at >= 0 {
			return scheme + "://redacted" + rest[at:]
		}
		return s
	}
	if u.User == nil {
		return s
	}
	u.User = url.User("redacted")
	return u.String()
}
