package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// TestSentGroupRecordsEachJob checks the records of one script run: each
// job sent (a claim finds it so), its message (q, h) when given, its
// expiry (a claimed job's left where its claim put it, dedup_ttl past the
// lease's end; a record no claim wrote dedup_ttl from now), and an
// argument out of range refused before anything is written.
func TestSentGroupRecordsEachJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.Redis(t).Client()
	l := NewRedis(c, "sg:", time.Hour)
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Claim(ctx, "a", "owner-a", time.Minute); err != nil || got.Status != Claimed {
		t.Fatalf("claim a = %+v, %v", got, err)
	}
	if ttl, err := c.PTTL(ctx, Key("sg:", "a")).Result(); err != nil || ttl <= time.Hour || ttl > time.Hour+time.Minute {
		t.Fatalf("PTTL of a claimed record = %s, %v; want dedup_ttl + the lease (1h1m)", ttl, err)
	}
	g := l.SentGroup()
	g.Add("a", 41, "sum-a")
	g.Add("b", 0, "")
	g.Add("c", 18446744073709551615, "sum-c")
	if g.Len() != 3 {
		t.Fatalf("Len = %d, want 3", g.Len())
	}
	pipe := c.Pipeline()
	g.Queue(ctx, pipe)
	_, _ = pipe.Exec(ctx)
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		id       string
		seq      uint64
		sum      string
		ok       bool
		min, max time.Duration // its PTTL
	}{
		{"a", 41, "sum-a", true, time.Hour, time.Hour + time.Minute},            // as its claim left it
		{"b", 0, "", false, 59 * time.Minute, time.Hour},                        // no claim: dedup_ttl from now
		{"c", 18446744073709551615, "sum-c", true, 59 * time.Minute, time.Hour}, // no claim
	} {
		if got, err := l.Claim(ctx, w.id, "someone", time.Minute); err != nil || got.Status != AlreadySent {
			t.Errorf("claim %s after its record = %+v, %v; want AlreadySent", w.id, got, err)
		}
		seq, sum, ok, err := l.SentFrom(ctx, w.id)
		if err != nil || ok != w.ok || seq != w.seq || sum != w.sum {
			t.Errorf("SentFrom(%s) = %d %q %v %v; want %d %q %v", w.id, seq, sum, ok, err, w.seq, w.sum, w.ok)
		}
		if ttl, err := c.PTTL(ctx, Key("sg:", w.id)).Result(); err != nil || ttl <= w.min || ttl > w.max {
			t.Errorf("PTTL of %s = %s, %v; want in (%s, %s]", w.id, ttl, err, w.min, w.max)
		}
	}

	// A sequence that is not a decimal integer from 1 stops the run before
	// any record is written, and the error names it.
	for _, bad := range []any{"0", "-1", "1e3", "123456789012345678901"} {
		keys := []string{Key("sg:", "x"), Key("sg:", "y")}
		err := ledgerSentScript.Run(ctx, c, keys, 3600000, "5", "s", bad, "s").Err()
		if err == nil || !strings.Contains(err.Error(), "argument sequence out of range") {
			t.Errorf("sequence %v: err %v; want the sequence named", bad, err)
		}
		if n, err := c.Exists(ctx, keys...).Result(); err != nil || n != 0 {
			t.Errorf("sequence %v: %d records written, %v; want none", bad, n, err)
		}
	}
	if err := ledgerSentScript.Run(ctx, c, []string{Key("sg:", "x")}, 3600000, "5").Err(); err == nil || !strings.Contains(err.Error(), "wrong number of arguments") {
		t.Errorf("a record without its digest: err %v; want wrong number of arguments", err)
	}

	// The script gone from the server's cache: Err says so.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	g = l.SentGroup()
	g.Add("d", 1, "sum-d")
	pipe = c.Pipeline()
	g.Queue(ctx, pipe)
	_, _ = pipe.Exec(ctx)
	if err := g.Err(); !errors.Is(err, ErrNotLoaded) || !strings.Contains(err.Error(), "record sent for job d") {
		t.Errorf("after SCRIPT FLUSH: %v; want ErrNotLoaded naming job d", err)
	}
	// Sent (one job, no pipeline) falls back to EVAL.
	if err := l.Sent(ctx, "d", "o"); err != nil {
		t.Fatalf("Sent after SCRIPT FLUSH: %v", err)
	}
}
