package dispatch

// End-to-end tests of the promises the README makes ("Delivery guarantees",
// "Stopping", "When Redis is unreachable", "Architecture"), each against
// real servers and asserting what the promise says: how many requests the
// provider saw, in what order and how far apart, which outcome was counted,
// and what JetStream still holds. docs/guarantees.md maps every promise to
// the test that fails when it breaks.

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// requestsFor is every request the fake received for job id, in order.
func requestsFor(f *testenv.Fake, id string) []testenv.FakeRequest {
	var out []testenv.FakeRequest
	for _, r := range f.Requests() {
		if r.ID == id {
			out = append(out, r)
		}
	}
	return out
}

// lane is the normal lane's consumer state at the server, asked through a
// consumer of its own (the durables are shared).
func (b *bundle) lane() queue.Lane {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(b.nats.Conn())
	if err != nil {
		b.t.Fatal(err)
	}
	c, err := queue.NewConsumer(ctx, js, b.qcfg, queue.ConsumerConfig{})
	if err != nil {
		b.t.Fatalf("consumer: %v", err)
	}
	bl, err := c.Backlog(ctx)
	if err != nil {
		b.t.Fatalf("backlog: %v", err)
	}
	return bl.Normal
}

// startOwnConn starts a dispatcher on a NATS connection of its own and
// returns that connection, which the test closes to cut the process off
// from JetStream as a crash would: no ack, no NAK, no heartbeat reaches the
// server after it.
func (b *bundle) startOwnConn(mutate func(*Options)) (*proc, *nats.Conn) {
	b.t.Helper()
	nc := b.nats.Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		b.t.Fatal(err)
	}
	cons, err := queue.NewConsumer(context.Background(), js, b.qcfg, queue.ConsumerConfig{})
	if err != nil {
		b.t.Fatalf("consumer: %v", err)
	}
	p := b.start(func(o *Options) {
		o.Source = cons
		o.DeadLetters = queue.NewPublisher(js)
		if mutate != nil {
			mutate(o)
		}
	})
	return p, nc
}

// TestPromiseDuplicateIsNotSentAgain: "does not send a job twice". A job
// that was sent and then comes again (published a second time with another
// Nats-Msg-Id, which JetStream does not drop) ends as duplicate and the
// provider is not called again. It fails when the ledger does not record
// the send.
func TestPromiseDuplicateIsNotSentAgain(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	p := b.start(nil)
	j := newJob("dup-1", "sms", "u1")
	b.publish(j)
	testenv.WaitFor(t, 20*time.Second, "the job sent and acknowledged", func() bool {
		return p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeSent)) == 1 && b.remaining() == 0
	})
	// The sent record outlives the send by dedup_ttl (1h here), its expiry
	// left where the claim put it (limits/ledger/sent.lua): checked against the
	// instant the request reached the provider.
	reqs := requestsFor(b.fake, "dup-1")
	if len(reqs) != 1 {
		t.Fatalf("%d requests for dup-1, want 1", len(reqs))
	}
	before := time.Now()
	ttl, err := b.redis.Client().PTTL(context.Background(), ledger.Key(b.prefix, "dup-1")).Result()
	if expires := before.Add(ttl); err != nil || expires.Before(reqs[0].At.Add(time.Hour-time.Millisecond)) {
		t.Fatalf("the sent record expires %s after the send (PTTL %s, %v); want at least dedup_ttl, 1h", expires.Sub(reqs[0].At), ttl, err)
	}
	data, err := j.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	dup, err := b.pub.PublishRaw(context.Background(), queue.JobSubject("sms", false), data, "dup-1:again")
	if err != nil || dup {
		t.Fatalf("publish the job again: duplicate=%v err=%v", dup, err)
	}
	// The lease of the first delivery, were it never cleared by a record,
	// lasts max_queue_delay + timeout + ack_wait (9 s): wait past it.
	testenv.WaitFor(t, 20*time.Second, "the second copy handled", func() bool {
		return p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeDuplicate)) == 1 || len(requestsFor(b.fake, "dup-1")) > 1
	})
	if n := len(requestsFor(b.fake, "dup-1")); n != 1 {
		t.Fatalf("the provider was called %d times for one job, want 1", n)
	}
	if got := p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeDuplicate)); got != 1 {
		t.Fatalf("notifier_jobs_total{outcome=duplicate} = %v, want 1", got)
	}
	testenv.WaitFor(t, 10*time.Second, "the second copy acknowledged", func() bool { return b.remaining() == 0 })
}

// TestPromiseLostAckRedeliveryIsDuplicate: a job sent and recorded whose ack
// never reaches JetStream (its process is cut off from NATS while the
// provider answers) comes back after ack_wait to another process, which
// finds it in the ledger: outcome duplicate, no second request. It fails
// when the ledger does not record the send.
func TestPromiseLostAckRedeliveryIsDuplicate(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{ackWait: 2 * time.Second})
	b.fake.SlowFor(time.Hour, 700*time.Millisecond) // the answer comes after the cut
	a, nc := b.startOwnConn(nil)
	b.publish(newJob("lost-ack", "sms", "u1"))
	testenv.WaitFor(t, 20*time.Second, "the request at the provider", func() bool { return len(requestsFor(b.fake, "lost-ack")) == 1 })
	nc.Close() // the ack of this delivery is lost
	testenv.WaitFor(t, 10*time.Second, "the first process settled the job", func() bool {
		return a.count(a.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeSent)) == 1
	})
	if b.remaining() != 1 {
		t.Fatalf("the job left the stream although its ack was lost")
	}
	b.fake.Reset()
	other := b.start(nil)
	testenv.WaitFor(t, 30*time.Second, "the redelivery handled", func() bool {
		return other.count(other.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeDuplicate)) == 1 || len(requestsFor(b.fake, "lost-ack")) > 1
	})
	if n := len(requestsFor(b.fake, "lost-ack")); n != 1 {
		t.Fatalf("the provider was called %d times for one job, want 1", n)
	}
	testenv.WaitFor(t, 10*time.Second, "the redelivery acknowledged", func() bool { return b.remaining() == 0 })
	if got := other.count(other.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeSent)); got != 0 {
		t.Fatalf("the second process counted the job sent %v times", got)
	}
}

// TestPromiseLeaseHoldsRedeliveredCopy: the ledger "leases the job to one
// sender, so a copy redelivered while the first worker is still sending
// waits". A provider call outlasts ack_wait, so JetStream redelivers the job
// to another process meanwhile; that copy waits for the lease, then finds
// the job sent: one request at the provider, one duplicate outcome.
func TestPromiseLeaseHoldsRedeliveredCopy(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{ackWait: time.Second})
	a := b.start(func(o *Options) { o.Workers = 1 }) // the redelivery cannot come back to it
	b.publish(newJob("warm", "sms", "u0"))           // a fresh Redis starts the provider's queue cold
	testenv.WaitFor(t, 20*time.Second, "the warm-up job sent", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	b.fake.SlowFor(time.Hour, 1800*time.Millisecond) // under the 2 s timeout, over ack_wait
	b.publish(newJob("slow-1", "sms", "u1"))
	testenv.WaitFor(t, 20*time.Second, "the request at the provider", func() bool { return len(requestsFor(b.fake, "slow-1")) == 1 })
	other := b.start(nil)
	testenv.WaitFor(t, 20*time.Second, "the redelivered copy handled", func() bool {
		return other.count(other.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeDuplicate)) == 1 || len(requestsFor(b.fake, "slow-1")) > 1
	})
	if n := len(requestsFor(b.fake, "slow-1")); n != 1 {
		t.Fatalf("the provider was called %d times for one job, want 1", n)
	}
	if got := a.count(a.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeSent)); got != 2 {
		t.Fatalf("the first process counted %v sent, want 2 (the warm-up job and this one)", got)
	}
	if got := other.count(other.d.m.Deferrals.WithLabelValues(LayerLedger, "busy")); got < 1 {
		t.Fatalf("deferrals{ledger,busy} = %v at the process with the redelivered copy, want at least 1 (it waited for the lease)", got)
	}
}

// TestPromiseAckAfterProviderCall: "a job is acknowledged only after its
// outcome is recorded". While the provider call hangs, the delivery is still
// unacknowledged at the server; the process is then cut off (a crash), the
// job comes back after ack_wait to another process and is sent exactly
// once.
func TestPromiseAckAfterProviderCall(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{ackWait: 2 * time.Second})
	b.fake.HangFor(time.Hour)
	_, nc := b.startOwnConn(nil)
	b.publish(newJob("hang-1", "sms", "u1"))
	testenv.WaitFor(t, 20*time.Second, "the request held at the provider", func() bool { return b.fake.Count(0) == 1 })
	if l := b.lane(); l.AckPending != 1 {
		t.Fatalf("while the provider call hangs, ack pending = %d at the server, want 1 (acknowledged before the outcome)", l.AckPending)
	}
	if b.remaining() != 1 {
		t.Fatalf("the job left the stream while its provider call hangs")
	}
	nc.Close() // crash: nothing more reaches JetStream from this process
	b.fake.Reset()
	other := b.start(nil)
	testenv.WaitFor(t, 30*time.Second, "the job sent by the other process", func() bool {
		return other.count(other.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeSent)) == 1
	})
	testenv.WaitFor(t, 10*time.Second, "the job acknowledged", func() bool { return b.remaining() == 0 })
	b.acceptedOnce([]string{"hang-1"})
}

// TestPromiseAckWaitsForSentRecord: "a job is acknowledged only after its
// outcome is recorded (the provider accepted it and the ledger says so)".
// Redis goes down while the provider is answering: the accepted job stays
// unacknowledged in JetStream until the ledger has recorded it, then it is
// acknowledged once and the ledger says sent.
func TestPromiseAckWaitsForSentRecord(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	// A client that gives up on a Redis that is down quickly.
	opts := b.redis.Options()
	opts.MaxRetries, opts.DialerRetries, opts.DialTimeout, opts.ReadTimeout = -1, 1, 100*time.Millisecond, 200*time.Millisecond
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	p := b.start(func(o *Options) { o.Limits = redisLimits(t, rdb, limits.Config{Prefix: b.prefix, DedupTTL: time.Hour}) })
	b.publish(newJob("warm", "sms", "u0")) // a fresh Redis starts the provider's queue cold
	testenv.WaitFor(t, 20*time.Second, "the warm-up job sent", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	b.fake.SlowFor(time.Hour, 50*time.Millisecond)
	b.publish(newJob("rec-1", "sms", "u1"))
	testenv.WaitFor(t, 20*time.Second, "the request at the provider", func() bool { return len(requestsFor(b.fake, "rec-1")) == 1 })
	b.redis.Stop() // before the answer: the record cannot be written
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if b.remaining() != 1 || p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeSent)) != 1 {
			t.Fatalf("the sent job was acknowledged while its record could not be written")
		}
	}
	b.redis.Start()
	// The ack leaves before the outcome is counted: wait for both.
	testenv.WaitFor(t, 30*time.Second, "the job recorded, acknowledged and counted", func() bool {
		return b.remaining() == 0 && p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeSent)) == 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if r, err := ledger.NewRedis(b.redis.Client(), b.prefix, time.Hour).Record(ctx, "rec-1"); err != nil || !r.Sent {
		t.Fatalf("the ledger's record of the sent job: %+v, %v; want sent", r, err)
	}
	b.acceptedOnce([]string{"warm", "rec-1"})
}

// TestPromiseTransientFailureIsRetried: a provider 5xx leaves the job in
// JetStream (not acknowledged, not dead-lettered) and it is sent on a
// retry, once.
func TestPromiseTransientFailureIsRetried(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	b.fake.FailNext(1, http.StatusServiceUnavailable)
	b.fake.SlowFor(time.Hour, 300*time.Millisecond)
	p := b.start(func(o *Options) {
		o.Retry = RetryConfig{MaxAttempts: 3, BaseDelay: 2 * time.Second, MaxDelay: 2 * time.Second}
		o.Rand = func() float64 { return 0.5 } // a backoff of 1 s
	})
	b.publish(newJob("retry-1", "sms", "u1"))
	testenv.WaitFor(t, 20*time.Second, "the 503", func() bool { return b.fake.Count(http.StatusServiceUnavailable) == 1 })
	time.Sleep(500 * time.Millisecond) // inside the backoff
	if b.remaining() != 1 {
		t.Fatalf("after a 503 the job left the stream before it was sent")
	}
	if len(b.deadLetters()) != 0 {
		t.Fatalf("a job was dead-lettered after one 503 of max_attempts 3")
	}
	// The ledger counts the failure and keeps its class (what explain
	// --job shows), never the provider's text.
	rec, err := ledger.NewRedis(b.redis.Client(), b.prefix, time.Hour).Record(context.Background(), "retry-1")
	if err != nil || rec.Attempts != 1 || rec.LastError != "5xx" {
		t.Fatalf("ledger after the 503: %+v, %v; want 1 attempt, last error 5xx", rec, err)
	}
	testenv.WaitFor(t, 20*time.Second, "the job sent on its retry", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	testenv.WaitFor(t, 10*time.Second, "the job acknowledged", func() bool { return b.remaining() == 0 })
	reqs := requestsFor(b.fake, "retry-1")
	if len(reqs) != 2 || reqs[0].Status != http.StatusServiceUnavailable || reqs[1].Status != http.StatusOK {
		t.Fatalf("requests for the job: %d, want a 503 then a 200", len(reqs))
	}
	if got := p.count(p.d.m.Deferrals.WithLabelValues(LayerProvider, "retry")); got != 1 {
		t.Fatalf("deferrals{provider,retry} = %v, want 1", got)
	}
}

// TestPromiseDeadLetterBeforeAck: "its dead letter is stored" before the ack.
// With the dead-letter stream gone, an invalid job is held (still
// unacknowledged at the server, still in the stream); once the stream is
// back its dead letter is written once and the job acknowledged.
func TestPromiseDeadLetterBeforeAck(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	ctx := context.Background()
	if err := b.js.DeleteStream(ctx, b.qcfg.DeadStream); err != nil {
		t.Fatalf("delete the dead-letter stream: %v", err)
	}
	p := b.start(nil)
	if _, err := b.pub.PublishRaw(ctx, "notify.jobs.sms", []byte(`{"id":"bad-1","channel":"sms"}`), "bad-1"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the dead letter refused", func() bool {
		return strings.Contains(b.logs.String(), "write dead letter; holding the job")
	})
	time.Sleep(time.Second)
	if l := b.lane(); l.AckPending != 1 {
		t.Fatalf("with its dead letter unwritten, ack pending = %d, want 1", l.AckPending)
	}
	if b.remaining() != 1 {
		t.Fatalf("the job left the stream before its dead letter was stored")
	}
	if err := queue.EnsureStreams(ctx, b.js, b.qcfg, 1); err != nil {
		t.Fatalf("re-create the dead-letter stream: %v", err)
	}
	testenv.WaitFor(t, 20*time.Second, "the dead letter stored and the job acknowledged", func() bool {
		return len(b.deadLetters()) == 1 && b.remaining() == 0
	})
	if dl := b.deadLetters()[0]; dl.Reason != ledger.ReasonInvalid {
		t.Fatalf("dead letter reason %q, want %q", dl.Reason, ledger.ReasonInvalid)
	}
	if got := p.count(p.d.m.Jobs.WithLabelValues("sms", "unknown", OutcomeDead)); got != 1 {
		t.Fatalf("notifier_jobs_total{outcome=dead} = %v, want 1", got)
	}
}

// TestPromiseNakOnStop: "hands every job that is still waiting (for a slot,
// a token, a user's window) back to JetStream at once with a NAK so another
// process takes it". Jobs waiting for their send slots when their process
// stops reach another process well before ack_wait, and every job is sent
// once.
func TestPromiseNakOnStop(t *testing.T) {
	waits(t)
	const ackWait = 10 * time.Second
	b := setup(t, setupOpts{rate: 1, maxQueueDelay: 3 * time.Second, ackWait: ackWait})
	a := b.start(nil)
	ids := b.publishN("nak", "sms", 3, 3)
	testenv.WaitFor(t, 20*time.Second, "one sent, two waiting for their slots", func() bool {
		return len(b.fake.AcceptedIDs()) == 1 && a.d.InFlight() == 2
	})
	a.cancel()
	err := <-a.done // Run returned: the stop is over
	a.done <- err   // for the cleanup's stop
	stopped := time.Now()
	other := b.start(nil)
	testenv.WaitFor(t, 20*time.Second, "the waiting jobs at the other process", func() bool { return other.d.InFlight() == 2 })
	if took := time.Since(stopped); took > ackWait/3 {
		t.Fatalf("the jobs waiting at the stopped process came back after %s (ack_wait %s): not handed back at once", took, ackWait)
	}
	testenv.WaitFor(t, 30*time.Second, "all 3 sent", func() bool { return len(b.fake.AcceptedIDs()) == 3 })
	b.acceptedOnce(ids)
}

// TestPromiseStopFinishesSendsUnderWay: on a stop the process "lets the
// sends already at a provider finish ..., records and acknowledges every job
// that was sent". A send in flight when the process is told to stop is
// answered, recorded in the ledger and acknowledged before Run returns.
func TestPromiseStopFinishesSendsUnderWay(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	a := b.start(nil)
	b.publish(newJob("warm", "sms", "u0")) // a fresh Redis starts the provider's queue cold
	testenv.WaitFor(t, 20*time.Second, "the warm-up job sent", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	b.fake.SlowFor(time.Hour, time.Second)
	b.publish(newJob("inflight", "sms", "u1"))
	testenv.WaitFor(t, 20*time.Second, "the request at the provider", func() bool { return len(requestsFor(b.fake, "inflight")) == 1 })
	a.cancel()
	err := <-a.done // Run returned: the stop is over
	a.done <- err   // for the cleanup's stop
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := a.count(a.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeSent)); got != 2 {
		t.Fatalf("after the stop, sent counted %v, want 2: the send under way was not finished and acknowledged", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if r, err := ledger.NewRedis(b.redis.Client(), b.prefix, time.Hour).Record(ctx, "inflight"); err != nil || !r.Sent {
		t.Fatalf("the ledger's record of the job sent during the stop: %+v, %v; want sent", r, err)
	}
	testenv.WaitFor(t, 5*time.Second, "the job acknowledged", func() bool { return b.remaining() == 0 })
	b.acceptedOnce([]string{"warm", "inflight"})
}

// TestPromiseWaitingJobsAreKeptAlive: "A full queue ... make[s] the worker
// wait, heart-beating the message with InProgress; the backlog stays in
// JetStream, no redelivery storm". Jobs that wait for their send slots for
// several times ack_wait are never redelivered, and each is sent once.
func TestPromiseWaitingJobsAreKeptAlive(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{rate: 2, maxQueueDelay: time.Second, ackWait: time.Second})
	p := b.start(nil)
	ids := b.publishN("alive", "sms", 8, 8) // about 5 s at 2/s: several ack waits
	// The most messages redelivered and not yet acknowledged, seen at the server.
	most := 0
	testenv.WaitFor(t, 30*time.Second, "all 8 sent", func() bool {
		if l := b.lane(); l.Redelivered > most {
			most = l.Redelivered
		}
		return len(b.fake.AcceptedIDs()) == 8
	})
	b.acceptedOnce(ids)
	if most != 0 {
		t.Fatalf("%d jobs redelivered while they waited for their slots, want 0", most)
	}
	if got := p.count(p.d.m.Jobs.WithLabelValues("sms", "sms-gw", OutcomeDuplicate)); got != 0 {
		t.Fatalf("%v duplicate outcomes (redelivered copies), want 0", got)
	}
	if got := p.count(p.d.m.Deferrals.WithLabelValues(LayerLedger, "busy")); got != 0 {
		t.Fatalf("%v waits for another copy's lease, want 0", got)
	}
}

// TestPromiseHoldTakesNoJobs: "redis.on_failure: hold: the process takes no
// new jobs (they wait in JetStream)". With Redis down nothing is fetched or
// sent, /readyz says so, and once Redis is back every job is sent once.
func TestPromiseHoldTakesNoJobs(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	p := b.start(nil)
	b.publish(newJob("warm", "sms", "u0"))
	testenv.WaitFor(t, 20*time.Second, "the first job sent", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	// Recorded and acknowledged too: Redis stopped in between would keep
	// it out (alive, waiting for its record), which is not a job taken.
	testenv.WaitFor(t, 10*time.Second, "the first job acknowledged", func() bool {
		l := b.lane()
		return l.AckPending == 0 && l.Pending == 0
	})
	b.redis.Stop()
	testenv.WaitFor(t, 10*time.Second, "the process holding", func() bool { return p.d.LimitsName() == "holding" })
	if err := p.d.Ready(); err == nil {
		t.Fatalf("Ready() = nil while holding for Redis")
	}
	time.Sleep(500 * time.Millisecond) // a pull already out when it began to hold ends within FetchWait (200ms)
	ids := b.publishN("held", "sms", 5, 5)
	time.Sleep(2 * time.Second)
	if n := len(b.fake.Requests()); n != 1 {
		t.Fatalf("%d requests at the provider while Redis is down under hold, want only the first job's", n)
	}
	if l := b.lane(); l.AckPending != 0 || l.Pending != 5 {
		t.Fatalf("under hold: ack pending %d, pending %d; want 0 and 5 (no job taken from JetStream)", l.AckPending, l.Pending)
	}
	b.redis.Start()
	testenv.WaitFor(t, 30*time.Second, "all sent once Redis is back", func() bool { return len(b.fake.AcceptedIDs()) == 6 })
	b.acceptedOnce(append(ids, "warm"))
	if err := p.d.Ready(); err != nil {
		t.Fatalf("Ready() after Redis came back: %v", err)
	}
}

// TestPromiseHoldFromStart: "a server unreachable at start holds from the
// start (/readyz 503)". Started with Redis unreachable (stopped with
// SIGSTOP: connections hang rather than fail), the dispatcher is never
// ready and takes no job until Redis answers; then it sends it. Before,
// it called itself ready (after 5 s of trying to lift credential pauses)
// and fetched jobs until one's operation failed: with no job, for good.
func TestPromiseHoldFromStart(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	b.redis.Freeze() // unreachable: its port accepts, nothing answers
	p := b.start(func(o *Options) {
		// Operations give up after 300 ms, so the start's own attempts
		// (lifting credential pauses) end before the gauge loop's first
		// failed read a second in: the window the probe closes.
		ro := b.redis.Options()
		ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
		rdb := redis.NewClient(ro)
		t.Cleanup(func() { _ = rdb.Close() })
		o.Limits = redisLimits(t, rdb, limits.Config{Prefix: b.prefix, DedupTTL: time.Hour})
	})
	// Past the start's bounded attempts at Redis (5 s for lifting
	// credential pauses), with no job to fail an operation on.
	deadline := time.Now().Add(7 * time.Second)
	for time.Now().Before(deadline) {
		if err := p.d.Ready(); err == nil {
			t.Fatalf("Ready() = nil with Redis unreachable since the start (limits %s)", p.d.LimitsName())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := p.d.LimitsName(); got != "holding" {
		t.Fatalf("limits %q with Redis unreachable at start under hold, want holding", got)
	}
	b.publish(newJob("early", "sms", "u0"))
	time.Sleep(time.Second)
	if l := b.lane(); l.AckPending != 0 || l.Pending != 1 {
		t.Fatalf("holding from the start: ack pending %d, pending %d; want 0 and 1 (the job left in JetStream)", l.AckPending, l.Pending)
	}
	b.redis.Thaw()
	testenv.WaitFor(t, 20*time.Second, "the job sent once Redis answers", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	if err := p.d.Ready(); err != nil {
		t.Fatalf("Ready() after Redis answered: %v", err)
	}
}

// TestPromiseReadyOnLocalFallback: "/readyz (... the limit backend reachable
// — or the local fallback in use)". With redis.on_failure: local and Redis
// down, Ready is nil and jobs are sent.
func TestPromiseReadyOnLocalFallback(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	p := b.start(func(o *Options) {
		o.Fallback = func() (*limits.Set, error) { return limits.Memory(limits.Config{DedupTTL: time.Hour}, 1) }
	})
	testenv.WaitFor(t, 10*time.Second, "the dispatcher ready", func() bool { return p.d.Ready() == nil })
	b.redis.Stop()
	testenv.WaitFor(t, 10*time.Second, "on local limits", func() bool { return p.d.LimitsName() == "local" })
	if err := p.d.Ready(); err != nil {
		t.Fatalf("Ready() on the local fallback: %v, want nil", err)
	}
	ids := b.publishN("loc", "sms", 5, 5)
	testenv.WaitFor(t, 20*time.Second, "the jobs sent on local limits", func() bool { return len(b.fake.AcceptedIDs()) == 5 })
	b.acceptedOnce(ids)
	if err := p.d.Ready(); err != nil {
		t.Fatalf("Ready() on the local fallback after sending: %v, want nil", err)
	}
}

// TestPromiseReloadKeepsJobsUnderWay: "jobs already under way finish on the
// configuration they started with; the next ones take the new one". Jobs
// waiting for their slots at a reload go to the old endpoint; jobs published
// after it go to the new one; none is dropped or sent twice.
func TestPromiseReloadKeepsJobsUnderWay(t *testing.T) {
	measures(t)
	b := setup(t, setupOpts{rate: 1, maxQueueDelay: 3 * time.Second})
	p := b.start(nil)
	old := b.publishN("old", "sms", 3, 3)
	t.Cleanup(func() {
		if t.Failed() { // what became of the jobs under way
			for _, line := range strings.Split(b.logs.String(), "\n") {
				if strings.Contains(line, `"job":"old-`) {
					t.Log(line)
				}
			}
		}
	})
	// Under way: each of the three holds its slot (in flight alone is not
	// enough: a job handed to a worker reads the configuration only when
	// it starts, which a loaded machine can put after the reload). Three
	// slots less those given up: a worker that woke late for its slot gave
	// it up and took another (a loaded run's first job did, and a count of
	// exactly 3 slots taken never came).
	testenv.WaitFor(t, 20*time.Second, "one sent, two waiting for their slots", func() bool {
		held := p.count(p.d.m.LimitDecisions.WithLabelValues(LayerLeaky, "allow")) -
			p.count(p.d.m.Deferrals.WithLabelValues(LayerLeaky, "late"))
		return len(b.fake.AcceptedIDs()) == 1 && p.d.InFlight() == 2 && held == 3
	})
	next := testenv.FakeProvider(t)
	cfgs := make([]providers.Config, len(b.pcfgs))
	copy(cfgs, b.pcfgs)
	for i := range cfgs {
		cfgs[i].URL = next.URL()
		cfgs[i].Rate = 1000
	}
	reg, err := providers.NewRegistry(cfgs, providers.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	if err := p.d.Reload(Reload{Providers: reg}); err != nil {
		t.Fatal(err)
	}
	fresh := b.publishN("new", "sms", 3, 3)
	testenv.WaitFor(t, 30*time.Second, "all 6 sent", func() bool {
		return len(b.fake.AcceptedIDs())+len(next.AcceptedIDs()) >= 6
	})
	b.acceptedOnce(old) // the jobs under way, on the old endpoint only
	got := map[string]int{}
	for _, id := range next.AcceptedIDs() {
		got[id]++
	}
	for _, id := range fresh {
		if got[id] != 1 {
			t.Fatalf("new endpoint accepted %s %d times, want 1 (accepted: %v)", id, got[id], next.AcceptedIDs())
		}
	}
	if len(next.Requests()) != 3 {
		t.Fatalf("the new endpoint got %d requests, want the 3 jobs published after the reload", len(next.Requests()))
	}
}

// TestPromiseBreakerSpendsNoAttempts: "after 10 consecutive transient
// failures the provider is not called for 5 s, then probed with one call.
// Jobs wait meanwhile without using attempts". With max_attempts 3 and the
// provider failing until 4 s after the breaker opened, no job is
// dead-lettered, the provider sees about one request per job plus the
// probes, and all are sent once it recovers.
func TestPromiseBreakerSpendsNoAttempts(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	p := b.start(func(o *Options) {
		o.Workers = 12
		o.Retry = RetryConfig{MaxAttempts: 3, BaseDelay: time.Second, MaxDelay: time.Second} // retries spread over 1 s: no job fails 3 times before the breaker opens
	})
	// The provider is down until the breaker opens and 4 s more: the
	// outage is measured from the breaker, not from a start-up or a first
	// fetch that a loaded machine may stretch over a fixed outage's length.
	b.fake.FailFor(time.Hour, http.StatusServiceUnavailable)
	ids := b.publishN("brk", "push", 12, 12)
	testenv.WaitFor(t, 20*time.Second, "the breaker open", func() bool {
		return p.count(p.d.m.Deferrals.WithLabelValues(LayerProvider, "circuit_open")) > 0
	})
	b.fake.FailFor(4*time.Second, http.StatusServiceUnavailable)
	testenv.WaitFor(t, 40*time.Second, "all 12 sent after the provider recovered", func() bool { return len(b.fake.AcceptedIDs()) >= 12 })
	b.acceptedOnce(ids)
	if dls := b.deadLetters(); len(dls) != 0 {
		t.Fatalf("%d jobs dead-lettered (first: %s) while the breaker held them", len(dls), dls[0].Reason)
	}
	// Without the breaker the 12 jobs would fail 3 times each (36) within
	// the 6 s; with it, at most the 12 first failures plus a probe or two.
	if n := b.fake.Count(http.StatusServiceUnavailable); n > 12+3 {
		t.Fatalf("the failing provider was called %d times; the open breaker should have stopped the calls", n)
	}
}

// TestPromiseDefaultPauseIsFleetWide: "a 429 without a usable one pauses the
// provider for 1 s plus up to 1 s of jitter", fleet-wide ("pause the
// provider fleet-wide until Retry-After"). After a 429 without Retry-After
// at one process, no process calls the provider for at least 1 s, and the
// paused job is sent within 2 s (+ tolerance).
func TestPromiseDefaultPauseIsFleetWide(t *testing.T) {
	measures(t)
	b := setup(t, setupOpts{})
	b.start(func(o *Options) { o.Workers = 1 }) // it holds the paused job and takes no other
	// A fresh Redis starts the provider's queue cold: the first send waits
	// max_queue_delay. Warm it up first.
	b.publish(newJob("warm", "sms", "u0"))
	testenv.WaitFor(t, 20*time.Second, "the warm-up job sent", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	b.fake.RateLimitFor(300*time.Millisecond, "")
	b.publish(newJob("limited", "sms", "u0"))
	testenv.WaitFor(t, 20*time.Second, "the 429", func() bool { return b.fake.Count(http.StatusTooManyRequests) == 1 })
	at429 := b.fake.Requests()[1].At
	b.start(nil) // another process, which did not see the 429
	ids := b.publishN("p", "sms", 3, 3)
	defer func() {
		if t.Failed() {
			for _, r := range b.fake.Requests() {
				t.Logf("%s %s %d", r.At.Format("15:04:05.000"), r.ID, r.Status)
			}
		}
	}()
	testenv.WaitFor(t, 20*time.Second, "all 5 sent", func() bool { return len(b.fake.AcceptedIDs()) == 5 })
	b.acceptedOnce(append(ids, "limited", "warm"))
	reqs := b.fake.Requests()
	if n := b.fake.Count(http.StatusTooManyRequests); n != 1 {
		t.Fatalf("%d 429s, want 1", n)
	}
	first := reqs[2].At.Sub(at429)
	for _, r := range reqs[2:] {
		if gap := r.At.Sub(at429); gap < time.Second {
			t.Fatalf("request for %s %s after the 429: the provider was not paused for 1 s fleet-wide", r.ID, gap)
		}
	}
	if first > 2*time.Second+300*time.Millisecond {
		t.Fatalf("first request %s after the 429: paused longer than 1 s + 1 s of jitter", first)
	}
	t.Logf("first request after the 429: %s", first)
}

// TestPromiseFleetBucketThroughDispatcher: the fleet bucket ("global") admits
// at most burst + rate·t (+ one lease per process) in any window t, measured
// at the provider.
func TestPromiseFleetBucketThroughDispatcher(t *testing.T) {
	measures(t)
	const rate, burst = 20.0, 5
	b := setup(t, setupOpts{})
	b.start(func(o *Options) {
		o.Limits = redisLimits(t, b.redis.Client(), limits.Config{Prefix: b.prefix, DedupTTL: time.Hour,
			Global: &globallimit.Config{Rate: rate, Burst: burst}})
	})
	// A fresh Redis starts the provider's queue cold (the first send waits
	// max_queue_delay, holding the jobs that took tokens meanwhile): warm it
	// up, and let the bucket fill again.
	b.publish(newJob("warm", "push", "u0"))
	testenv.WaitFor(t, 20*time.Second, "the warm-up job sent", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	time.Sleep(time.Second)
	ids := b.publishN("fb", "push", 50, 50)
	testenv.WaitFor(t, 30*time.Second, "all 50 sent", func() bool { return len(b.fake.AcceptedIDs()) == 51 })
	b.acceptedOnce(append(ids, "warm"))
	acc := b.fake.Accepted()[1:]
	// lease L = max(1, min(⌊rate·10ms⌋, ⌊burst/50⌋)) = 1 for one process;
	// 30 ms of slack for the path from the bucket to the provider.
	const lease, slack = 1, 30 * time.Millisecond
	for i := range acc {
		for j := i; j < len(acc); j++ {
			win := acc[j].At.Sub(acc[i].At) + slack
			if n := j - i + 1; float64(n) > burst+rate*win.Seconds()+lease {
				t.Fatalf("%d arrivals in %s: over burst %d + rate %.0f/s·t + %d", n, acc[j].At.Sub(acc[i].At), burst, rate, lease)
			}
		}
	}
	if took := acc[len(acc)-1].At.Sub(acc[0].At); took < time.Duration(float64(50-burst-lease)/rate*float64(time.Second))-100*time.Millisecond {
		t.Fatalf("50 jobs in %s through a bucket of %.0f/s, burst %d", took, rate, burst)
	}
}

// TestPromisePacedUnderContract: "paced 1.5 % under the contract, so a
// 100/s contract sends one job every 10.15 ms". The send slots the
// dispatcher's limit sets hand out (shared on Redis, and local) are
// ⌈1/(rate·(1−0.015))⌉ apart.
func TestPromisePacedUnderContract(t *testing.T) {
	waits(t)
	rd := testenv.Redis(t)
	rdb := rd.Client()
	ctx := context.Background()
	want := int64(math.Ceil(1e6 / (100 * (1 - leaky.DefaultHeadroom)))) // µs: 10153
	for _, l := range []*limits.Set{
		redisLimits(t, rdb, limits.Config{Prefix: "h:", DedupTTL: time.Hour}),
		memoryLimits(t, limits.Config{DedupTTL: time.Hour}, 1),
	} {
		c := l.ContractOf(providers.Config{Rate: 100, MaxQueueDelay: 10 * time.Second})
		// A fresh Redis starts the queue full (cold): each reservation then
		// waits for the one before it to leave the queue.
		var prev int64
		for got, tries := 0, 0; got < 10; tries++ {
			if tries > 500 {
				t.Fatalf("%s: %d reservations in %d tries", l.Name, got, tries)
			}
			r, err := l.Leaky.Reserve(ctx, "sms-gw", c, 1)
			if err != nil {
				t.Fatalf("%s: reserve: %v", l.Name, err)
			}
			if !r.OK {
				time.Sleep(r.RetryAfter)
				continue
			}
			if got > 0 && r.Slot-prev != want {
				t.Fatalf("%s: slots %d µs apart on a 100/s contract, want %d (1.5 %% under it)", l.Name, r.Slot-prev, want)
			}
			prev = r.Slot
			got++
		}
	}
}
