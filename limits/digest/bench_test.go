package digest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/notifier/notifier/limits/digest"
	"github.com/notifier/notifier/testenv"
)

// BenchmarkHoldsForOneUser holds 20,000 jobs for one user on Redis, then
// takes them into a digest and has 1,000 of its members come back (Of):
// the total time of the holds, the mean of the last 100 holds, the time
// of the members' return, and the hash's size and fields after. With the
// bound lifted, every job is held (the cost of a hash that large); with
// digest.MaxHeld, the jobs past it are refused.
//
//	go test -run '^$' -bench HoldsForOneUser -benchtime 1x ./digest
func BenchmarkHoldsForOneUser(b *testing.B) {
	const n = 20000
	srv := testenv.Redis(b)
	rdb := srv.Client()
	ctx := context.Background()
	for _, bc := range []struct {
		name    string
		maxHeld int
	}{{"bound_lifted", n}, {"bound", digest.MaxHeld}} {
		b.Run(bc.name, func(b *testing.B) {
			for i := range b.N {
				prefix := fmt.Sprintf("%s%d:", bc.name, i)
				s := digest.NewRedis(rdb, prefix).WithLimits(bc.maxHeld, 0)
				k := digest.KeyOf("push", "", "u")
				start := time.Now()
				var late time.Duration
				for j := range n {
					t := time.Now()
					if _, _, err := s.Hold(ctx, k, fmt.Sprintf("j%05d", j), time.Time{}, time.Hour); err != nil && !errors.Is(err, digest.ErrTooManyHeld) {
						b.Fatal(err)
					}
					if j >= n-100 {
						late += time.Since(t)
					}
				}
				holds := time.Since(start)
				tk, err := s.Take(ctx, k, "trigger", time.Time{}, time.Time{}, time.Hour)
				if err != nil || len(tk.Members) != bc.maxHeld+1 {
					b.Fatalf("take: %d members, %v", len(tk.Members), err)
				}
				start = time.Now()
				for j := range 1000 {
					if m, err := s.Of(ctx, k, fmt.Sprintf("j%05d", j)); err != nil || m.Count != bc.maxHeld+1 {
						b.Fatalf("of: %+v, %v", m.Count, err)
					}
				}
				back := time.Since(start)
				key := fmt.Sprintf("{%sdg:%s}", prefix, k)
				mem, _ := rdb.MemoryUsage(ctx, key).Result()
				fields, _ := rdb.HLen(ctx, key).Result()
				b.ReportMetric(holds.Seconds(), "holds_s")
				b.ReportMetric(float64(late.Microseconds())/100, "late_hold_µs")
				b.ReportMetric(back.Seconds(), "1000_of_s")
				b.ReportMetric(float64(mem), "hash_B")
				b.ReportMetric(float64(fields), "hash_fields")
			}
		})
	}
}
