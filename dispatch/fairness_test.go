package dispatch

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
)

// publishTenant publishes n jobs of tenant for channel, ids
// <tenant>-0..n-1, each to its own user, and returns when each was
// published.
func (b *bundle) publishTenant(tenant, channel string, n int) map[string]time.Time {
	b.t.Helper()
	batch := b.pub.NewBatch(256, 10*time.Second)
	at := make(map[string]time.Time, n)
	ctx := context.Background()
	for i := 0; i < n; i++ {
		j := newJob(fmt.Sprintf("%s-%d", tenant, i), channel, fmt.Sprintf("%s-u%d", tenant, i))
		j.Tenant = tenant
		at[j.ID] = time.Now()
		if err := batch.Publish(ctx, j, false); err != nil {
			b.t.Fatalf("publish: %v", err)
		}
	}
	if _, err := batch.Wait(ctx); err != nil {
		b.t.Fatalf("publish batch: %v", err)
	}
	return at
}

// pace publishes n jobs of tenant (prefix-0..n-1, each to its own user),
// one every every, on the priority lane when high, and returns when each
// was published.
func (w *isolation) pace(prefix, tenant string, n int, every time.Duration, high bool) map[string]time.Time {
	w.t.Helper()
	published := make(map[string]time.Time, n)
	for i := 0; i < n; i++ {
		j := newJob(fmt.Sprintf("%s-%d", prefix, i), "sms", fmt.Sprintf("%s-u%d", prefix, i))
		j.Tenant = tenant
		published[j.ID] = time.Now()
		if _, err := w.pub.Publish(w.t.Context(), j, high); err != nil {
			w.t.Fatal(err)
		}
		time.Sleep(every)
	}
	return published
}

// waits waits until the fake accepted every job of published and returns
// each one's wait from publish to provider, sorted, and the last arrival.
func (b *bundle) waits(what string, published map[string]time.Time) ([]time.Duration, time.Time) {
	b.t.Helper()
	testenv.WaitFor(b.t, 60*time.Second, what, func() bool {
		n := 0
		for _, r := range b.fake.Accepted() {
			if _, ok := published[r.ID]; ok {
				n++
			}
		}
		return n == len(published)
	})
	var waits []time.Duration
	var last time.Time
	for _, r := range b.fake.Accepted() {
		if at, ok := published[r.ID]; ok {
			waits = append(waits, r.At.Sub(at))
			if r.At.After(last) {
				last = r.At
			}
		}
	}
	slices.Sort(waits)
	return waits, last
}

// TestFairnessLateTenantNotBehindBlast: "within one provider the first big
// publisher starves everyone after it" no more. One tenant publishes 1,500
// SMS at once (15 s of the 100/s contract); another's one-time codes come
// 3 s later at 20/s. Two dispatchers of 64 workers. The codes reach the
// provider within max_queue_delay + 1 s of their publish (p95; the issue's
// figure was 31 s), and within 1 s (the channel's budget), and the
// provider stays busy meanwhile.
func TestFairnessLateTenantNotBehindBlast(t *testing.T) {
	measures(t)
	w := newIsolation(t, 100, 250)
	w.procs(2, 64)
	w.warm()
	_, ref := w.referenceRate(w.fake, "ref", "sms", 300)
	w.publishTenant("bulk", "sms", 1500)
	time.Sleep(3 * time.Second)
	since := time.Now()
	waits, last := w.waits("every code sent", w.pace("otp", "otp", 40, 50*time.Millisecond, false))
	p50, p95 := waits[len(waits)/2], waits[len(waits)*95/100]
	busy, n := rateOf(w.fake, since, last)
	t.Logf("late tenant's codes: p50 %s, p95 %s, max %s from publish to provider; provider at %.1f/s of 100 meanwhile (%d sends)",
		p50.Round(time.Millisecond), p95.Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond), busy, n)
	if limit := 3*time.Second + time.Second; p95 > limit {
		t.Errorf("late tenant's p95 %s, want at most max_queue_delay + 1 s = %s", p95.Round(time.Millisecond), limit)
	}
	// The channel's budget keeps its queue about 250 ms deep, however many
	// workers: without it the 128 workers would hold 1.28 s of the blast
	// ahead of every code.
	if p95 > time.Second {
		t.Errorf("late tenant's p95 %s behind 2 × 64 workers, want at most 1 s (the budget's 250 ms horizon, and room)", p95.Round(time.Millisecond))
	}
	atLeastOf(t, "the provider while both tenants had jobs", busy, ref, 100)
	arrivalsPaced(t, "sms-gw", w.fake, 100)
}

// TestFairnessWeights: two tenants with weights 3 and 1, both with deep
// backlogs, published in the order 1 then 3, share the contract 75/25
// (within 10 points) while both wait, and use it (90 % of the rate the
// default tenant's jobs reach alone first, in the same run).
func TestFairnessWeights(t *testing.T) {
	measures(t)
	w := newIsolation(t, 100, 250)
	weights := map[string]float64{"gold": 3, "bronze": 1}
	w.procs2(2, 16, weights)
	w.warm()
	_, ref := w.referenceRate(w.fake, "ref", "sms", 300)
	w.publishTenant("bronze", "sms", 600)
	w.publishTenant("gold", "sms", 600)
	since := time.Now().Add(time.Second) // past the jobs the first plans took before gold's came
	time.Sleep(5 * time.Second)
	until := time.Now()
	count := sendsByPrefix(w.fake, since, until)
	total := count["gold"] + count["bronze"]
	if total == 0 {
		t.Fatal("nothing sent")
	}
	share := float64(count["gold"]) / float64(total)
	t.Logf("weights 3:1 over %s: gold %d, bronze %d sends: %.1f %% / %.1f %%",
		until.Sub(since).Round(time.Millisecond), count["gold"], count["bronze"], 100*share, 100*(1-share))
	if share < 0.65 || share > 0.85 {
		t.Errorf("gold (weight 3) had %.1f %% of the sends, want 75 ± 10 %%", 100*share)
	}
	atLeastOf(t, "the provider while both tenants waited", float64(total)/until.Sub(since).Seconds(), ref, 100)
}

// procs2 is procs with tenant weights.
func (w *isolation) procs2(n, workers int, weights map[string]float64) []*proc {
	ps := make([]*proc, n)
	for i := range ps {
		ps[i] = w.start(func(o *Options) {
			o.Workers = workers
			o.Peers = func() int { return n }
			o.TenantWeights = weights
		})
	}
	return ps
}

// TestPriorityNotBehindBacklog: "the priority lane is always taken before
// the normal lane". 1,500 normal SMS (15 s of backlog), then 20 priority
// ones, one every 100 ms: each reaches the provider within 1 s of its
// publish (the channel's budget keeps about 250 ms of normal jobs ahead of
// it; without it, up to max_queue_delay's 3 s).
func TestPriorityNotBehindBacklog(t *testing.T) {
	measures(t)
	w := newIsolation(t, 100, 250)
	w.procs(2, 16)
	w.warm()
	w.publishN("bulk", "sms", 1500, 1500)
	time.Sleep(2 * time.Second)
	waits, _ := w.waits("every priority job sent", w.pace("prio", "", 20, 100*time.Millisecond, true))
	t.Logf("priority jobs behind a 15 s backlog: p50 %s, max %s from publish to provider",
		waits[len(waits)/2].Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond))
	if worst := waits[len(waits)-1]; worst > time.Second {
		t.Errorf("a priority job waited %s behind the normal backlog, want at most 1 s", worst.Round(time.Millisecond))
	}
}
