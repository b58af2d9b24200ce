package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/internal/text"
)

// Dead-letter headers (SPEC §3).
const (
	HeaderReason  = "Notifier-Reason"  // one word: why the job was not sent
	HeaderDetail  = "Notifier-Detail"  // one line, human readable
	HeaderSubject = "Notifier-Subject" // the subject the job was published on
	// MaxDetailBytes caps Notifier-Detail.
	MaxDetailBytes = 512
)

// Outcome says where DeadLetter publishes a job.
type Outcome string

// Outcomes of a job that is not sent (SPEC §6).
const (
	Dead       Outcome = "dead"       // failed: notify.dead.<channel>
	Suppressed Outcome = "suppressed" // dropped on purpose: notify.suppressed.<channel>
)

// Publisher publishes jobs and dead letters to JetStream and waits for the
// stream's acknowledgement. It is safe for concurrent use.
type Publisher struct {
	js    jetstream.JetStream
	lanes *Lanes
}

// PublisherOption configures a Publisher.
type PublisherOption func(*Publisher)

// WithFairLanes places tenants' jobs on n fair lanes (tenants.lanes;
// default DefaultFairLanes), reading the lanes' depths from the stream.
func WithFairLanes(n int) PublisherOption {
	return func(p *Publisher) { p.lanes = StreamLanes(p.js, n) }
}

// WithLanes places tenants' jobs with l (shared with a Consumer's view:
// Consumer.Lanes).
func WithLanes(l *Lanes) PublisherOption { return func(p *Publisher) { p.lanes = l } }

// NewPublisher returns a Publisher using js.
func NewPublisher(js jetstream.JetStream, opts ...PublisherOption) *Publisher {
	p := &Publisher{js: js}
	for _, o := range opts {
		o(p)
	}
	if p.lanes == nil {
		p.lanes = StreamLanes(js, DefaultFairLanes)
	}
	return p
}

// Place is where a job of queue k is published: the default tenant's
// queue itself (no header), or for a tenant's job the fair lane Lanes
// places it on, with the Notifier-Tenant header naming the tenant (the
// lane's subject names none).
func (p *Publisher) Place(ctx context.Context, k Key) (subject string, header nats.Header) {
	if k.Tenant == "" {
		return k.Subject(), nil
	}
	return p.lanes.Place(ctx, k).Subject(), nats.Header{HeaderTenant: []string{k.Tenant}}
}

// Publish validates and publishes j on the subject of its queue (KeyFor: its
// tenant's, on the priority lane when high, else on its category's lane
// when it names one; a named tenant's on the fair lane Place chooses) with Nats-Msg-Id set to j.MsgID() (the id, scoped by its tenant), and reports whether the stream dropped it as a
// duplicate of a publish within the duplicate window (2 minutes). An
// invalid job is an *InvalidError and nothing is sent.
func (p *Publisher) Publish(ctx context.Context, j *Job, high bool) (duplicate bool, err error) {
	return p.PublishJob(ctx, j, high, nil)
}

// PublishJob is Publish with more headers on the message (a digest job's
// Notifier-Digest); Nats-Msg-Id and Notifier-Tenant among them are
// replaced by the job's own.
func (p *Publisher) PublishJob(ctx context.Context, j *Job, high bool, extra map[string]string) (duplicate bool, err error) {
	k, data, err := j.marshalFor(high)
	if err != nil {
		return false, fmt.Errorf("publish job: %w", err)
	}
	subject, header := p.Place(ctx, k)
	if len(extra) > 0 {
		if header == nil {
			header = nats.Header{}
		}
		for h, v := range extra {
			if h != jetstream.MsgIDHeader && h != HeaderTenant {
				header.Set(h, v)
			}
		}
	}
	ack, err := p.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data, Header: header}, msgIDOpt(j.MsgID())...)
	if err != nil {
		return false, fmt.Errorf("publish %s: %w", subject, err)
	}
	return ack.Duplicate, nil
}

// PublishRaw publishes data as is on subject, with Nats-Msg-Id msgID unless
// msgID is empty, and reports whether the stream dropped it as a
// duplicate. It sends lines of an NDJSON file as they are, and invalid input
// in tests. A subject no stream takes fails (jetstream.ErrNoStreamResponse).
func (p *Publisher) PublishRaw(ctx context.Context, subject string, data []byte, msgID string) (duplicate bool, err error) {
	ack, err := p.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data}, msgIDOpt(msgID)...)
	if err != nil {
		return false, fmt.Errorf("publish %s: %w", subject, err)
	}
	return ack.Duplicate, nil
}

func msgIDOpt(id string) []jetstream.PublishOpt {
	if id == "" {
		return nil
	}
	return []jetstream.PublishOpt{jetstream.WithMsgID(id)}
}

// DeadLetter publishes the delivery's original bytes to
// notify.dead.<channel> (Dead) or notify.suppressed.<channel> (Suppressed)
// with the headers Notifier-Reason (reason: one word of letters, digits,
// '_' or '-', such as "invalid" or "user_limit"), Notifier-Detail (detail
// on one line: control characters become spaces, capped at 512 bytes) and
// Notifier-Subject (the original subject), and waits for the stream's
// acknowledgement. The caller then acks the delivery.
//
// The <channel> is the delivery's subject token made safe for a subject
// (see ChannelOf): a garbage subject still gets a dead letter. The
// Nats-Msg-Id is derived from the original stream, sequence and store time,
// so dead-lettering the same delivery again (after a crash between this
// call and the ack) within the duplicate window stores nothing new.
func (p *Publisher) DeadLetter(ctx context.Context, d *Delivery, o Outcome, reason, detail string) error {
	var subject string
	switch o {
	case Dead:
		subject = DeadSubject(subjectToken(d.Channel))
	case Suppressed:
		subject = SuppressedSubject(subjectToken(d.Channel))
	default:
		return fmt.Errorf("dead letter %s seq %d: outcome %q is not %q or %q", d.Subject, d.StreamSeq, o, Dead, Suppressed)
	}
	if !isWord(reason) {
		return fmt.Errorf("dead letter %s seq %d: reason %q is not one word", d.Subject, d.StreamSeq, reason)
	}
	m := &nats.Msg{Subject: subject, Data: d.Data, Header: nats.Header{}}
	m.Header.Set(HeaderReason, reason)
	m.Header.Set(HeaderDetail, text.OneLine(detail, MaxDetailBytes))
	m.Header.Set(HeaderSubject, text.OneLine(d.Subject, MaxDetailBytes))
	if t := d.Header.Get(HeaderTenant); t != "" {
		m.Header.Set(HeaderTenant, text.OneLine(t, MaxTenantLen+8)) // a replay puts the job back as its tenant's
	}
	var opts []jetstream.PublishOpt
	if d.StreamSeq != 0 {
		opts = msgIDOpt(deadLetterID(d))
	}
	if _, err := p.js.PublishMsg(ctx, m, opts...); err != nil {
		return fmt.Errorf("dead letter %s seq %d to %s: %w", d.Subject, d.StreamSeq, subject, err)
	}
	return nil
}

// deadLetterID identifies a stored job: its stream and sequence, plus its
// store time so that a stream deleted and re-created (sequences restart)
// cannot collide with an earlier dead letter.
func deadLetterID(d *Delivery) string {
	return "dead:" + d.Stream + ":" + strconv.FormatUint(d.StreamSeq, 10) + ":" + strconv.FormatInt(d.Published.UnixNano(), 10)
}

func isWord(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Report is what a provider said, after accepting a job, about its
// delivery: for a job that failed at the provider's end (a Twilio status
// callback "undelivered" or "failed").
type Report struct {
	Channel   string // the provider's channel: the dead letter's subject is notify.dead.<channel>
	Tenant    string // the job's tenant, "" the default tenant's
	JobID     string // the job's id within its tenant, as the callback named it
	Provider  string // the provider's configured name
	Status    string // the provider's delivery status ("undelivered", "failed")
	ErrorCode int    // the provider's error code (Twilio 30xxx), 0 when none
}

// DeadReport publishes a dead letter for a job that is no longer in the
// job stream: the provider accepted it and then reported that it could not
// deliver it. The body is the report as JSON (id, channel, provider,
// status, error_code), not the job, whose content is not kept after a
// send: such a letter records what happened and cannot be replayed. The
// headers are those of DeadLetter (Notifier-Subject left empty). Its
// Nats-Msg-Id derives from the provider, job and status, so a report the
// provider calls back twice is stored once (within the duplicate window).
func (p *Publisher) DeadReport(ctx context.Context, r Report, reason, detail string) error {
	if !isWord(reason) {
		return fmt.Errorf("dead report of %s: reason %q is not one word", r.JobID, reason)
	}
	if r.Channel == "" || subjectToken(r.Channel) != r.Channel {
		return fmt.Errorf("dead report of %s: channel %q is not a subject token", r.JobID, r.Channel)
	}
	if r.Tenant != "" && !ValidTenant(r.Tenant) {
		return fmt.Errorf("dead report of %s: tenant %q is not a tenant name", r.JobID, r.Tenant)
	}
	body, err := json.Marshal(struct {
		ID        string `json:"id"`
		Tenant    string `json:"tenant,omitempty"` // whose letter it is (a dead letter's tenant is its job's field)
		Channel   string `json:"channel"`
		Provider  string `json:"provider"`
		Status    string `json:"status"`
		ErrorCode int    `json:"error_code,omitempty"`
	}{r.JobID, r.Tenant, r.Channel, r.Provider, r.Status, r.ErrorCode})
	if err != nil {
		return fmt.Errorf("dead report of %s: %w", r.JobID, err)
	}
	m := &nats.Msg{Subject: DeadSubject(r.Channel), Data: body, Header: nats.Header{}}
	m.Header.Set(HeaderReason, reason)
	m.Header.Set(HeaderDetail, text.OneLine(detail, MaxDetailBytes))
	id := "report:" + r.Provider + ":" + MsgID(r.Tenant, r.JobID) + ":" + r.Status
	if _, err := p.js.PublishMsg(ctx, m, msgIDOpt(id)...); err != nil {
		return fmt.Errorf("dead report of %s to %s: %w", r.JobID, m.Subject, err)
	}
	return nil
}

// ErrNotSent marks a publish of PublishMsgs that was not sent at all (its
// ctx had ended): nothing was stored.
var ErrNotSent = errors.New("not sent")

// OutMsg is one message for PublishMsgs: data published as is on Subject,
// with Nats-Msg-Id MsgID (none when empty) and the extra Header (nil for
// none; Nats-Msg-Id in it is replaced by MsgID).
type OutMsg struct {
	Subject string
	Data    []byte
	MsgID   string
	Header  nats.Header
}

// PubResult is what became of one message of PublishMsgs: stored, dropped
// by the stream as a Duplicate of an earlier Nats-Msg-Id (within the
// duplicate window), or Err (refused, lost to a disconnection, or not
// acknowledged before ctx ended: it may still have been stored, and
// publishing it again with the same Nats-Msg-Id is safe within the
// window).
type PubResult struct {
	Duplicate bool
	Err       error
}

// PublishMsgs publishes every message at once (asynchronously) and waits
// for each acknowledgement or for ctx to end; results[i] is msgs[i]'s. It
// is what an intake that answers only once JetStream holds the job uses:
// a message whose result has no Err is in the stream. Headers are sent as
// given (a traceparent, for one).
func (p *Publisher) PublishMsgs(ctx context.Context, msgs []OutMsg) []PubResult {
	results := make([]PubResult, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		nm := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: m.Header}
		if m.Header != nil { // the client sets Nats-Msg-Id in it: leave the caller's alone
			nm.Header = make(nats.Header, len(m.Header)+1)
			for k, v := range m.Header {
				nm.Header[k] = append([]string(nil), v...)
			}
		}
		// A ctx that has ended sends nothing more: a message sent would be
		// stored while its caller is told it failed, and the sends past the
		// publishes that may await their acknowledgement at once (4,000)
		// wait 200 ms each for room, past ctx.
		if err := ctx.Err(); err != nil {
			results[i].Err = fmt.Errorf("publish %s: %w: %w", m.Subject, ErrNotSent, err)
			continue
		}
		f, err := p.js.PublishMsgAsync(nm, msgIDOpt(m.MsgID)...)
		if err != nil {
			// nats.go words a closed connection met when the first async
			// publish sets up its reply subscription with %s: keep the cause
			// in the chain (the gateway and callers test for it).
			if nc := p.js.Conn(); nc != nil && nc.IsClosed() && !errors.Is(err, nats.ErrConnectionClosed) {
				err = fmt.Errorf("%w: %v", nats.ErrConnectionClosed, err)
			}
			results[i].Err = fmt.Errorf("publish %s: %w", m.Subject, err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			results[i].Duplicate = ack.Duplicate
		case err := <-f.Err():
			results[i].Err = fmt.Errorf("publish %s: %w", msgs[i].Subject, err)
		case <-ctx.Done():
			results[i].Err = fmt.Errorf("publish %s: wait for the acknowledgement: %w", msgs[i].Subject, ctx.Err())
		}
	}
	return results
}
