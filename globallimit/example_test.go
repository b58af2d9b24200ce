package globallimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/testenv"
)

// A bucket of 3 refilling at 2 per second: a burst of 3, then one every
// 500 ms. The fake sleeper advances the fake clock.
func ExampleBucket() {
	ctx := context.Background()
	clock := testenv.NewClock(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC))
	sleep := func(_ context.Context, d time.Duration) error { clock.Advance(d); return nil }
	b := globallimit.New(globallimit.NewMemory(globallimit.WithNow(clock.Now)), globallimit.Config{Rate: 2, Burst: 3},
		globallimit.WithNow(clock.Now), globallimit.WithSleeper(sleep))
	start := clock.Now()
	for i := 0; i < 6; i++ {
		if err := b.Wait(ctx); err != nil {
			panic(err)
		}
		fmt.Println("job", i, "at", clock.Now().Sub(start))
	}
	// Output:
	// job 0 at 0s
	// job 1 at 0s
	// job 2 at 0s
	// job 3 at 500ms
	// job 4 at 1s
	// job 5 at 1.5s
}

// Take leases several tokens at once and says when the next one is due.
func ExampleMemoryStore_Take() {
	ctx := context.Background()
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	s := globallimit.NewMemory(globallimit.WithNow(func() time.Time { return now }))
	cfg := globallimit.Config{Rate: 100, Burst: 25}
	for i := 0; i < 3; i++ {
		granted, wait, _ := s.Take(ctx, cfg, 10)
		fmt.Println(granted, wait)
	}
	// Output:
	// 10 0s
	// 10 0s
	// 5 10ms
}

func ExampleConfig_Validate() {
	err := globallimit.Config{Rate: -5, Burst: 0}.Validate()
	fmt.Println(err)
	// Output:
	// rate: must be a number of tokens per second from 1/86400 (one a day) to 1000000, got -5
	// burst: must be a whole number from 1 to 1000000, got 0
}
