package providers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/testenv"
)

// tenantMessages are the same job id in two tenants, then in the default
// tenant (Key = ID, as queue.MsgID makes it) and with no Key at all.
func tenantMessages(m func() *providers.Message) []*providers.Message {
	acme, globex, def, none := m(), m(), m(), m()
	acme.Key, globex.Key, def.Key = "acme/"+acme.ID, "globex/"+globex.ID, def.ID
	return []*providers.Message{acme, globex, def, none}
}

// TestWebhookKeysAreTheTenantsKey: two tenants' jobs with one id send
// different Idempotency-Key and webhook-id headers, derived from
// Message.Key; a default-tenant job (Key = ID) and one without a Key send
// the id's, as before Key existed. Key is not in the body.
func TestWebhookKeysAreTheTenantsKey(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeProvider(t)
	w := signedWebhook(t, fake.URL(), whsec(1, 32), testenv.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)))
	msgs := tenantMessages(smsMessage)
	for _, m := range msgs {
		if err := w.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	reqs := fake.Requests()
	if len(reqs) != len(msgs) {
		t.Fatalf("%d requests, want %d", len(reqs), len(msgs))
	}
	idem := func(i int) string { return reqs[i].Header.Get("Idempotency-Key") }
	hook := func(i int) string { return reqs[i].Header.Get("webhook-id") }
	if idem(0) == idem(1) || hook(0) == hook(1) {
		t.Errorf("two tenants' job-42: Idempotency-Key %s and %s, webhook-id %q and %q: want them different",
			idem(0), idem(1), hook(0), hook(1))
	}
	for i, m := range msgs[:2] {
		if idem(i) != providers.IdempotencyKey(m.Key) || hook(i) != providers.WebhookID(m.Key) {
			t.Errorf("key %q: Idempotency-Key %s, webhook-id %q: want them of the key", m.Key, idem(i), hook(i))
		}
	}
	for i := 2; i < 4; i++ {
		if idem(i) != `"job-42"` || hook(i) != "job-42" {
			t.Errorf("message %d (Key %q): Idempotency-Key %s, webhook-id %q: want the id's, as before", i, msgs[i].Key, idem(i), hook(i))
		}
	}
	for _, r := range reqs {
		if bytes.Contains(r.Body, []byte("acme")) || bytes.Contains(r.Body, []byte("globex")) {
			t.Errorf("the body carries the key: %s", r.Body)
		}
		var fields map[string]any
		if err := json.Unmarshal(r.Body, &fields); err != nil || fields["id"] != "job-42" {
			t.Errorf("body %s: id %v, want job-42 (%v)", r.Body, fields["id"], err)
		}
	}
}

// TestAPNsKeysAreTheTenantsKey: two tenants' jobs with one id go with
// different apns-collapse-id (one would replace the other on a device
// both reach) and apns-id; the default tenant's are the id's.
func TestAPNsKeysAreTheTenantsKey(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeAPNs(t)
	p := apnsAgainst(t, fake, providers.Config{}, nil)
	msgs := tenantMessages(iosMessage)
	for _, m := range msgs {
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	got := fake.Notifications()
	if len(got) != len(msgs) {
		t.Fatalf("%d notifications, want %d", len(got), len(msgs))
	}
	if got[0].CollapseID == got[1].CollapseID || got[0].ID == got[1].ID {
		t.Errorf("two tenants' job-42: collapse ids %q and %q, apns-ids %s and %s: want them different",
			got[0].CollapseID, got[1].CollapseID, got[0].ID, got[1].ID)
	}
	for i, m := range msgs[:2] {
		if got[i].CollapseID != providers.APNsCollapseID(m.Key) || got[i].ID != providers.APNsID(m.Key) {
			t.Errorf("key %q: collapse id %q, apns-id %s: want them of the key", m.Key, got[i].CollapseID, got[i].ID)
		}
	}
	for i := 2; i < 4; i++ {
		if got[i].CollapseID != "job-42" || got[i].ID != providers.APNsID("job-42") {
			t.Errorf("message %d (Key %q): collapse id %q, apns-id %s: want the id's", i, msgs[i].Key, got[i].CollapseID, got[i].ID)
		}
	}
}

// TestSMTPMessageIDIsTheTenantsKey: two tenants' mails with one job id
// carry different Message-IDs (a mail system may drop the second as a
// duplicate of the first); the default tenant's is the id's.
func TestSMTPMessageIDIsTheTenantsKey(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeSMTP(t)
	p, err := providers.NewSMTP(providers.Config{Name: "mail", Channel: "email", Kind: "smtp", Rate: 1,
		Host: fake.Host(), Port: fake.Port(), TLSCAFile: fake.CAFile(), From: "no-reply@example.com",
		Username: fake.Username(), PasswordEnv: "PW"},
		providers.Options{Getenv: env(map[string]string{"PW": fake.Password()})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	msgs := tenantMessages(emailMessage)
	for _, m := range msgs {
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	got := fake.Messages()
	if len(got) != len(msgs) {
		t.Fatalf("%d mails, want %d", len(got), len(msgs))
	}
	if got[0].MessageID == got[1].MessageID || got[0].MessageID != providers.SMTPMessageID("acme/job-42", "example.com") {
		t.Errorf("two tenants' job-42: Message-IDs %q and %q, want them of the keys", got[0].MessageID, got[1].MessageID)
	}
	for i := 2; i < 4; i++ {
		if want := providers.SMTPMessageID("job-42", "example.com"); got[i].MessageID != want {
			t.Errorf("message %d (Key %q): Message-ID %q, want %q", i, msgs[i].Key, got[i].MessageID, want)
		}
	}
}
