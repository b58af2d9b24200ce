package limits

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/notifier/notifier/internal/roundtrip"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
)

// TestClaimGroupMatchesMemory drives the in-memory ledger with single
// claims and the Redis ledger with the same claims made in groups (one
// script run each, as a batch makes them), among sent records, failures,
// releases and clock steps, and demands the same answers.
func TestClaimGroupMatchesMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t).Client()
	if err := ledger.NewRedis(rdb, "", time.Hour).Load(ctx); err != nil {
		t.Fatal(err)
	}
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		clock := newFakeClock()
		mem := ledger.NewMemory(24*time.Hour, ledger.WithNow(clock.Now))
		red := ledger.NewRedis(rdb, fmt.Sprintf("cg%d:", run), 24*time.Hour, ledger.WithNow(clock.Now))
		ids := rapid.SampledFrom([]string{"j0", "j1", "j2", "j3"})
		owners := rapid.SampledFrom([]string{"a", "b", "c"})
		actions := map[string]func(*rapid.T){
			"advance": func(rt *rapid.T) {
				clock.Advance(time.Duration(rapid.Int64Range(0, 15_000).Draw(rt, "advanceMs")) * time.Millisecond)
			},
			"claims": func(rt *rapid.T) {
				n := rapid.IntRange(1, 8).Draw(rt, "claims")
				g := red.ClaimGroup()
				type req struct {
					id, owner string
					lease     time.Duration
				}
				reqs := make([]req, n)
				cmds := make([]*ledger.ClaimCmd, n)
				for i := range reqs {
					reqs[i] = req{ids.Draw(rt, "id"), owners.Draw(rt, "owner"), time.Duration(rapid.IntRange(1, 20).Draw(rt, "leaseS")) * time.Second}
					cmds[i] = g.Add(reqs[i].id, reqs[i].owner, reqs[i].lease)
				}
				pipe := rdb.Pipeline()
				g.Queue(ctx, pipe)
				if _, err := pipe.Exec(ctx); err != nil {
					rt.Fatal(err)
				}
				for i, r := range reqs {
					want, err := mem.Claim(ctx, r.id, r.owner, r.lease)
					if err != nil {
						rt.Fatal(err)
					}
					got, err := cmds[i].Result()
					if err != nil {
						rt.Fatal(err)
					}
					if got != want {
						rt.Fatalf("claim %d of %d (%+v): redis group %+v, memory %+v", i+1, n, r, got, want)
					}
				}
			},
			"sent": func(rt *rapid.T) {
				id, owner := ids.Draw(rt, "id"), owners.Draw(rt, "owner")
				if err := mem.Sent(ctx, id, owner); err != nil {
					rt.Fatal(err)
				}
				if err := red.Sent(ctx, id, owner); err != nil {
					rt.Fatal(err)
				}
			},
			"failed": func(rt *rapid.T) {
				id, owner := ids.Draw(rt, "id"), owners.Draw(rt, "owner")
				want, err := mem.Failed(ctx, id, owner, "5xx")
				if err != nil {
					rt.Fatal(err)
				}
				got, err := red.Failed(ctx, id, owner, "5xx")
				if err != nil {
					rt.Fatal(err)
				}
				if got != want {
					rt.Fatalf("failed %s by %s: redis %d attempts, memory %d", id, owner, got, want)
				}
			},
			"release": func(rt *rapid.T) {
				id, owner := ids.Draw(rt, "id"), owners.Draw(rt, "owner")
				if err := mem.Release(ctx, id, owner); err != nil {
					rt.Fatal(err)
				}
				if err := red.Release(ctx, id, owner); err != nil {
					rt.Fatal(err)
				}
			},
		}
		names := []string{"advance", "claims", "claims", "claims", "sent", "failed", "release"}
		for range 60 {
			actions[rapid.SampledFrom(names).Draw(rt, "action")](rt)
		}
	})
}

// TestPipeBatcherMergesRequests: many workers' requests at once share
// pipelines (far fewer round trips than requests), every request gets its
// own answers, and the claims, cap decisions and reservations merged into
// one script run per batch answer as if made one by one: every job claimed
// once, every user's cap counting each of its jobs once, the provider's
// slots all distinct and one interval apart. Run on a single server and on
// a Redis Cluster (claims and caps grouped per slot there).
func TestPipeBatcherMergesRequests(t *testing.T) {
	t.Parallel()
	for name, rdb := range map[string]redis.UniversalClient{
		"redis":   testenv.Redis(t).Client(),
		"cluster": testenv.RedisCluster(t).Client(),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			trips := &roundtrip.Counter{}
			rdb.AddHook(trips)
			prefix := "batch-" + name + ":"
			led := ledger.NewRedis(rdb, prefix, time.Hour)
			q := leakyRedis(t, rdb, prefix, leaky.WithHeadroom(0))
			users := userlimit.NewRedis(rdb, prefix)
			if err := users.Load(ctx); err != nil {
				t.Fatal(err)
			}
			if err := led.Load(ctx); err != nil {
				t.Fatal(err)
			}
			if err := q.Load(ctx); err != nil {
				t.Fatal(err)
			}
			// A warm queue: a new one starts cold (full for max_queue_delay).
			c := leaky.Contract{Rate: 1e5, MaxQueueDelay: time.Hour}
			if _, err := q.Reserve(ctx, "p", c, 1); err != nil {
				t.Fatal(err)
			}
			b := newPipeBatcher(rdb)
			rs := &redisSet{ledger: led, users: users, leaky: q, batch: b}
			const workers, rounds = 32, 20
			type answer struct {
				claim ledger.Claim
				cap   userlimit.Result
				slot  leaky.Reservation
			}
			// Each worker's jobs go to its own user, capped at exactly
			// the jobs it sends.
			rule := userlimit.Rule{Limit: rounds, Window: time.Hour, Algorithm: userlimit.SlidingLog}
			answers := make([][]answer, workers)
			trips0 := trips.Count()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := range rounds {
						var cc *ledger.ClaimCmd
						var dc *userlimit.Decision
						var rc *leaky.ReserveCmd
						id := fmt.Sprintf("w%d-r%d", w, r)
						b.do(ctx, func(bt *pipeBatch) {
							cc = bt.claim(led, id, "owner-"+id, time.Minute)
							dc = bt.allow(users, userlimit.Key{Channel: "sms", User: fmt.Sprintf("u%d", w)}, id, rule, time.Time{})
							rc = bt.reserve(q, "p", c, 1)
						})
						claim, err := cc.Result()
						if err != nil {
							t.Error(err)
							return
						}
						capped, err := dc.Result()
						if err != nil {
							t.Error(err)
							return
						}
						slot, err := rc.Result()
						if err != nil {
							t.Error(err)
							return
						}
						answers[w] = append(answers[w], answer{claim, capped, slot})
					}
				}()
			}
			wg.Wait()
			used := trips.Count() - trips0
			requests := int64(workers * rounds)
			// One pipeline per request would be 640 round trips; merged,
			// 32 workers share about 50 (55 on the cluster, where a pipeline
			// counts once per node it reaches). A quarter of the requests is
			// the bound.
			t.Logf("%s: %d round trips for %d requests", name, used, requests)
			if used*4 > requests {
				t.Errorf("%d round trips for %d requests: batches hardly merged", used, requests)
			}
			seen := map[int64]bool{}
			for w := range workers {
				if len(answers[w]) != rounds {
					t.Fatalf("worker %d: %d answers, want %d", w, len(answers[w]), rounds)
				}
				for r, a := range answers[w] {
					if a.claim.Status != ledger.Claimed || !a.slot.OK || !a.cap.Allowed || a.cap.Remaining != rounds-r-1 {
						t.Fatalf("worker %d, round %d: %+v; want a claim, a slot, and the cap allowing with %d left", w, r, a, rounds-r-1)
					}
					if seen[a.slot.Slot] {
						t.Fatalf("slot %d given twice", a.slot.Slot)
					}
					seen[a.slot.Slot] = true
				}
			}
			// The slots follow one another at the contract's interval, as
			// if reserved one by one: 10 µs apart at 100,000/s.
			var first, last int64
			for s := range seen {
				if first == 0 || s < first {
					first = s
				}
				last = max(last, s)
			}
			if span := last - first; span != 10*(requests-1) {
				t.Errorf("slots span %d µs, want %d (one every 10 µs)", span, 10*(requests-1))
			}
			// Every user's cap is used up: one more job is denied.
			var dc *userlimit.Decision
			b.do(ctx, func(bt *pipeBatch) {
				dc = bt.allow(users, userlimit.Key{Channel: "sms", User: "u0"}, "one-more", rule, time.Time{})
			})
			if got, err := dc.Result(); err != nil || got.Allowed {
				t.Errorf("a job over the cap: %+v, %v; want denied", got, err)
			}
			// A second claim of every job through the batch finds it held.
			var cc *ledger.ClaimCmd
			b.do(ctx, func(bt *pipeBatch) { cc = bt.claim(led, "w0-r0", "someone-else", time.Minute) })
			if got, err := cc.Result(); err != nil || got.Status != ledger.Busy {
				t.Errorf("claim of a held job: %+v, %v; want ledger.Busy", got, err)
			}
			// The sent records go the same way.
			set := &Set{Ledger: led, redis: rs}
			if err := set.RecordSent(ctx, []Sent{{ID: "w0-r0", Owner: "owner-w0-r0", Seq: 7, Sum: "abc"}}, nil); err != nil {
				t.Fatal(err)
			}
			if got, err := led.Claim(ctx, "w0-r0", "x", time.Minute); err != nil || got.Status != ledger.AlreadySent {
				t.Errorf("claim after the batched sent: %+v, %v; want ledger.AlreadySent", got, err)
			}
			if seq, sum, ok, err := set.SentFrom(ctx, "w0-r0"); err != nil || !ok || seq != 7 || sum != "abc" {
				t.Errorf("SentFrom after the batched sent: %d %q %v %v; want 7 \"abc\" true", seq, sum, ok, err)
			}
			// A server that lost the script (a restart, a failover): the
			// records are written all the same, the script loaded again.
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if err := set.RecordSent(ctx, []Sent{{ID: "w1-r0", Owner: "owner-w1-r0"}, {ID: "w2-r0", Owner: "owner-w2-r0", Seq: 9, Sum: "def"}}, nil); err != nil {
				t.Fatalf("RecordSent after SCRIPT FLUSH: %v", err)
			}
			for _, id := range []string{"w1-r0", "w2-r0"} {
				if got, err := led.Claim(ctx, id, "x", time.Minute); err != nil || got.Status != ledger.AlreadySent {
					t.Errorf("claim of %s after SCRIPT FLUSH and RecordSent: %+v, %v; want ledger.AlreadySent", id, got, err)
				}
			}
			// A slot taken alone (a job that woke too late for its first)
			// rides the batch too: workers asking together share round
			// trips, and their slots follow the last one handed out at the
			// contract's interval, the script loaded again after a flush.
			set.Leaky = q
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := set.Reserve(ctx, "p", c, 1); err != nil {
				t.Fatalf("Reserve after SCRIPT FLUSH: %v", err)
			}
			slots := make([]int64, workers)
			trips0 = trips.Count()
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := set.Reserve(ctx, "p", c, 1)
					if err != nil || !r.OK {
						t.Errorf("Reserve: %+v, %v; want a slot", r, err)
						return
					}
					slots[w] = r.Slot
				}()
			}
			wg.Wait()
			if used := trips.Count() - trips0; used*4 > workers {
				t.Errorf("%d round trips for %d lone reservations: they did not ride a batch", used, workers)
			}
			slices.Sort(slots)
			for i, s := range slots {
				if want := last + 10*int64(i+2); s != want {
					t.Fatalf("lone reservation %d at %d µs, want %d (10 µs after the one before)", i, s, want)
				}
			}
		})
	}
}

// TestClusterSlot checks the hash slot the claims are grouped by against
// the cluster's own CLUSTER KEYSLOT.
func TestClusterSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.RedisCluster(t).Client()
	keys := []string{"", "a", "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{}x", "x{", "x}"}
	for i := range 200 {
		keys = append(keys, ledger.Key("notifier:", fmt.Sprintf("job-%d", i)))
	}
	for _, k := range keys {
		want, err := rdb.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := clusterSlot(k); int64(got) != want {
			t.Errorf("clusterSlot(%q) = %d, CLUSTER KEYSLOT = %d", k, got, want)
		}
	}
}

// newFakeClock is the clock of the batcher's step tables.
func newFakeClock() *testenv.Clock {
	return testenv.NewClock(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
}

func leakyRedis(t testing.TB, rdb redis.Scripter, prefix string, opts ...leaky.Option) *leaky.Redis {
	t.Helper()
	q, err := leaky.NewRedis(rdb, prefix, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return q
}
