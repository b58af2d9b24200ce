package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/notifier/notifier/config"
)

// StartTracing sets up the OTLP/HTTP exporter when tracing is on. It
// returns nil (tracing off) or the provider to give the dispatcher or the
// gateway, and a stop to defer: it sends the last spans, for at most 5 s
// after ctx's end, and logs what it could not send.
func StartTracing(ctx context.Context, c config.Tracing, version string, log *slog.Logger) (trace.TracerProvider, func(), error) {
	if c.OTLPEndpoint == "" {
		return nil, func() {}, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(c.OTLPEndpoint), otlptracehttp.WithTimeout(5*time.Second))
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP exporter for %s: %w", config.RedactURL(c.OTLPEndpoint), err)
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
	log.Info("tracing on", "otlp_endpoint", config.RedactURL(c.OTLPEndpoint), "service", c.ServiceName, "sample_ratio", *c.SampleRatio)
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("send the last spans", "err", err)
		}
	}
	return tp, stop, nil
}
