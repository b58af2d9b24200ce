package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

func TestPublishDeduplicatesByJobID(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	j := job("sms", "dup-1")
	dup, err := b.pub.Publish(ctx(t), j, false)
	if err != nil || dup {
		t.Fatalf("first publish: duplicate=%v err=%v", dup, err)
	}
	// The same id again, even on the other lane and with another body, is
	// dropped by the stream.
	j2 := *j
	j2.Body = "changed"
	dup, err = b.pub.Publish(ctx(t), &j2, true)
	if err != nil || !dup {
		t.Fatalf("second publish: duplicate=%v err=%v, want duplicate", dup, err)
	}
	dup, err = b.pub.PublishRaw(ctx(t), queue.JobSubject("sms", false), []byte("raw"), "dup-1")
	if err != nil || !dup {
		t.Fatalf("raw publish with the same id: duplicate=%v err=%v, want duplicate", dup, err)
	}
	if n := b.streamMsgs(t, "NOTIFY"); n != 1 {
		t.Fatalf("NOTIFY holds %d messages, want 1", n)
	}

	c := b.consumer(t, queue.ConsumerConfig{})
	ds, err := c.Fetch(ctx(t), 10, 0)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Fetch: %d deliveries, %v", len(ds), err)
	}
	if got := ds[0].Header.Get(jetstream.MsgIDHeader); got != "dup-1" {
		t.Errorf("Nats-Msg-Id %q, want the job id", got)
	}
	back, err := queue.Decode(ds[0].Subject, ds[0].Data)
	if err != nil || back.Body != j.Body {
		t.Errorf("stored job %+v, %v; want the first publish", back, err)
	}
}

func TestPublishRawWithoutIDIsNotDeduplicated(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	for range 2 {
		if dup, err := b.pub.PublishRaw(ctx(t), "notify.jobs.sms", []byte("not json"), ""); err != nil || dup {
			t.Fatalf("PublishRaw: duplicate=%v err=%v", dup, err)
		}
	}
	if n := b.streamMsgs(t, "NOTIFY"); n != 2 {
		t.Fatalf("NOTIFY holds %d messages, want 2", n)
	}
}

func TestPublishRefusesInvalidJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	j := job("sms", "bad-1")
	j.To = "12345"
	_, err := b.pub.Publish(ctx(t), j, false)
	var ie *queue.InvalidError
	if !errors.As(err, &ie) || ie.Field != "to" {
		t.Fatalf("Publish of an invalid job: %v, want an *InvalidError on to", err)
	}
	if n := b.streamMsgs(t, "NOTIFY"); n != 0 {
		t.Fatalf("NOTIFY holds %d messages, want 0", n)
	}
}

func TestBatchCountsAcks(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	batch := b.pub.NewBatch(16, 0)
	const unique, repeats = 300, 20
	var wg sync.WaitGroup
	for w := range 3 { // concurrent publishers share the batch
		wg.Go(func() {
			for i := w; i < unique; i += 3 {
				if err := batch.Publish(ctx(t), job("push", fmt.Sprintf("load-%d", i)), i%10 == 0); err != nil {
					t.Errorf("Publish %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	for i := range repeats {
		if err := batch.Publish(ctx(t), job("push", fmt.Sprintf("load-%d", i)), false); err != nil {
			t.Fatalf("Publish repeat %d: %v", i, err)
		}
	}
	if got := batch.Result(); got.Pending > 16 {
		t.Errorf("%d publishes awaiting their ack, want at most 16", got.Pending)
	}
	// One that no stream takes: counted as failed, with its error.
	if err := batch.PublishRaw(ctx(t), "notify.nowhere", []byte("x"), "x-1"); err != nil {
		t.Fatalf("PublishRaw: %v", err)
	}
	bad := job("push", "bad")
	bad.UserID = ""
	if err := batch.Publish(ctx(t), bad, false); err == nil {
		t.Fatal("an invalid job was accepted")
	}

	res, err := batch.Wait(ctx(t))
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if res.Stored != unique || res.Duplicates != repeats || res.Failed != 1 || res.Pending != 0 {
		t.Fatalf("result %+v, want %d stored, %d duplicates, 1 failed", res, unique, repeats)
	}
	if !errors.Is(res.Err, jetstream.ErrNoStreamResponse) || !strings.Contains(res.Err.Error(), "notify.nowhere") {
		t.Errorf("first failure %v, want the refused publish", res.Err)
	}
	if n := b.streamMsgs(t, "NOTIFY"); n != unique {
		t.Fatalf("NOTIFY holds %d messages, want %d", n, unique)
	}
	if err := batch.Publish(ctx(t), job("push", "late"), false); err == nil {
		t.Fatal("Publish after Wait succeeded")
	}
}

func TestBatchWaitGivesUpWithContext(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	batch := b.pub.NewBatch(4, time.Hour)
	for i := range 3 {
		if err := batch.Publish(ctx(t), job("sms", fmt.Sprintf("w-%d", i)), false); err != nil {
			t.Fatal(err)
		}
	}
	b.srv.Stop() // acknowledgements can no longer come from the server
	c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := batch.Wait(c)
	if res.Stored+res.Failed+res.Pending != 3 {
		t.Fatalf("result %+v does not account for 3 publishes", res)
	}
	if res.Pending > 0 && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with pending acks: %v, want the context's error", err)
	}
}

func TestDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	original := []byte(`{"id":"x","channel":"fax"` + "\n}")
	if _, err := b.pub.PublishRaw(ctx(t), "notify.jobs.fax.high", original, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pub.PublishRaw(ctx(t), "notify.jobs.fa$x", []byte("garbage"), ""); err != nil {
		t.Fatal(err)
	}
	c := b.consumer(t, queue.ConsumerConfig{})
	ds, err := c.Fetch(ctx(t), 2, time.Second)
	if err != nil || len(ds) != 2 {
		t.Fatalf("Fetch: %d deliveries, %v", len(ds), err)
	}
	d := ds[0]
	_, decodeErr := queue.Decode(d.Subject, d.Data)
	if decodeErr == nil {
		t.Fatal("the invalid job decoded")
	}
	detail := "line one\r\nline two: " + decodeErr.Error()
	for range 2 { // a retried dead-lettering (crash before the ack) stores one message
		if err := b.pub.DeadLetter(ctx(t), d, queue.Dead, "invalid", detail); err != nil {
			t.Fatalf("DeadLetter: %v", err)
		}
	}
	if err := b.pub.DeadLetter(ctx(t), ds[1], queue.Suppressed, "expired", "too late"); err != nil {
		t.Fatalf("DeadLetter of a garbage subject: %v", err)
	}
	for _, d := range ds {
		if err := d.Ack(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.streamMsgs(t, "NOTIFY_DEAD"); n != 2 {
		t.Fatalf("NOTIFY_DEAD holds %d messages, want 2 (the retry deduplicated)", n)
	}
	if n := b.streamMsgs(t, "NOTIFY"); n != 0 {
		t.Fatalf("NOTIFY holds %d messages after the acks, want 0", n)
	}

	s, err := b.js.Stream(ctx(t), "NOTIFY_DEAD")
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx(t), "notify.dead.fax")
	if err != nil {
		t.Fatalf("dead letter on notify.dead.fax: %v", err)
	}
	if string(m.Data) != string(original) {
		t.Errorf("dead letter body %q, want the original bytes %q", m.Data, original)
	}
	if got := m.Header.Get(queue.HeaderReason); got != "invalid" {
		t.Errorf("Notifier-Reason %q", got)
	}
	if got, want := m.Header.Get(queue.HeaderDetail), "line one line two: "+decodeErr.Error(); got != want {
		t.Errorf("Notifier-Detail %q, want %q", got, want)
	}
	if got := m.Header.Get(queue.HeaderSubject); got != "notify.jobs.fax.high" {
		t.Errorf("Notifier-Subject %q", got)
	}
	if id := m.Header.Get(jetstream.MsgIDHeader); !strings.HasPrefix(id, fmt.Sprintf("dead:NOTIFY:%d:", d.StreamSeq)) {
		t.Errorf("Nats-Msg-Id %q, want one derived from the stream sequence %d", id, d.StreamSeq)
	}
	m, err = s.GetLastMsgForSubject(ctx(t), "notify.suppressed.fa_x")
	if err != nil {
		t.Fatalf("garbage subject dead letter on notify.suppressed.fa_x: %v", err)
	}
	if string(m.Data) != "garbage" || m.Header.Get(queue.HeaderReason) != "expired" || m.Header.Get(queue.HeaderSubject) != "notify.jobs.fa$x" {
		t.Errorf("suppressed message %q headers %v", m.Data, m.Header)
	}
}

func TestDeadLetterRefusesBadArguments(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.publish(t, false, job("sms", "a-1"))
	c := b.consumer(t, queue.ConsumerConfig{})
	ds, err := c.Fetch(ctx(t), 1, time.Second)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Fetch: %d, %v", len(ds), err)
	}
	if err := b.pub.DeadLetter(ctx(t), ds[0], "lost", "invalid", ""); err == nil {
		t.Error("an unknown outcome was accepted")
	}
	if err := b.pub.DeadLetter(ctx(t), ds[0], queue.Dead, "two words", ""); err == nil {
		t.Error("a reason of two words was accepted")
	}
	if err := b.pub.DeadLetter(ctx(t), ds[0], queue.Dead, "", ""); err == nil {
		t.Error("an empty reason was accepted")
	}
	if n := b.streamMsgs(t, "NOTIFY_DEAD"); n != 0 {
		t.Fatalf("NOTIFY_DEAD holds %d messages, want 0", n)
	}
}

// TestDeadReport: a provider's report that it could not deliver a job it
// accepted is stored as a dead letter on notify.dead.<channel> with its
// reason and detail; its body is the report, naming the job (dead list
// shows the job id), and the same report twice is stored once.
func TestDeadReport(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	r := queue.Report{Channel: "sms", JobID: "otp-42", Provider: "twilio-eu", Status: "undelivered", ErrorCode: 30003}
	for range 2 {
		if err := b.pub.DeadReport(ctx(t), r, "undelivered", "Twilio error 30003: Unreachable destination handset"); err != nil {
			t.Fatalf("DeadReport: %v", err)
		}
	}
	letters, _, err := queue.NewDeadLetters(b.js, b.cfg).List(ctx(t), queue.DeadFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(letters) != 1 {
		t.Fatalf("%d dead letters, want 1 (the repeated report stored once)", len(letters))
	}
	d := letters[0]
	if d.Subject != "notify.dead.sms" || d.Reason != "undelivered" || d.JobID != "otp-42" ||
		d.Detail != "Twilio error 30003: Unreachable destination handset" {
		t.Errorf("dead letter %s reason %q job %q detail %q", d.Subject, d.Reason, d.JobID, d.Detail)
	}
	if want := `{"id":"otp-42","channel":"sms","provider":"twilio-eu","status":"undelivered","error_code":30003}`; string(d.Data) != want {
		t.Errorf("body %s, want %s", d.Data, want)
	}
	if err := b.pub.DeadReport(ctx(t), r, "not a word", ""); err == nil {
		t.Error("a reason of several words was accepted")
	}
	r.Channel = "sms.x"
	if err := b.pub.DeadReport(ctx(t), r, "undelivered", ""); err == nil {
		t.Error("a channel that is not a subject token was accepted")
	}
}

func TestPublishMsgsKeepsHeadersAndDeduplicates(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	data := func(id string) []byte {
		d, err := job("sms", id).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	hdr := nats.Header{}
	hdr.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	msgs := []queue.OutMsg{
		{Subject: queue.JobSubject("sms", false), Data: data("h-1"), MsgID: "h-1", Header: hdr},
		{Subject: queue.JobSubject("sms", false), Data: data("h-2"), MsgID: "h-2"},
		{Subject: queue.JobSubject("sms", false), Data: data("h-1"), MsgID: "h-1", Header: hdr},
		{Subject: "notify.nowhere", Data: []byte("x"), MsgID: "x"},
	}
	res := b.pub.PublishMsgs(ctx(t), msgs)
	if res[0].Err != nil || res[0].Duplicate || res[1].Err != nil || res[1].Duplicate {
		t.Fatalf("first two: %+v %+v, want stored", res[0], res[1])
	}
	if res[2].Err != nil || !res[2].Duplicate {
		t.Fatalf("the same Nats-Msg-Id again: %+v, want a duplicate", res[2])
	}
	if !errors.Is(res[3].Err, jetstream.ErrNoStreamResponse) && !errors.Is(res[3].Err, nats.ErrNoResponders) {
		t.Fatalf("a subject no stream takes: %v, want no stream", res[3].Err)
	}
	if len(hdr) != 1 {
		t.Errorf("the caller's header was changed: %v", hdr)
	}
	if n := b.streamMsgs(t, "NOTIFY"); n != 2 {
		t.Fatalf("NOTIFY holds %d messages, want 2", n)
	}
	c := b.consumer(t, queue.ConsumerConfig{})
	ds, err := c.Fetch(ctx(t), 10, 0)
	if err != nil || len(ds) != 2 {
		t.Fatalf("Fetch: %d deliveries, %v", len(ds), err)
	}
	for _, d := range ds {
		want := ""
		if d.Header.Get(jetstream.MsgIDHeader) == "h-1" {
			want = hdr.Get("traceparent")
		}
		if got := d.Header.Get("traceparent"); got != want {
			t.Errorf("%s: traceparent %q, want %q", d.Header.Get(jetstream.MsgIDHeader), got, want)
		}
	}
}

func TestPublishMsgsFailsWhenTheServerIsDown(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	nc := b.srv.Conn(nats.ReconnectBufSize(-1))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pub := queue.NewPublisher(js)
	b.srv.Stop()
	testenv.WaitFor(t, 5*time.Second, "client sees the disconnect", func() bool { return !nc.IsConnected() })
	c, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	d, _ := job("sms", "down-1").Marshal()
	res := pub.PublishMsgs(c, []queue.OutMsg{{Subject: queue.JobSubject("sms", false), Data: d, MsgID: "down-1"}})
	if res[0].Err == nil {
		t.Fatal("a publish with the server down succeeded")
	}
}
