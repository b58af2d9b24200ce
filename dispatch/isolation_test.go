package dispatch

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
)

// isolation is a world of two providers with fakes of their own: sms-gw
// (b.fake, contract smsRate) and push-gw (push, contract pushRate), both
// with max_queue_delay 3s, and dispatchers of 16 workers each.
type isolation struct {
	*bundle
	push *testenv.Fake
}

func newIsolation(t *testing.T, smsRate, pushRate int) *isolation {
	t.Helper()
	b := setup(t, setupOpts{contract: smsRate, rate: float64(smsRate), maxQueueDelay: 3 * time.Second})
	w := &isolation{bundle: b, push: testenv.FakeProvider(t, testenv.WithContract(pushRate))}
	b.pcfgs[1].URL, b.pcfgs[1].Rate = w.push.URL(), float64(pushRate)
	return w
}

// warm sends one job to each provider: a provider's queue starts cold
// (full for max_queue_delay, see leaky's package doc), which these tests
// are not about.
func (w *isolation) warm() {
	w.t.Helper()
	w.publish(newJob("warm-sms", "sms", "w"), newJob("warm-push", "push", "w"))
	testenv.WaitFor(w.t, 20*time.Second, "the providers' queues warm", func() bool {
		return len(w.fake.Accepted()) >= 1 && len(w.push.Accepted()) >= 1
	})
}

// procs starts n dispatchers of workers workers each, knowing of each
// other (each holds its share of a channel's budget).
func (w *isolation) procs(n, workers int) []*proc {
	ps := make([]*proc, n)
	for i := range ps {
		ps[i] = w.start(func(o *Options) {
			o.Workers = workers
			o.Peers = func() int { return n }
		})
	}
	return ps
}

// rateOf is the rate of the accepted requests of f that arrived in
// [from, to]: their count less one over the time from the first to the
// last.
func rateOf(f *testenv.Fake, from, to time.Time) (float64, int) {
	var at []time.Time
	for _, r := range f.Accepted() {
		if !r.At.Before(from) && !r.At.After(to) {
			at = append(at, r.At)
		}
	}
	if len(at) < 2 {
		return 0, len(at)
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	return float64(len(at)-1) / at[len(at)-1].Sub(at[0]).Seconds(), len(at)
}

// sendsByPrefix counts f's accepted requests in (since, until) by the
// prefix of their job id before its first "-" (the tenant, in the
// fairness tests' ids).
func sendsByPrefix(f *testenv.Fake, since, until time.Time) map[string]int {
	count := map[string]int{}
	for _, r := range f.Accepted() {
		if r.At.After(since) && r.At.Before(until) {
			prefix, _, _ := strings.Cut(r.ID, "-")
			count[prefix]++
		}
	}
	return count
}

// referenceRate publishes n jobs of channel (ids prefix-0..n-1, each to
// its own user) and returns their ids and the rate f accepted them at, from the first
// arrival to the last: what the dispatchers already running reach on this
// machine now, on a path without the behaviour under test. A throughput
// floor is a share of it, measured in the same run, so a loaded machine
// (which slows the reference and the measure alike) does not fail the
// floor, while a behaviour that costs throughput does (issue 29: fixed
// floors failed at 60.8/s of 75 on a machine shared with other work).
func (b *bundle) referenceRate(f *testenv.Fake, prefix, channel string, n int) (ids []string, rate float64) {
	b.t.Helper()
	ids = b.publishN(prefix, channel, n, n)
	var at []time.Time
	testenv.WaitFor(b.t, 60*time.Second, "the reference's jobs sent", func() bool {
		at = at[:0]
		for _, r := range f.Accepted() {
			if strings.HasPrefix(r.ID, prefix+"-") {
				at = append(at, r.At)
			}
		}
		return len(at) >= n
	})
	slices.SortFunc(at, time.Time.Compare)
	return ids, float64(len(at)-1) / at[len(at)-1].Sub(at[0]).Seconds()
}

// atLeastOf fails t unless got is at least 90 % of ref, the rate the same
// dispatchers reached on a reference earlier in the same run
// (referenceRate); what names the measure. A reference under half the
// contract fails too: a share of it would measure nothing. Alone such a
// reference runs at 95–99 % of its contract; in make test, beside the
// other tests, it was seen at 29–43 % (with and without a CPU burner).
func atLeastOf(t *testing.T, what string, got, ref, contract float64) {
	t.Helper()
	atLeastShareOf(t, what, got, ref, contract, 0.9)
}

// atLeastShareOf is atLeastOf with another share of the reference.
func atLeastShareOf(t *testing.T, what string, got, ref, contract, share float64) {
	t.Helper()
	if got < share*ref {
		t.Errorf("%s: %.1f/s, want at least %.0f %% of the %.1f/s the reference reached in this run (contract %g/s)", what, got, 100*share, ref, contract)
	}
	if ref < contract/2 {
		t.Errorf("the reference ran at %.1f/s of a %g/s contract: too little to measure a share against (the dispatchers are broken, or starved of CPU by the tests beside them: alone such a reference runs at 95–99 %% of its contract)", ref, contract)
	}
}

// span is the first and last arrival of f's accepted requests since since.
func span(f *testenv.Fake, since time.Time) (first, last time.Time) {
	for _, r := range f.Accepted() {
		if r.At.Before(since) {
			continue
		}
		if first.IsZero() || r.At.Before(first) {
			first = r.At
		}
		if r.At.After(last) {
			last = r.At
		}
	}
	return first, last
}

// TestIsolationPushNotBehindSMSBacklog: "a provider's backlog never lowers
// another provider's achieved rate". Two dispatchers of 16 workers, an SMS
// gateway at 100/s and a push provider at 250/s: 3,000 SMS jobs (30 s of
// backlog), then 1,500 push jobs 2 s later. Push runs at its contract while
// SMS keeps its own, and neither is exceeded. Before the queues were
// scheduled, push reached 37-103/s here. "At its contract" is measured
// against references in the same run: 500 push jobs alone, then 200 SMS
// alone, first (referenceRate).
func TestIsolationPushNotBehindSMSBacklog(t *testing.T) {
	measuresAlone(t)
	w := newIsolation(t, 100, 250)
	w.procs(2, 16)
	w.warm()
	refPush, pushRef := w.referenceRate(w.push, "refp", "push", 500)
	_, smsRef := w.referenceRate(w.fake, "refs", "sms", 200)
	w.publishN("sms", "sms", 3000, 3000)
	time.Sleep(2 * time.Second)
	since := time.Now()
	pushIDs := w.publishN("push", "push", 1500, 1500)
	testenv.WaitFor(t, 60*time.Second, "every push job sent", func() bool { return len(w.push.Accepted()) >= len(pushIDs)+len(refPush)+1 })
	first, last := span(w.push, since)
	overall, _ := rateOf(w.push, first, last)
	// Sustained: after the first second, in which push takes its share of
	// the workers from the SMS jobs they held (each freed worker goes to
	// the channel furthest below its budget).
	push, _ := rateOf(w.push, first.Add(time.Second), last)
	sms, n := rateOf(w.fake, first.Add(time.Second), last)
	t.Logf("push sustained %.1f/s of 250, %.2f of its %.1f/s alone (%.1f/s over all its %d jobs in %s); sms meanwhile %.1f/s of 100, %.2f of its %.1f/s alone (%d jobs); 429s: push %d, sms %d",
		push, push/pushRef, pushRef, overall, len(pushIDs), last.Sub(first).Round(time.Millisecond), sms, sms/smsRef, smsRef, n, w.push.Count(429), w.fake.Count(429))
	// Floors of 75 % of each provider's rate alone: the two together need
	// more CPU than either reference did, and on a loaded 2-core machine
	// under -race the machine, not the scheduler, runs out (CI saw sms
	// at 0.80 of its reference while push held 0.99; beside a CPU burner
	// both ran at 0.82). Behind the backlog before the queues were
	// scheduled, push reached 0.15-0.41 of its contract.
	atLeastShareOf(t, "push behind the SMS backlog", push, pushRef, 250, 0.75)
	atLeastShareOf(t, "sms while push ran", sms, smsRef, 100, 0.75)
	arrivalsPaced(t, "sms-gw", w.fake, 100)
	arrivalsPaced(t, "push-gw", w.push, 250)
	w.acceptedOnceOn(w.push, pushIDs)

}

// TestIsolationSickProvider: "a provider that is paused (429) or has its
// breaker open holds no worker that another provider's jobs need". The
// SMS gateway answers 429 with Retry-After: 99999, or 500 to everything;
// its jobs wait (in JetStream, or handed back with a delay), and push jobs,
// normal and priority, go at push's contract (at least 90 % of the rate
// 400 push jobs alone reach first, in the same run). No SMS job is lost.
func TestIsolationSickProvider(t *testing.T) {
	measuresAlone(t)
	for _, tc := range []struct {
		name string
		sick func(f *testenv.Fake)
		seen func(w *isolation) bool
	}{
		{"paused", func(f *testenv.Fake) { f.RateLimitFor(time.Hour, "99999") },
			func(w *isolation) bool { return w.fake.Count(429) >= 1 }},
		{"breaker", func(f *testenv.Fake) { f.FailFor(time.Hour, 500) },
			func(w *isolation) bool { return w.fake.Count(500) >= 10 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newIsolation(t, 100, 250)
			ps := w.procs(2, 8)
			w.warm()
			refIDs, ref := w.referenceRate(w.push, "refp", "push", 400)
			tc.sick(w.fake)
			w.publishN("sms", "sms", 300, 300)
			testenv.WaitFor(t, 20*time.Second, "the SMS gateway refusing", func() bool { return tc.seen(w) })
			time.Sleep(time.Second) // every worker that would hold an SMS job holds one by now
			since := time.Now()
			ids := w.publishN("push", "push", 200, 200)
			for i := range 20 {
				id := fmt.Sprintf("push-high-%d", i)
				j := newJob(id, "push", "hu")
				if _, err := w.pub.Publish(t.Context(), j, true); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			testenv.WaitFor(t, 30*time.Second, "every push job sent", func() bool { return len(w.push.Accepted()) >= len(ids)+len(refIDs)+1 })
			first, last := span(w.push, since)
			rate, _ := rateOf(w.push, first, last)
			t.Logf("%s SMS gateway: %d push jobs at %.1f/s of 250 in %s, %.2f of the %.1f/s push alone reached", tc.name, len(ids), rate, last.Sub(first).Round(time.Millisecond), rate/ref, ref)
			atLeastOf(t, "push beside a "+tc.name+" SMS gateway", rate, ref, 250)
			w.acceptedOnceOn(w.push, ids)
			for _, p := range ps {
				p.stop(t)
			}
			// No SMS job lost: each is still in the stream or dead-lettered.
			// The acks of the last dead-lettered jobs are not waited for
			// (the dead letter is stored first), so the server may still
			// hold a job it has a dead letter of for a moment: the sum
			// settles, it does not start at 300.
			var got uint64
			settled := func() bool {
				got = w.remaining() + uint64(len(w.deadLetters()))
				return got == 300
			}
			deadline := time.Now().Add(10 * time.Second)
			for !settled() && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			if got != 300 {
				t.Errorf("SMS jobs after the run: %d in the stream or dead-lettered, want the 300 published", got)
			}
		})
	}
}

// acceptedOnceOn asserts that f accepted each of ids exactly once (among
// whatever else it accepted).
func (b *bundle) acceptedOnceOn(f *testenv.Fake, ids []string) {
	b.t.Helper()
	got := map[string]int{}
	for _, id := range f.AcceptedIDs() {
		got[id]++
	}
	for _, id := range ids {
		if got[id] != 1 {
			b.t.Errorf("job %s accepted %d times, want once", id, got[id])
			return
		}
	}
}
