package cli

import (
	"encoding/json"
	"os/exec"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
)

// TestUserCapScenario is the scenario of the per-user cap issue, through
// the binary: a cap of 2 per 3 s (sliding_log, defer), `notifier run`
// processes of 16 workers, a provider at 2,000/s, and 20 users × 5 jobs
// published interleaved (job k of every user, then job k+1). With one
// process, with two, and with two of which one is killed with SIGKILL
// mid-run (its jobs come back after ack_wait): every job is sent, and,
// measured from the arrival times at the provider, no user ever gets more
// than 2 in any 3 s window (100 ms of jitter allowed).
func TestUserCapScenario(t *testing.T) {
	measures(t)
	for _, tc := range []struct {
		name  string
		procs int
		kill  bool
	}{{"1proc", 1, false}, {"2proc", 2, false}, {"2proc-one-killed", 2, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkUserCapScenario(t, tc.procs, tc.kill)
		})
	}
}

func checkUserCapScenario(t *testing.T, procs int, kill bool) {
	w := newWorld(t, 2000, `user_limits:
  sms: { limit: 2, window: 3s, algorithm: sliding_log, on_exceed: defer }
`)
	out, err := exec.Command(notifierBinary(t), "publish", "--config", w.config, "--count", "100", "--users", "20", "--channel", "sms", "--quiet").CombinedOutput()
	if err != nil {
		t.Fatalf("publish: %v: %s", err, out)
	}
	ids := w.streamIDs()
	var ps []*process
	for range procs {
		ps = append(ps, w.run())
	}
	if kill {
		testenv.WaitFor(t, 30*time.Second, "a first sends", func() bool { return len(w.fake.AcceptedIDs()) >= 30 })
		if err := ps[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	// Distinct ids: a job sent twice in the kill's crash window must not
	// stand in for one still waiting out its ack_wait.
	testenv.WaitFor(t, 90*time.Second, "every job sent", func() bool { return w.acceptedDistinct() >= len(ids) })
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
	const window, jitter = 3 * time.Second, 100 * time.Millisecond
	for user, ts := range byUser {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		for i := range ts {
			n := 0
			for k := i; k < len(ts) && ts[k].Sub(ts[i]) < window-jitter; k++ {
				n++
			}
			if n > 2 {
				t.Errorf("user %s got %d jobs within %s of %s (cap 2 per 3s); arrivals %v", user, n, window-jitter, ts[i].Format("15:04:05.000"), ts)
				break
			}
		}
	}
	t.Logf("%d jobs of 20 users sent by %d processes (one killed: %t); the cap held at the provider", len(seen), procs, kill)
}

// acceptedDistinct is how many distinct jobs the fake accepted.
func (w *world) acceptedDistinct() int {
	seen := map[string]bool{}
	for _, id := range w.fake.AcceptedIDs() {
		seen[id] = true
	}
	return len(seen)
}
