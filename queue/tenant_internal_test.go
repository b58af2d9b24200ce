package queue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// stored is a message of the job stream as a delivery hands it over,
// without a server (no metadata).
type stored struct {
	jetstream.Msg
	subject string
	header  nats.Header
	data    []byte
}

func (m stored) Subject() string                           { return m.subject }
func (m stored) Headers() nats.Header                      { return m.header }
func (m stored) Data() []byte                              { return m.data }
func (m stored) Metadata() (*jetstream.MsgMetadata, error) { return nil, jetstream.ErrNotJSMessage }

// TestOneTenantRule: a delivery, a job found waiting and a dead letter
// name the same tenant for the same message, in the dispatcher's order:
// the subject's, else the Notifier-Tenant header's, else the job's tenant
// field (SPEC §2). A dead letter took the header, then the field, then the
// subject (found in review: three copies of the rule in two orders).
func TestOneTenantRule(t *testing.T) {
	t.Parallel()
	field := func(tenant string) []byte {
		if tenant == "" {
			return []byte(`{"id":"j-1","user_id":"u","channel":"sms","to":"+14155550123","body":"b"}`)
		}
		return []byte(`{"id":"j-1","user_id":"u","channel":"sms","to":"+14155550123","body":"b","tenant":"` + tenant + `"}`)
	}
	for _, tc := range []struct {
		name, subject, header string
		data                  []byte
		want                  string
	}{
		{"the subject first", "notify.jobs.sms.t.acme", "other", field("third"), "acme"},
		{"the subject's, a dot written ~", "notify.jobs.sms.t.acme~eu.high", "", field(""), "acme.eu"},
		{"then the header", "notify.jobs.sms.f.3", "acme", field("third"), "acme"},
		{"then the field", "notify.jobs.sms", "", field("acme"), "acme"},
		{"the field on a fair lane", "notify.jobs.sms.f.0.marketing", "", field("acme"), "acme"},
		{"the default tenant", "notify.jobs.sms.high", "", field(""), ""},
		{"not JSON", "notify.jobs.sms", "", []byte(`{"tenant":`), ""},
	} {
		h := nats.Header{}
		if tc.header != "" {
			h.Set(HeaderTenant, tc.header)
		}
		if got, bad := jobTenant(tc.subject, h, tc.data); got != tc.want || bad != "" {
			t.Errorf("%s: jobTenant %q, want %q", tc.name, got, tc.want)
		}
		if got := newDelivery(stored{subject: tc.subject, header: h, data: tc.data}).Tenant; got != tc.want {
			t.Errorf("%s: Delivery.Tenant %q, want %q", tc.name, got, tc.want)
		}
		dh := nats.Header{}
		for k, v := range h {
			dh[k] = v
		}
		dh.Set(HeaderReason, "invalid")
		dh.Set(HeaderSubject, tc.subject)
		if got := newDeadLetter(1, time.Now(), DeadSubject("sms"), dh, tc.data).Tenant; got != tc.want {
			t.Errorf("%s: DeadLetter.Tenant %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestHeaderTenantMustBeATenant: a Notifier-Tenant header that is not a
// tenant name (a raw publisher's) makes the job invalid, naming it, and
// is nobody's tenant: not the delivery's, not a dead letter's, not a job
// found waiting, and the router leaves it where it is to be
// dead-lettered. The header was trusted as it was, into ledger keys
// (MsgID's '/') and per-tenant state (found in review). A tenant field
// that is no name is nobody's either (Decode already refused it).
func TestHeaderTenantMustBeATenant(t *testing.T) {
	t.Parallel()
	const bad = "not a/valid tenant!!"
	data := []byte(`{"id":"j-1","user_id":"u","channel":"sms","to":"+14155550123","body":"b"}`)
	for _, subject := range []string{"notify.jobs.sms.f.3", "notify.jobs.sms", "notify.jobs.sms.high", "notify.jobs.sms.f.0.marketing"} {
		h := nats.Header{HeaderTenant: {bad}}
		d := newDelivery(stored{subject: subject, header: h, data: data})
		if d.Tenant != "" || d.badTenant != bad {
			t.Errorf("%s: Delivery.Tenant %q (bad %q), want none", subject, d.Tenant, d.badTenant)
		}
		_, err := DecodeDelivery(d)
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Field != "tenant" || !strings.Contains(err.Error(), `Notifier-Tenant header "not a/valid tenant!!" is not a tenant name`) {
			t.Errorf("%s: DecodeDelivery: %v, want invalid naming the header's tenant", subject, err)
		}
		if tn, b := jobTenant(subject, h, data); tn != "" || b != bad || isTenants(subject, h, data, "") || isTenants(subject, h, data, bad) {
			t.Errorf("%s: jobTenant %q, %q: a job found waiting would be someone's", subject, tn, b)
		}
		dh := nats.Header{HeaderTenant: {bad}, HeaderSubject: {subject}}
		if got := newDeadLetter(1, time.Now(), DeadSubject("sms"), dh, data).Tenant; got != "" {
			t.Errorf("%s: DeadLetter.Tenant %q", subject, got)
		}
		rest, moved, err := (&Router{}).Move(context.Background(), []*Delivery{{Subject: subject, Channel: "sms", Header: h, Data: data,
			msg: &pulledMsg{m: &nats.Msg{Subject: subject, Header: h, Data: data}}, badTenant: d.badTenant, Fair: d.Fair}},
			map[string]bool{subject: true})
		if len(rest) != 1 || moved != 0 || err != nil {
			t.Errorf("%s: Move took a job whose header names no tenant: rest %d, moved %d, %v", subject, len(rest), moved, err)
		}
	}
	// A valid header still binds the job; on a tenant's own subject the
	// subject's tenant is the job's and the header is not read.
	if _, err := DecodeDelivery(&Delivery{Subject: "notify.jobs.sms.f.3", Header: nats.Header{HeaderTenant: {"acme.eu"}}, Data: data}); err != nil {
		t.Errorf("a valid header: %v", err)
	}
	if _, err := DecodeDelivery(&Delivery{Subject: "notify.jobs.sms.t.acme", Header: nats.Header{HeaderTenant: {bad}}, Data: data}); err != nil {
		t.Errorf("a tenant's own subject: %v", err)
	}
	// A tenant field that is no name: nobody's, and invalid.
	junk := []byte(`{"id":"j-1","user_id":"u","channel":"sms","to":"+14155550123","body":"b","tenant":"a b/c"}`)
	d := newDelivery(stored{subject: "notify.jobs.sms", header: nats.Header{}, data: junk})
	if d.Tenant != "" || d.badTenant != "a b/c" {
		t.Errorf("a junk tenant field: Delivery.Tenant %q (bad %q)", d.Tenant, d.badTenant)
	}
	if _, err := DecodeDelivery(d); err == nil || !strings.Contains(err.Error(), "tenant: must be 1 to 64 characters") {
		t.Errorf("a junk tenant field: %v", err)
	}
}
