package dispatch

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
)

// TestMain lifts -parallel past the number of tests: the tests bound their
// own concurrency by kind (measures, waits), and one waiting for its place
// must not hold a place of -parallel's that a test of the other kind
// could have run in.
func TestMain(m *testing.M) {
	flag.Parse()
	if err := flag.Set("test.parallel", "10000"); err != nil {
		panic(err)
	}
	testenv.VerifyNoLeaks(m, testenv.DyingConnections...)
}

func TestSendsEveryJobOnce(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	ids := b.publishN("ok", "sms", 200, 50)
	p := b.start(nil)
	testenv.WaitFor(t, 30*time.Second, "all 200 jobs accepted", func() bool { return len(b.fake.AcceptedIDs()) >= 200 })
	testenv.WaitFor(t, 10*time.Second, "job stream empty", func() bool { return b.remaining() == 0 })
	b.acceptedOnce(ids)
	if got := p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeSent)); got != 200 {
		t.Fatalf("notifier_jobs_total{outcome=sent} = %v, want 200", got)
	}
	// Headers of the webhook protocol.
	r := b.fake.Accepted()[0]
	if r.Header.Get("Idempotency-Key") == "" || !strings.HasPrefix(r.Header.Get("User-Agent"), "notifier/") {
		t.Fatalf("webhook headers: %v", r.Header)
	}
}

// TestBadInputIsDeadLettered mixes every kind of bad input into a valid
// load: each is dead-lettered with the right reason and detail, the valid
// ones are sent, and no worker dies.
func TestBadInputIsDeadLettered(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	ctx := context.Background()
	valid := b.publishN("good", "push", 40, 40)
	bad := []struct {
		subject, id, body, reason, detail string
	}{
		{"notify.jobs.sms", "b1", `{not json`, ledger.ReasonInvalid, "JSON"},
		{"notify.jobs.sms", "b2", `{"id":"b2","channel":"sms","to":"+447700900123","body":"x"}`, ledger.ReasonInvalid, "user_id"},
		{"notify.jobs.sms", "b3", `{"id":"b3","user_id":"u","channel":"push","to":"+447700900123","body":"x"}`, ledger.ReasonInvalid, "channel"},
		{"notify.jobs.sms", "b4", `{"id":"b4","user_id":"u","channel":"sms","to":"+447700900123","body":"` + strings.Repeat("x", 17*1024) + `"}`, ledger.ReasonInvalid, "body"},
		{"notify.jobs.sms", "b5", `{"id":"bad id!","user_id":"u","channel":"sms","to":"+447700900123","body":"x"}`, ledger.ReasonInvalid, "id"},
		{"notify.jobs.sms", "b6", `{"id":"b6","user_id":"u","channel":"sms","to":"+447700900123","body":"x","provider":"nope"}`, ledger.ReasonUnknownProvider, "nope"},
		{"notify.jobs.sms", "b7", `{"id":"b7","user_id":"u","channel":"sms","to":"+447700900123","body":"x","provider":"push-gw"}`, ledger.ReasonUnknownProvider, "push"},
		{"notify.jobs.fax", "b8", `{"id":"b8","user_id":"u","channel":"fax","to":"x","body":"x"}`, ledger.ReasonInvalid, "channel"},
		{"notify.jobs.sms", "b9", "\xff\xfe", ledger.ReasonInvalid, "UTF-8"},
		{"notify.jobs.sms", "b10", `[]`, ledger.ReasonInvalid, ""},
	}
	for _, x := range bad {
		if _, err := b.pub.PublishRaw(ctx, x.subject, []byte(x.body), x.id); err != nil {
			t.Fatalf("publish %s: %v", x.id, err)
		}
	}
	p := b.start(nil)
	testenv.WaitFor(t, 30*time.Second, "valid jobs sent", func() bool { return len(b.fake.AcceptedIDs()) >= len(valid) })
	testenv.WaitFor(t, 10*time.Second, "every bad job dead-lettered", func() bool { return len(b.deadLetters()) >= len(bad) })
	testenv.WaitFor(t, 10*time.Second, "job stream empty", func() bool { return b.remaining() == 0 })
	b.acceptedOnce(valid)
	dls := b.deadLetters()
	if len(dls) != len(bad) {
		t.Fatalf("dead letters: %d, want %d", len(dls), len(bad))
	}
	byBody := map[string]deadLetter{}
	for _, dl := range dls {
		byBody[string(dl.Data)] = dl
	}
	for _, x := range bad {
		dl, ok := byBody[x.body]
		if !ok {
			t.Errorf("%s: no dead letter with the original bytes", x.id)
			continue
		}
		wantSubject := "notify.dead." + queue.ChannelOf(x.subject)
		if dl.Subject != wantSubject || dl.Reason != x.reason || !strings.Contains(dl.Detail, x.detail) {
			t.Errorf("%s: dead letter %s reason=%q detail=%q; want %s reason=%q detail containing %q",
				x.id, dl.Subject, dl.Reason, dl.Detail, wantSubject, x.reason, x.detail)
		}
	}
	if got := p.count(p.d.m.Jobs.WithLabelValues("invalid", "unknown", OutcomeDead)); got != 1 {
		t.Errorf("dead jobs of an unknown channel counted under channel=invalid: %v, want 1 (the fax job)", got)
	}
	if got := p.d.InFlight(); got != 0 {
		t.Errorf("jobs in flight after the load: %d", got)
	}
}

func TestExpiredJobsAreSuppressed(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	past := newJob("old-1", "sms", "u1")
	past.ExpiresAt = time.Now().Add(-time.Minute)
	future := newJob("new-1", "sms", "u1")
	future.ExpiresAt = time.Now().Add(time.Hour)
	b.publish(past, future)
	b.start(nil)
	testenv.WaitFor(t, 20*time.Second, "both jobs handled", func() bool {
		return len(b.fake.AcceptedIDs()) == 1 && len(b.deadLetters()) == 1
	})
	b.acceptedOnce([]string{"new-1"})
	dl := b.deadLetters()[0]
	if dl.Subject != "notify.suppressed.sms" || dl.Reason != ledger.ReasonExpired {
		t.Fatalf("expired job: %s reason %q, want notify.suppressed.sms reason expired", dl.Subject, dl.Reason)
	}
}

func TestUserCapDrop(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	var jobs []*queue.Job
	for i := 0; i < 8; i++ {
		jobs = append(jobs, newJob(fmt.Sprintf("cap-%d", i), "push", "alice"))
	}
	jobs = append(jobs, newJob("cap-bob", "push", "bob"))
	b.publish(jobs...)
	p := b.start(func(o *Options) {
		o.UserLimits = map[string]userlimit.Rule{"push": {Limit: 5, Window: time.Hour, Algorithm: userlimit.SlidingLog, OnExceed: userlimit.Drop}}
	})
	testenv.WaitFor(t, 20*time.Second, "all 9 handled", func() bool { return b.remaining() == 0 })
	if n := len(b.fake.AcceptedIDs()); n != 6 {
		t.Fatalf("accepted %d, want 5 for alice + 1 for bob", n)
	}
	dls := b.deadLetters()
	if len(dls) != 3 {
		t.Fatalf("suppressed: %d, want 3", len(dls))
	}
	for _, dl := range dls {
		if dl.Subject != "notify.suppressed.push" || dl.Reason != ledger.ReasonUserLimit {
			t.Errorf("suppressed job: %s %q", dl.Subject, dl.Reason)
		}
		var j map[string]any
		if err := json.Unmarshal(dl.Data, &j); err != nil || j["user_id"] != "alice" {
			t.Errorf("suppressed job is not one of alice's: %s", dl.Data)
		}
	}
	if got := p.count(p.d.m.Jobs.WithLabelValues("push", "push-gw", OutcomeSuppressed)); got != 3 {
		t.Errorf("suppressed counted %v, want 3", got)
	}
}

// TestUserCapDefer: over the cap with on_exceed: defer, a job waits until
// its window allows, then is sent; it is never dropped.
func TestUserCapDefer(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	var ids []string
	var jobs []*queue.Job
	for i := 0; i < 5; i++ {
		ids = append(ids, fmt.Sprintf("def-%d", i))
		jobs = append(jobs, newJob(ids[i], "sms", "carol"))
	}
	b.publish(jobs...)
	start := time.Now()
	p := b.start(func(o *Options) {
		o.UserLimits = map[string]userlimit.Rule{"sms": {Limit: 2, Window: 2 * time.Second, Algorithm: userlimit.SlidingLog, OnExceed: userlimit.Defer}}
		o.MaxHold = 500 * time.Millisecond // longer waits go back to JetStream with a delay
	})
	testenv.WaitFor(t, 30*time.Second, "all 5 sent", func() bool { return len(b.fake.AcceptedIDs()) == 5 })
	b.acceptedOnce(ids)
	if len(b.deadLetters()) != 0 {
		t.Fatalf("a deferred job was dead-lettered: %v", b.deadLetters())
	}
	// 2 per 2 s: the fifth job cannot go before 4 s.
	acc := b.fake.Accepted()
	if last := acc[len(acc)-1].At.Sub(start); last < 4*time.Second-100*time.Millisecond {
		t.Fatalf("fifth job sent after %s; the cap of 2 per 2s allows it only after 4s", last)
	}
	if p.count(p.d.m.Deferrals.WithLabelValues(LayerUser, "defer")) < 3 {
		t.Fatalf("deferrals{layer=user} = %v, want at least 3", p.count(p.d.m.Deferrals.WithLabelValues(LayerUser, "defer")))
	}
}
