package cli

import (
	"syscall"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
)

// TestStopIsBoundedBySendTimeout: on SIGTERM "lets the sends already at a
// provider finish (at most the longest provider timeout + 1 s, never past
// ack_wait)". The provider stops answering; SIGTERM reaches a process whose
// workers are inside hung sends (timeout 2 s, ack_wait 4 s): it exits 0
// within 3 s (plus scheduling slack), and its jobs are all sent once the
// provider answers again.
func TestStopIsBoundedBySendTimeout(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 1000, "")
	ids := w.publish(40)
	p := w.run()
	testenv.WaitFor(t, 30*time.Second, "the first sends", func() bool { return len(w.fake.AcceptedIDs()) >= 5 })
	w.fake.HangFor(time.Hour)
	testenv.WaitFor(t, 10*time.Second, "sends hanging at the provider", func() bool { return w.fake.Count(0) >= 3 })
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(3*time.Second + 700*time.Millisecond):
		// Still running: the cleanup's SIGQUIT shows where it waits.
		t.Fatalf("no exit %s after SIGTERM with sends hanging; the bound is timeout (2s) + 1s", time.Since(start).Round(time.Millisecond))
	}
	took := time.Since(start)
	if p.err != nil {
		t.Fatalf("exit after SIGTERM: %v, want 0", p.err)
	}
	w.fake.Reset()
	w.run()
	testenv.WaitFor(t, 60*time.Second, "every job sent", func() bool { return w.acceptedDistinct() >= len(ids) })
	if dups := w.delivered(ids); len(dups) > 0 {
		t.Errorf("sent twice: %v", dups)
	}
	t.Logf("stopped %s after SIGTERM with %d sends hanging", took.Round(time.Millisecond), w.fake.Count(0))
}
