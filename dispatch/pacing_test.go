package dispatch

import (
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
)

// sustainedRate is the rate of the accepted requests between the first and
// the last, in requests per second.
func sustainedRate(f *testenv.Fake) float64 {
	acc := f.Accepted()
	if len(acc) < 2 {
		return 0
	}
	sort.Slice(acc, func(i, j int) bool { return acc[i].At.Before(acc[j].At) })
	return float64(len(acc)-1) / acc[len(acc)-1].At.Sub(acc[0].At).Seconds()
}

// TestPacingAcrossDispatchers: three dispatchers (separate Redis and NATS
// connections, as separate processes have) on a 100/s contract drain a
// 2,000-job backlog: every job exactly once, no 429 from a provider that
// enforces the same contract, no 1 s window over 100, and at least 95 % of
// the contract sustained.
func TestPacingAcrossDispatchers(t *testing.T) {
	// Not parallel: it measures pacing, and the package's other tests
	// (run in parallel after it) would load the machine's two cores.
	b := setup(t, setupOpts{contract: 100, rate: 100, maxQueueDelay: time.Second})
	ids := b.publishN("pace", "sms", 2000, 300)
	var procs []*proc
	for i := 0; i < 3; i++ {
		procs = append(procs, b.start(func(o *Options) { o.Workers = 16 }))
	}
	defer func() {
		var late float64
		for _, p := range procs {
			late += p.count(p.d.m.Deferrals.WithLabelValues(LayerLeaky, "late"))
		}
		t.Logf("slots given up because a worker woke more than 5ms late: %v", late)
	}()
	testenv.WaitFor(t, 60*time.Second, "2000 jobs accepted", func() bool { return len(b.fake.AcceptedIDs()) >= 2000 })
	b.acceptedOnce(ids)
	if n := b.fake.Count(http.StatusTooManyRequests); n != 0 {
		t.Errorf("the provider answered 429 %d times; the contract was exceeded", n)
	}
	if most := b.fake.MaxInWindow(time.Second); most > 100 {
		t.Errorf("most sends in any 1 s window: %d, contract 100", most)
	}
	if r := sustainedRate(b.fake); r < 95 {
		t.Errorf("sustained %.1f/s, want at least 95 %% of the 100/s contract", r)
	} else {
		t.Logf("sustained %.1f/s on a 100/s contract; most in a 1 s window %d", r, b.fake.MaxInWindow(time.Second))
	}
}

// TestRateLimitedProviderNoStorm: the provider really allows only half the
// configured contract and answers the excess with 429. Every job is sent
// in the end, and 429s stay a small fraction of the jobs: a 429 pauses the
// provider fleet-wide, no retry storm.
func TestRateLimitedProviderNoStorm(t *testing.T) {
	// Not parallel: it measures pacing, and the package's other tests
	// (run in parallel after it) would load the machine's two cores.
	b := setup(t, setupOpts{contract: 50, rate: 100, maxQueueDelay: time.Second})
	ids := b.publishN("half", "sms", 600, 100)
	var procs []*proc
	for i := 0; i < 2; i++ {
		procs = append(procs, b.start(func(o *Options) { o.Workers = 16 }))
	}
	testenv.WaitFor(t, 90*time.Second, "600 jobs accepted", func() bool { return len(b.fake.AcceptedIDs()) >= 600 })
	testenv.WaitFor(t, 10*time.Second, "job stream empty", func() bool { return b.remaining() == 0 })
	b.acceptedOnce(ids)
	n429 := b.fake.Count(http.StatusTooManyRequests)
	if frac := float64(n429) / 600; frac > 0.10 {
		t.Errorf("429s: %d for 600 jobs (%.0f %%); a pause should keep them a small fraction", n429, 100*frac)
	}
	var paused float64
	for _, p := range procs {
		paused += p.count(p.d.m.Deferrals.WithLabelValues(LayerProvider, "rate_limited"))
	}
	if int(paused) != n429 {
		t.Errorf("deferrals{reason=rate_limited} = %v, want one per 429 (%d)", paused, n429)
	}
	if len(b.deadLetters()) != 0 {
		t.Errorf("a rate-limited job was dead-lettered")
	}
	t.Logf("600 jobs through a provider allowing half the contract: %d answers 429 (%.1f %%)", n429, 100*float64(n429)/600)
}

// TestTransientFailuresRetryThenDead: 5xx answers are retried with backoff
// and counted in the ledger across redeliveries; after max_attempts the job
// is dead with reason max_attempts. Permanent refusals are dead at once.
func TestTransientFailuresRetryThenDead(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.fake.FailNext(2, http.StatusServiceUnavailable)
	b.publish(newJob("flaky-1", "sms", "u1"))
	p := b.start(nil) // max_attempts 3
	testenv.WaitFor(t, 20*time.Second, "flaky job sent after 2 failures", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	if got := p.count(p.d.m.Deferrals.WithLabelValues(LayerProvider, "retry")); got != 2 {
		t.Errorf("retries counted: %v, want 2", got)
	}

	b.fake.FailFor(time.Hour, http.StatusInternalServerError)
	b.publish(newJob("doomed-1", "sms", "u2"))
	testenv.WaitFor(t, 20*time.Second, "doomed job dead-lettered", func() bool { return len(b.deadLetters()) == 1 })
	dl := b.deadLetters()[0]
	if dl.Reason != ReasonMaxAttempts || !strings.Contains(dl.Detail, "3 transient provider failures") {
		t.Fatalf("dead letter: reason %q detail %q", dl.Reason, dl.Detail)
	}
	b.fake.Reset()

	b.fake.FailNext(1, http.StatusBadRequest)
	b.publish(newJob("refused-1", "sms", "u3"))
	testenv.WaitFor(t, 20*time.Second, "refused job dead-lettered", func() bool { return len(b.deadLetters()) == 2 })
	dl = b.deadLetters()[1]
	if dl.Reason != ReasonRejected || !strings.Contains(dl.Detail, "400") {
		t.Fatalf("refused job: reason %q detail %q, want rejected with the status", dl.Reason, dl.Detail)
	}
	if got := p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeDead)); got != 2 {
		t.Errorf("dead counted %v, want 2", got)
	}
}

// TestRedisRestartHold: Redis restarts empty mid-run under redis.on_failure
// hold. Nothing is lost, nothing sent twice, the contract holds.
func TestRedisRestartHold(t *testing.T) {
	// Not parallel: it measures pacing, and the package's other tests
	// (run in parallel after it) would load the machine's two cores.
	b := setup(t, setupOpts{contract: 100, rate: 100, maxQueueDelay: time.Second})
	ids := b.publishN("rr", "push", 600, 100)
	for i := 0; i < 2; i++ {
		b.start(func(o *Options) { o.Workers = 16 })
	}
	testenv.WaitFor(t, 30*time.Second, "a third of the jobs sent", func() bool { return len(b.fake.AcceptedIDs()) >= 200 })
	b.redis.Stop()
	time.Sleep(time.Second) // an outage, not a blip: the test is about what happens meanwhile
	before := len(b.fake.AcceptedIDs())
	b.redis.Start()
	testenv.WaitFor(t, 60*time.Second, "all 600 sent", func() bool { return len(b.fake.AcceptedIDs()) >= 600 })
	testenv.WaitFor(t, 10*time.Second, "job stream empty", func() bool { return b.remaining() == 0 })
	b.acceptedOnce(ids)
	if most := b.fake.MaxInWindow(time.Second); most > 100 {
		t.Errorf("most sends in a 1 s window: %d, contract 100", most)
	}
	if n := b.fake.Count(http.StatusTooManyRequests); n != 0 {
		t.Errorf("provider answered 429 %d times", n)
	}
	t.Logf("%d sent before the outage's end, all 600 after; most in 1 s: %d", before, b.fake.MaxInWindow(time.Second))
}

// TestLogsCarryNoPersonalData runs a load with sends, retries, dead letters
// and suppressions, and greps every log line for the recipients, bodies and
// secrets of the jobs.
func TestLogsCarryNoPersonalData(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.fake.FailNext(3, http.StatusBadGateway)
	for i := 0; i < 30; i++ {
		j := newJob(fmt.Sprintf("pii-%d", i), []string{"sms", "push", "email"}[i%3], "user-secret-name")
		j.To = map[string]string{"sms": "+447700900777", "push": "devtoken-SECRET-abcdefghijklmnopqrstuvwxyz0123456789", "email": "private.person@example.org"}[j.Channel]
		j.Body = "your one-time code is 987654"
		if i%10 == 0 {
			j.ExpiresAt = time.Now().Add(-time.Hour)
		}
		b.publish(j)
	}
	b.fake.FailNext(1, http.StatusBadRequest)
	b.start(nil)
	testenv.WaitFor(t, 30*time.Second, "every job handled", func() bool { return b.remaining() == 0 })
	logs := b.logs.String()
	if !strings.Contains(logs, "pii-") {
		t.Fatalf("logs should name job ids (they are not personal data); got:\n%.2000s", logs)
	}
	for _, secret := range []string{"+447700900777", "447700900777", "devtoken-SECRET-abcdefghijklmnopqrstuvwxyz0123456789", "private.person@example.org", "987654", "one-time code", "user-secret-name"} {
		if strings.Contains(logs, secret) {
			t.Errorf("a log line carries %q", secret)
		}
	}
	// Phone numbers in any form.
	if m := regexp.MustCompile(`\+?\d{10,15}`).FindString(logs); m != "" {
		t.Errorf("a log line carries a long number %q", m)
	}
}
