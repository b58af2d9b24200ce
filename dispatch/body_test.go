package dispatch

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// TestTheProviderIsSentTheJob: what a webhook receives, through the whole
// dispatcher, decodes to the job as it was published, every field of it,
// with the tenant it was delivered for: named in its JSON, left out of the
// JSON on its tenant's own subject, or none (the default tenant's). The
// whole job sets every field of queue.Job, so a field added to the job
// that does not reach the provider fails here.
func TestTheProviderIsSentTheJob(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	at := time.Date(2026, 12, 6, 10, 0, 0, 123_000_000, time.UTC)
	whole := &queue.Job{
		ID: "whole", UserID: "u-1", Channel: "sms", To: "+447700900123", Body: "your code is 123456",
		Title: "Code", Data: map[string]string{"a": "1", "b": "2"}, Provider: "sms-gw", Tenant: "acme",
		Category: queue.Transactional, ExpiresAt: time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond), CreatedAt: at,
	}
	for i, v := 0, reflect.ValueOf(*whole); i < v.NumField(); i++ {
		if v.Field(i).IsZero() {
			t.Fatalf("the whole job leaves %s unset: set it, so that the test shows it reaches the provider", v.Type().Field(i).Name)
		}
	}
	bare := newJob("bare", "sms", "u-2") // on acme's own subject, naming no tenant
	data, err := bare.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	dflt := newJob("default", "sms", "u-3")
	b.publish(whole, dflt)
	if _, err := b.pub.PublishRaw(context.Background(), queue.KeyFor("sms", "acme", false, "").Subject(), data, queue.MsgID("acme", bare.ID)); err != nil {
		t.Fatal(err)
	}
	b.start(nil)
	testenv.WaitFor(t, 30*time.Second, "the three sent", func() bool { return len(b.fake.AcceptedIDs()) >= 3 })

	acme := *bare
	acme.Tenant = "acme"
	want := map[string]*queue.Job{"whole": whole, "bare": &acme, "default": dflt}
	wantKey := map[string]string{"whole": `"acme/whole"`, "bare": `"acme/bare"`, "default": `"default"`}
	for _, r := range b.fake.Accepted() {
		var got queue.Job
		if err := json.Unmarshal(r.Body, &got); err != nil {
			t.Fatalf("%s: the body is not a job: %v: %s", r.ID, err, r.Body)
		}
		if !reflect.DeepEqual(&got, want[r.ID]) {
			t.Errorf("%s: the provider was sent\n%+v\nwant the job\n%+v", r.ID, got, *want[r.ID])
		}
		if k := r.Header.Get("Idempotency-Key"); k != wantKey[r.ID] {
			t.Errorf("%s: Idempotency-Key %s, want %s", r.ID, k, wantKey[r.ID])
		}
		if r.ID == "default" && strings.Contains(string(r.Body), `"tenant"`) {
			t.Errorf("the default tenant's job names a tenant: %s", r.Body)
		}
	}
}
