package leaky_test

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/testenv"
)

// sleepCtx waits d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func redisNowMicros(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	tm, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("redis TIME: %v", err)
	}
	return tm.UnixMicro()
}

// checkPacing fails unless the sorted slots (Redis µs) are at least
// 1/rate apart and no 1 s window holds more than rate of them.
func checkPacing(t *testing.T, slots []int64, rate float64) {
	t.Helper()
	sort.Slice(slots, func(i, j int) bool { return slots[i] < slots[j] })
	minGap := int64(1e6 / rate)
	for i := 1; i < len(slots); i++ {
		if gap := slots[i] - slots[i-1]; gap < minGap {
			t.Errorf("slots %d and %d are %dµs apart, less than 1/rate = %dµs", i-1, i, gap, minGap)
		}
	}
	most := maxInWindow(slots, int64(time.Second/time.Microsecond))
	if most > int(rate) {
		t.Errorf("%d slots in one 1 s window, more than the contract's %v", most, rate)
	}
	t.Logf("%d slots, at most %d in any 1 s window (contract %v/s)", len(slots), most, rate)
}

// maxInWindow is the largest number of sorted instants in any window
// [x, x+width).
func maxInWindow(sorted []int64, width int64) int {
	most, j := 0, 0
	for i := range sorted {
		for sorted[i]-sorted[j] >= width {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// checkedSend is a send's PausedFor check: asked and answered, local time.
type checkedSend struct{ asked, answered time.Time }

// TestPacingAcrossProcesses: three processes (separate clients) of 16
// workers each reserve on one provider at 200/s for 5 s, sleep to their
// slots and send; halfway a 429 pauses the provider.
func TestPacingAcrossProcesses(t *testing.T) {
	t.Parallel()
	const (
		rate    = 200.0
		run     = 5 * time.Second
		procs   = 3
		workers = 16
		mqd     = 500 * time.Millisecond
		pause   = 300 * time.Millisecond
	)
	srv := testenv.Redis(t)
	admin := srv.Client()
	prefix := newPrefix("pacing")
	c := leaky.Contract{Rate: rate, MaxQueueDelay: mqd}

	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var (
		mu         sync.Mutex
		slots      []int64 // every reserved slot, Redis µs
		sends      []checkedSend
		skipped    int // woke inside the pause, did not send
		violations []string
		pauseFrom  atomic.Int64 // Redis µs read before Pause
		pauseDone  atomic.Bool  // Pause has returned
	)
	fail := func(s string) {
		mu.Lock()
		violations = append(violations, s)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for p := 0; p < procs; p++ {
		q := newRedis(t, srv.Client(), prefix)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					afterPause := pauseDone.Load()
					r, err := q.Reserve(ctx, "sms", c, 1)
					if err != nil {
						if ctx.Err() == nil {
							fail("reserve: " + err.Error())
						}
						return
					}
					if !r.OK {
						if r.RetryAfter <= 0 {
							fail("full with no retry-after")
							return
						}
						sleepCtx(ctx, r.RetryAfter)
						continue
					}
					if r.Delay < 0 || r.Delay > mqd {
						fail("delay " + r.Delay.String() + " outside [0, max_queue_delay]")
					}
					if afterPause && r.Slot < pauseFrom.Load()+pause.Microseconds() {
						fail("a slot reserved after the pause falls inside it")
					}
					mu.Lock()
					slots = append(slots, r.Slot)
					mu.Unlock()
					if !sleepCtx(ctx, r.Delay) {
						return
					}
					asked := time.Now()
					paused, err := q.PausedFor(ctx, "sms")
					answered := time.Now()
					if err != nil {
						if ctx.Err() == nil {
							fail("paused for: " + err.Error())
						}
						return
					}
					mu.Lock()
					if paused > 0 {
						skipped++
					} else {
						sends = append(sends, checkedSend{asked, answered})
					}
					mu.Unlock()
				}
			}()
		}
	}

	// halfway: the provider answers 429 with Retry-After 300 ms
	q := newRedis(t, admin, prefix)
	if !sleepCtx(ctx, run/2) {
		t.Fatal("run ended before the pause")
	}
	t0 := redisNowMicros(t, admin)
	t0Local := time.Now()
	if err := q.Pause(ctx, "sms", pause); err != nil {
		t.Fatalf("pause: %v", err)
	}
	t1Local := time.Now()
	pauseFrom.Store(t0)
	pauseDone.Store(true)
	if pf, err := q.PausedFor(ctx, "sms"); err != nil || pf <= 0 || pf > pause {
		t.Errorf("paused for right after the pause: %v (err %v), want (0, %v]", pf, err, pause)
	}
	wg.Wait()

	for _, v := range violations {
		t.Error(v)
	}
	checkPacing(t, slots, rate)
	// the fleet paces at 198/s; the cold start (~0.5 s) and the pause (0.3 s) cost some
	if want := int(0.7 * rate * (run - mqd - pause).Seconds()); len(slots) < want {
		t.Errorf("only %d slots in %v, want at least %d", len(slots), run, want)
	}
	// nobody sends on a check made entirely inside the pause: asked after
	// Pause returned, answered before t0+pause (the pause end is later,
	// since the pause script ran after t0)
	for _, s := range sends {
		if !s.asked.Before(t1Local) && s.answered.Before(t0Local.Add(pause)) {
			t.Errorf("a send checked at [%v, %v] after the pause began, inside it (pause returned at %v, lasts %v)",
				s.asked.Sub(t0Local), s.answered.Sub(t0Local), t1Local.Sub(t0Local), pause)
		}
	}
	// how late the workers' timers woke is the machine's business; report it
	local := make([]int64, len(sends))
	for i, s := range sends {
		local[i] = s.answered.UnixMicro()
	}
	sort.Slice(local, func(i, j int) bool { return local[i] < local[j] })
	t.Logf("%d sends (%d skipped in the pause); observed send times: at most %d in any 1 s window",
		len(sends), skipped, maxInWindow(local, int64(time.Second/time.Microsecond)))
}

// TestStateLossNeverExceedsContract: reservations made before a Redis
// restart (state wiped) and after it never put more than rate sends into
// any 1 s window, because an empty state starts as a full queue.
func TestStateLossNeverExceedsContract(t *testing.T) {
	t.Parallel()
	const (
		rate    = 200.0
		procs   = 3
		workers = 8
		mqd     = 300 * time.Millisecond
		phase   = 1500 * time.Millisecond
	)
	srv := testenv.Redis(t)
	prefix := newPrefix("loss")
	c := leaky.Contract{Rate: rate, MaxQueueDelay: mqd}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var (
		mu           sync.Mutex
		before       []int64 // slots reserved before the restart
		after        []int64 // slots reserved by calls that started after it
		restarted    atomic.Bool
		errorsDuring atomic.Int64
		wg           sync.WaitGroup
	)
	for p := 0; p < procs; p++ {
		q := newRedis(t, srv.Client(), prefix)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					late := restarted.Load()
					r, err := q.Reserve(ctx, "sms", c, 1)
					if err != nil { // the restart: try again shortly
						errorsDuring.Add(1)
						sleepCtx(ctx, 5*time.Millisecond)
						continue
					}
					if !r.OK {
						sleepCtx(ctx, r.RetryAfter)
						continue
					}
					mu.Lock()
					if late {
						after = append(after, r.Slot)
					} else {
						before = append(before, r.Slot)
					}
					mu.Unlock()
					sleepCtx(ctx, r.Delay)
				}
			}()
		}
	}
	sleepCtx(ctx, phase)
	// Redis TIME and time.Now read the same host clock: anything the new
	// server decides, it decides after stopped
	stopped := time.Now().UnixMicro()
	srv.Restart()
	restarted.Store(true)
	sleepCtx(ctx, phase)
	cancel()
	wg.Wait()

	if len(before) == 0 || len(after) == 0 {
		t.Fatalf("%d slots before the restart and %d after, want some of both", len(before), len(after))
	}
	// the new server starts cold: its first slot is max_queue_delay + one
	// interval after its first decision
	sort.Slice(after, func(i, j int) bool { return after[i] < after[j] })
	if after[0] < stopped+mqd.Microseconds() {
		t.Errorf("first slot after the restart %dµs after the stop, want at least max_queue_delay %v",
			after[0]-stopped, mqd)
	}
	t.Logf("%d slots before the restart, %d after; %d errors while Redis was down",
		len(before), len(after), errorsDuring.Load())
	checkPacing(t, append(before, after...), rate)
}

// TestStateFromAnotherServerStartsCold: a failover promotes a replica whose
// copy of the state was written by the old master and may miss its latest
// reservations. The queue must not trust it.
func TestStateFromAnotherServerStartsCold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	clock := newClock()
	prefix := newPrefix("foreign")
	q := newRedis(t, rdb, prefix, leaky.WithHeadroom(0), leaky.WithNow(clock.Now))
	c := leaky.Contract{Rate: 10, MaxQueueDelay: 300 * time.Millisecond}
	key := "{" + prefix + "p:sms}:tat"

	warm(t, q, c, clock)
	a := reserveOK(t, q, c, 0)
	b := reserveOK(t, q, c, 100*time.Millisecond)
	const otherNode = "0000000000000000000000000000000000000000"
	// a promoted replica with all of the state, written by the old master:
	// cancel refuses it (the replica may have missed later reservations)
	if err := rdb.HSet(ctx, key, "node", otherNode).Err(); err != nil {
		t.Fatal(err)
	}
	if err := q.Cancel(ctx, "sms", c, b, 1); err != nil {
		t.Fatal(err)
	}
	if tat, err := rdb.HGet(ctx, key, "tat").Int64(); err != nil || tat != b.Slot+100_000 {
		t.Fatalf("tat after a cancel on a foreign state: %d (err %v), want unchanged %d", tat, err, b.Slot+100_000)
	}
	// a promoted replica that saw a but not b: reserving starts cold
	if err := rdb.HSet(ctx, key, "tat", a.Slot+100_000).Err(); err != nil {
		t.Fatal(err)
	}
	r, err := q.Reserve(ctx, "sms", c, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || r.RetryAfter != 100*time.Millisecond {
		t.Fatalf("first reservation on a foreign state: %+v, want full with retry-after 100ms (a cold start)", r)
	}
	clock.Advance(100 * time.Millisecond)
	r = reserveOK(t, q, c, 300*time.Millisecond)
	if r.Slot-b.Slot < 100_000 {
		t.Fatalf("slot %dµs after b's lost one, want at least an interval", r.Slot-b.Slot)
	}
	node, err := rdb.HGet(ctx, key, "node").Result()
	if err != nil {
		t.Fatal(err)
	}
	info, err := rdb.InfoMap(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := info["Server"]["run_id"]; node != want {
		t.Fatalf("state node %q after the cold start, want this server's run_id %q", node, want)
	}
}

// TestWithoutFailoverGuardTrustsAnyState: the guard's opt-out trusts a
// state whatever server wrote it (the documented risk), and still starts a
// missing one cold.
func TestWithoutFailoverGuardTrustsAnyState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	clock := newClock()
	prefix := newPrefix("noguard")
	q := newRedis(t, rdb, prefix, leaky.WithHeadroom(0), leaky.WithNow(clock.Now), leaky.WithoutFailoverGuard())
	c := leaky.Contract{Rate: 10, MaxQueueDelay: 300 * time.Millisecond}
	r, err := q.Reserve(ctx, "sms", c, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || r.RetryAfter != 100*time.Millisecond {
		t.Fatalf("first reservation: %+v, want a cold start", r)
	}
	clock.Advance(time.Minute)
	reserveOK(t, q, c, 0)
	reserveOK(t, q, c, 100*time.Millisecond)
	key := "{" + prefix + "p:sms}:tat"
	if err := rdb.HSet(ctx, key, "node", "0000000000000000000000000000000000000000").Err(); err != nil {
		t.Fatal(err)
	}
	// with the guard this would start cold (full, retry-after 100ms)
	reserveOK(t, q, c, 200*time.Millisecond)
}

// TestRestartFromDiskStartsCold: a Redis restarted from its append-only
// file reloads a tat that may be older than slots handed out before the
// crash; the new run_id marks it untrusted.
func TestRestartFromDiskStartsCold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testenv.Redis(t, testenv.WithRedisArgs("--appendonly", "yes", "--appendfsync", "always"))
	rdb := srv.Client()
	clock := newClock()
	prefix := newPrefix("aof")
	q := newRedis(t, rdb, prefix, leaky.WithHeadroom(0), leaky.WithNow(clock.Now))
	c := leaky.Contract{Rate: 10, MaxQueueDelay: 300 * time.Millisecond}
	warm(t, q, c, clock)
	reserveOK(t, q, c, 0)
	reserveOK(t, q, c, 100*time.Millisecond)
	srv.Restart()
	n, err := rdb.Exists(ctx, "{"+prefix+"p:sms}:tat").Result()
	if err != nil || n != 1 {
		t.Fatalf("state after a restart from the AOF: exists=%d err=%v, want it reloaded", n, err)
	}
	r, err := q.Reserve(ctx, "sms", c, 1)
	if err != nil {
		t.Fatal(err)
	}
	// trusted, it would give 200 ms; cold: tat = max(now+200ms, now+400ms)
	if r.OK || r.RetryAfter != 100*time.Millisecond {
		t.Fatalf("first reservation after the restart: %+v, want full with retry-after 100ms", r)
	}
}

func warm(t *testing.T, q leaky.Queue, c leaky.Contract, clock interface{ Advance(time.Duration) }) {
	t.Helper()
	if _, err := q.Reserve(context.Background(), "sms", c, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
}

func reserveOK(t *testing.T, q leaky.Queue, c leaky.Contract, delay time.Duration) leaky.Reservation {
	t.Helper()
	r, err := q.Reserve(context.Background(), "sms", c, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK || r.Delay != delay {
		t.Fatalf("reservation %+v, want ok with delay %v", r, delay)
	}
	return r
}
