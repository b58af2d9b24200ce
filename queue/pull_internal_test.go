package queue

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/testenv"
)

// pullSetup is a Consumer over a fresh server with n jobs on the router's
// lane (a tenant's own subject), pulled with fetchNow as the fetch loop
// pulls its lanes.
func pullSetup(t *testing.T, n int, ackWait time.Duration) (context.Context, *Consumer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	srv := testenv.NATS(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{URL: srv.URL(), AckWait: ackWait}.WithDefaults()
	if err := EnsureStreams(ctx, js, cfg, 1); err != nil {
		t.Fatal(err)
	}
	c, err := NewConsumer(ctx, js, cfg, ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		m := nats.NewMsg("notify.jobs.sms.t.acme")
		m.Data = fmt.Appendf(nil, `{"id":"j-%d","user_id":"u","channel":"sms","to":"+14155550123","body":"b"}`, i)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, c
}

// pullN fetches until it has n messages from the router's lane (a no-wait
// pull right after a publish may find the consumer not caught up yet).
func pullN(ctx context.Context, t *testing.T, c *Consumer, n int) []*nats.Msg {
	t.Helper()
	var got []*nats.Msg
	err := localenv.WaitFor(5*time.Second, func() error {
		g, err := c.fetchNow(ctx, []pullWant{{lane: c.route, n: n - len(got)}})
		if err != nil {
			return err
		}
		got = append(got, g[0]...)
		if len(got) < n {
			return fmt.Errorf("%d of %d delivered", len(got), n)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pull %d: %v", n, err)
	}
	return got
}

// TestFetchKeepsItsInbox: fetches one after another answer on one kept
// inbox, with no subscription of their own (a SUB and an UNSUB for every
// fetch and lane before), and each gets what it asked for, no job twice.
func TestFetchKeepsItsInbox(t *testing.T) {
	t.Parallel()
	ctx, c := pullSetup(t, 40, time.Minute)
	seen := map[string]bool{}
	take := func() {
		for _, m := range pullN(ctx, t, c, 4) {
			if seen[string(m.Data)] {
				t.Fatalf("%s delivered twice", m.Data)
			}
			seen[string(m.Data)] = true
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
	}
	take()
	subs := c.nc.NumSubscriptions()
	for range 9 {
		take()
		if n := c.nc.NumSubscriptions(); n != subs {
			t.Fatalf("subscriptions %d after a fetch, want %d as after the first: the inbox was not kept", n, subs)
		}
	}
	if len(seen) != 40 {
		t.Errorf("%d jobs pulled, want 40", len(seen))
	}
	c.inboxMu.Lock()
	kept := len(c.inboxes)
	c.inboxMu.Unlock()
	if kept != 1 {
		t.Errorf("%d inboxes kept, want 1", kept)
	}
}

// TestCloseDropsTheKeptInboxes: Close unsubscribes the inbox a fetch
// kept, and a fetch after it still works, on an inbox it does not keep.
func TestCloseDropsTheKeptInboxes(t *testing.T) {
	t.Parallel()
	ctx, c := pullSetup(t, 8, time.Minute)
	before := c.nc.NumSubscriptions()
	ack := func(n int) {
		for _, m := range pullN(ctx, t, c, n) {
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
	}
	ack(4)
	if n := c.nc.NumSubscriptions(); n != before+1 {
		t.Fatalf("subscriptions %d after a fetch, want %d (its inbox kept)", n, before+1)
	}
	c.Close()
	if n := c.nc.NumSubscriptions(); n != before {
		t.Errorf("subscriptions %d after Close, want %d", n, before)
	}
	ack(4)
	if n := c.nc.NumSubscriptions(); n != before {
		t.Errorf("subscriptions %d after a fetch after Close, want %d (nothing kept)", n, before)
	}
	c.Close() // a second time: nothing to do
}

// TestFetchHandsBackStrays: a message on a kept inbox that answers none
// of the current fetch's requests (a stored message of another lane, a
// status for a request of an earlier fetch) does not end the fetch or
// count as its own; a stored one goes back to the stream at once (nak),
// not after its ack wait.
func TestFetchHandsBackStrays(t *testing.T) {
	t.Parallel()
	ctx, c := pullSetup(t, 3, time.Minute) // an ack wait far past the test's waits
	other, err := c.laneFor(ctx, "notify.jobs.sms")
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("notify.jobs.sms")
	m.Data = []byte(`{"id":"o-1","user_id":"u","channel":"sms","to":"+14155550123","body":"b"}`)
	if _, err := c.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	var stray *nats.Msg
	if err := localenv.WaitFor(5*time.Second, func() error {
		g, err := c.fetchNow(ctx, []pullWant{{lane: other, n: 1}})
		if err == nil && len(g[0]) == 0 {
			err = errors.New("nothing delivered yet")
		}
		if err == nil {
			stray = g[0][0]
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c.inboxMu.Lock()
	in := c.inboxes[0]
	c.inboxMu.Unlock()
	// Late arrivals on the kept inbox: the other lane's job, as if its
	// request had delivered it after the fetch ended, and a status for a
	// request of an earlier fetch.
	in.ch <- &nats.Msg{Subject: in.prefix + "0", Header: nats.Header{"Status": {"404"}}}
	in.ch <- stray
	// And a message some client published to the inbox: no job, and its
	// reply subject is not answered.
	forged, err := c.nc.SubscribeSync("forged.reply")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = forged.Unsubscribe() }()
	in.ch <- &nats.Msg{Subject: in.prefix + "1", Reply: "forged.reply", Data: []byte(`{"id":"forged"}`)}
	got := pullN(ctx, t, c, 2)
	if m, err := forged.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("answered a forged message's reply subject: %q", m.Data)
	}
	for _, m := range got {
		if string(m.Data) == string(stray.Data) || string(m.Data) == `{"id":"forged"}` {
			t.Fatalf("the stray %s was taken as the router lane's", m.Data)
		}
	}
	// The stray was handed back: its lane delivers it again now.
	g, err := c.fetchNow(ctx, []pullWant{{lane: other, n: 1}})
	if err != nil || len(g[0]) != 1 || string(g[0][0].Data) != string(stray.Data) {
		t.Fatalf("pull the other lane again: %v, %v; want the stray back at once", g, err)
	}
	if md, err := g[0][0].Metadata(); err != nil || md.NumDelivered != 2 {
		t.Errorf("the stray's metadata %+v, %v: want its second delivery", md, err)
	}
}

// TestFetchHandsBackWhatWaitsOnAKeptInbox: a stored message found on a
// kept inbox when a fetch takes it (one its lane sent after an earlier
// request had ended, as after a leader change) is not counted as the new
// request's, even from the same lane: it goes back to the stream at once.
func TestFetchHandsBackWhatWaitsOnAKeptInbox(t *testing.T) {
	t.Parallel()
	ctx, c := pullSetup(t, 3, time.Minute)
	late := pullN(ctx, t, c, 1)[0]
	c.inboxMu.Lock()
	in := c.inboxes[0]
	c.inboxMu.Unlock()
	in.ch <- late
	// Handed back, it comes again at once (its second delivery), with
	// the two jobs not yet pulled.
	redelivered := 0
	for _, m := range pullN(ctx, t, c, 3) {
		if m == late {
			t.Fatalf("the late %s was counted as the new request's", late.Data)
		}
		if string(m.Data) == string(late.Data) {
			if md, err := m.Metadata(); err != nil || md.NumDelivered != 2 {
				t.Fatalf("the late job again: %+v, %v; want its second delivery", md, err)
			}
			redelivered++
		}
	}
	if redelivered != 1 {
		t.Fatalf("the late job came back %d times, want once", redelivered)
	}
}

// TestFetchDropsAnInboxAfterAnError: an inbox on which a request ended
// with an error status is not kept (a 409 at a leader change can come
// before the old leader's deliveries), and the next fetch works on a new
// one.
func TestFetchDropsAnInboxAfterAnError(t *testing.T) {
	t.Parallel()
	ctx, c := pullSetup(t, 2, time.Minute)
	pullN(ctx, t, c, 1)
	c.inboxMu.Lock()
	kept := c.inboxes[0]
	c.inboxMu.Unlock()
	if err := c.js.DeleteConsumer(ctx, c.cfg.Stream, c.route.name); err != nil {
		t.Fatal(err)
	}
	if _, err := c.fetchNow(ctx, []pullWant{{lane: c.route, n: 1}}); err == nil {
		t.Fatal("a pull from a deleted consumer succeeded")
	}
	c.inboxMu.Lock()
	n := len(c.inboxes)
	c.inboxMu.Unlock()
	if n != 0 || kept.sub.IsValid() {
		t.Fatalf("%d inboxes kept (the first still subscribed: %v) after an error status, want none", n, kept.sub.IsValid())
	}
}

// TestFetchAsksALaneOnce: a lane wanted twice in one fetch is asked once,
// for the sum (two requests of one consumer could not be told apart), all
// of it in the lane's first entry.
func TestFetchAsksALaneOnce(t *testing.T) {
	t.Parallel()
	ctx, c := pullSetup(t, 4, time.Minute)
	var got [][]*nats.Msg
	err := localenv.WaitFor(5*time.Second, func() error {
		g, err := c.fetchNow(ctx, []pullWant{{lane: c.route, n: 2}, {lane: c.route, n: 2}})
		if err != nil {
			return err
		}
		got = g
		if len(g) != 2 || len(g[0])+len(g[1]) < 4 {
			nakAll(c.nc, append(g[0], g[1]...))
			return fmt.Errorf("%d and %d delivered", len(g[0]), len(g[1]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0]) != 4 || len(got[1]) != 0 {
		t.Fatalf("%d and %d delivered, want all 4 in the first entry", len(got[0]), len(got[1]))
	}
}
