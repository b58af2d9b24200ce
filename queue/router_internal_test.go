package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/testenv"
)

// TestRouterMovesAJobOnceThroughACrash: a job on a tenant's own subject
// whose copy was stored on its fair lane, but whose original was not
// acknowledged (the router's process died between the two), is moved
// again when it comes back; the copy's Nats-Msg-Id derives from the
// original's stream sequence and store time, the same both times, so the
// stream keeps one copy.
func TestRouterMovesAJobOnceThroughACrash(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := testenv.NATS(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{URL: srv.URL(), AckWait: 2 * time.Second}.WithDefaults()
	if err := EnsureStreams(ctx, js, cfg, 1); err != nil {
		t.Fatal(err)
	}
	c, err := NewConsumer(ctx, js, cfg, ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("notify.jobs.sms.t.acme")
	m.Data = []byte(`{"id":"j-1","user_id":"u","channel":"sms","to":"+14155550123","body":"b"}`)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	// The crash: the copy stored, the original handed back unacknowledged.
	// A no-wait pull right after the publish may find the consumer
	// not caught up yet: pull until it delivers.
	var got [][]*nats.Msg
	_ = localenv.WaitFor(5*time.Second, func() error {
		if got, err = c.fetchNow(ctx, []pullWant{{lane: c.route, n: 1}}); err == nil && (len(got) != 1 || len(got[0]) == 0) {
			return errors.New("nothing delivered yet")
		}
		return nil // delivered, or an error reported below
	})
	if err != nil || len(got) != 1 || len(got[0]) != 1 {
		t.Fatalf("pull the original: %v, %v", got, err)
	}
	pm := &pulledMsg{m: got[0][0], nc: c.nc}
	first := routeID(pm)
	copyMsg := &nats.Msg{Subject: c.place.Place(ctx, Key{Channel: "sms", Tenant: "acme"}).Subject(), Data: pm.m.Data, Header: nats.Header{HeaderTenant: {"acme"}}}
	if _, err := js.PublishMsg(ctx, copyMsg, jetstream.WithMsgID(first)); err != nil {
		t.Fatal(err)
	}
	if err := pm.Nak(); err != nil {
		t.Fatal(err)
	}
	// It comes back, and the router moves it again.
	r := c.Router()
	moved, err := r.Round(ctx, 5*time.Second)
	if err != nil || moved != 1 {
		t.Fatalf("Round: %d moved, %v", moved, err)
	}
	s, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	// The original's ack is not waited for (the router's acks are
	// plain): the stream lets it go a moment after Round returns.
	var info *jetstream.StreamInfo
	_ = localenv.WaitFor(5*time.Second, func() error {
		if info, err = s.Info(ctx, jetstream.WithSubjectFilter(fairLanesFilter)); err == nil && info.State.Msgs > 1 {
			return errors.New("the original not let go yet")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var copies uint64
	for _, n := range info.State.Subjects {
		copies += n
	}
	if copies != 1 || info.State.Msgs != 1 {
		t.Fatalf("the fair lanes hold %d copies (stream %d messages), want 1: the second move's copy is a duplicate of the first", copies, info.State.Msgs)
	}
}
