package limits

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/internal/roundtrip"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
)

// BenchmarkRedisCostPerJob is what one job's limit work costs the Redis
// server, apart from the dispatcher around it: batches of n jobs, each
// admitted (claim, speculative slot, and with the cap the per-user
// sliding log) and then recorded sent, as n workers do together, over
// 1,000 users. It reports redis-µs/job, redis-server's CPU (INFO cpu,
// user and system) per job, and round trips per job; ns/op, a batch's
// time at the client, means little on a shared machine. The CPU figure
// moves with the machine too (±2 µs here); redis-server's instructions,
// counted under callgrind, do not (docs/benchmarks.md).
func BenchmarkRedisCostPerJob(b *testing.B) {
	for _, cs := range []struct {
		name    string
		reserve bool // a speculative send slot
		capped  bool // the per-user cap
		n       int  // jobs a batch
	}{
		{"ledger/batch32", false, false, 32},
		{"ledger/batch8", false, false, 8},
		{"ledger+slot/batch32", true, false, 32},
		{"ledger+slot/batch8", true, false, 8},
		{"ledger+cap/batch8", false, true, 8},
		{"ledger+slot+cap/batch32", true, true, 32},
		{"ledger+slot+cap/batch8", true, true, 8},
	} {
		b.Run(cs.name, func(b *testing.B) { benchRedisCost(b, cs.reserve, cs.capped, cs.n) })
	}
}

func benchRedisCost(b *testing.B, reserve, capped bool, n int) {
	ctx := context.Background()
	srv := testenv.Redis(b)
	rdb := srv.Client()
	trips := &roundtrip.Counter{}
	rdb.AddHook(trips)
	l, err := Redis(rdb, Config{Prefix: "cost:", DedupTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Load(ctx); err != nil {
		b.Fatal(err)
	}
	rule := userlimit.Rule{Limit: userlimit.MaxSlidingLogLimit, Window: time.Hour, Algorithm: userlimit.SlidingLog, OnExceed: userlimit.Drop}
	cold := time.Duration(0) // a first start: no slot lies ahead of now
	contract := leaky.Contract{Rate: 1e6, MaxQueueDelay: 100 * time.Millisecond, ColdStart: &cold}
	job := 0
	round := func() {
		var wg sync.WaitGroup
		for i := range n {
			id := "job-" + strconv.Itoa(job+i)
			user := "user-" + strconv.Itoa((job+i)%1000)
			wg.Go(func() {
				adm, err := l.Admit(ctx, Ask{ID: id, Owner: "w", Lease: time.Minute,
					Capped: capped, CapKey: userlimit.Key{Channel: "sms", User: user}, Rule: rule,
					Reserve: reserve, Provider: "p", Contract: contract, Cost: 1})
				if err != nil {
					b.Error(err)
					return
				}
				if reserve && !adm.Slot.OK {
					b.Errorf("job %s: no slot", id)
				}
			})
		}
		wg.Wait()
		sent := make([]Sent, n)
		for i := range sent {
			sent[i] = Sent{ID: "job-" + strconv.Itoa(job+i), Owner: "w", Seq: uint64(job + i + 1), Sum: "0123456789abcdef"}
		}
		if err := l.RecordSent(ctx, sent, nil); err != nil {
			b.Fatal(err)
		}
		job += n
	}
	// Warm: the scripts loaded, each user's log holding a few entries.
	for range 2000 / n {
		round()
	}
	cpu0 := redisCPU(b, rdb)
	t0 := trips.Count()
	b.ResetTimer()
	jobs := 0
	for b.Loop() {
		round()
		jobs += n
	}
	b.StopTimer()
	b.ReportMetric((redisCPU(b, rdb)-cpu0)*1e6/float64(jobs), "redis-µs/job")
	b.ReportMetric(float64(trips.Count()-t0)/float64(jobs), "roundtrips/job")
}

// redisCPU is redis-server's CPU seconds so far, user and system.
func redisCPU(b *testing.B, rdb redis.UniversalClient) float64 {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var s float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(fmt.Errorf("INFO cpu %s: %w", k, err))
			}
			s += f
		}
	}
	return s
}
