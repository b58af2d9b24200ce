package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bundle is one test's private JetStream with both streams.
type bundle struct {
	srv *testenv.NATSServer
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg queue.Config
	pub *queue.Publisher
}

// setup starts a private server, creates the streams and returns a bundle
// whose Config has the given ack wait (30s when 0).
func setup(t *testing.T, ackWait time.Duration) *bundle {
	t.Helper()
	return newBundle(t, ctx(t), ackWait)
}

func newBundle(t testing.TB, c context.Context, ackWait time.Duration) *bundle {
	t.Helper()
	srv := testenv.NATS(t)
	nc := srv.Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := queue.Config{URL: srv.URL(), AckWait: ackWait}.WithDefaults()
	if err := queue.EnsureStreams(c, js, cfg, 1); err != nil {
		t.Fatalf("EnsureStreams: %v", err)
	}
	return &bundle{srv: srv, nc: nc, js: js, cfg: cfg, pub: queue.NewPublisher(js)}
}

func setupB(b *testing.B) *bundle { return newBundle(b, b.Context(), 0) }

func (bb *bundle) consumerB(b *testing.B) *queue.Consumer {
	c, err := queue.NewConsumer(b.Context(), bb.js, bb.cfg, queue.ConsumerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// ctx is a context that ends with the test, bounded to a minute.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// consumer creates the lane consumers on a new connection, as another
// process would.
func (b *bundle) consumer(t *testing.T, cc queue.ConsumerConfig) *queue.Consumer {
	t.Helper()
	js, err := jetstream.New(b.srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	c, err := queue.NewConsumer(ctx(t), js, b.cfg, cc)
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	return c
}

// job is a valid job for channel with id.
func job(channel, id string) *queue.Job {
	to := map[string]string{
		"sms":   "+14155550123",
		"push":  "f3a9c0d1e2b34a5f6c7d8e9fa0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9",
		"email": "ada@example.com",
	}[channel]
	return &queue.Job{ID: id, UserID: "user-1", Channel: channel, To: to, Body: "your code is 123456"}
}

// publish publishes jobs and fails the test on any error.
func (b *bundle) publish(t *testing.T, high bool, jobs ...*queue.Job) {
	t.Helper()
	for _, j := range jobs {
		if _, err := b.pub.Publish(ctx(t), j, high); err != nil {
			t.Fatalf("publish %s: %v", j.ID, err)
		}
	}
}

// streamMsgs is the number of messages stored in stream.
func (b *bundle) streamMsgs(t *testing.T, stream string) uint64 {
	t.Helper()
	s, err := b.js.Stream(ctx(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// deadLetters reads every message of NOTIFY_DEAD, oldest first.
func (b *bundle) deadLetters(t *testing.T) []*nats.Msg {
	t.Helper()
	s, err := b.js.Stream(ctx(t), "NOTIFY_DEAD")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []*nats.Msg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx(t), seq)
		if err != nil {
			continue
		}
		out = append(out, &nats.Msg{Subject: m.Subject, Data: m.Data, Header: m.Header})
	}
	return out
}
