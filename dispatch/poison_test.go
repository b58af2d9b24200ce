package dispatch

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/testenv"
)

// TestARecordRedisCannotReadHoldsOnlyItsJob: a job whose ledger record is
// not one (a key written by something else, a record mangled by hand)
// makes the claim script fail with an error about that record. Before, any
// error of the limit scripts read as Redis failing: the dispatcher switched
// to holding (or to local limits) and back every 100 ms while the job
// looped, and the jobs batched with it shared its failed script run. Now
// the job is handed back to JetStream with the retry backoff, logged as
// refused, its batch-mates asked again alone and sent, the fleet never
// switched; once the key is mended the job is sent.
func TestARecordRedisCannotReadHoldsOnlyItsJob(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{rate: 1000})
	rdb := b.redis.Client()
	ctx := context.Background()
	// Three such jobs among 120 others, so that their script runs are
	// shared with other jobs' (a batch holds what 8 workers ask at once).
	var bad []string
	for i := range 123 {
		if i%41 == 20 {
			id := fmt.Sprintf("poison-%d", len(bad))
			bad = append(bad, ledger.Key(b.prefix, id))
			if err := rdb.Set(ctx, bad[len(bad)-1], "not a ledger record", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			b.publish(newJob(id, "sms", "u0"))
			continue
		}
		b.publish(newJob(fmt.Sprintf("ok-%d", i), "sms", fmt.Sprintf("u%d", i)))
	}
	p := b.start(nil)
	testenv.WaitFor(t, 20*time.Second, "the 120 other jobs sent", func() bool {
		return len(b.fake.AcceptedIDs()) == 120
	})
	testenv.WaitFor(t, 10*time.Second, "each of the three refused twice", func() bool {
		return strings.Count(b.logs.String(), "refused this job's data") >= 6
	})
	for _, id := range b.fake.AcceptedIDs() {
		if strings.HasPrefix(id, "poison") {
			t.Fatalf("job %s, whose record Redis cannot read, was sent", id)
		}
	}
	if n := len(b.deadLetters()); n != 0 {
		t.Errorf("%d dead letters, want none: the job waits in JetStream", n)
	}
	logs := b.logs.String()
	if strings.Contains(logs, "limit backend unreachable") || strings.Contains(logs, "limit backend failed") {
		t.Error("a refused record was taken for the limit backend failing")
	}
	for line := range strings.Lines(logs) {
		if strings.Contains(line, "refused this job's data") && !strings.Contains(line, `"job":"poison-`) {
			t.Errorf("another job was refused with it: %s", line)
		}
	}
	if got := p.count(p.d.o.Metrics.Deferrals.WithLabelValues("redis", ledger.DeferRefused)); got < 6 {
		t.Errorf("notifier_deferrals_total{layer=redis,reason=refused} = %v, want at least 6", got)
	}
	if err := rdb.Del(ctx, bad...).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the three sent once their records are mended", func() bool {
		return len(b.fake.AcceptedIDs()) == 123
	})
}

// TestASentRecordRedisRefusesLosesNoOtherRecord: the records of jobs sent
// together are written in one script run, so a key that stopped being a
// record while its job was at the provider (something else wrote a list
// there) failed every record of the run, and the dispatcher took it for
// Redis failing (switching to holding, retrying for 20 s). Now the records
// are written again one by one: every other job's says sent, every job is
// acknowledged once (none is delivered again), and the fleet never
// switched.
func TestASentRecordRedisRefusesLosesNoOtherRecord(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{rate: 1000})
	rdb := b.redis.Client()
	ctx := context.Background()
	b.fake.SlowFor(time.Minute, 500*time.Millisecond)
	ids := []string{"mangled"}
	b.publish(newJob("mangled", "sms", "u0"))
	for i := range 15 {
		ids = append(ids, fmt.Sprintf("ok-%d", i))
		b.publish(newJob(ids[len(ids)-1], "sms", fmt.Sprintf("u%d", i+1)))
	}
	b.start(nil)
	testenv.WaitFor(t, 10*time.Second, "the job at the provider", func() bool {
		for _, r := range b.fake.Requests() {
			if r.ID == "mangled" {
				return true
			}
		}
		return false
	})
	key := ledger.Key(b.prefix, "mangled")
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.RPush(ctx, key, "not a record").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "every job sent", func() bool {
		return len(b.fake.AcceptedIDs()) == len(ids)
	})
	l := ledger.NewRedis(rdb, b.prefix, time.Hour)
	testenv.WaitFor(t, 10*time.Second, "every other job's record sent", func() bool {
		for _, id := range ids[1:] {
			if r, err := l.Record(ctx, id); err != nil || !r.Sent {
				return false
			}
		}
		return true
	})
	time.Sleep(b.qcfg.AckWait + time.Second) // an unacknowledged job would have been delivered again
	if d := b.fake.Duplicates(); len(d) > 0 {
		t.Errorf("sent twice: %v", d)
	}
	logs := b.logs.String()
	if strings.Contains(logs, "limit backend unreachable") {
		t.Error("a refused record was taken for the limit backend failing")
	}
	if !strings.Contains(logs, "record sent job in the ledger; acknowledging anyway") {
		t.Error("the refused record was not logged")
	}
}
