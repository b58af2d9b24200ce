package dispatch

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/notifier/notifier/queue"
)

// Tracing. A job published with a W3C traceparent header (the intake
// gateway sets one on every job) is a step of its publisher's trace. The
// dispatcher continues it: with Options.Tracer set, a span "notifier.job"
// (the child of the job's traceparent) covers the job's way from delivery
// to its end, and a span "notifier.send" each call to its provider. The
// provider call carries the trace context of that span (the webhook kind
// sends it as a traceparent header), so a provider can join the trace.
// Without a Tracer nothing is recorded, and the provider call carries the
// job's own traceparent unchanged.

// tracerName names the dispatcher's instrumentation.
const tracerName = "github.com/notifier/notifier/dispatch"

// traceProp reads and writes the W3C trace context headers.
var traceProp = propagation.TraceContext{}

// natsCarrier lets the propagator read a NATS message's headers, whose
// keys are case-sensitive (http.Header's would look for "Traceparent").
type natsCarrier nats.Header

func (c natsCarrier) Get(key string) string { return nats.Header(c).Get(key) }
func (c natsCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }
func (c natsCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// newTracer is the tracer of tp, or nil for none: without a Tracer a job
// starts no span of its own (each would cost allocations for nothing) and
// carries the span context its headers name.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}

// startJobSpan starts the span of one delivery of a job, the child of the
// trace context in its headers (a new trace when there is none). Without a
// Tracer the span records nothing and carries the job's own trace context.
func (pl *pipeline) startJobSpan(dl *queue.Delivery) trace.Span {
	pctx := context.Background()
	if dl.Header != nil {
		pctx = traceProp.Extract(pctx, natsCarrier(dl.Header))
	}
	if pl.tracer == nil {
		return trace.SpanFromContext(pctx) // records nothing; the headers' span context, or none
	}
	_, span := pl.tracer.Start(pctx, "notifier.job",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", dl.Subject),
			attribute.Int64("messaging.nats.stream_sequence", int64(dl.StreamSeq)),
			attribute.Int64("notifier.delivery", int64(dl.NumDelivered)),
		))
	return span
}

// endJobSpan records where the job ended and ends its span. Attributes
// name the job, its channel and provider, never a recipient or content.
func endJobSpan(span trace.Span, jb *job, e end) {
	if !span.IsRecording() {
		span.End()
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String("notifier.channel", jb.channel),
		attribute.String("notifier.provider", jb.provider),
		attribute.String("notifier.end", e.kind.String()),
	}
	if jb.j != nil {
		attrs = append(attrs, attribute.String("notifier.job.id", jb.j.ID))
	}
	if e.reason != "" {
		attrs = append(attrs, attribute.String("notifier.reason", e.reason))
	}
	span.SetAttributes(attrs...)
	if e.kind == endDead {
		span.SetStatus(codes.Error, e.reason)
	}
	span.End()
}

// String names an end in spans.
func (k endKind) String() string {
	switch k {
	case endSent:
		return "sent"
	case endDuplicate:
		return "duplicate"
	case endDead:
		return "dead"
	case endSuppressed:
		return "suppressed"
	case endRetry:
		return "retry"
	case endDefer:
		return "defer"
	case endStepAside:
		return "step_aside"
	case endStop:
		return "stop"
	case endAgain:
		return "again"
	default:
		return "none"
	}
}
