package dispatch

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
)

// TestFairQueueProperties drives the tenant scheduler with random weights
// and random arrivals and checks what it promises: while tenants all wait,
// their picks follow their weights; it is work-conserving (someone is
// picked whenever anyone waits, and only those who wait); no waiting
// tenant goes more than ⌈W/w⌉+n picks without one (n tenants); and a tenant that comes
// back from idling gets no burst for the time it was away.
// NOTIFIER_PROPERTY_SEED replays one seed.
func TestFairQueueProperties(t *testing.T) {
	seeds := 200
	first := uint64(1)
	if s := os.Getenv("NOTIFIER_PROPERTY_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		first, seeds = n, 1
	}
	for seed := first; seed < first+uint64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { checkFair(t, seed) })
	}
}

func checkFair(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	n := 2 + r.IntN(6)
	tenants := make([]string, n)
	weights := map[string]float64{}
	for i := range tenants {
		tenants[i] = fmt.Sprintf("t%d", i)
		weights[tenants[i]] = float64(1 + r.IntN(5))
	}
	tenants[0] = "" // the default tenant takes part too
	weights[""] = float64(1 + r.IntN(5))
	weight := func(s string) float64 { return weights[s] }
	q := newFairQueue()

	// Phase 1: everyone waits. Shares converge to the weights and no one
	// waits longer than the bound.
	var W float64
	for _, tn := range tenants {
		W += weights[tn]
	}
	picks := map[string]int{}
	last := map[string]int{}
	const rounds = 2000
	for i := 0; i < rounds; i++ {
		got := q.pick(tenants, weight) // "" is the default tenant here: everyone waits
		picks[got]++
		for _, tn := range tenants {
			if tn == got {
				last[tn] = i
				continue
			}
			if gap := i - last[tn]; gap > int(math.Ceil(W/weights[tn]))+n && i > n {
				t.Fatalf("tenant %s (weight %v of %v) waited %d picks", tn, weights[tn], W, gap)
			}
		}
	}
	for _, tn := range tenants {
		want := float64(rounds) * weights[tn] / W
		if d := math.Abs(float64(picks[tn]) - want); d > float64(n)+1 {
			t.Errorf("tenant %s (weight %v of %v): %d picks of %d, want %.1f", tn, weights[tn], W, picks[tn], rounds, want)
		}
	}

	// Phase 2: random subsets wait. Only waiting tenants are picked, and
	// one always is.
	for i := 0; i < 2000; i++ {
		var waiting []string
		for _, tn := range tenants {
			if r.IntN(3) > 0 {
				waiting = append(waiting, tn)
			}
		}
		got := q.pick(waiting, weight)
		if len(waiting) == 0 {
			if got != "" {
				t.Fatalf("picked %q while nobody waits", got)
			}
			continue
		}
		found := false
		for _, tn := range waiting {
			found = found || tn == got
		}
		if !found {
			t.Fatalf("picked %s, not among the waiting %v", got, waiting)
		}
	}

	// Phase 3: one tenant idles while the others are served, then comes
	// back: over the next picks it gets its share, not the time it was away.
	idle := tenants[r.IntN(n)]
	var others []string
	for _, tn := range tenants {
		if tn != idle {
			others = append(others, tn)
		}
	}
	for i := 0; i < 1000; i++ {
		q.pick(others, weight)
	}
	back := 0
	const after = 200
	for i := 0; i < after; i++ {
		if q.pick(tenants, weight) == idle {
			back++
		}
	}
	if want := after * weights[idle] / W; float64(back) > want+float64(n)+1 {
		t.Errorf("tenant %s back from idling took %d of %d picks, its share is %.1f", idle, back, after, want)
	}
}
