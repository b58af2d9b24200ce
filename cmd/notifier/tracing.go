package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// TracingConfig is YAML tracing:. Tracing is off unless otlp_endpoint is
// set; off, jobs' traceparent headers still reach webhook providers.
type TracingConfig struct {
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
func (c TracingConfig) WithDefaults() TracingConfig {
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
func (c TracingConfig) Validate() error {
	var errs []error
	if c.OTLPEndpoint != "" {
		u, err := url.Parse(c.OTLPEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("otlp_endpoint: must be an http:// or https:// URL of an OTLP/HTTP collector (e.g. http://otel-collector:4318/v1/traces), got %q", redactURL(c.OTLPEndpoint)))
		}
	}
	if r := c.SampleRatio; r != nil && (math.IsNaN(*r) || *r < 0 || *r > 1) {
		errs = append(errs, fmt.Errorf("sample_ratio: must be from 0 to 1, got %v", *r))
	}
	return errors.Join(errs...)
}

// redactURL drops a URL's user information (a collector's credentials).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = url.User("redacted")
	return u.String()
}

// startTracing sets up the OTLP/HTTP exporter when tracing is on. It
// returns nil (tracing off) or the provider to give the dispatcher or the
// gateway, and a stop to defer: it sends the last spans, for at most 5 s
// after ctx's end, and logs what it could not send.
func startTracing(ctx context.Context, c TracingConfig, log *slog.Logger) (trace.TracerProvider, func(), error) {
	if c.OTLPEndpoint == "" {
		return nil, func() {}, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(c.OTLPEndpoint), otlptracehttp.WithTimeout(5*time.Second))
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP exporter for %s: %w", redactURL(c.OTLPEndpoint), err)
	}
	res := resource.NewSchemaless(semconv.ServiceName(c.ServiceName), semconv.ServiceVersion(version))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*c.SampleRatio))),
	)
	// The exporter's failures (a collector away) go to the log, not to
	// the standard logger's stderr.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing: export spans", "err", err) }))
	log.Info("tracing on", "otlp_endpoint", redactURL(c.OTLPEndpoint), "service", c.ServiceName, "sample_ratio", *c.SampleRatio)
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("send the last spans", "err", err)
		}
	}
	return tp, stop, nil
}
