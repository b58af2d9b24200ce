package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/client"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// TestEnsureStreamsLeavesTheFleetsStreams: an application's EnsureStreams
// creates streams that are missing and leaves existing ones as the fleet
// made them: it updated them to its own settings (an R3 stream became R1
// when an application asked for 1 replica; found in review).
func TestEnsureStreamsLeavesTheFleetsStreams(t *testing.T) {
	t.Parallel()
	js, err := jetstream.New(testenv.NATS(t).Conn())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.EnsureStreams(ctx, js, 1); err != nil { // nothing yet: made
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "NOTIFY")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgs = 123456 // the fleet's own setting
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := client.EnsureStreams(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	if s, err = js.Stream(ctx, "NOTIFY"); err != nil || s.CachedInfo().Config.MaxMsgs != 123456 {
		t.Errorf("NOTIFY after an application's EnsureStreams: %v (%v), want the fleet's settings kept", s.CachedInfo().Config.MaxMsgs, err)
	}
}

// TestPublishWithAnEndedCtxSendsNothing: a ctx that has ended sends
// nothing (the job was stored while the caller was told the publish had
// failed; found in review), and says so.
func TestPublishWithAnEndedCtxSendsNothing(t *testing.T) {
	t.Parallel()
	c, s, ctx := setup(t)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Publish(ended, sms("cx1")); !errors.Is(err, queue.ErrNotSent) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Publish with a cancelled ctx: %v, want not sent, context canceled", err)
	}
	time.Sleep(200 * time.Millisecond)
	if info, err := s.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Errorf("the stream holds %d jobs after a publish with a cancelled ctx (%v), want none", info.State.Msgs, err)
	}
}

// TestPublishAllEndsWithItsCtx: with acknowledgements that never come
// (a stream gone, a plain subscriber answering nothing), PublishAll of
// more jobs than may await their acknowledgement at once (4,000) returns
// when its ctx ends, not 200 ms a job after it (found in review).
func TestPublishAllEndsWithItsCtx(t *testing.T) {
	t.Parallel()
	nc := testenv.NATS(t).Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.SubscribeSync("notify.jobs.>"); err != nil {
		t.Fatal(err)
	}
	jobs := make([]*client.Job, 4025)
	for i := range jobs {
		jobs[i] = sms(fmt.Sprintf("o-%d", i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, _ = client.New(js).PublishAll(ctx, jobs)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("PublishAll with a 1 s ctx returned after %s", d)
	}
}

// TestAnInvalidIDIsNotEchoed: the error of a job whose id is invalid does
// not quote the id (it may hold a recipient, a line break, a megabyte).
func TestAnInvalidIDIsNotEchoed(t *testing.T) {
	t.Parallel()
	c, _, ctx := setup(t)
	j := &client.Job{ID: "welcome:u7@example.com", UserID: "u7", Channel: "email", To: "u7@example.com", Body: "Welcome"}
	_, err := c.Publish(ctx, j)
	var ie *client.InvalidError
	if !errors.As(err, &ie) || ie.Field != "id" {
		t.Fatalf("%v, want an invalid id", err)
	}
	if strings.Contains(err.Error(), "u7@example.com") {
		t.Errorf("the error quotes the recipient: %q", err)
	}
	j.ID = strings.Repeat("x", 1<<20) + "\nlevel=ERROR msg=forged"
	_, err = c.Publish(ctx, j)
	if n := len(err.Error()); n > 1024 || strings.Contains(err.Error(), "\n") {
		t.Errorf("the error of an invalid id is %d bytes (a line break in it: %v)", n, strings.Contains(err.Error(), "\n"))
	}
}

// TestWithFairLanesZeroIsTheDefault: WithFairLanes(0) is the default
// number of lanes, as an unset tenants.lanes is (it was one lane: every
// tenant on f.0, no shuffle sharding; found in review).
func TestWithFairLanesZeroIsTheDefault(t *testing.T) {
	t.Parallel()
	c, _, ctx := setup(t, client.WithFairLanes(0))
	for _, tenant := range []string{"acme", "globex", "initech"} {
		j := sms("z-" + tenant)
		j.Tenant = tenant
		res, err := c.Publish(ctx, j)
		if err != nil {
			t.Fatal(err)
		}
		a, b := queue.LanePair("sms", tenant, queue.DefaultFairLanes)
		if k, _ := queue.ParseJobSubject(res.Subject); k.Index != a && k.Index != b {
			t.Errorf("%s's job on %s, not on its pair f.%d/f.%d of the default %d lanes", tenant, res.Subject, a, b, queue.DefaultFairLanes)
		}
	}
}

// TestPublishOnAClosedConnectionSaysSo: a publish on a connection closed
// before its JetStream's first publish keeps nats.ErrConnectionClosed in
// its error chain (nats.go words it into text there; found in review).
func TestPublishOnAClosedConnectionSaysSo(t *testing.T) {
	t.Parallel()
	nc := testenv.NATS(t).Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(js)
	nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, sms("cc1")); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("publish on a closed connection: %v, want nats.ErrConnectionClosed in its chain", err)
	}
}
