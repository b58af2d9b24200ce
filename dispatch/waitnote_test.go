package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// TestLedgerSaysWhyAJobWaits: the dispatcher notes in a job's ledger
// record why it waits, through the whole pipeline, for `notifier explain
// --job` (issue 29): a job whose send slot is seconds away (the first
// after a cold start waits about max_queue_delay) holds its lease with the
// wait noted (slot, until its slot); a job of a provider paused while it
// was held is handed back with the pause noted (provider_paused), and is
// sent once the pause ends, its notes left as history.
func TestLedgerSaysWhyAJobWaits(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{rate: 1, maxQueueDelay: 8 * time.Second})
	ctx := context.Background()
	rdb := b.redis.Client()
	led := ledger.NewRedis(rdb, b.prefix, time.Hour)
	record := func(id string) ledger.Record {
		t.Helper()
		r, err := led.Record(ctx, queue.MsgID("", id))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	q := leakyRedis(t, rdb, b.prefix)
	b.start(nil)
	b.publish(newJob("s-1", "sms", "u1"), newJob("s-2", "sms", "u2"), newJob("e-1", "email", "u5"))

	// The first jobs after a cold start wait about max_queue_delay for
	// their slots, holding their leases; meanwhile email-gw is paused for
	// longer than a job waits in its worker.
	var far ledger.Record
	testenv.WaitFor(t, 10*time.Second, "a far slot noted", func() bool {
		far = record("s-1")
		return far.Why == ledger.WaitSlot
	})
	if far.Owner == "" || far.Sent || far.Deferrals != 0 || far.Until.Before(time.Now().Add(time.Second)) {
		t.Fatalf("s-1 waiting for its slot: %+v, want its lease held, due seconds later, no deferral", far)
	}
	// e-1 too holds its far slot when the pause comes (on a loaded machine
	// the note above can take seconds to appear, and e-1 must not be sent
	// meanwhile: max_queue_delay is 8 s, and the pause outlasts it).
	testenv.WaitFor(t, 10*time.Second, "e-1's far slot noted", func() bool { return record("e-1").Why == ledger.WaitSlot })
	if err := q.Pause(ctx, "email-gw", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the paused provider's job put off", func() bool {
		return record("e-1").Why == ledger.DeferProviderPaused
	})
	if r := record("e-1"); r.Owner != "" || r.Deferrals < 1 || r.Sent {
		t.Fatalf("e-1 put off by the pause: %+v, want no lease, at least one deferral", r)
	}
	testenv.WaitFor(t, 30*time.Second, "every job sent", func() bool { return len(b.fake.AcceptedIDs()) == 3 })
	for _, id := range []string{"s-1", "e-1"} {
		testenv.WaitFor(t, 5*time.Second, id+"'s record says sent", func() bool { return record(id).Sent })
	}
	// Sent, its record keeps what it waited for last: the pause, or (on a
	// loaded machine, when it came back to a queue whose next slot was
	// then more than slotNote away) the slot it waited for after the
	// pause; the deferral's count stays either way.
	if r := record("e-1"); r.Deferrals < 1 || (r.Why != ledger.DeferProviderPaused && r.Why != ledger.WaitSlot) {
		t.Fatalf("e-1 sent: %+v, want its deferral kept as history", r)
	}
}
