package globallimit_test

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/testenv"
)

// TestFleetAdmission: 3 processes (separate clients) × 16 goroutines Wait
// for 3 s on one Redis bucket. The fleet admits no more than the bucket
// allows plus the documented over-admission P·L, over the whole run and
// over the middle 2 s, and not much less than the rate.
func TestFleetAdmission(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   globallimit.Config
		lease int // 0: LeaseSize(cfg)
	}{
		{"lease 10", globallimit.Config{Rate: 1000, Burst: 100}, 10},
		{"default lease", globallimit.Config{Rate: 1000, Burst: 500}, 0},
		{"no lease", globallimit.Config{Rate: 300, Burst: 30}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const (
				procs   = 3
				workers = 16
				run     = 3 * time.Second
			)
			srv := testenv.Redis(t)
			prefix := newPrefix("fleet")
			lease := tc.lease
			if lease == 0 {
				lease = globallimit.LeaseSize(tc.cfg)
			}
			ctx, cancel := context.WithTimeout(context.Background(), run)
			defer cancel()
			var (
				mu       sync.Mutex
				admitted []time.Time
				failures []error
				wg       sync.WaitGroup
			)
			start := time.Now()
			for p := 0; p < procs; p++ {
				b := globallimit.New(globallimit.NewRedis(srv.Client(), prefix), tc.cfg, globallimit.WithLeaseSize(lease))
				for w := 0; w < workers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							err := b.Wait(ctx)
							now := time.Now()
							mu.Lock()
							if err == nil {
								admitted = append(admitted, now)
							} else if ctx.Err() == nil {
								failures = append(failures, err)
							}
							mu.Unlock()
							if err != nil {
								return
							}
						}
					}()
				}
			}
			wg.Wait()
			for _, err := range failures {
				t.Fatal(err)
			}
			sort.Slice(admitted, func(i, j int) bool { return admitted[i].Before(admitted[j]) })
			elapsed := admitted[len(admitted)-1].Sub(start).Seconds()
			rate, burst, over := tc.cfg.Rate, float64(tc.cfg.Burst), float64(procs*lease)
			slack := rate * 0.005 // 5 ms of clock reads and round trips
			total := float64(len(admitted))
			if limit := burst + rate*elapsed + over + slack; total > limit {
				t.Errorf("admitted %.0f in %.2fs, more than burst + rate·t + P·L = %.0f", total, elapsed, limit)
			}
			mid := 0
			for _, a := range admitted {
				if d := a.Sub(start); d >= time.Second && d < 3*time.Second {
					mid++
				}
			}
			if limit := burst + rate*2 + over + slack; float64(mid) > limit {
				t.Errorf("admitted %d in the 2 s from 1 s to 3 s, more than %.0f", mid, limit)
			}
			if low := 0.7 * rate * run.Seconds(); total < low {
				t.Errorf("admitted only %.0f in %v at %v/s, want at least %.0f", total, run, rate, low)
			}
			t.Logf("lease %d: admitted %.0f in %.2fs (bucket allows %.0f, + P·L = %.0f); %d in [1s, 3s) (allows %.0f + %.0f)",
				lease, total, elapsed, burst+rate*elapsed, over, mid, burst+rate*2, over)
		})
	}
}

// TestRedisDown: Take and Wait fail with an error naming the operation
// while Redis is down, and work again once it is back.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testenv.Redis(t)
	store := globallimit.NewRedis(srv.Client(), newPrefix("down"))
	c := globallimit.Config{Rate: 100, Burst: 10}
	b := globallimit.New(store, c, globallimit.WithLeaseSize(1))
	if err := b.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if _, _, err := store.Take(ctx, c, 1); err == nil || !strings.HasPrefix(err.Error(), "take global tokens: ") {
		t.Errorf("take with Redis down: %v, want an error starting %q", err, "take global tokens: ")
	}
	if err := b.Wait(ctx); err == nil || !strings.HasPrefix(err.Error(), "take global tokens: ") {
		t.Errorf("wait with Redis down: %v, want an error starting %q", err, "take global tokens: ")
	}
	srv.Start()
	if err := b.Wait(ctx); err != nil {
		t.Fatalf("wait after Redis came back: %v", err)
	}
	if g, _, err := store.Take(ctx, c, 5); err != nil || g != 5 {
		t.Fatalf("take after Redis came back: %d, %v; want 5 from the refilled bucket", g, err)
	}
}
