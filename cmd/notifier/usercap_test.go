package main

import (
	"encoding/json"
	"os/exec"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
)

// TestUserCapHeldWhenAWorkerIsKilled runs two `notifier run` processes
// with a per-user cap (sliding_log, 2 per 2 s, defer) on interleaved jobs
// of 20 users, and kills one with SIGKILL mid-run. Its jobs come back after
// ack_wait and are sent by the other; measured from the arrival times at
// the provider, no user ever gets more than 2 in any 2 s window (100 ms of
// jitter allowed), and every job is sent.
func TestUserCapHeldWhenAWorkerIsKilled(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 2000, `user_limits:
  sms: { limit: 2, window: 2s, algorithm: sliding_log, on_exceed: defer }
`)
	out, err := exec.Command(notifierBinary(t), "publish", "--config", w.config, "--count", "80", "--users", "20", "--channel", "sms", "--quiet").CombinedOutput()
	if err != nil {
		t.Fatalf("publish: %v: %s", err, out)
	}
	ids := w.streamIDs()
	a, _ := w.run(), w.run()
	testenv.WaitFor(t, 30*time.Second, "a first sends", func() bool { return len(w.fake.AcceptedIDs()) >= 25 })
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 90*time.Second, "every job sent", func() bool { return len(w.fake.AcceptedIDs()) >= len(ids) })
	if dups := w.delivered(ids); len(dups) > 0 {
		t.Logf("sent twice in the documented kill window: %v", dups)
	}

	// The first arrival of each job, per user.
	seen := map[string]bool{}
	byUser := map[string][]time.Time{}
	for _, r := range w.fake.Accepted() {
		if seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		var j struct {
			UserID string `json:"user_id"`
		}
		if err := json.Unmarshal(r.Body, &j); err != nil {
			t.Fatal(err)
		}
		byUser[j.UserID] = append(byUser[j.UserID], r.At)
	}
	const window, jitter = 2 * time.Second, 100 * time.Millisecond
	for user, ts := range byUser {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		for i := range ts {
			n := 0
			for k := i; k < len(ts) && ts[k].Sub(ts[i]) < window-jitter; k++ {
				n++
			}
			if n > 2 {
				t.Errorf("user %s got %d jobs within %s of %s (cap 2 per 2s); arrivals %v", user, n, window-jitter, ts[i].Format("15:04:05.000"), ts)
				break
			}
		}
	}
	t.Logf("%d jobs of 20 users sent with one of two workers killed; cap held at the provider", len(seen))
}
