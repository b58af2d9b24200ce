package leaky_test

import (
	"context"
	"testing"
	"time"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/testenv"
)

// TestPauseWatcherHearsTheFleet: a pause set by another process is known to
// a watcher without asking Redis, and a pause set while the watcher was not
// yet subscribed is read at its subscription.
func TestPauseWatcherHearsTheFleet(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := testenv.Redis(t)
	setter := newRedis(t, srv.Client(), "w:")
	if err := setter.Pause(ctx, "early", 30*time.Second); err != nil {
		t.Fatal(err)
	}

	rdb := srv.Client()
	q := newRedis(t, rdb, "w:")
	w := leaky.NewPauseWatcher(nil)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, rdb, q, []string{"early", "sms"}) }()
	testenv.WaitFor(t, 5*time.Second, "the pause set before the subscription", func() bool { return w.PausedFor("early") > 25*time.Second })

	if w.PausedFor("sms") != 0 {
		t.Fatalf("sms paused before any pause")
	}
	if err := setter.Pause(ctx, "sms", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "the announced pause", func() bool { return w.PausedFor("sms") > time.Second })
	if got := w.PausedFor("sms"); got > 2*time.Second {
		t.Fatalf("pause %s, longer than the 2s announced", got)
	}
	// A shorter pause does not shorten a longer one.
	if err := setter.Pause(ctx, "sms", 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if got := w.PausedFor("sms"); got < time.Second {
		t.Fatalf("a shorter pause shortened the pause to %s", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestPauseWatcherNote(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	w := leaky.NewPauseWatcher(func() time.Time { return now })
	w.Note("p", 3*time.Second)
	w.Note("p", time.Second)
	if got := w.PausedFor("p"); got != 3*time.Second {
		t.Fatalf("PausedFor = %s, want 3s", got)
	}
	now = now.Add(4 * time.Second)
	if got := w.PausedFor("p"); got != 0 {
		t.Fatalf("PausedFor after the end = %s, want 0", got)
	}
}

// TestPauseWatcherHearsAResume: a pause lifted by Resume is cleared in a
// watcher at once, by its announcement.
func TestPauseWatcherHearsAResume(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := testenv.Redis(t)
	rdb := srv.Client()
	q := newRedis(t, rdb, "r:")
	w := leaky.NewPauseWatcher(nil)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, rdb, q, []string{"sms"}) }()
	if err := q.Pause(ctx, "sms", time.Hour); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "the pause heard", func() bool { return w.PausedFor("sms") > 59*time.Minute })
	left, err := q.Resume(ctx, "sms", leaky.Contract{Rate: 100, MaxQueueDelay: time.Second})
	if err != nil || left < 59*time.Minute {
		t.Fatalf("Resume: %v %v, want about an hour left", left, err)
	}
	testenv.WaitFor(t, 5*time.Second, "the resume heard", func() bool { return w.PausedFor("sms") == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestPauseWatcherResyncClearsALiftedPause: a pause this process knows of
// but Redis no longer holds (lifted while the subscription was down, its
// announcement missed) is cleared when the watcher (re)subscribes and
// reads Redis; one Redis does hold is kept.
func TestPauseWatcherResyncClearsALiftedPause(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := testenv.Redis(t)
	rdb := srv.Client()
	q := newRedis(t, rdb, "rs:")
	if err := q.Pause(ctx, "push", time.Minute); err != nil {
		t.Fatal(err)
	}
	w := leaky.NewPauseWatcher(nil)
	w.Note("sms", time.Hour) // heard before; lifted since, unheard
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, rdb, q, []string{"sms", "push"}) }()
	// The resync reads the providers one after the other: sms's pause is
	// cleared a moment before push's is noted.
	testenv.WaitFor(t, 5*time.Second, "the lifted pause cleared on subscribing and the held one noted", func() bool {
		return w.PausedFor("sms") == 0 && w.PausedFor("push") > 0
	})
	if got := w.PausedFor("push"); got < 50*time.Second {
		t.Errorf("push's pause in Redis: the watcher has %s, want about 1m", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
