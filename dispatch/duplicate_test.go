package dispatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// TestDuplicateIDWithOtherContentIsDeadLettered: a second job given an id
// that was already sent, with other content (published without its
// Nats-Msg-Id, so JetStream does not drop it), is not sent and not dropped
// in silence: it is dead-lettered as duplicate_id, its detail naming the
// stream sequence of the message sent and never its content; a redelivery
// of the same message is a duplicate, acknowledged unsent. Ids are unique
// within a tenant: two tenants' jobs with the same id are both sent.
func TestDuplicateIDWithOtherContentIsDeadLettered(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	p := b.start(nil)
	first := newJob("same-id", "sms", "u1")
	b.publish(first)
	testenv.WaitFor(t, 20*time.Second, "the first sent", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	second := newJob("same-id", "sms", "u1")
	second.Body = "a different secret text"
	data, err := second.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pub.PublishRaw(context.Background(), queue.JobSubject("sms", false), data, ""); err != nil {
		t.Fatal(err)
	}
	same, err := first.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pub.PublishRaw(context.Background(), queue.JobSubject("sms", false), same, ""); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "a duplicate and a dead letter", func() bool {
		return p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeDuplicate)) == 1 &&
			p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeDead)) == 1
	})
	if n := len(b.fake.Requests()); n != 1 {
		t.Fatalf("%d requests at the provider, want 1", n)
	}
	dead := b.deadLetters()
	if len(dead) != 1 || dead[0].Reason != ledger.ReasonDuplicateID || !strings.Contains(dead[0].Detail, "stream sequence 1") ||
		!strings.Contains(dead[0].Detail, "same-id") || strings.Contains(dead[0].Detail, "secret") {
		t.Fatalf("dead letters %+v, want one duplicate_id naming the id and the sequence sent, never the content", dead)
	}
	if strings.Contains(b.logs.String(), "secret") {
		t.Errorf("the job's content reached the log")
	}

	// Two tenants, one id: two jobs, both sent.
	for _, tenant := range []string{"acme", "bank"} {
		j := newJob("order-42", "sms", "u-"+tenant)
		j.Tenant = tenant
		b.publish(j)
	}
	testenv.WaitFor(t, 20*time.Second, "both tenants' order-42 sent", func() bool { return len(b.fake.AcceptedIDs()) == 3 })
	if n := len(b.deadLetters()); n != 1 {
		t.Errorf("%d dead letters after two tenants' order-42, want still 1", n)
	}
	// And the provider is told two keys: a receiver deduplicating on the
	// Idempotency-Key must not drop the second tenant's job as the first's.
	keys := map[string]bool{}
	for _, r := range b.fake.Accepted() {
		if r.ID != "same-id" {
			keys[r.Header.Get("Idempotency-Key")] = true
		}
	}
	if !keys[`"acme/order-42"`] || !keys[`"bank/order-42"`] {
		t.Errorf("the two tenants' order-42 carried Idempotency-Keys %v, want acme/order-42 and bank/order-42", keys)
	}
}
