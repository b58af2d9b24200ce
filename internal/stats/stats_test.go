package stats

import (
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	ds := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for q, want := range map[float64]time.Duration{0.5: 5, 0.95: 10, 0.99: 10, 0.01: 1, 0.1: 1} {
		if got := Percentile(ds, q); got != want {
			t.Errorf("p%v = %v, want %v", q*100, got, want)
		}
	}
	if Percentile(nil, 0.5) != 0 {
		t.Error("the percentile of nothing is not 0")
	}
}

func TestMedian(t *testing.T) {
	xs := []float64{3, 1, 2}
	if m := Median(xs); m != 2 || xs[0] != 3 {
		t.Errorf("median %v of %v (must not sort the caller's slice)", m, xs)
	}
	if m := Median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("even count: %v, want 2.5", m)
	}
	if Median(nil) != 0 {
		t.Error("the median of nothing is not 0")
	}
}

func TestPercentileOfAHundred(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.01, time.Millisecond}, {0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := Percentile(ds, c.q); got != c.want {
			t.Errorf("Percentile(1..100 ms, %v) = %s, want %s", c.q, got, c.want)
		}
	}
	if got := Percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile of nothing = %s", got)
	}
}
