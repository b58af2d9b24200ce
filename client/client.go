// Package client is the producer's side of the notifier for Go
// applications: it publishes notification jobs (SPEC §2) to the job stream
// on NATS JetStream, where `notifier run` takes them.
//
//	nc, _ := nats.Connect("nats://127.0.0.1:4222")
//	js, _ := jetstream.New(nc)
//	c := client.New(js)
//	res, err := c.Publish(ctx, &client.Job{ID: "otp-7f3a", UserID: "u42", Channel: "sms",
//		To: "+447700900123", Body: "Your code is 123456"}, client.High())
//
// A job goes on the subject of its queue, as the dispatcher and the HTTP
// gateway place it: its channel's, its category's lane, the priority lane
// with High, and for a named tenant one of the tenants' fair lanes with the
// Notifier-Tenant header (through queue.Publisher: the same number of fair
// lanes as the fleet's tenants.lanes, WithFairLanes). Its Nats-Msg-Id is
// its id scoped by its tenant, so JetStream drops a second publish of the
// same job within the stream's duplicate window (2 minutes), and the
// result says so (Result.Duplicate): retrying a publish that failed or
// timed out with the same id is safe. A job is checked before anything is
// sent by the dispatcher's own rules for the subject it goes on
// (queue.Decode): a job the client accepts is never dead-lettered as
// invalid.
//
// The trace context of the ctx given to Publish (an OpenTelemetry span, or
// one extracted from an incoming request) is written in the job's
// traceparent and tracestate headers by the W3C propagator, so the
// dispatcher's spans (tracing.otlp_endpoint) join the publisher's trace.
//
// # Concurrency, zero values, errors
//
// A Client is safe for concurrent use by many goroutines; make one per
// JetStream context and keep it. The zero Client is not usable: make one
// with New. A Job is a plain value the client does not keep or change
// (an empty ID is filled in the copy it publishes; Result.ID says which).
//
// Errors: an invalid job is an *InvalidError (errors.As) naming the field
// and the rule, and nothing is sent; any other error is JetStream's (no
// stream for the subject: the streams are created by `notifier run` or
// `notifier publish`; no acknowledgement before ctx ended: the job may be
// stored, publish it again with the same id).
package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"

	"github.com/notifier/notifier/queue"
)

// Job is a notification job (SPEC §2): ID, UserID, Channel (sms, push or
// email), To and Body are required; Tenant, Category, Provider, Title,
// Data, ExpiresAt and CreatedAt are optional.
type Job = queue.Job

// InvalidError is the error of a job that breaks a rule of SPEC §2: its
// Field and the Rule, never the value of to, body or title.
type InvalidError = queue.InvalidError

// Categories of a job (Job.Category).
const (
	Transactional = queue.Transactional
	Marketing     = queue.Marketing
)

// Client publishes jobs. See the package documentation.
type Client struct {
	pub   *queue.Publisher
	prop  propagation.TextMapPropagator
	lanes int
	newID func() string
}

// Option configures a Client.
type Option func(*Client)

// WithFairLanes places named tenants' jobs on n fair lanes: the fleet's
// tenants.lanes (default queue.DefaultFairLanes, 15; 0 or less is that
// default, as an unset tenants.lanes is; more than queue.MaxFairLanes is
// that many). Every publisher and process of a fleet must use the same
// number.
func WithFairLanes(n int) Option {
	return func(c *Client) {
		if n <= 0 {
			n = queue.DefaultFairLanes
		}
		c.lanes = n
	}
}

// WithPropagator writes a job's trace context with p instead of the W3C
// trace-context propagator (propagation.TraceContext): the dispatcher
// reads traceparent and tracestate.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *Client) { c.prop = p }
}

// New returns a Client publishing through js.
func New(js jetstream.JetStream, opts ...Option) *Client {
	c := &Client{prop: propagation.TraceContext{}, lanes: queue.DefaultFairLanes, newID: newID}
	for _, o := range opts {
		o(c)
	}
	c.pub = queue.NewPublisher(js, queue.WithFairLanes(c.lanes))
	return c
}

// PublishOption is an option of one publish.
type PublishOption func(*publishOptions)

type publishOptions struct{ high bool }

// High publishes on the priority lane (notify.jobs.<channel>.high, or the
// tenant's): taken before the channel's other jobs. A marketing job cannot
// take it.
func High() PublishOption { return func(o *publishOptions) { o.high = true } }

// Result is what became of one published job.
type Result struct {
	ID        string // the job's id (generated when the job had none)
	Subject   string // the subject it was published on
	Duplicate bool   // JetStream already held a job with this id and tenant (within its duplicate window): dropped
	Err       error  // PublishAll only: why this job was not published
}

// Publish validates j and publishes it, waiting for JetStream's
// acknowledgement. A job JetStream already held (the same id and tenant,
// published within its duplicate window) is not stored again:
// res.Duplicate is true and err nil.
func (c *Client) Publish(ctx context.Context, j *Job, opts ...PublishOption) (Result, error) {
	m, res, err := c.prepare(ctx, j, opts)
	if err != nil {
		return res, err
	}
	out := c.pub.PublishMsgs(ctx, []queue.OutMsg{m})[0]
	res.Duplicate = out.Duplicate
	return res, out.Err
}

// PublishAll validates and publishes jobs at once (asynchronously, every
// acknowledgement awaited together: one round trip's latency for the lot)
// and returns a Result for each, in order, with its Err; err is the first
// of them, or nil when every job was published or a duplicate. Invalid jobs
// are not sent; the valid ones are. A few thousand jobs per call keep the
// client's buffers small.
func (c *Client) PublishAll(ctx context.Context, jobs []*Job, opts ...PublishOption) (results []Result, err error) {
	results = make([]Result, len(jobs))
	msgs := make([]queue.OutMsg, 0, len(jobs))
	at := make([]int, 0, len(jobs))
	for i, j := range jobs {
		m, res, err := c.prepare(ctx, j, opts)
		results[i] = res
		if err != nil {
			results[i].Err = err
			continue
		}
		msgs = append(msgs, m)
		at = append(at, i)
	}
	for k, out := range c.pub.PublishMsgs(ctx, msgs) {
		results[at[k]].Duplicate, results[at[k]].Err = out.Duplicate, out.Err
	}
	for _, r := range results {
		if r.Err != nil {
			return results, r.Err
		}
	}
	return results, nil
}

// prepare validates a copy of j (its id filled in when empty) against its
// queue's subject and builds its message: placed as Publisher.Place says,
// with ctx's trace context in its headers.
func (c *Client) prepare(ctx context.Context, j *Job, opts []PublishOption) (queue.OutMsg, Result, error) {
	if j == nil {
		return queue.OutMsg{}, Result{}, errors.New("publish job: nil job")
	}
	var o publishOptions
	for _, opt := range opts {
		opt(&o)
	}
	job := *j
	if job.ID == "" {
		job.ID = c.newID()
	}
	res := Result{ID: job.ID}
	k := queue.KeyFor(job.Channel, job.Tenant, o.high, job.Category)
	data, err := job.Marshal()
	if err == nil {
		// The dispatcher's check of a job against the subject it came on
		// (its channel, tenant and lane): what Marshal cannot know.
		_, err = queue.Decode(k.Subject(), data)
	}
	if err != nil {
		// The id is named only when it is one: an invalid id may hold
		// anything (a recipient, a line break) and be of any length.
		if queue.ValidID(job.ID) {
			return queue.OutMsg{}, res, fmt.Errorf("publish job %s: %w", job.ID, err)
		}
		return queue.OutMsg{}, res, fmt.Errorf("publish job: %w", err)
	}
	subject, header := c.pub.Place(ctx, k)
	if header == nil {
		header = nats.Header{}
	}
	c.prop.Inject(ctx, natsCarrier(header))
	res.Subject = subject
	return queue.OutMsg{Subject: subject, Data: data, MsgID: job.MsgID(), Header: header}, res, nil
}

// natsCarrier writes propagation fields into a NATS header under the
// names as the propagator gives them (traceparent in lower case, as SPEC
// §9 and the dispatcher read it; nats.Header.Set would write Traceparent).
type natsCarrier nats.Header

func (h natsCarrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return nats.Header(h).Get(key)
}

func (h natsCarrier) Set(key, value string) { h[strings.ToLower(key)] = []string{value} }

func (h natsCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// EnsureStreams creates the job and dead-letter streams with their
// default names and settings (those `notifier run` makes at start) if they
// do not exist yet, with replicas replicas (1 for a single server, 3 on a
// JetStream cluster): for an application that may publish before the fleet
// first started. A stream that exists is left as it is: the fleet's
// settings (its replicas among them) are the fleet's. Safe to call from
// many processes at once.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, replicas int) error {
	return queue.CreateMissingStreams(ctx, js, queue.Config{}.WithDefaults(), replicas)
}

// newID is a job id for a job published without one: a NATS unique id,
// 22 characters of [A-Za-z0-9].
func newID() string { return nats.NewInbox()[len(nats.InboxPrefix):] }
