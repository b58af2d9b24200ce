package dispatch

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/limits/suppress"
	"github.com/notifier/notifier/testenv"
)

// TestSuppressedRecipientIsNotSentTo: a recipient the provider answers
// 410 Gone once goes on the suppression list — its job dead-lettered
// (rejected) saying so; the next 5 jobs to it make no provider request
// and end suppressed (suppressed_recipient), their detail naming the
// entry, never the address; another recipient is not affected; once
// removed from the list (`notifier suppression remove`), the next job to
// it is sent.
func TestSuppressedRecipientIsNotSentTo(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	p := b.start(func(o *Options) { o.SuppressTTL = time.Hour })
	b.fake.FailNext(1, http.StatusGone)
	gone := newJob("first", "sms", "u1") // to +447700900123
	b.publish(gone)
	testenv.WaitFor(t, 20*time.Second, "the 410 dead-lettered", func() bool { return len(b.deadLetters()) == 1 })
	dl := b.deadLetters()[0]
	if dl.Reason != ledger.ReasonRejected || !strings.Contains(dl.Detail, "now suppressed for 1h") {
		t.Fatalf("the 410's dead letter: %+v", dl)
	}
	requests := len(b.fake.Requests())
	for i := range 5 {
		b.publish(newJob(fmt.Sprintf("again-%d", i), "sms", "u1"))
	}
	other := newJob("other", "sms", "u2")
	other.To = "+447700900124"
	b.publish(other)
	testenv.WaitFor(t, 20*time.Second, "5 suppressed, the other sent", func() bool {
		return len(b.deadLetters()) == 6 && len(b.fake.AcceptedIDs()) == 1
	})
	if n := len(b.fake.Requests()) - requests; n != 1 {
		t.Fatalf("%d provider requests after the 410, want 1 (the other recipient's)", n)
	}
	for _, dl := range b.deadLetters()[1:] {
		if dl.Reason != ReasonSuppressedRecipient || !strings.Contains(dl.Subject, "suppressed") ||
			!strings.Contains(dl.Detail, "suppression list since") || strings.Contains(dl.Detail, "447700900123") {
			t.Errorf("dead letter %+v, want suppressed_recipient naming the entry, not the address", dl)
		}
	}
	if n := testutil.ToFloat64(p.d.m.Suppressions.WithLabelValues("sms")); n != 1 {
		t.Errorf("notifier_suppressions_total counted %v, want 1", n)
	}
	list := suppress.NewRedis(b.redis.Client(), b.prefix)
	if removed, err := list.Remove(context.Background(), "sms", suppress.Hash("sms", gone.To)); err != nil || !removed {
		t.Fatalf("remove: %v, %v", removed, err)
	}
	b.publish(newJob("after-remove", "sms", "u1"))
	testenv.WaitFor(t, 20*time.Second, "the job after the removal sent", func() bool { return len(b.fake.AcceptedIDs()) == 2 })
}
