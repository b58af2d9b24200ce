// Package stats holds the two summaries the notifier's reports (the bench,
// the demo) print: the nearest-rank percentile of durations and the median
// of figures.
package stats

import (
	"slices"
	"time"
)

// Percentile is the q-quantile (0 < q <= 1) of sorted durations by nearest
// rank; 0 for none.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Median is the median of xs (the mean of the middle two for an even
// count); 0 for none. xs is left as it was.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
