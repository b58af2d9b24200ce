package testenv

import (
	"sync"
	"sync/atomic"
	"testing"
)

// RunConcurrent makes b.N calls of op, numbered from 1, from exactly
// goroutines goroutines, and reports decisions per second: the driver of
// the limiters' benchmarks at 1, 8 and 64 goroutines. The first error
// fails the benchmark and stops its goroutine.
func RunConcurrent(b *testing.B, goroutines int, op func(i int64) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range goroutines {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}
