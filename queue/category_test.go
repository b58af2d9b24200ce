package queue_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/notifier/notifier/queue"
)

func TestCategoryLanes(t *testing.T) {
	for _, tc := range []struct {
		key     queue.Key
		subject string
		lane    string
	}{
		{queue.Key{Channel: "sms", Category: queue.Marketing}, "notify.jobs.sms.marketing", "marketing"},
		{queue.Key{Channel: "email", Category: queue.Transactional}, "notify.jobs.email.transactional", "transactional"},
		{queue.Key{Channel: "push", Tenant: "acme.eu", Category: queue.Marketing}, "notify.jobs.push.t.acme~eu.marketing", "marketing"},
		{queue.Key{Channel: "sms", High: true}, "notify.jobs.sms.high", "high"},
		{queue.Key{Channel: "sms"}, "notify.jobs.sms", "normal"},
		// A tenant may be called like a lane: it sits in the tenant token.
		{queue.Key{Channel: "sms", Tenant: "marketing"}, "notify.jobs.sms.t.marketing", "normal"},
	} {
		if got := tc.key.Subject(); got != tc.subject {
			t.Errorf("%+v: subject %q, want %q", tc.key, got, tc.subject)
		}
		if got := tc.key.Lane(); got != tc.lane {
			t.Errorf("%+v: lane %q, want %q", tc.key, got, tc.lane)
		}
		back, ok := queue.ParseJobSubject(tc.subject)
		if !ok || back != tc.key {
			t.Errorf("ParseJobSubject(%q) = %+v %v, want %+v", tc.subject, back, ok, tc.key)
		}
	}
	// KeyFor: the priority lane whatever the category; a named category
	// its own lane; none the normal lane.
	if k := queue.KeyFor("sms", "", true, queue.Marketing); !k.High || k.Category != "" {
		t.Errorf("KeyFor high marketing = %+v, want the priority lane", k)
	}
	if s := queue.KeyFor("sms", "acme", false, queue.Marketing).Subject(); s != "notify.jobs.sms.t.acme.marketing" {
		t.Errorf("KeyFor acme marketing: %s", s)
	}
	for _, s := range []string{"notify.jobs.sms.bulk", "notify.jobs.sms.t.acme.promo", "notify.jobs.sms.marketing.high"} {
		if k, ok := queue.ParseJobSubject(s); ok {
			t.Errorf("ParseJobSubject(%q) = %+v, want not a queue subject", s, k)
		}
	}
	if queue.ValidCategory("") || queue.ValidCategory("promo") || !queue.ValidCategory(queue.Marketing) {
		t.Error("ValidCategory")
	}
}

func TestDecodeCategory(t *testing.T) {
	base := `{"id":"a","user_id":"u","channel":"sms","to":"+14155550123","body":"b"%s}`
	for _, tc := range []struct {
		subject, extra, wantErr string
		want                    queue.Category
	}{
		{"notify.jobs.sms", ``, "", ""},
		{"notify.jobs.sms", `,"category":"marketing"`, "", queue.Marketing}, // the dispatcher checks it against the channel's
		{"notify.jobs.sms.marketing", ``, "", ""},
		{"notify.jobs.sms.marketing", `,"category":"marketing"`, "", queue.Marketing},
		{"notify.jobs.sms.t.acme.transactional", `,"category":"transactional","tenant":"acme"`, "", queue.Transactional},
		{"notify.jobs.sms.high", `,"category":"transactional"`, "", queue.Transactional},
		{"notify.jobs.sms.high", `,"category":"marketing"`, "category: \"marketing\" does not match the subject: it was published on the transactional lane (publish on notify.jobs.sms.marketing)", ""},
		{"notify.jobs.sms.marketing", `,"category":"transactional"`, "category: \"transactional\" does not match the subject: it was published on the marketing lane (publish on notify.jobs.sms.transactional)", ""},
		{"notify.jobs.sms", `,"category":"promo"`, `category: "promo" is not one of transactional, marketing`, ""},
		{"notify.jobs.sms", `,"category":1`, `category`, ""},
	} {
		j, err := queue.Decode(tc.subject, fmt.Appendf(nil, base, tc.extra))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s %s: %v", tc.subject, tc.extra, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s %s: %v, want an error with %q", tc.subject, tc.extra, err, tc.wantErr)
		case err == nil && j.Category != tc.want:
			t.Errorf("%s %s: category %q, want %q", tc.subject, tc.extra, j.Category, tc.want)
		}
	}
	// Marshal writes it, and it comes back.
	j := &queue.Job{ID: "a", UserID: "u", Channel: "sms", To: "+14155550123", Body: "b", Category: queue.Marketing}
	data, err := j.Marshal()
	if err != nil || !strings.Contains(string(data), `"category":"marketing"`) {
		t.Fatalf("Marshal: %s %v", data, err)
	}
	back, err := queue.Decode("notify.jobs.sms.marketing", data)
	if err != nil || back.Category != queue.Marketing {
		t.Fatalf("Decode(Marshal): %+v %v", back, err)
	}
}

// TestPublishRoutesByCategory: Publish puts a job naming its category on
// that category's lane, and refuses a marketing job on the priority lane;
// Queues sees the lane, and its consumer is made on demand.
func TestPublishRoutesByCategory(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.consumer(t, queue.ConsumerConfig{})
	j := job("sms", "promo-1")
	j.Category = queue.Marketing
	b.publish(t, false, j)
	k := job("sms", "otp-1")
	k.Category = queue.Transactional
	b.publish(t, false, k)
	b.publish(t, false, job("sms", "plain-1"))
	m := job("sms", "promo-2")
	m.Category = queue.Marketing
	if _, err := queue.NewPublisher(b.js).Publish(ctx(t), m, true); err == nil || !strings.Contains(err.Error(), "category") {
		t.Errorf("publish a marketing job on the priority lane: %v, want refused (category)", err)
	}
	qs, err := c.Queues(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, q := range qs {
		got[q.Key.String()] = q.Stored
	}
	want := map[string]uint64{"sms": 1, "sms/marketing": 1, "sms/transactional": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("queues %v, want %v", got, want)
	}
	ds, err := c.FetchFrom(ctx(t), []queue.Want{{Subject: "notify.jobs.sms.marketing", N: 5}})
	if err != nil || len(ds) != 1 || ds[0].Lane != queue.Marketing {
		t.Fatalf("FetchFrom the marketing lane: %d deliveries, %v", len(ds), err)
	}
	ackAll(t, ds)
	cons, err := b.js.Consumer(ctx(t), "NOTIFY", "notifier-sms-marketing")
	if err != nil {
		t.Fatal(err)
	}
	if cfg := cons.CachedInfo().Config; cfg.FilterSubject != "notify.jobs.sms.marketing" || cfg.InactiveThreshold != 0 {
		t.Errorf("marketing lane consumer: filter %q inactive threshold %s, want kept (made at start)", cfg.FilterSubject, cfg.InactiveThreshold)
	}
}
