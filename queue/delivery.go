package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Delivery is one delivery of a job message by a lane consumer. The exported
// fields are copies taken when it was fetched; Data is the original bytes
// (decode them with Decode(d.Subject, d.Data)). Exactly one of Ack, Nak,
// NakWithDelay or Term should end it; InProgress may be called any number of
// times before that. Its methods are safe for concurrent use, but a second
// terminal call fails with jetstream.ErrMsgAlreadyAckd.
type Delivery struct {
	Subject string // e.g. notify.jobs.sms.high
	Data    []byte // the message as published
	High    bool   // from the subject: the priority lane
	Channel string // from the subject: its <channel> token, unchecked
	// Tenant is the job's tenant, "" for the default tenant: a tenant's
	// own subject's, else the Notifier-Tenant header's, else (on the
	// default tenant's subjects and the fair lanes) the job's own tenant
	// field, read without decoding the rest; DecodeDelivery checks it. A
	// header or field naming no tenant (not ValidTenant) gives "": the
	// job is invalid, and the name is never a key of per-tenant state.
	Tenant string
	Fair   bool // from the subject: a fair lane, shared by tenants
	// Lane is from the subject: the category of its lane (a category's
	// own lane, or Transactional for the priority lane); "" for the normal
	// lane, whose jobs without a category take their channel's.
	Lane   Category
	Header nats.Header // the message headers (Nats-Msg-Id among them)

	// From the JetStream metadata; zero if the server sent none.
	Stream       string    // the stream it is stored in
	StreamSeq    uint64    // its sequence in that stream
	NumDelivered uint64    // 1 on the first delivery
	Published    time.Time // when the stream stored it

	msg       jetstream.Msg
	badTenant string // the header's or field's tenant that is no tenant name (Tenant is "")
}

func newDelivery(m jetstream.Msg) *Delivery {
	d := new(Delivery)
	d.init(m)
	return d
}

// pulledDelivery is a delivery and its message in one allocation.
type pulledDelivery struct {
	Delivery
	pm pulledMsg
}

// newPulledDelivery is the delivery of m, received by nc on one of our
// pull-request inboxes.
func newPulledDelivery(m *nats.Msg, nc *nats.Conn) *Delivery {
	pd := &pulledDelivery{pm: pulledMsg{m: m, nc: nc}}
	pd.init(&pd.pm)
	return &pd.Delivery
}

// init fills d from m: what every delivery pays for once.
func (d *Delivery) init(m jetstream.Msg) {
	d.Subject, d.Data, d.Header, d.msg = m.Subject(), m.Data(), m.Headers(), m
	k, ok := ParseJobSubject(d.Subject) // once: every delivery pays for it
	d.High, d.Fair = ok && k.High, ok && k.Fair
	d.Tenant, d.badTenant = tenantOf(k, d.Header, d.Data)
	switch {
	case d.High:
		d.Lane = Transactional
	case ok:
		d.Lane = k.Category
	}
	d.Channel = ChannelOf(d.Subject)
	if pm, ok := m.(*pulledMsg); ok {
		if stream, seq, delivered, published, ok := ackMetadata(pm.m.Reply); ok {
			d.Stream, d.StreamSeq, d.NumDelivered, d.Published = stream, seq, delivered, published
		}
		return
	}
	if md, err := m.Metadata(); err == nil {
		d.Stream = md.Stream
		d.StreamSeq = md.Sequence.Stream
		d.NumDelivered = md.NumDelivered
		d.Published = md.Timestamp
	}
}

// jobTenant is whose job a message of the job stream on subject is, ""
// the default tenant's (SPEC §2, the tenant field): the subject's tenant
// (a tenant's own subject), else the Notifier-Tenant header's (a fair
// lane), else the job's own tenant field. A header or field that names no
// tenant (not ValidTenant: a raw publisher's "not a/valid tenant!!") gives
// "" and the name as bad: the job is invalid (DecodeDelivery says so) and
// is nobody's. It is the one answer for a delivery (newDelivery), a job
// found waiting (FindWaiting) and a dead letter (its original subject).
func jobTenant(subject string, h nats.Header, data []byte) (tenant, bad string) {
	k, _ := ParseJobSubject(subject)
	return tenantOf(k, h, data)
}

// tenantOf is jobTenant of a subject already parsed into k.
func tenantOf(k Key, h nats.Header, data []byte) (tenant, bad string) {
	if k.Tenant != "" {
		return k.Tenant, "" // ParseJobSubject took only a valid name
	}
	t := h.Get(HeaderTenant)
	if t == "" {
		t = tenantField(data)
	}
	if t != "" && !ValidTenant(t) {
		return "", t
	}
	return t, ""
}

// tenantField reads a job's top-level "tenant" string without checking
// the rest: "" when it names none (the usual job of the default tenant
// costs one search of its bytes), or is not a JSON object with one. It
// reads the members as the strict decoder does (objectMembers), so the
// two never disagree on whose job it is: a name written with escapes
// ("tena\u006et") is "tenant" to both, and a member repeated elsewhere in
// the object does not hide it (the job's ledger key and the provider's
// tenant follow this answer).
func tenantField(data []byte) string {
	if !bytes.Contains(data, []byte(`"tenant"`)) && !escapesATenantLetter(data) {
		return ""
	}
	members, err := objectMembers(data, func(string) bool { return false })
	if err != nil {
		return ""
	}
	raw, ok := members["tenant"]
	if !ok {
		return ""
	}
	var t string
	if json.Unmarshal(raw, &t) != nil {
		return ""
	}
	return t
}

// escapesATenantLetter reports whether data holds a \u escape of one of
// the letters of "tenant" (\u0074, \u0065, \u006e, \u0061, any case):
// the only way a member name can spell "tenant" without the plain word.
// Other escapes, common in bodies (Go's encoder writes & as \u0026), keep
// a job off the full read.
func escapesATenantLetter(data []byte) bool {
	for {
		i := bytes.Index(data, []byte(`\u00`))
		if i < 0 || i+6 > len(data) {
			return false
		}
		switch hi, lo := data[i+4], data[i+5]|0x20; {
		case hi == '7' && lo == '4', hi == '6' && (lo == '5' || lo == 'e' || lo == '1'):
			return true
		}
		data = data[i+4:]
	}
}

// Ack acknowledges the delivery and waits for the server to confirm it
// (a double ack), so that a nil error means the job will not come back.
// The context bounds the wait.
func (d *Delivery) Ack(ctx context.Context) error {
	if err := d.msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("ack %s seq %d: %w", d.Subject, d.StreamSeq, err)
	}
	return nil
}

// AckNoWait acknowledges the delivery without waiting for the server to
// confirm it. The ack may be lost (a disconnection at that moment), and the
// job is then delivered again after ack_wait: use it only where a second
// delivery is harmless — when a shared ledger says the job was sent, or its
// dead letter is already stored.
func (d *Delivery) AckNoWait() error {
	if err := d.msg.Ack(); err != nil {
		return fmt.Errorf("ack %s seq %d: %w", d.Subject, d.StreamSeq, err)
	}
	return nil
}

// Nak asks for an immediate redelivery. It counts as a delivery and ignores
// any back-off; prefer NakWithDelay for a retry.
func (d *Delivery) Nak() error {
	if err := d.msg.Nak(); err != nil {
		return fmt.Errorf("nak %s seq %d: %w", d.Subject, d.StreamSeq, err)
	}
	return nil
}

// NakWithDelay asks for a redelivery after delay. The redelivery counts as
// a delivery (NumDelivered grows); the lane consumers have no MaxDeliver,
// so this never drops a job, but it also cannot count failures: the
// dispatcher's ledger does.
func (d *Delivery) NakWithDelay(delay time.Duration) error {
	if err := d.msg.NakWithDelay(delay); err != nil {
		return fmt.Errorf("nak %s seq %d with delay %s: %w", d.Subject, d.StreamSeq, delay, err)
	}
	return nil
}

// InProgress tells the server the job is still being worked on, which
// restarts its ack wait. Call it well within the ack wait (e.g. every third
// of it) while a job is held back by a limiter.
func (d *Delivery) InProgress() error {
	if err := d.msg.InProgress(); err != nil {
		return fmt.Errorf("in progress %s seq %d: %w", d.Subject, d.StreamSeq, err)
	}
	return nil
}

// Term tells the server never to redeliver the job; the reason (may be
// empty) appears in the server's termination advisory. Dead-lettering
// publishes and then acks instead: Term is for a job that must be dropped
// without a trace in NOTIFY_DEAD.
func (d *Delivery) Term(reason string) error {
	var err error
	if reason == "" {
		err = d.msg.Term()
	} else {
		err = d.msg.TermWithReason(reason)
	}
	if err != nil {
		return fmt.Errorf("term %s seq %d: %w", d.Subject, d.StreamSeq, err)
	}
	return nil
}
