package globallimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/testenv"
)

// fakeStore is a hand-written Store: answer decides each call; it records
// the calls, the configurations they carried and how many ran at once.
type fakeStore struct {
	answer func(call int, cfg globallimit.Config, n int) (int, time.Duration, error)
	delay  time.Duration // each call lasts this long (a Redis round trip)

	mu          sync.Mutex
	calls       int
	cfgs        []globallimit.Config
	inFlight    int
	maxInFlight int
}

func (s *fakeStore) Take(_ context.Context, cfg globallimit.Config, n int) (int, time.Duration, error) {
	s.mu.Lock()
	s.calls++
	call := s.calls
	s.cfgs = append(s.cfgs, cfg)
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	s.mu.Unlock()
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	g, w, err := s.answer(call, cfg, n)
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
	return g, w, err
}

func (s *fakeStore) stats() (calls, maxInFlight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.maxInFlight
}

var cfg = globallimit.Config{Rate: 100, Burst: 10}

// recordingSleeper records the sleeps and returns at once (or blocks until
// ctx ends when block is set).
type recordingSleeper struct {
	mu      sync.Mutex
	sleeps  []time.Duration
	entered chan struct{}
	block   bool
	onSleep func(n int) // called after each recorded sleep
}

func (r *recordingSleeper) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	r.sleeps = append(r.sleeps, d)
	n := len(r.sleeps)
	r.mu.Unlock()
	if r.onSleep != nil {
		r.onSleep(n)
	}
	if r.entered != nil {
		r.entered <- struct{}{}
	}
	if r.block {
		<-ctx.Done()
		return ctx.Err()
	}
	return ctx.Err()
}

func (r *recordingSleeper) got() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.sleeps...)
}

func TestLeaseSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  globallimit.Config
		want int
	}{
		{globallimit.Config{Rate: 2000, Burst: 500}, 10}, // the default config
		{globallimit.Config{Rate: 1000, Burst: 100}, 2},
		{globallimit.Config{Rate: 100000, Burst: 5000}, 100},
		{globallimit.Config{Rate: 100000, Burst: 50000}, 1000},
		{globallimit.Config{Rate: 10, Burst: 1000}, 1},
		{globallimit.Config{Rate: 1, Burst: 1}, 1},
	} {
		if got := globallimit.LeaseSize(tc.cfg); got != tc.want {
			t.Errorf("LeaseSize(%+v) = %d, want %d", tc.cfg, got, tc.want)
		}
	}
}

// TestOneTakeInFlightServesAllWaiters: 64 waiters of one process share
// leases of 5 tokens; only one Store call runs at a time.
func TestOneTakeInFlightServesAllWaiters(t *testing.T) {
	t.Parallel()
	store := &fakeStore{
		delay:  time.Millisecond,
		answer: func(_ int, _ globallimit.Config, n int) (int, time.Duration, error) { return n, 0, nil },
	}
	b := globallimit.New(store, cfg, globallimit.WithLeaseSize(5))
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- b.Wait(context.Background())
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	calls, most := store.stats()
	if most != 1 {
		t.Errorf("%d Store calls ran at once, want 1", most)
	}
	if calls != 13 { // ⌈64/5⌉
		t.Errorf("%d Store calls for 64 tokens in leases of 5, want 13", calls)
	}
}

// TestWaitSleepsAsTheStoreSays: no token now means one sleep of exactly
// the store's wait, then one more call.
func TestWaitSleepsAsTheStoreSays(t *testing.T) {
	t.Parallel()
	store := &fakeStore{answer: func(call int, _ globallimit.Config, n int) (int, time.Duration, error) {
		switch call {
		case 1:
			return 0, 250 * time.Millisecond, nil
		case 2:
			return 0, 100 * time.Millisecond, nil
		}
		return n, 0, nil
	}}
	sl := &recordingSleeper{}
	b := globallimit.New(store, cfg, globallimit.WithSleeper(sl.sleep))
	if err := b.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := sl.got()
	if len(got) != 2 || got[0] != 250*time.Millisecond || got[1] != 100*time.Millisecond {
		t.Fatalf("sleeps %v, want [250ms 100ms]", got)
	}
	if calls, _ := store.stats(); calls != 3 {
		t.Fatalf("%d Store calls, want 3", calls)
	}
}

// TestWaitNeverBusyLoops: a store that keeps answering "none, wait 0" is
// asked at most once per millisecond of sleep.
func TestWaitNeverBusyLoops(t *testing.T) {
	t.Parallel()
	store := &fakeStore{answer: func(int, globallimit.Config, int) (int, time.Duration, error) { return 0, 0, nil }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sl := &recordingSleeper{onSleep: func(n int) {
		if n == 10 {
			cancel()
		}
	}}
	b := globallimit.New(store, cfg, globallimit.WithSleeper(sl.sleep))
	if err := b.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait: %v, want context.Canceled", err)
	}
	for _, d := range sl.got() {
		if d < time.Millisecond {
			t.Fatalf("slept %v between calls, want at least 1ms", d)
		}
	}
	if calls, _ := store.stats(); calls != 10 {
		t.Fatalf("%d Store calls for 10 sleeps", calls)
	}
}

// TestLeasedTokensExpire: a quiet process gives its leftover tokens up.
func TestLeasedTokensExpire(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []globallimit.Option
		ttl  time.Duration
	}{
		{"default", nil, time.Second},
		{"WithLeaseTTL", []globallimit.Option{globallimit.WithLeaseTTL(200 * time.Millisecond)}, 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := testenv.NewClock(time.Now())
			store := &fakeStore{answer: func(_ int, _ globallimit.Config, n int) (int, time.Duration, error) { return n, 0, nil }}
			opts := append([]globallimit.Option{globallimit.WithLeaseSize(5), globallimit.WithNow(clock.Now)}, tc.opts...)
			b := globallimit.New(store, cfg, opts...)
			ctx := context.Background()
			for i := 0; i < 2; i++ {
				if err := b.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			clock.Advance(tc.ttl - time.Microsecond)
			if err := b.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if calls, _ := store.stats(); calls != 1 {
				t.Fatalf("%d Store calls within the lease, want 1", calls)
			}
			clock.Advance(time.Microsecond)
			if err := b.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if calls, _ := store.stats(); calls != 2 {
				t.Fatalf("%d Store calls after the lease expired with 2 tokens left, want 2", calls)
			}
		})
	}
}

// TestWaitReturnsPromptlyOnCancel: the waiter sleeping for the store and
// the waiters queued behind it all return ctx.Err() when their ctx ends,
// long before the next token (2 s away).
func TestWaitReturnsPromptlyOnCancel(t *testing.T) {
	t.Parallel()
	srv := testenv.Redis(t)
	store := globallimit.NewRedis(srv.Client(), newPrefix("cancel"))
	b := globallimit.New(store, globallimit.Config{Rate: 0.5, Burst: 1})
	if err := b.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []error{context.Canceled, context.DeadlineExceeded} {
		var (
			ctx    context.Context
			cancel context.CancelFunc
		)
		if want == context.Canceled {
			ctx, cancel = context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
		} else {
			ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
		}
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- b.Wait(ctx)
			}()
		}
		wg.Wait()
		cancel()
		close(errs)
		for err := range errs {
			if !errors.Is(err, want) {
				t.Fatalf("wait: %v, want %v", err, want)
			}
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("waiters took %v to return after their ctx ended at 50ms", took)
		}
	}
}

// TestSetConfigWakesTheSleepingWaiter: a hot reload makes the waiter
// sleeping under the old configuration ask the store again at once.
func TestSetConfigWakesTheSleepingWaiter(t *testing.T) {
	t.Parallel()
	slow := globallimit.Config{Rate: 0.001, Burst: 1}
	fast := globallimit.Config{Rate: 1000, Burst: 10}
	store := &fakeStore{answer: func(_ int, c globallimit.Config, n int) (int, time.Duration, error) {
		if c == slow {
			return 0, time.Hour, nil
		}
		return n, 0, nil
	}}
	sl := &recordingSleeper{block: true, entered: make(chan struct{}, 1)}
	b := globallimit.New(store, slow, globallimit.WithSleeper(sl.sleep))
	done := make(chan error, 1)
	go func() { done <- b.Wait(context.Background()) }()
	<-sl.entered // sleeping for an hour
	b.SetConfig(fast)
	if err := <-done; err != nil {
		t.Fatalf("wait after the reload: %v", err)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.cfgs) != 2 || store.cfgs[0] != slow || store.cfgs[1] != fast {
		t.Fatalf("store calls with %v, want the slow config then the fast one", store.cfgs)
	}
}

// TestStoreErrorReachesEveryWaiter: one failing Store call fails the
// waiters it was refilling for, with the store's error.
func TestStoreErrorReachesEveryWaiter(t *testing.T) {
	t.Parallel()
	errDown := errors.New("redis down")
	store := &fakeStore{
		delay:  5 * time.Millisecond,
		answer: func(int, globallimit.Config, int) (int, time.Duration, error) { return 0, 0, errDown },
	}
	b := globallimit.New(store, cfg)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- b.Wait(context.Background())
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, errDown) {
			t.Fatalf("wait: %v, want the store's error", err)
		}
	}
	if calls, most := store.stats(); most != 1 || calls > 16 {
		t.Fatalf("%d calls, %d at once", calls, most)
	}
}

// TestSetConfigConcurrentWithWait is for the race detector: reloads while
// many goroutines wait.
func TestSetConfigConcurrentWithWait(t *testing.T) {
	t.Parallel()
	b := globallimit.New(globallimit.NewMemory(), globallimit.Config{Rate: 5000, Burst: 50})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b.Wait(ctx) == nil {
				admitted.Add(1)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			b.SetConfig(globallimit.Config{Rate: float64(4000 + 1000*(i%3)), Burst: 50 + i%5})
			time.Sleep(time.Millisecond)
		}
	}()
	wg.Wait()
	if admitted.Load() == 0 {
		t.Fatal("nothing admitted")
	}
}

// TestTryTakeCountsTheTrafficOverTheRate: a shadow bucket (TryTake) of
// 100/s and burst 10, asked by 64 concurrent callers 10 times a
// millisecond for 2 s on a fake clock, grants exactly what Wait would
// have had without waiting (the burst plus the rate over the run, leases
// of 1), never waits, and calls the Store at most once per grant plus once
// per empty spell (not once per refused call: an empty bucket costs no
// round trip per job).
func TestTryTakeCountsTheTrafficOverTheRate(t *testing.T) {
	t.Parallel()
	for _, lease := range []int{1, 5} {
		t.Run(fmt.Sprintf("lease %d", lease), func(t *testing.T) {
			t.Parallel()
			clock := testenv.NewClock(time.Unix(1_700_000_000, 0))
			mem := globallimit.NewMemory(globallimit.WithNow(clock.Now))
			store := &fakeStore{answer: func(_ int, c globallimit.Config, n int) (int, time.Duration, error) {
				return mem.Take(context.Background(), c, n)
			}}
			b := globallimit.New(store, cfg, globallimit.WithLeaseSize(lease), globallimit.WithNow(clock.Now))
			var granted, refused atomic.Int64
			for step := 0; step < 2000; step++ {
				var wg sync.WaitGroup
				for range 10 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ok, err := b.TryTake(context.Background())
						if err != nil {
							t.Error(err)
						}
						if ok {
							granted.Add(1)
						} else {
							refused.Add(1)
						}
					}()
				}
				wg.Wait()
				clock.Advance(time.Millisecond)
			}
			// 10 at once, then one every 10 ms for 2 s (the last step at
			// 1.999 s), a lease's worth at a time.
			if g := granted.Load(); g < 10+199-int64(lease) || g > 10+200 {
				t.Errorf("granted %d of 20000, want the burst 10 + 100/s over 2 s (~209)", g)
			}
			if granted.Load()+refused.Load() != 20_000 {
				t.Errorf("%d granted + %d refused, want every call answered", granted.Load(), refused.Load())
			}
			if calls, _ := store.stats(); calls > 2*int(granted.Load())/lease+3 {
				t.Errorf("%d Store calls for %d grants in leases of %d: want about one per lease, not one per call", calls, granted.Load(), lease)
			}
		})
	}
}

// TestTryTakeSharesAStoreError: a failing Store fails the TryTake that
// called it, and a later one asks again.
func TestTryTakeSharesAStoreError(t *testing.T) {
	t.Parallel()
	boom := errors.New("redis down")
	store := &fakeStore{answer: func(call int, _ globallimit.Config, n int) (int, time.Duration, error) {
		if call == 1 {
			return 0, 0, boom
		}
		return n, 0, nil
	}}
	b := globallimit.New(store, cfg)
	if ok, err := b.TryTake(context.Background()); ok || !errors.Is(err, boom) {
		t.Fatalf("TryTake on a failing store: %v, %v", ok, err)
	}
	if ok, err := b.TryTake(context.Background()); !ok || err != nil {
		t.Fatalf("TryTake after the store recovered: %v, %v", ok, err)
	}
}

// TestTakeLeasedNeverAsksTheStore: TakeLeased hands out the tokens of the
// lease at hand, one each, and says false, without a Store call, when none
// is left or the lease has expired; Wait then leases again.
func TestTakeLeasedNeverAsksTheStore(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock(time.Now())
	store := &fakeStore{answer: func(_ int, _ globallimit.Config, n int) (int, time.Duration, error) { return n, 0, nil }}
	b := globallimit.New(store, cfg, globallimit.WithLeaseSize(3), globallimit.WithNow(clock.Now))
	if b.TakeLeased() {
		t.Fatal("a token taken before any lease")
	}
	ctx := context.Background()
	if err := b.Wait(ctx); err != nil { // leases 3, takes 1
		t.Fatal(err)
	}
	for i := range 2 {
		if !b.TakeLeased() {
			t.Fatalf("leased token %d of 2 left not taken", i+1)
		}
	}
	if b.TakeLeased() {
		t.Fatal("a fourth token taken from a lease of 3")
	}
	if err := b.Wait(ctx); err != nil { // leases 3 more
		t.Fatal(err)
	}
	clock.Advance(time.Second) // the lease's default TTL
	if b.TakeLeased() {
		t.Fatal("a token taken from an expired lease")
	}
	if calls, _ := store.stats(); calls != 2 {
		t.Fatalf("%d Store calls, want 2 (the two Waits')", calls)
	}
}
