package ledger

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
)

// newFakeClock is the clock of the ledger's step tables.
func newFakeClock() *testenv.Clock {
	return testenv.NewClock(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
}

// ledgerBackends returns, per backend, a constructor of fresh ledgers with
// opts applied (a test's fake clock among them, WithNow), as the
// limit packages' conformance suites take their backends.
func ledgerBackends(t *testing.T) map[string]func(ttl time.Duration, opts ...Option) Ledger {
	redisSrv := testenv.Redis(t)
	cluster := testenv.RedisCluster(t)
	var n atomic.Int64
	prefix := func() string { return fmt.Sprintf("t%d:", n.Add(1)) }
	return map[string]func(time.Duration, ...Option) Ledger{
		"memory": func(ttl time.Duration, opts ...Option) Ledger { return NewMemory(ttl, opts...) },
		"redis": func(ttl time.Duration, opts ...Option) Ledger {
			return NewRedis(redisSrv.Client(), prefix(), ttl, opts...)
		},
		"cluster": func(ttl time.Duration, opts ...Option) Ledger {
			return NewRedis(cluster.Client(), prefix(), ttl, opts...)
		},
	}
}

func TestLedgerConformance(t *testing.T) {
	ctx := context.Background()
	for name, newLedger := range ledgerBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Run("claim, fail, claim again, sent, dedup", func(t *testing.T) {
				clock := newFakeClock()
				l := newLedger(time.Hour, WithNow(clock.Now))
				steps := []struct {
					advance time.Duration
					op      string // claim | sent | failed | release
					owner   string
					want    Claim
					wantN   int
				}{
					{op: "claim", owner: "a", want: Claim{Status: Claimed}},
					{advance: time.Second, op: "claim", owner: "b", want: Claim{Status: Busy, BusyFor: 9 * time.Second}},
					{op: "claim", owner: "a", want: Claim{Status: Claimed}}, // the owner extends its lease
					{op: "failed", owner: "a", wantN: 1},
					{op: "claim", owner: "b", want: Claim{Status: Claimed, Attempts: 1}}, // lease freed by the failure
					{op: "failed", owner: "b", wantN: 2},
					{op: "claim", owner: "c", want: Claim{Status: Claimed, Attempts: 2}},
					{op: "release", owner: "c"},
					{op: "claim", owner: "d", want: Claim{Status: Claimed, Attempts: 2}},
					{advance: 11 * time.Second, op: "claim", owner: "e", want: Claim{Status: Claimed, Attempts: 2}}, // d's lease expired
					{op: "sent", owner: "e"},
					{op: "claim", owner: "f", want: Claim{Status: AlreadySent, Attempts: 2}},
					{advance: 30 * time.Minute, op: "claim", owner: "g", want: Claim{Status: AlreadySent, Attempts: 2}},
				}
				for i, s := range steps {
					clock.Advance(s.advance)
					switch s.op {
					case "claim":
						got, err := l.Claim(ctx, "job-1", s.owner, 10*time.Second)
						if err != nil {
							t.Fatalf("step %d: claim: %v", i, err)
						}
						if got != s.want {
							t.Fatalf("step %d: claim by %s = %+v, want %+v", i, s.owner, got, s.want)
						}
					case "sent":
						if err := l.Sent(ctx, "job-1", s.owner); err != nil {
							t.Fatalf("step %d: sent: %v", i, err)
						}
					case "failed":
						n, err := l.Failed(ctx, "job-1", s.owner, "5xx")
						if err != nil || n != s.wantN {
							t.Fatalf("step %d: failed = %d, %v; want %d", i, n, err, s.wantN)
						}
					case "release":
						if err := l.Release(ctx, "job-1", s.owner); err != nil {
							t.Fatalf("step %d: release: %v", i, err)
						}
					}
				}
			})
			t.Run("jobs are independent", func(t *testing.T) {
				l := newLedger(time.Hour, WithNow(newFakeClock().Now))
				if err := l.Sent(ctx, "x", "o"); err != nil {
					t.Fatal(err)
				}
				got, err := l.Claim(ctx, "y", "o", time.Second)
				if err != nil || got.Status != Claimed || got.Attempts != 0 {
					t.Fatalf("claim of another job: %+v, %v", got, err)
				}
			})
			t.Run("one claim wins among many", func(t *testing.T) {
				l := newLedger(time.Hour, WithNow(newFakeClock().Now))
				var wins atomic.Int32
				var wg sync.WaitGroup
				for w := 0; w < 32; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						c, err := l.Claim(ctx, "race", fmt.Sprintf("w%d", w), time.Minute)
						if err != nil {
							t.Error(err)
							return
						}
						if c.Status == Claimed {
							wins.Add(1)
						}
					}()
				}
				wg.Wait()
				if wins.Load() != 1 {
					t.Fatalf("claims won: %d, want exactly 1", wins.Load())
				}
			})
		})
	}
}

// TestRedisLedgerTTL checks that Redis forgets a job dedup_ttl after its last
// change, with the real clock (the TTL is Redis's own expiry).
func TestRedisLedgerTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.Redis(t).Client()
	l := NewRedis(c, "ttl:", 300*time.Millisecond)
	if err := l.Sent(ctx, "j", "o"); err != nil {
		t.Fatal(err)
	}
	ttl, err := c.PTTL(ctx, Key("ttl:", "j")).Result()
	if err != nil || ttl <= 0 || ttl > 300*time.Millisecond {
		t.Fatalf("PTTL = %s, %v; want in (0, 300ms]", ttl, err)
	}
	testenv.WaitFor(t, 5*time.Second, "ledger record expired", func() bool {
		n, err := c.Exists(ctx, Key("ttl:", "j")).Result()
		return err == nil && n == 0
	})
	got, err := l.Claim(ctx, "j", "o2", time.Second)
	if err != nil || got.Status != Claimed {
		t.Fatalf("claim after expiry = %+v, %v; want Claimed", got, err)
	}
}

// TestRedisLedgerSurvivesScriptFlush checks the EVALSHA→EVAL fallback that a
// Redis restart or SCRIPT FLUSH needs.
func TestRedisLedgerSurvivesScriptFlush(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.Redis(t).Client()
	l := NewRedis(c, "flush:", time.Hour)
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Claim(ctx, "j", "o", time.Second); err != nil {
		t.Fatalf("claim after SCRIPT FLUSH: %v", err)
	}
}

func TestRedisLedgerDownIsAnError(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv := testenv.Redis(t)
	l := NewRedis(srv.Client(), "down:", time.Hour)
	srv.Stop()
	_, err := l.Claim(ctx, "j-1", "o", time.Second)
	if err == nil {
		t.Fatal("claim with Redis down succeeded")
	}
	if want := "claim job j-1: "; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Fatalf("error %q does not name the operation", err)
	}
	srv.Start()
	if _, err := l.Claim(ctx, "j-1", "o", time.Second); err != nil {
		t.Fatalf("claim after Redis came back: %v", err)
	}
}

func TestRedisLedgerResetForReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := NewRedis(testenv.Redis(t).Client(), "rp:", time.Hour)
	for i := 0; i < 3; i++ {
		if _, err := l.Failed(ctx, "dead-1", "o", "error"); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sent(ctx, "sent-1", "o"); err != nil {
		t.Fatal(err)
	}
	if sent, err := l.ResetForReplay(ctx, "dead-1"); err != nil || sent {
		t.Fatalf("reset of a dead job: sent=%v err=%v", sent, err)
	}
	if c, err := l.Claim(ctx, "dead-1", "o2", time.Second); err != nil || c.Status != Claimed || c.Attempts != 0 {
		t.Fatalf("claim after reset: %+v %v, want Claimed with 0 attempts", c, err)
	}
	if sent, err := l.ResetForReplay(ctx, "sent-1"); err != nil || !sent {
		t.Fatalf("reset of a sent job: sent=%v err=%v, want sent=true (kept)", sent, err)
	}
	if c, _ := l.Claim(ctx, "sent-1", "o3", time.Second); c.Status != AlreadySent {
		t.Fatalf("a sent job was forgotten by reset: %+v", c)
	}
	if sent, err := l.ResetForReplay(ctx, "never-seen"); err != nil || sent {
		t.Fatalf("reset of an unknown job: %v %v", sent, err)
	}
}
