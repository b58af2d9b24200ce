package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// publishTraced publishes a job with a traceparent header, as the intake
// gateway does.
func (b *bundle) publishTraced(id, traceparent string) {
	b.t.Helper()
	data, err := newJob(id, "sms", "u1").Marshal()
	if err != nil {
		b.t.Fatal(err)
	}
	m := &nats.Msg{Subject: queue.JobSubjectFor("sms", "", false), Data: data, Header: nats.Header{}}
	m.Header.Set(queue.HeaderTraceparent, traceparent)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.js.PublishMsg(ctx, m, jetstream.WithMsgID(id)); err != nil {
		b.t.Fatal(err)
	}
}

const (
	testTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	testParentSpan  = "00f067aa0ba902b7"
	testTraceparent = "00-" + testTraceID + "-" + testParentSpan + "-01"
)

// TestTraceparentReachesTheWebhookWithoutTracing: with tracing off, the
// provider call carries the job's traceparent unchanged, so a provider on
// the webhook kind joins the publisher's trace.
func TestTraceparentReachesTheWebhookWithoutTracing(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	b.start(nil)
	b.publishTraced("traced-off", testTraceparent)
	testenv.WaitFor(t, 20*time.Second, "the job sent", func() bool { return len(b.fake.Accepted()) == 1 })
	if got := b.fake.Accepted()[0].Header.Get("traceparent"); got != testTraceparent {
		t.Fatalf("traceparent at the provider %q, want the job's %q", got, testTraceparent)
	}
	// A job without one gets none (no trace is invented when off).
	b.publish(newJob("untraced", "sms", "u2"))
	testenv.WaitFor(t, 20*time.Second, "the second job sent", func() bool { return len(b.fake.Accepted()) == 2 })
	for _, r := range b.fake.Accepted() {
		if r.ID == "untraced" && r.Header.Get("traceparent") != "" {
			t.Fatalf("a job without a trace reached the provider with traceparent %q", r.Header.Get("traceparent"))
		}
	}
}

// TestTracingContinuesTheJobsTrace: with a tracer, the dispatcher records
// a "notifier.job" span, the child of the job's traceparent, and under it
// a "notifier.send" span whose context the provider receives.
func TestTracingContinuesTheJobsTrace(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b.start(func(o *Options) { o.Tracer = tp })
	b.publishTraced("traced-on", testTraceparent)
	testenv.WaitFor(t, 20*time.Second, "the job sent", func() bool { return len(b.fake.Accepted()) == 1 })
	var job, send *tracetest.SpanStub
	testenv.WaitFor(t, 10*time.Second, "both spans exported", func() bool {
		job, send = nil, nil
		spans := exp.GetSpans()
		for i := range spans {
			switch spans[i].Name {
			case "notifier.job":
				job = &spans[i]
			case "notifier.send":
				send = &spans[i]
			}
		}
		return job != nil && send != nil
	})
	if job.SpanContext.TraceID().String() != testTraceID || job.Parent.SpanID().String() != testParentSpan || !job.Parent.IsRemote() {
		t.Fatalf("job span in trace %s under %s (remote %v), want trace %s under the publisher's %s",
			job.SpanContext.TraceID(), job.Parent.SpanID(), job.Parent.IsRemote(), testTraceID, testParentSpan)
	}
	if send.Parent.SpanID() != job.SpanContext.SpanID() {
		t.Fatalf("send span under %s, want the job span %s", send.Parent.SpanID(), job.SpanContext.SpanID())
	}
	want := "00-" + testTraceID + "-" + send.SpanContext.SpanID().String() + "-01"
	if got := b.fake.Accepted()[0].Header.Get("traceparent"); got != want {
		t.Fatalf("traceparent at the provider %q, want the send span's %q", got, want)
	}
	attrs := map[string]string{}
	for _, a := range job.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	for k, v := range map[string]string{"notifier.end": "sent", "notifier.provider": "sms-gw", "notifier.channel": "sms", "notifier.job.id": "traced-on"} {
		if attrs[k] != v {
			t.Errorf("job span %s = %q, want %q (attributes %v)", k, attrs[k], v, attrs)
		}
	}
}
