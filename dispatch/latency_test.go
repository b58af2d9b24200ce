package dispatch

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/notifier/notifier/testenv"
)

// TestFutureCreatedAtDoesNotCorruptLatency: a job whose created_at lies
// in 2099 is sent, measured from its publish (no negative observation in
// notifier_job_latency_seconds), and counted in
// notifier_job_created_at_ignored_total; a job with a past created_at is
// measured from it.
func TestFutureCreatedAtDoesNotCorruptLatency(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	p := b.start(nil)
	future := newJob("future", "sms", "u1")
	future.CreatedAt = time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	past := newJob("past", "sms", "u2")
	past.CreatedAt = time.Now().Add(-time.Hour)
	b.publish(future, past)
	testenv.WaitFor(t, 20*time.Second, "both sent", func() bool { return len(b.fake.AcceptedIDs()) == 2 })
	// The fake counts a job when its request arrives, the dispatcher its
	// latency once the answer is back: wait for both observations.
	testenv.WaitFor(t, 5*time.Second, "both counted, two latency observations", func() bool {
		if testutil.CollectAndCount(p.d.m.JobLatency) != 1 || p.count(p.d.m.CreatedAtIgnored.WithLabelValues("sms")) != 1 {
			return false
		}
		return histogramOf(t, p, "notifier_job_latency_seconds").GetSampleCount() >= 2
	})
	h := histogramOf(t, p, "notifier_job_latency_seconds")
	if h.GetSampleCount() != 2 {
		t.Fatalf("%d latency observations, want 2", h.GetSampleCount())
	}
	// One of about an hour (the past created_at), one of under a minute
	// (the publish): never negative.
	if sum := h.GetSampleSum(); sum < 3600 || sum > 3600+60 {
		t.Fatalf("latency sum %.1f s, want about 3600 (the past job's hour plus the future one's time since publish)", sum)
	}
}

// histogramOf is the one histogram of family name in p's registry.
func histogramOf(t *testing.T, p *proc, name string) *dto.Histogram {
	t.Helper()
	mfs, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatalf("no single histogram %s", name)
	return nil
}
