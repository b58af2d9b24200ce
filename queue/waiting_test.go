package queue_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/notifier/notifier/queue"
)

// TestFindWaiting: FindWaiting finds a job still in the work-queue stream
// by its id within its tenant (the default tenant's on its plain subject,
// a named tenant's on its fair lane and on its own subject), skips the
// sequences of jobs already acknowledged, tells one tenant's id from
// another's, reads no more than asked, and says when the whole stream was
// read without finding it.
func TestFindWaiting(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := ctx(t)
	pub := func(j *queue.Job, high bool) {
		t.Helper()
		if _, err := b.pub.Publish(c, j, high); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1500 { // more than a chunk of gets, and a hole
		pub(&queue.Job{ID: fmt.Sprintf("j-%d", i), UserID: "u", Channel: "sms", To: "+14155550123", Body: "x"}, false)
	}
	// Acknowledge the first 600: a hole the scan steps over.
	cons := b.consumer(t, queue.ConsumerConfig{})
	acked := 0
	for acked < 600 {
		ds, err := cons.Fetch(c, 600-acked, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if err := d.Ack(c); err != nil {
				t.Fatal(err)
			}
			acked++
		}
	}
	// The tenants' jobs come after the acknowledgements (a consumer takes
	// the priority lane first).
	pub(&queue.Job{ID: "shared", UserID: "u", Channel: "push", To: "device-token-0123456789", Body: "x", Tenant: "acme"}, true)
	if _, err := b.pub.PublishRaw(c, queue.JobSubjectFor("email", "beta", false), []byte(`{"id":"shared","user_id":"u","channel":"email","to":"a@example.com","body":"x"}`), "beta/shared"); err != nil {
		t.Fatal(err)
	}
	find := func(tenant, id string, limit int) queue.WaitingScan {
		t.Helper()
		s, err := queue.FindWaiting(c, b.js, b.cfg, tenant, id, limit)
		if err != nil {
			t.Fatalf("find %s/%s: %v", tenant, id, err)
		}
		return s
	}
	s := find("", "j-1234", 0)
	if s.Job == nil || s.Job.Channel != "sms" || s.Job.Subject != "notify.jobs.sms" || s.InStream != 902 {
		t.Fatalf("j-1234: %+v (job %+v), want found on notify.jobs.sms among 902", s, s.Job)
	}
	if j := find("", "j-10", 0); j.Job != nil || !j.Complete || j.Scanned != 902 {
		t.Fatalf("an acknowledged job: %+v, want not found after all 902", j)
	}
	acme := find("acme", "shared", 0)
	if acme.Job == nil || acme.Job.Channel != "push" {
		t.Fatalf("acme's shared: %+v", acme)
	}
	if k, ok := queue.ParseJobSubject(acme.Job.Subject); !ok || !k.Fair || !k.High {
		t.Fatalf("acme's job on %s, want a fair priority lane", acme.Job.Subject)
	}
	beta := find("beta", "shared", 0)
	if beta.Job == nil || beta.Job.Channel != "email" || beta.Job.Subject != "notify.jobs.email.t.beta" {
		t.Fatalf("beta's shared: %+v", beta.Job)
	}
	if d := find("", "shared", 0); d.Job != nil {
		t.Fatalf("the default tenant has no job shared: found %+v", d.Job)
	}
	if l := find("", "j-1499", 100); l.Job != nil || l.Complete || l.Scanned < 100 || l.Scanned > 100+7 {
		t.Fatalf("limit 100: %+v, want about 100 read, not found, not complete", l)
	}
	if _, err := queue.FindWaiting(c, b.js, b.cfg, "", "not an id!", 0); err == nil {
		t.Fatal("a malformed id: no error")
	}
}

// BenchmarkFindWaiting reads a stream of NOTIFIER_SCAN_JOBS jobs (10,000
// by default) looking for the last one: the cost of `explain --job` on a
// job not taken yet (docs/operating.md).
//
//	NOTIFIER_SCAN_JOBS=100000 go test -run '^$' -bench FindWaiting -benchtime 3x ./queue
func BenchmarkFindWaiting(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("NOTIFIER_SCAN_JOBS")); err == nil && v > 0 {
		n = v
	}
	bb := setupB(b)
	batch := bb.pub.NewBatch(512, time.Minute)
	for i := range n {
		j := &queue.Job{ID: fmt.Sprintf("job-%d", i), UserID: fmt.Sprintf("u%d", i%1000), Channel: "sms", To: "+14155550123", Body: "Your code is 123456"}
		if err := batch.Publish(b.Context(), j, false); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := batch.Wait(b.Context()); err != nil {
		b.Fatal(err)
	}
	last := fmt.Sprintf("job-%d", n-1)
	b.ResetTimer()
	for b.Loop() {
		s, err := queue.FindWaiting(b.Context(), bb.js, bb.cfg, "", last, 0)
		if err != nil || s.Job == nil {
			b.Fatalf("find %s: %+v, %v", last, s, err)
		}
	}
	b.ReportMetric(float64(n), "msgs")
}
