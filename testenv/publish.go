package testenv

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStreamNoSync starts a server that does not sync every write
// (WithNATSNoSync) and returns it, a connection to it and a JetStream
// context that keeps up to 4,096 asynchronous publishes in flight: for a
// test that stores 100,000 messages to measure what reads them.
func JetStreamNoSync(t testing.TB) (*NATSServer, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	n := NATS(t, WithNATSNoSync())
	nc := n.Conn()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return n, nc, js
}

// PublishAll publishes n messages, msg(i), asynchronously, and waits for
// every acknowledgement; an error, or ctx ending first, fails the test.
func PublishAll(ctx context.Context, t testing.TB, js jetstream.JetStream, n int, msg func(i int) *nats.Msg) {
	t.Helper()
	wait := func() {
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			t.Fatalf("testenv: publish %d messages: %v", n, ctx.Err())
		}
	}
	for i := range n {
		if _, err := js.PublishMsgAsync(msg(i)); err != nil {
			t.Fatalf("testenv: publish message %d of %d: %v", i, n, err)
		}
		if i%2048 == 2047 {
			wait()
		}
	}
	wait()
}
