package queue_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/queue"
)

func TestJobSubjectsOfTenants(t *testing.T) {
	for _, tc := range []struct {
		key     queue.Key
		subject string
	}{
		{queue.Key{Channel: "sms"}, "notify.jobs.sms"},
		{queue.Key{Channel: "sms", High: true}, "notify.jobs.sms.high"},
		{queue.Key{Channel: "push", Tenant: "acme"}, "notify.jobs.push.t.acme"},
		{queue.Key{Channel: "email", Tenant: "acme.eu-1_x", High: true}, "notify.jobs.email.t.acme~eu-1_x.high"},
	} {
		if got := tc.key.Subject(); got != tc.subject {
			t.Errorf("%+v: subject %q, want %q", tc.key, got, tc.subject)
		}
		back, ok := queue.ParseJobSubject(tc.subject)
		if !ok || back != tc.key {
			t.Errorf("ParseJobSubject(%q) = %+v %v, want %+v", tc.subject, back, ok, tc.key)
		}
		if queue.IsHigh(tc.subject) != tc.key.High || queue.TenantOf(tc.subject) != tc.key.Tenant || queue.ChannelOf(tc.subject) != tc.key.Channel {
			t.Errorf("%q: IsHigh/TenantOf/ChannelOf disagree with %+v", tc.subject, tc.key)
		}
	}
	for _, s := range []string{"notify.jobs", "notify.jobs.", "notify.jobs.sms.low", "notify.jobs.sms.t", "notify.jobs.sms.x.acme",
		"notify.jobs.sms.t.acme.low", "notify.jobs.sms.t.a$b", "notify.jobs.sms.t." + strings.Repeat("a", 65), "notify.dead.sms"} {
		if k, ok := queue.ParseJobSubject(s); ok {
			t.Errorf("ParseJobSubject(%q) = %+v, want not a queue subject", s, k)
		}
	}
	for _, tn := range []string{"", "a b", "ü", strings.Repeat("x", 65), "a/b", "a~b"} {
		if queue.ValidTenant(tn) {
			t.Errorf("ValidTenant(%q) = true", tn)
		}
	}
}

func TestDecodeTenant(t *testing.T) {
	base := `{"id":"a","user_id":"u","channel":"sms","to":"+14155550123","body":"b"%s}`
	for _, tc := range []struct {
		subject, extra, wantErr string
	}{
		{"notify.jobs.sms.t.acme", ``, ""},
		{"notify.jobs.sms.t.acme", `,"tenant":"acme"`, ""},
		{"notify.jobs.sms.t.acme~eu.high", `,"tenant":"acme.eu"`, ""},
		{"notify.jobs.sms", ``, ""},
		{"notify.jobs.sms", `,"tenant":"acme"`, `tenant: "acme" does not match the subject: it was published on the default tenant's subject (publish on notify.jobs.sms.t.acme)`},
		{"notify.jobs.sms.t.other", `,"tenant":"acme"`, `tenant: "acme" does not match the subject: it was published on tenant "other"'s subject`},
		{"notify.jobs.sms.t.acme", `,"tenant":"a b"`, `tenant: must be 1 to 64 characters`},
		{"notify.jobs.sms.t.acme", `,"tenant":7`, `tenant`},
	} {
		_, err := queue.Decode(tc.subject, fmt.Appendf(nil, base, tc.extra))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s %s: %v", tc.subject, tc.extra, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s %s: %v, want an error with %q", tc.subject, tc.extra, err, tc.wantErr)
		}
	}
}

// TestQueuesOfTenants: a tenant's jobs get a queue of their own, found by
// Queues, pulled by FetchFrom without touching the other queues, and its
// consumer is filtered on exactly its subject.
func TestQueuesOfTenants(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.consumer(t, queue.ConsumerConfig{})
	for i := range 30 {
		j := job("sms", fmt.Sprintf("bulk-%d", i))
		j.Tenant = "bulk"
		b.publish(t, false, j)
	}
	for i := range 3 {
		j := job("sms", fmt.Sprintf("otp-%d", i))
		j.Tenant = "otp.eu"
		b.publish(t, i == 0, j)
	}
	b.publish(t, false, job("sms", "plain"))
	qs, err := c.Queues(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, q := range qs {
		got[q.Key.String()] = q.Stored
	}
	want := map[string]uint64{"sms": 1, "sms@bulk": 30, "sms@otp.eu": 2, "sms@otp.eu/high": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("queues %v, want %v", got, want)
	}
	if qs[0].Key.Tenant != "" {
		t.Errorf("the default tenant's queue is not listed first: %+v", qs)
	}
	ds, err := c.FetchFrom(ctx(t), []queue.Want{{Subject: "notify.jobs.sms.t.otp~eu.high", N: 5}, {Subject: "notify.jobs.sms.t.otp~eu", N: 5}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range ds {
		ids = append(ids, d.Header.Get(jetstream.MsgIDHeader))
		if d.Tenant != "otp.eu" || d.Channel != "sms" {
			t.Errorf("delivery %s: tenant %q channel %q", d.Subject, d.Tenant, d.Channel)
		}
	}
	if !slices.Equal(ids, []string{"otp-0", "otp-1", "otp-2"}) {
		t.Fatalf("FetchFrom the otp queues: %v, want otp-0 (priority) then otp-1, otp-2", ids)
	}
	ackAll(t, ds)
	cons, err := b.js.Consumer(ctx(t), "NOTIFY", "notifier-sms-normal-t-otp~eu")
	if err != nil {
		t.Fatal(err)
	}
	if cfg := cons.CachedInfo().Config; cfg.FilterSubject != "notify.jobs.sms.t.otp~eu" || cfg.InactiveThreshold != time.Hour {
		t.Errorf("tenant queue consumer: filter %q inactive threshold %s", cfg.FilterSubject, cfg.InactiveThreshold)
	}
	// Poll wakes on the first job of any of its queues.
	done := make(chan []*queue.Delivery, 1)
	go func() {
		ds, _ := c.Poll(ctx(t), []string{"notify.jobs.push", "notify.jobs.sms.t.otp~eu"}, 3, 10*time.Second)
		done <- ds
	}()
	time.Sleep(200 * time.Millisecond)
	j := job("sms", "otp-late")
	j.Tenant = "otp.eu"
	b.publish(t, false, j)
	select {
	case ds := <-done:
		if len(ds) != 1 || ds[0].Header.Get(jetstream.MsgIDHeader) != "otp-late" {
			t.Fatalf("Poll: %d deliveries", len(ds))
		}
		ackAll(t, ds)
	case <-time.After(5 * time.Second):
		t.Fatal("Poll did not wake on a job of one of its queues")
	}
}

// TestNewConsumerReplacesTheLaneConsumers: the two lane consumers of
// earlier versions overlap the queues and are deleted; their jobs stay and
// are taken from the new queues.
func TestNewConsumerReplacesTheLaneConsumers(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	for _, lc := range []jetstream.ConsumerConfig{
		{Durable: "notifier-high", FilterSubject: "notify.jobs.*.high", AckPolicy: jetstream.AckExplicitPolicy},
		{Durable: "notifier-normal", FilterSubject: "notify.jobs.*", AckPolicy: jetstream.AckExplicitPolicy},
	} {
		if _, err := b.js.CreateOrUpdateConsumer(ctx(t), "NOTIFY", lc); err != nil {
			t.Fatal(err)
		}
	}
	b.publish(t, false, job("sms", "old-1"))
	b.publish(t, true, job("push", "old-2"))
	c := b.consumer(t, queue.ConsumerConfig{})
	for _, name := range []string{"notifier-high", "notifier-normal"} {
		if _, err := b.js.Consumer(ctx(t), "NOTIFY", name); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Errorf("consumer %s after NewConsumer: %v, want deleted", name, err)
		}
	}
	ds, err := c.Fetch(ctx(t), 5, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ids := ackAll(t, ds); !slices.Equal(ids, []string{"old-2", "old-1"}) {
		t.Fatalf("jobs published before the upgrade: %v, want old-2 (priority) then old-1", ids)
	}
}
