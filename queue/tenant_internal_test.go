package queue

import (
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
		if got := jobTenant(tc.subject, h, tc.data); got != tc.want {
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
