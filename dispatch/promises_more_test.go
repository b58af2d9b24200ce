package dispatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/testenv"
)

// TestPromiseBucketWaitIsKeptAlive: "A full queue, an empty bucket, a
// pause or a busy lease make the worker wait, heart-beating the message
// with InProgress". Jobs wait up to four times ack_wait for fleet-bucket
// tokens (2/s, burst 1, ack_wait 1 s): none is redelivered meanwhile (no
// delivery 2 in any job's log line), each is sent once.
func TestPromiseBucketWaitIsKeptAlive(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{ackWait: time.Second})
	b.start(func(o *Options) {
		o.Workers = 10
		o.Limits = redisLimits(t, b.redis.Client(), limits.Config{Prefix: b.prefix, DedupTTL: time.Hour,
			Global: &globallimit.Config{Rate: 2, Burst: 1}})
	})
	ids := b.publishN("bucket", "push", 10, 10)
	testenv.WaitFor(t, 30*time.Second, "all 10 sent", func() bool { return len(b.fake.AcceptedIDs()) == 10 })
	b.acceptedOnce(ids)
	if strings.Contains(b.logs.String(), `"delivery":2`) {
		t.Fatalf("a job waiting for a fleet-bucket token was redelivered (its heartbeat lapsed past ack_wait)")
	}
}

// TestPromiseLocalFleetBucketIsDivided: "local: it keeps going on
// in-process limits, each provider contract and the fleet bucket divided by
// the number of live instances it last saw". On local limits for a fleet of
// 3, a bucket of 30/s (burst 3) lets this process take 10/s (burst 1).
func TestPromiseLocalFleetBucketIsDivided(t *testing.T) {
	measures(t)
	b := setup(t, setupOpts{})
	b.start(func(o *Options) {
		o.Limits = memoryLimits(t, limits.Config{DedupTTL: time.Hour, Global: &globallimit.Config{Rate: 30, Burst: 3}}, 3)
	})
	ids := b.publishN("local", "push", 21, 21)
	testenv.WaitFor(t, 30*time.Second, "all 21 sent", func() bool { return len(b.fake.AcceptedIDs()) == 21 })
	b.acceptedOnce(ids)
	acc := b.fake.Accepted()
	// At 10/s after a burst of 1, the 21st job cannot go before 2 s.
	if took := acc[len(acc)-1].At.Sub(acc[0].At); took < 1900*time.Millisecond {
		t.Fatalf("21 jobs in %s: the local bucket was not divided by the 3 instances (10/s, burst 1)", took)
	}
}

// TestPromisePauseWaitIsKeptAlive: jobs held through a short provider
// pause (Retry-After: 1, with ack_wait 600 ms: held past ack_wait) are
// heart-beaten, not redelivered, and each is sent once after it.
func TestPromisePauseWaitIsKeptAlive(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{ackWait: 600 * time.Millisecond})
	b.start(nil)
	b.publish(newJob("warm", "sms", "u0"))
	testenv.WaitFor(t, 20*time.Second, "the warm-up job sent", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	b.fake.RateLimitFor(time.Hour, "1")
	b.publish(newJob("trigger", "sms", "u1"))
	testenv.WaitFor(t, 10*time.Second, "a 429", func() bool { return b.fake.Count(429) >= 1 })
	b.fake.Reset()
	ids := b.publishN("paused", "sms", 5, 5)
	testenv.WaitFor(t, 30*time.Second, "all sent after the pause", func() bool { return len(b.fake.AcceptedIDs()) == 7 })
	b.acceptedOnce(append(ids, "warm", "trigger"))
	if strings.Contains(b.logs.String(), `"delivery":2`) {
		t.Fatalf("a job held through the pause was redelivered (its heartbeat lapsed past ack_wait)")
	}
}

// TestPromiseLongPauseHandsJobsBack: a provider paused for longer than 1 s
// (Retry-After: 3) holds no worker: its jobs stay in JetStream, or go back
// there, until the pause ends; nothing reaches it during the pause, and
// each is sent once after it.
func TestPromiseLongPauseHandsJobsBack(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	p := b.start(nil)
	b.publish(newJob("warm", "sms", "u0"))
	testenv.WaitFor(t, 20*time.Second, "the warm-up job sent", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	b.fake.RateLimitFor(time.Hour, "3")
	b.publish(newJob("trigger", "sms", "u1"))
	testenv.WaitFor(t, 10*time.Second, "a 429", func() bool { return b.fake.Count(429) >= 1 })
	paused := time.Now()
	b.fake.Reset()
	ids := b.publishN("paused", "sms", 5, 5)
	// Not taken (the channel has no budget while its provider is paused),
	// or handed back: no worker holds one.
	time.Sleep(time.Second)
	if n := p.d.inFlight.Load(); n != 0 {
		t.Fatalf("%d jobs held by workers during a 3 s pause, want 0", n)
	}
	testenv.WaitFor(t, 30*time.Second, "all sent after the pause", func() bool { return len(b.fake.AcceptedIDs()) == 7 })
	b.acceptedOnce(append(ids, "warm", "trigger"))
	for _, r := range b.fake.Requests() {
		if r.At.After(paused) && r.At.Before(paused.Add(2900*time.Millisecond)) {
			t.Errorf("request %s at %s, inside the 3 s pause", r.ID, r.At.Sub(paused).Round(time.Millisecond))
		}
	}
}

// TestPromiseQueueBoundedByMaxQueueDelay: "`max_queue_delay` bounds how
// long a job may wait for its slot (the queue's depth is rate ×
// max_queue_delay); beyond it a worker holds the job and tries again". 16
// workers on a 10/s provider with max_queue_delay 300 ms: the queue never
// holds more than 3 (+1 being placed) units, sampled throughout, and
// workers were held at the full queue.
func TestPromiseQueueBoundedByMaxQueueDelay(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{rate: 10, maxQueueDelay: 300 * time.Millisecond})
	p := b.start(func(o *Options) { o.Workers = 16 })
	ids := b.publishN("mqd", "sms", 30, 30)
	q := leakyRedis(t, b.redis.Client(), b.prefix, leaky.WithHeadroom(leaky.DefaultHeadroom))
	most := 0.0
	for len(b.fake.AcceptedIDs()) < len(ids) {
		depth, err := q.Depth(context.Background(), "sms-gw", limits.Contract(b.pcfgs[0]))
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, depth)
		time.Sleep(20 * time.Millisecond)
	}
	b.acceptedOnce(ids)
	if most > 10*0.3+1 {
		t.Fatalf("the queue held %.1f units; max_queue_delay 300ms at 10/s bounds it to 3 (+1 being placed)", most)
	}
	if full := p.count(p.d.m.Deferrals.WithLabelValues(LayerLeaky, "full")); full == 0 {
		t.Fatalf("no worker was held at a full queue (deferrals{leaky,full} = 0): the bound was not reached")
	}
}

// TestPromisePullsNoMoreThanFreeWorkers: "a process pulls no more jobs
// than it has free workers" (a larger client-side buffer ages jobs past
// ack_wait). Three workers, each send held 300 ms by the provider, 30 jobs
// waiting: sampled throughout, JetStream never has more than 9 of them out
// with the process: 3 with its workers, and sent jobs the workers handed to
// the settler, whose record and ack are on their way (its queue holds one
// per worker, and the batch it is recording at most as many again). A
// client-side buffer of the usual size (hundreds) would show at once.
func TestPromisePullsNoMoreThanFreeWorkers(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	b.start(func(o *Options) { o.Workers = 3 })
	b.publish(newJob("warm", "sms", "u0"))
	testenv.WaitFor(t, 20*time.Second, "the warm-up job sent", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	b.fake.SlowFor(time.Hour, 300*time.Millisecond)
	ids := b.publishN("pull", "sms", 30, 30)
	most := 0
	for len(b.fake.AcceptedIDs()) < len(ids)+1 {
		most = max(most, b.lane().AckPending)
		time.Sleep(50 * time.Millisecond)
	}
	b.acceptedOnce(append(ids, "warm"))
	if most > 3*3 {
		t.Fatalf("%d jobs out with a process of 3 workers (and at most 6 settling)", most)
	}
	if most < 3 {
		t.Fatalf("at most %d jobs out with 3 busy workers: the sampling saw nothing", most)
	}
}

// TestPromiseMaxPauseCapsRetryAfter: "providers[].max_pause caps the pause
// one 429 sets". A 429 asking for 99999 s pauses a provider whose
// max_pause is 2 s for 2 s: the next request comes 2 s later, not in an
// hour.
func TestPromiseMaxPauseCapsRetryAfter(t *testing.T) {
	measures(t)
	b := setup(t, setupOpts{})
	b.pcfgs[0].MaxPause = 2 * time.Second
	b.start(nil)
	b.publish(newJob("warm", "sms", "u0"))
	testenv.WaitFor(t, 20*time.Second, "the warm-up job sent", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	b.fake.RateLimitFor(300*time.Millisecond, "99999")
	b.publish(newJob("limited", "sms", "u1"))
	testenv.WaitFor(t, 20*time.Second, "the limited job sent after its pause", func() bool { return len(b.fake.AcceptedIDs()) == 2 })
	var refused, next time.Time
	for _, r := range b.fake.Requests() {
		switch {
		case r.ID == "limited" && r.Status == 429 && refused.IsZero():
			refused = r.At
		case r.ID == "limited" && r.Status == 200:
			next = r.At
		}
	}
	if refused.IsZero() {
		t.Fatal("no 429")
	}
	if gap := next.Sub(refused); gap < 2*time.Second || gap > 4*time.Second {
		t.Fatalf("the job was sent %s after a 429 asking for 99999 s, want after max_pause (2 s)", gap.Round(time.Millisecond))
	}
}
