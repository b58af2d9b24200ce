package cli

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
)

// TestContractHeldWhileAWorkerStalls: two `notifier run` processes on a
// 100/s contract with jitter_budget: 80ms, one of them stopped (SIGSTOP)
// for 30–50 ms every second of the run: the CPU starvation or GC pause
// that put 202 sends into a second of a 200/s contract. Sends due while it
// is stopped leave late or take new slots; none may push a 1 s window of
// arrivals at the provider over the contract. The promise holds while
// arrivals lag their slots by less than the budget: a stop can land after
// a send's last check of its slot, so the budget covers the longest stop
// (50 ms) and the scheduling delays of a loaded machine on top of it (30
// ms; with a 50 ms budget a run beside other work saw 101 in a window).
func TestContractHeldWhileAWorkerStalls(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 100, "")
	cfg, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	world := "    jitter_budget: " + jitterBudget.String() + "\n"
	if !strings.Contains(string(cfg), world) {
		t.Fatalf("the world's configuration has no %q to raise", world)
	}
	cfg = []byte(strings.Replace(string(cfg), world, "    jitter_budget: 80ms\n", 1))
	if err := os.WriteFile(w.config, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	ids := w.publish(800)
	stalled, _ := w.run(), w.run()
	done := make(chan struct{})
	stalls := make(chan int, 1)
	go func() {
		n := 0
		defer func() { stalls <- n }()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-time.After(time.Second - 40*time.Millisecond):
			}
			if stalled.cmd.Process.Signal(syscall.SIGSTOP) != nil {
				return
			}
			time.Sleep(30*time.Millisecond + time.Duration(i%3)*10*time.Millisecond)
			_ = stalled.cmd.Process.Signal(syscall.SIGCONT)
			n++
		}
	}()
	testenv.WaitFor(t, 60*time.Second, "800 jobs sent", func() bool { return len(w.fake.AcceptedIDs()) >= len(ids) })
	close(done)
	n := <-stalls
	if dups := w.delivered(ids); len(dups) > 0 {
		t.Errorf("sent twice: %v", dups)
	}
	most := w.fake.MaxArrivalsInWindow(time.Second, 0)
	if most > 100 {
		t.Errorf("most arrivals in any 1 s window: %d, contract 100 (one process stopped %d times for 30-50ms)", most, n)
	}
	t.Logf("one of two processes stopped %d times for 30-50 ms; most arrivals in any 1 s window: %d (contract 100), 429s: %d", n, most, w.fake.Count(429))
}
