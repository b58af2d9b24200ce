package queue_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/queue"
)

// letter is a dead letter to store in a test.
type letter struct {
	outcome queue.Outcome
	subject string // the job's original subject
	data    string
	reason  string
	detail  string
}

// store dead-letters each letter as the dispatcher would (from a delivery
// of the job stream with sequence 100+i) and returns their sequences in the
// dead-letter stream.
func (b *bundle) store(t *testing.T, letters ...letter) []uint64 {
	t.Helper()
	s, err := b.js.Stream(ctx(t), b.cfg.DeadStream)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for i, l := range letters {
		d := &queue.Delivery{
			Subject: l.subject, Data: []byte(l.data), Channel: queue.ChannelOf(l.subject),
			Stream: b.cfg.Stream, StreamSeq: uint64(100 + i), Published: time.Now(),
		}
		if err := b.pub.DeadLetter(ctx(t), d, l.outcome, l.reason, l.detail); err != nil {
			t.Fatalf("DeadLetter: %v", err)
		}
		info, err := s.Info(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, info.State.LastSeq)
	}
	return seqs
}

func jobJSON(channel, id string) string {
	data, err := job(channel, id).Marshal()
	if err != nil {
		panic(err)
	}
	return string(data)
}

// fixture stores six letters of every kind and a few channels.
func fixture(t *testing.T, b *bundle) []uint64 {
	t.Helper()
	return b.store(t,
		letter{queue.Dead, "notify.jobs.sms", jobJSON("sms", "a1"), "rejected", "provider sms-gw answered 400"},
		letter{queue.Dead, "notify.jobs.sms.high", jobJSON("sms", "a2"), "max_attempts", "8 transient provider failures"},
		letter{queue.Suppressed, "notify.jobs.sms", jobJSON("sms", "a3"), "expired", "expires_at passed"},
		letter{queue.Dead, "notify.jobs.push", jobJSON("push", "a4"), "rejected", "provider push answered 410"},
		letter{queue.Suppressed, "notify.jobs.email", jobJSON("email", "a5"), "user_limit", "over the cap"},
		letter{queue.Dead, "notify.jobs.sms", `{"id":"bad id!","channel":"sms"`, "invalid", "not valid JSON"},
	)
}

func ids(ls []*queue.DeadLetter) string {
	var s []string
	for _, l := range ls {
		id := l.JobID
		if id == "" {
			id = "-"
		}
		s = append(s, id)
	}
	return strings.Join(s, ",")
}

// TestDeadLettersList: every filter selects what it says, oldest first,
// and each letter carries its headers, kind, channel and job id.
func TestDeadLettersList(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	seqs := fixture(t, b)
	r := queue.NewDeadLetters(b.js, b.cfg)

	all, more, err := r.List(ctx(t), queue.DeadFilter{})
	if err != nil || more {
		t.Fatalf("List: more %v, %v", more, err)
	}
	if got := ids(all); got != "a1,a2,a3,a4,a5,-" {
		t.Fatalf("all: %s", got)
	}
	a2 := all[1]
	if a2.Seq != seqs[1] || a2.Kind != queue.Dead || a2.Channel != "sms" || a2.Reason != "max_attempts" ||
		a2.Detail != "8 transient provider failures" || a2.JobSubject != "notify.jobs.sms.high" ||
		a2.Subject != "notify.dead.sms" || a2.Stored.IsZero() || string(a2.Data) != jobJSON("sms", "a2") {
		t.Fatalf("letter a2: %+v", a2)
	}
	if a2.ReplaySubject() != "notify.jobs.sms.high" || all[0].ReplaySubject() != "notify.jobs.sms" {
		t.Fatalf("replay subjects %s, %s", a2.ReplaySubject(), all[0].ReplaySubject())
	}
	if all[2].Kind != queue.Suppressed || all[2].Channel != "sms" {
		t.Fatalf("suppressed letter: kind %s channel %s", all[2].Kind, all[2].Channel)
	}

	for _, c := range []struct {
		name string
		f    queue.DeadFilter
		want string
		more bool
	}{
		{"dead", queue.DeadFilter{Kind: queue.Dead}, "a1,a2,a4,-", false},
		{"suppressed", queue.DeadFilter{Kind: queue.Suppressed}, "a3,a5", false},
		{"channel sms", queue.DeadFilter{Channel: "sms"}, "a1,a2,a3,-", false},
		{"dead sms", queue.DeadFilter{Kind: queue.Dead, Channel: "sms"}, "a1,a2,-", false},
		{"suppressed email", queue.DeadFilter{Kind: queue.Suppressed, Channel: "email"}, "a5", false},
		{"reason rejected", queue.DeadFilter{Reason: "rejected"}, "a1,a4", false},
		{"reason and channel", queue.DeadFilter{Reason: "rejected", Channel: "push"}, "a4", false},
		{"job id", queue.DeadFilter{JobID: "a3"}, "a3", false},
		{"no match", queue.DeadFilter{Reason: "nothing"}, "", false},
		{"empty channel", queue.DeadFilter{Channel: "fax"}, "", false},
		{"limit", queue.DeadFilter{Limit: 2}, "a1,a2", true},
		{"limit exact", queue.DeadFilter{Kind: queue.Suppressed, Limit: 2}, "a3,a5", false},
		{"limit with a filter", queue.DeadFilter{Channel: "sms", Limit: 3}, "a1,a2,a3", true},
		{"since", queue.DeadFilter{Since: all[3].Stored}, "a4,a5,-", false},
		{"since and kind", queue.DeadFilter{Since: all[3].Stored, Kind: queue.Suppressed}, "a5", false},
		{"since the future", queue.DeadFilter{Since: time.Now().Add(time.Hour)}, "", false},
	} {
		got, more, err := r.List(ctx(t), c.f)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if ids(got) != c.want || more != c.more {
			t.Errorf("%s: %s (more %v), want %s (more %v)", c.name, ids(got), more, c.want, c.more)
		}
	}

	// The listing leaves no consumer behind.
	s, err := b.js.Stream(ctx(t), b.cfg.DeadStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Errorf("%d consumers left on %s", info.State.Consumers, b.cfg.DeadStream)
	}
}

// TestDeadLettersListMany reads more letters than one pull batch holds.
func TestDeadLettersListMany(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	const n = 300
	var ls []letter
	for i := range n {
		o, reason := queue.Dead, "rejected"
		if i%3 == 0 {
			o, reason = queue.Suppressed, "expired"
		}
		ls = append(ls, letter{o, "notify.jobs.push", jobJSON("push", fmt.Sprintf("m%03d", i)), reason, ""})
	}
	b.store(t, ls...)
	r := queue.NewDeadLetters(b.js, b.cfg)
	got, more, err := r.List(ctx(t), queue.DeadFilter{Kind: queue.Dead})
	if err != nil || more || len(got) != n*2/3 {
		t.Fatalf("List: %d letters, more %v, %v; want %d", len(got), more, err, n*2/3)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Seq <= got[i-1].Seq || got[i].Kind != queue.Dead {
			t.Fatalf("letter %d: seq %d after %d, kind %s", i, got[i].Seq, got[i-1].Seq, got[i].Kind)
		}
	}
	got, more, err = r.List(ctx(t), queue.DeadFilter{Reason: "expired", Limit: 50})
	if err != nil || !more || len(got) != 50 || got[49].JobID != "m147" {
		t.Fatalf("limit 50 of the expired: %d, more %v, last %s, %v", len(got), more, got[len(got)-1].JobID, err)
	}
}

func TestDeadLettersEmptyAndBadFilter(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	r := queue.NewDeadLetters(b.js, b.cfg)
	start := time.Now()
	got, more, err := r.List(ctx(t), queue.DeadFilter{})
	if err != nil || more || len(got) != 0 {
		t.Fatalf("empty stream: %d letters, more %v, %v", len(got), more, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("listing an empty stream took %s: it must not wait for messages", d)
	}
	for _, f := range []queue.DeadFilter{{Kind: "lost"}, {Channel: ">"}, {Channel: "sms.*"}, {Limit: -1}} {
		if _, _, err := r.List(ctx(t), f); err == nil {
			t.Errorf("filter %+v accepted", f)
		}
	}
	other := queue.NewDeadLetters(b.js, queue.Config{DeadStream: "NO_SUCH"})
	if _, _, err := other.List(ctx(t), queue.DeadFilter{}); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("a missing stream: %v, want ErrStreamNotFound", err)
	}
}

// TestDeadLettersGetDelete: Get reads one letter by sequence; Delete
// removes it, so that neither Get nor List finds it again.
func TestDeadLettersGetDelete(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	seqs := fixture(t, b)
	r := queue.NewDeadLetters(b.js, b.cfg)
	d, err := r.Get(ctx(t), seqs[3])
	if err != nil {
		t.Fatal(err)
	}
	if d.JobID != "a4" || d.Kind != queue.Dead || d.Channel != "push" || d.Reason != "rejected" || d.Seq != seqs[3] {
		t.Fatalf("Get: %+v", d)
	}
	if bad, err := r.Get(ctx(t), seqs[5]); err != nil || bad.JobID != "" || bad.Reason != "invalid" {
		t.Fatalf("Get of the invalid job: %+v, %v (its id is not a valid id: none)", bad, err)
	}
	if err := r.Delete(ctx(t), seqs[3]); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx(t), seqs[3]); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrMsgNotFound", err)
	}
	if _, err := r.Get(ctx(t), 9999); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("Get of a sequence never stored: %v", err)
	}
	if err := r.Delete(ctx(t), seqs[3]); err == nil {
		t.Fatal("a second Delete succeeded")
	}
	all, _, err := r.List(ctx(t), queue.DeadFilter{})
	if err != nil || ids(all) != "a1,a2,a3,a5,-" {
		t.Fatalf("after Delete: %s, %v", ids(all), err)
	}
}

// TestDeadLettersRepublish: the job's bytes go back to the job stream on
// its original lane with the given Nats-Msg-Id and headers; a lane
// consumer receives them and they decode to the same job.
func TestDeadLettersRepublish(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	fixture(t, b)
	r := queue.NewDeadLetters(b.js, b.cfg)
	all, _, err := r.List(ctx(t), queue.DeadFilter{})
	if err != nil {
		t.Fatal(err)
	}
	a1, a2 := all[0], all[1]
	// The job ids were used as Nats-Msg-Id a moment ago: a replay under
	// the job id would be dropped, so it takes another one.
	if _, err := b.pub.Publish(ctx(t), job("sms", "a1"), false); err != nil {
		t.Fatal(err)
	}
	c := b.consumer(t, queue.ConsumerConfig{})
	first, err := c.Fetch(ctx(t), 1, time.Second)
	if err != nil || len(first) != 1 {
		t.Fatalf("Fetch: %d, %v", len(first), err)
	}
	if err := first[0].Ack(ctx(t)); err != nil {
		t.Fatal(err)
	}

	h := nats.Header{}
	h.Set("Notifier-Replayed", "2030-01-02T03:04:05Z")
	for _, d := range []*queue.DeadLetter{a1, a2} {
		if _, err := r.Republish(ctx(t), d, d.JobID+":replay:1", h); err != nil {
			t.Fatalf("Republish %s: %v", d.JobID, err)
		}
	}
	// The same Nats-Msg-Id again within the window is stored once.
	if _, err := r.Republish(ctx(t), a1, "a1:replay:1", h); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Republish(ctx(t), a1, "", h); err == nil {
		t.Fatal("Republish without a Nats-Msg-Id succeeded")
	}
	ds, err := c.Fetch(ctx(t), 3, time.Second)
	if err != nil || len(ds) != 2 {
		t.Fatalf("Fetch: %d deliveries, %v; want 2", len(ds), err)
	}
	// High lane first.
	for i, want := range []*queue.DeadLetter{a2, a1} {
		d := ds[i]
		if d.Subject != want.ReplaySubject() || string(d.Data) != string(want.Data) {
			t.Errorf("delivery %d: %s %q, want %s %q", i, d.Subject, d.Data, want.ReplaySubject(), want.Data)
		}
		if d.Header.Get("Notifier-Replayed") != "2030-01-02T03:04:05Z" || d.Header.Get(jetstream.MsgIDHeader) != want.JobID+":replay:1" {
			t.Errorf("delivery %d headers %v", i, d.Header)
		}
		j, err := queue.Decode(d.Subject, d.Data)
		if err != nil || j.ID != want.JobID {
			t.Errorf("delivery %d decodes to %v, %v", i, j, err)
		}
		if err := d.Ack(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}

	// A job stream that does not take the subject refuses the publish.
	orphan := *a1
	orphan.JobSubject, orphan.Channel = "", "fax"
	if orphan.ReplaySubject() != "notify.jobs.fax" {
		t.Fatalf("fallback subject %s", orphan.ReplaySubject())
	}
	wrong := queue.NewDeadLetters(b.js, queue.Config{Stream: "OTHER"})
	if _, err := wrong.Republish(ctx(t), a1, "x:replay:2", nil); err == nil {
		t.Fatal("Republish to a stream that does not take the subject succeeded")
	}
}

// BenchmarkDeadLettersList times one listing of 1,000 dead letters (of
// 2,000 stored: the server filters out the other kind) and reports letters
// read per second.
func BenchmarkDeadLettersList(b *testing.B) {
	bb := setupB(b)
	for i := range 2000 {
		o := queue.Dead
		if i%2 == 1 {
			o = queue.Suppressed
		}
		d := &queue.Delivery{Subject: "notify.jobs.sms", Data: []byte(jobJSONB(i)), Channel: "sms",
			Stream: "NOTIFY", StreamSeq: uint64(i + 1), Published: time.Now()}
		if err := bb.pub.DeadLetter(b.Context(), d, o, "rejected", "provider answered 400"); err != nil {
			b.Fatal(err)
		}
	}
	r := queue.NewDeadLetters(bb.js, bb.cfg)
	b.ResetTimer()
	for b.Loop() {
		ls, _, err := r.List(b.Context(), queue.DeadFilter{Kind: queue.Dead})
		if err != nil || len(ls) != 1000 {
			b.Fatalf("List: %d, %v", len(ls), err)
		}
	}
	b.ReportMetric(float64(1000*b.N)/b.Elapsed().Seconds(), "letters/s")
}

func jobJSONB(i int) string {
	data, err := job("sms", fmt.Sprintf("b%05d", i)).Marshal()
	if err != nil {
		panic(err)
	}
	return string(data)
}
