package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/notifier/notifier/client"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// setup is a JetStream server with the notifier's streams and a client.
func setup(t *testing.T, opts ...client.Option) (*client.Client, jetstream.Stream, context.Context) {
	t.Helper()
	srv := testenv.NATS(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if err := client.EnsureStreams(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "NOTIFY")
	if err != nil {
		t.Fatal(err)
	}
	return client.New(js, opts...), s, ctx
}

func sms(id string) *client.Job {
	return &client.Job{ID: id, UserID: "u1", Channel: "sms", To: "+447700900123", Body: "hello"}
}

// TestPublishCarriesTheTraceContext: the span context of the ctx given to
// Publish is the job's traceparent (lower case, as the dispatcher reads
// it), and its tracestate.
func TestPublishCarriesTheTraceContext(t *testing.T) {
	t.Parallel()
	c, s, ctx := setup(t)
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, _ := trace.ParseTraceState("vendor=abc")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
	res, err := c.Publish(trace.ContextWithSpanContext(ctx, sc), sms("t1"))
	if err != nil || res.Subject != "notify.jobs.sms" || res.ID != "t1" {
		t.Fatalf("publish: %+v %v", res, err)
	}
	m, err := s.GetLastMsgForSubject(ctx, "notify.jobs.sms")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header[queue.HeaderTraceparent]; len(got) != 1 || got[0] != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Errorf("traceparent %v; headers %v", got, m.Header)
	}
	if got := m.Header[queue.HeaderTracestate]; len(got) != 1 || got[0] != "vendor=abc" {
		t.Errorf("tracestate %v", got)
	}
	// No span in ctx: no trace headers.
	if _, err := c.Publish(ctx, sms("t2")); err != nil {
		t.Fatal(err)
	}
	if m, _ := s.GetLastMsgForSubject(ctx, "notify.jobs.sms"); m.Header.Get(queue.HeaderTraceparent) != "" {
		t.Errorf("a job published without a span has a traceparent: %v", m.Header)
	}
}

// TestPublishPlacesAsTheDispatcherReads: a tenant's job goes on a fair
// lane with its Notifier-Tenant header and its id scoped by the tenant;
// the same id in another tenant is another job; a category picks its
// lane; a job without an id gets one.
func TestPublishPlacesAsTheDispatcherReads(t *testing.T) {
	t.Parallel()
	c, s, ctx := setup(t, client.WithFairLanes(4))
	j := sms("same-id")
	j.Tenant = "acme"
	res, err := c.Publish(ctx, j)
	if err != nil || res.Duplicate {
		t.Fatalf("publish: %+v %v", res, err)
	}
	k, ok := queue.ParseJobSubject(res.Subject)
	if !ok || !k.Fair || k.Index >= 4 || k.Channel != "sms" {
		t.Fatalf("a tenant's job on %s, want a fair lane of 4", res.Subject)
	}
	m, err := s.GetLastMsgForSubject(ctx, res.Subject)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(queue.HeaderTenant) != "acme" || m.Header.Get("Nats-Msg-Id") != "acme/same-id" {
		t.Errorf("headers %v, want the tenant and its scoped id", m.Header)
	}
	if res, err := c.Publish(ctx, sms("same-id")); err != nil || res.Duplicate || res.Subject != "notify.jobs.sms" {
		t.Errorf("the same id in the default tenant: %+v %v, want a new job on notify.jobs.sms", res, err)
	}
	if res, err := c.Publish(ctx, j); err != nil || !res.Duplicate {
		t.Errorf("acme's job again: %+v %v, want a duplicate", res, err)
	}
	mk := sms("promo-1")
	mk.Category = client.Marketing
	if res, err := c.Publish(ctx, mk); err != nil || res.Subject != "notify.jobs.sms.marketing" {
		t.Errorf("a marketing job: %+v %v", res, err)
	}
	res, err = c.Publish(ctx, sms(""))
	if err != nil || !queue.ValidID(res.ID) {
		t.Errorf("a job without an id: %+v %v", res, err)
	}
}

// TestPublishValidatesAsTheDispatcher: a job the dispatcher would
// dead-letter as invalid on its subject is refused with the same field and
// rule, and nothing is sent.
func TestPublishValidatesAsTheDispatcher(t *testing.T) {
	t.Parallel()
	c, s, ctx := setup(t)
	mk := sms("m1")
	mk.Category = client.Marketing
	for _, tc := range []struct {
		job   *client.Job
		high  bool
		field string
	}{
		{&client.Job{UserID: "u1", Channel: "sms", To: "+447700900123", Body: "x", ID: "bad id"}, false, "id"},
		{&client.Job{ID: "a", Channel: "sms", To: "+447700900123", Body: "x"}, false, "user_id"},
		{&client.Job{ID: "a", UserID: "u1", Channel: "fax", To: "+447700900123", Body: "x"}, false, "channel"},
		{&client.Job{ID: "a", UserID: "u1", Channel: "sms", To: "12", Body: "x"}, false, "to"},
		{&client.Job{ID: "a", UserID: "u1", Channel: "push", To: "tok_abcdefgh", Body: ""}, false, "body"},
		{&client.Job{ID: "a", UserID: "u1", Channel: "sms", To: "+447700900123", Body: "x", Tenant: "no spaces"}, false, "tenant"},
		{mk, true, "category"}, // the priority lane is transactional
	} {
		var opts []client.PublishOption
		if tc.high {
			opts = append(opts, client.High())
		}
		_, err := c.Publish(ctx, tc.job, opts...)
		var ie *client.InvalidError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%+v high=%v: %v, want an invalid %s", tc.job, tc.high, err, tc.field)
		}
		if strings.Contains(err.Error(), tc.job.To) && tc.job.To != "" {
			t.Errorf("the error shows the recipient: %v", err)
		}
	}
	if info, err := s.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("the stream holds %v messages after refused jobs (%v)", info.State.Msgs, err)
	}
}

// TestPublishAll: valid jobs are published together, invalid ones
// reported in place and not sent, duplicates counted.
func TestPublishAll(t *testing.T) {
	t.Parallel()
	c, s, ctx := setup(t)
	jobs := []*client.Job{sms("b1"), {ID: "b2", UserID: "u1", Channel: "sms", To: "x", Body: "y"}, sms("b3"), sms("b1")}
	results, err := c.PublishAll(ctx, jobs)
	var ie *client.InvalidError
	if !errors.As(err, &ie) || ie.Field != "to" {
		t.Fatalf("PublishAll's error %v, want the invalid job's", err)
	}
	if results[0].Err != nil || results[0].Duplicate || results[1].Err == nil || results[2].Err != nil || !results[3].Duplicate || results[3].Err != nil {
		t.Fatalf("results %+v", results)
	}
	if info, _ := s.Info(ctx); info.State.Msgs != 2 {
		t.Fatalf("the stream holds %d jobs, want b1 and b3", info.State.Msgs)
	}
	if _, err := c.PublishAll(ctx, []*client.Job{sms("c1"), sms("c2")}); err != nil {
		t.Fatalf("all valid: %v", err)
	}
}
