package dispatch

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/limits/digest"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
)

// TestAForgedDigestOfAnotherTenantDoesNotPassTheCap: the Notifier-Digest
// header lets a digest job past its user's cap once the store knows the
// digest (SPEC §4: the job that made it was counted for it). A digest's
// id is "digest-" and a SHA-1 of its members' ids, which whoever published
// them can compute, and a job id is unique only within a tenant: a
// publisher that sends the same id and header under other tenants' names
// must not get one more send past the cap per tenant name. Each such copy
// is another message under the digest's id, which was sent: never sent
// again (duplicate_id).
func TestAForgedDigestOfAnotherTenantDoesNotPassTheCap(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{rate: 2000})
	rule := userlimit.Rule{Limit: 1, Window: time.Minute, OnExceed: userlimit.Digest}.WithDefaults()
	b.start(func(o *Options) { o.UserLimits = map[string]userlimit.Rule{"sms": rule} })
	ctx := t.Context()

	// A digest of two of u1's jobs, as a dispatcher takes it.
	store := digest.NewRedis(b.redis.Client(), b.prefix)
	key := digest.KeyOf("sms", "", "u1")
	if _, _, err := store.Hold(ctx, key, "fd-1", time.Time{}, time.Hour); err != nil {
		t.Fatal(err)
	}
	taken, err := store.Take(ctx, key, "fd-2", time.Time{}, time.Time{}, time.Hour)
	if err != nil || taken.Digest == "" {
		t.Fatalf("take: %+v, %v", taken, err)
	}
	d := taken.Digest

	// The digest job itself (the default tenant's, as fd-2's was), then a
	// job that takes u1's cap: two sends.
	real := newJob(d, "sms", "u1")
	if _, err := b.pub.PublishJob(ctx, real, false, map[string]string{HeaderDigest: d}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the digest sent", func() bool { return len(b.fake.Accepted()) == 1 })
	b.publish(newJob("fd-cap", "sms", "u1"))
	testenv.WaitFor(t, 20*time.Second, "the cap's job sent", func() bool { return len(b.fake.Accepted()) == 2 })

	// The same id and header under three other tenants' names.
	forged := []string{"evil-1", "evil-2", "evil-3"}
	for _, tenant := range forged {
		j := newJob(d, "sms", "u1")
		j.Tenant = tenant
		j.Body = "not a digest"
		if _, err := b.pub.PublishJob(ctx, j, false, map[string]string{HeaderDigest: d}); err != nil {
			t.Fatal(err)
		}
	}
	ended := func() int {
		n := 0
		for _, dl := range b.deadLetters() {
			if strings.Contains(string(dl.Data), `"evil-`) {
				n++
			}
		}
		return n
	}
	testenv.WaitFor(t, 20*time.Second, "every forged copy ended or sent", func() bool {
		return ended()+len(b.fake.Accepted())-2 >= len(forged)
	})
	time.Sleep(300 * time.Millisecond) // nothing more may come
	for _, rq := range b.fake.Accepted()[2:] {
		var j struct {
			ID     string `json:"id"`
			Tenant string `json:"tenant"`
		}
		_ = json.Unmarshal(rq.Body, &j)
		t.Errorf("a forged copy of digest %s was sent past u1's cap as tenant %s's", j.ID, j.Tenant)
	}
	for _, dl := range b.deadLetters() {
		if strings.Contains(string(dl.Data), `"evil-`) && (dl.Reason != ledger.ReasonDuplicateID || !strings.Contains(dl.Detail, d)) {
			t.Errorf("a forged copy of the digest ended %s: %s, want duplicate_id naming %s", dl.Reason, dl.Detail, d)
		}
	}
}

// TestAJobAtTheStreamsSizeBoundOnATenantsSubjectIsDeadLettered: the job
// stream stores a message of up to twice a job's 64 KiB (headers
// included) so that an oversized job reaches a worker and is dead-lettered
// as invalid (SPEC §2). One published that large on a tenant's own
// subject, without headers, is stored; the router's copy adds its
// Notifier-Tenant and Nats-Msg-Id headers, which the stream refuses. The
// message must still end, dead-lettered as invalid, rather than come back
// every second for ever, and the router must go on moving the other
// tenants' jobs at its pace.
func TestAJobAtTheStreamsSizeBoundOnATenantsSubjectIsDeadLettered(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{rate: 2000})
	b.start(nil)
	ctx := t.Context()
	const stored = 2 * queue.MaxJobBytes // the stream's bound (queue's maxStoredJob)
	head := `{"id":"big","user_id":"u1","channel":"sms","to":"+447700900123","body":"`
	big := head + strings.Repeat("x", stored-len(head)-2) + `"}`
	if _, err := b.pub.PublishRaw(ctx, "notify.jobs.sms.t.acme", []byte(big), ""); err != nil {
		t.Fatalf("publish a job of %d bytes: %v", len(big), err)
	}
	testenv.WaitFor(t, 15*time.Second, "the oversized job dead-lettered", func() bool { return len(b.deadLetters()) > 0 })
	if dls := b.deadLetters(); len(dls) != 1 || dls[0].Reason != ledger.ReasonInvalid || !strings.Contains(dls[0].Detail, "bytes") {
		for _, dl := range dls {
			t.Errorf("dead letter %s: %s", dl.Reason, dl.Detail)
		}
		t.Fatalf("%d dead letters, want one, invalid, naming the size", len(dls))
	}
	// The router goes on: another tenant's jobs on its own subject are
	// moved and sent at once.
	start := time.Now()
	var ids []string
	for i := range 20 {
		j := newJob(fmt.Sprintf("after-%d", i), "sms", "u2")
		j.Tenant = "bank"
		data, err := j.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.pub.PublishRaw(ctx, "notify.jobs.sms.t.bank", data, j.MsgID()); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	testenv.WaitFor(t, 20*time.Second, "bank's jobs sent", func() bool { return len(b.fake.AcceptedIDs()) >= len(ids) })
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("bank's 20 jobs took %v to be sent behind the oversized one, want well under 3s", took)
	}
	b.acceptedOnce(ids)
}
