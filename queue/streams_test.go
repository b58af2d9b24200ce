package queue_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

func TestEnsureStreamsConcurrently(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	cfg := queue.Config{URL: srv.URL()}.WithDefaults()

	const processes = 5
	var (
		start = make(chan struct{})
		wg    sync.WaitGroup
		errs  = make([]error, processes)
	)
	for i := range processes {
		js, err := jetstream.New(srv.Conn()) // a connection per process
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			<-start
			errs[i] = queue.EnsureStreams(ctx(t), js, cfg, 1)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("process %d: EnsureStreams: %v", i, err)
		}
	}

	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	lister := js.StreamNames(ctx(t))
	for n := range lister.Name() {
		names = append(names, n)
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"NOTIFY", "NOTIFY_DEAD"}) {
		t.Fatalf("streams %v, want exactly NOTIFY and NOTIFY_DEAD", names)
	}
	assertJobStream(t, js)
	assertDeadStream(t, js)

	// A publish under notify.jobs that matches neither subject is refused.
	pub := queue.NewPublisher(js)
	for _, subject := range []string{"notify.jobs.a.b.c", "notify.jobs.sms.low", "notify.job.sms", "notify.jobs.sms.high.x"} {
		_, err := pub.PublishRaw(ctx(t), subject, []byte("{}"), "")
		if !errors.Is(err, jetstream.ErrNoStreamResponse) {
			t.Errorf("publish to %s: %v, want it refused (no stream)", subject, err)
		}
	}
	s, err := js.Stream(ctx(t), "NOTIFY")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(ctx(t)); err != nil || info.State.Msgs != 0 {
		t.Fatalf("NOTIFY holds %d messages after refused publishes (err %v)", info.State.Msgs, err)
	}
}

func assertJobStream(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	s, err := js.Stream(ctx(t), "NOTIFY")
	if err != nil {
		t.Fatal(err)
	}
	c := s.CachedInfo().Config
	if c.Retention != jetstream.WorkQueuePolicy || c.Storage != jetstream.FileStorage || c.Duplicates != 2*time.Minute ||
		!slices.Equal(c.Subjects, []string{"notify.jobs.*", "notify.jobs.*.high", "notify.jobs.*.marketing", "notify.jobs.*.transactional",
			"notify.jobs.*.t.*", "notify.jobs.*.t.*.high", "notify.jobs.*.t.*.marketing", "notify.jobs.*.t.*.transactional",
			"notify.jobs.*.f.*", "notify.jobs.*.f.*.high", "notify.jobs.*.f.*.marketing", "notify.jobs.*.f.*.transactional"}) || c.Discard != jetstream.DiscardNew ||
		c.MaxAge != 0 || c.Replicas != 1 {
		t.Errorf("NOTIFY config: retention %v storage %v duplicates %v subjects %v discard %v max age %v replicas %d",
			c.Retention, c.Storage, c.Duplicates, c.Subjects, c.Discard, c.MaxAge, c.Replicas)
	}
}

func assertDeadStream(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	s, err := js.Stream(ctx(t), "NOTIFY_DEAD")
	if err != nil {
		t.Fatal(err)
	}
	c := s.CachedInfo().Config
	if c.Retention != jetstream.LimitsPolicy || c.Storage != jetstream.FileStorage || c.MaxAge != 7*24*time.Hour ||
		!slices.Equal(c.Subjects, []string{"notify.dead.>", "notify.suppressed.>"}) || c.Duplicates != 2*time.Minute {
		t.Errorf("NOTIFY_DEAD config: retention %v storage %v max age %v subjects %v duplicates %v",
			c.Retention, c.Storage, c.MaxAge, c.Subjects, c.Duplicates)
	}
}

func TestEnsureStreamsRestoresDriftedSettings(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	drifted := queue.JobStreamConfig(b.cfg, 1)
	drifted.Duplicates = time.Minute
	drifted.Subjects = []string{"notify.jobs.*"}
	if _, err := b.js.UpdateStream(ctx(t), drifted); err != nil {
		t.Fatal(err)
	}
	if err := queue.EnsureStreams(ctx(t), b.js, b.cfg, 1); err != nil {
		t.Fatalf("EnsureStreams on a drifted stream: %v", err)
	}
	assertJobStream(t, b.js)

	// An immutable difference is reported, not papered over.
	if err := b.js.DeleteStream(ctx(t), "NOTIFY_DEAD"); err != nil {
		t.Fatal(err)
	}
	wrong := queue.DeadStreamConfig(b.cfg, 1)
	wrong.Storage = jetstream.MemoryStorage
	if _, err := b.js.CreateStream(ctx(t), wrong); err != nil {
		t.Fatal(err)
	}
	err := queue.EnsureStreams(ctx(t), b.js, b.cfg, 1)
	if err == nil {
		t.Fatal("EnsureStreams changed the storage of an existing stream without an error")
	}
	// Said at once, with the server's reason, not retried as a busy
	// cluster's answer until the start's deadline.
	if !strings.Contains(err.Error(), "storage type") || strings.Contains(err.Error(), "gave up") {
		t.Errorf("EnsureStreams on an immutable difference: %v", err)
	}
}

// TestEnsureStreamsLeavesAMatchingStreamAlone: a stream already as wanted
// is only read, never updated (every process starting rewrote it; an update
// racing another process's consumer creation trips a data race inside the
// server). No update advisory is published by the second EnsureStreams.
func TestEnsureStreamsLeavesAMatchingStreamAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	if err := queue.EnsureStreams(ctx(t), b.js, b.cfg, 1); err != nil {
		t.Fatal(err)
	}
	updates, err := b.js.Conn().SubscribeSync("$JS.EVENT.ADVISORY.STREAM.UPDATED.>")
	if err != nil {
		t.Fatal(err)
	}
	defer updates.Unsubscribe()
	if err := queue.EnsureStreams(ctx(t), b.js, b.cfg, 1); err != nil {
		t.Fatal(err)
	}
	if m, err := updates.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("EnsureStreams updated a stream that was already as wanted: %s", m.Subject)
	}
	// A drifted one is still updated (TestEnsureStreamsRestoresDriftedSettings).
	drifted := queue.JobStreamConfig(b.cfg, 1)
	drifted.Duplicates = time.Minute
	if _, err := b.js.UpdateStream(ctx(t), drifted); err != nil {
		t.Fatal(err)
	}
	if _, err := updates.NextMsg(2 * time.Second); err != nil {
		t.Fatalf("no advisory for a real update (is the advisory subject right?): %v", err)
	}
	if err := queue.EnsureStreams(ctx(t), b.js, b.cfg, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := updates.NextMsg(2 * time.Second); err != nil {
		t.Fatalf("EnsureStreams did not update a drifted stream: %v", err)
	}
}

func TestEnsureStreamsCustomNames(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	js, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	cfg := queue.Config{URL: srv.URL(), Stream: "JOBS", DeadStream: "JOBS_DEAD"}.WithDefaults()
	if err := queue.EnsureStreams(ctx(t), js, cfg, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx(t), "JOBS_DEAD"); err != nil {
		t.Fatalf("custom dead stream: %v", err)
	}
	if _, err := queue.NewConsumer(ctx(t), js, cfg, queue.ConsumerConfig{}); err != nil {
		t.Fatalf("consumers on a custom stream: %v", err)
	}
}

// TestHorizons: the slot horizons of a provider are the latest end any
// process noted, with the time of the latest note; a provider nobody noted
// has none, and provider names that differ only after a '.' are kept apart.
func TestHorizons(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	h, err := queue.OpenHorizons(ctx(t), b.js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, found, err := h.Read(ctx(t), "sms"); err != nil || found {
		t.Fatalf("a provider never noted: found %v, %v", found, err)
	}
	t0 := time.Now().Truncate(time.Microsecond)
	for _, n := range []struct {
		provider, instance string
		end                time.Time
	}{
		{"sms", "host-a.1", t0.Add(2 * time.Second)},
		{"sms", "host-b.1", t0.Add(5 * time.Second)},
		{"sms", "host-a.1", t0.Add(3 * time.Second)}, // the same process, later: replaces its own
		{"sms.eu", "host-a.1", t0.Add(time.Hour)},
	} {
		if err := h.Note(ctx(t), n.provider, n.instance, n.end); err != nil {
			t.Fatal(err)
		}
	}
	end, written, found, err := h.Read(ctx(t), "sms")
	if err != nil || !found || !end.Equal(t0.Add(5*time.Second)) {
		t.Errorf("sms: end %v found %v (%v), want %v", end, found, err, t0.Add(5*time.Second))
	}
	if time.Since(written) > 10*time.Second || time.Until(written) > 10*time.Second {
		t.Errorf("written %v, want about now", written)
	}
	if end, _, found, _ := h.Read(ctx(t), "sms.eu"); !found || !end.Equal(t0.Add(time.Hour)) {
		t.Errorf("sms.eu: end %v found %v", end, found)
	}
	// A second process opening the bucket finds it.
	h2, err := queue.OpenHorizons(ctx(t), b.js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, found, err := h2.Read(ctx(t), "sms"); !found || err != nil {
		t.Errorf("reopened: found %v, %v", found, err)
	}
}
