package gateway

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// TestTakeSteps drives take.lua on a fake clock: a request's wait is until
// its bucket holds the tokens asked for (not until it is full), and a take
// from several buckets is all or nothing.
func TestTakeSteps(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client()
	clock := time.UnixMicro(1_700_000_000_000_000)
	b := &Buckets{rdb: rdb, now: func() time.Time { return clock }}
	key := Bucket{Key: BucketKey("steps:", KindKey, "k"), Limit: Limit{Rate: 10, Burst: 50}}
	tenant := Bucket{Key: BucketKey("steps:", KindTenant, "t"), Limit: Limit{Rate: 1, Burst: 3}}
	ms := time.Millisecond
	steps := []struct {
		advance   time.Duration
		n         int
		buckets   []Bucket
		allowed   bool
		remaining []int
		wait      []time.Duration
	}{
		{0, 50, []Bucket{key}, true, []int{0}, []time.Duration{0}},
		{0, 1, []Bucket{key}, false, []int{0}, []time.Duration{100 * ms}},
		{0, 9, []Bucket{key}, false, []int{0}, []time.Duration{900 * ms}},
		{100 * ms, 1, []Bucket{key}, true, []int{0}, []time.Duration{0}},
		{250 * ms, 1, []Bucket{key}, true, []int{1}, []time.Duration{0}},
		{5 * time.Second, 0, []Bucket{key}, true, []int{50}, []time.Duration{0}},
		// The tenant's 3 and the key's 50: 2 jobs, then 2 more that the
		// tenant refuses, which leaves the key's bucket as it was.
		{0, 2, []Bucket{tenant, key}, true, []int{1, 48}, []time.Duration{0, 0}},
		{0, 2, []Bucket{tenant, key}, false, []int{1, 48}, []time.Duration{time.Second, 0}},
		{0, 1, []Bucket{key}, true, []int{47}, []time.Duration{0}},
		{time.Second, 2, []Bucket{tenant, key}, true, []int{0, 48}, []time.Duration{0, 0}},
	}
	for i, s := range steps {
		clock = clock.Add(s.advance)
		allowed, ts, err := b.Take(context.Background(), s.n, s.buckets...)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if allowed != s.allowed {
			t.Errorf("step %d: allowed %v, want %v (%+v)", i, allowed, s.allowed, ts)
		}
		for j := range ts {
			if ts[j].Remaining != s.remaining[j] || ts[j].Wait != s.wait[j] {
				t.Errorf("step %d, bucket %d: remaining %d wait %s, want %d and %s", i, j, ts[j].Remaining, ts[j].Wait, s.remaining[j], s.wait[j])
			}
		}
	}
}

// TestScriptsClampExpiries: whatever window or ttl the scripts are given,
// no key is written with an expiry past its configuration range's worst
// case (auth_failures.window ≤ 24 h, idempotency_ttl ≤ 30 days).
func TestScriptsClampExpiries(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client()
	ctx := context.Background()
	if _, left, err := failAuth(ctx, rdb, "clamp:", "192.0.2.1", 365*24*time.Hour); err != nil || left > maxAuthFailuresWindow {
		t.Fatalf("failAuth with a year's window: %s %v, want at most %s", left, err, maxAuthFailuresWindow)
	}
	if ttl, err := rdb.PTTL(ctx, AuthFailKey("clamp:", "192.0.2.1")).Result(); err != nil || ttl > maxAuthFailuresWindow {
		t.Fatalf("failure count expires in %s (%v), want at most %s", ttl, err, maxAuthFailuresWindow)
	}
	key, claim := IDKey("clamp:", "acme", "x"), idClaimKey("clamp:", "acme", "x")
	if _, err := claimIDs(ctx, rdb, []string{key, claim}, []string{"h"}, "t", 365*24*time.Hour, time.Minute+claimSlack); err != nil {
		t.Fatal(err)
	}
	if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl > maxIdempotencyTTL {
		t.Fatalf("id record expires in %s (%v), want at most %s", ttl, err, maxIdempotencyTTL)
	}
	if ttl, err := rdb.PTTL(ctx, claim).Result(); err != nil || ttl <= 0 || ttl > time.Minute+claimSlack {
		t.Fatalf("claim expires in %s (%v), want within %s", ttl, err, time.Minute+claimSlack)
	}
}

// TestLocalRefusalSteps holds the in-memory bound of a bucket to the
// script's waits: just emptied (full in 5 s at rate 10, burst 50), one job
// waits 100 ms and 20 jobs 2 s, not the 5 s until it is full; a bound that
// says the bucket holds the jobs does not refuse.
func TestLocalRefusalSteps(t *testing.T) {
	t.Parallel()
	b := newBucket("steps:", KindKey, "k", Limit{Rate: 10, Burst: 50})
	if _, refused := b.localRefusal(0, 1); refused {
		t.Fatal("an unknown bucket refused")
	}
	b.learn(0, Take{Reset: 5 * time.Second})
	ms := time.Millisecond
	for _, s := range []struct {
		now     time.Duration
		n       int
		refused bool
		wait    time.Duration
		left    int
	}{
		{0, 1, true, 100 * ms, 0},
		{0, 20, true, 2 * time.Second, 0},
		{50 * ms, 1, true, 50 * ms, 0},
		{100 * ms, 1, false, 0, 0},
		{1500 * ms, 20, true, 500 * ms, 15},
		{5 * time.Second, 50, false, 0, 0},
	} {
		tk, refused := b.localRefusal(s.now, s.n)
		if refused != s.refused || tk.Wait != s.wait || refused && tk.Remaining != s.left {
			t.Errorf("at %s, %d jobs: refused %v %+v, want %v, wait %s, %d left", s.now, s.n, refused, tk, s.refused, s.wait, s.left)
		}
	}
}

// TestUnclaimDeletesOnlyItsOwnRecord: unclaim.lua deletes a record only
// while it holds the hash the request wrote and its claim the request's
// token; one that names another job by then, or that another request
// claimed, is kept.
func TestUnclaimDeletesOnlyItsOwnRecord(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client()
	ctx := context.Background()
	pair := func(id string) []string {
		return []string{IDKey("unclaim:", "acme", id), idClaimKey("unclaim:", "acme", id)}
	}
	mine, theirs, none := pair("a"), pair("b"), pair("none")
	if got, err := claimIDs(ctx, rdb, append(slices.Clone(mine), theirs...), []string{"h1", "h2"}, "t1", time.Hour, time.Minute); err != nil || !slices.Equal(got, []idClaim{idNew, idNew}) {
		t.Fatalf("claim: %v %v, want two new", got, err)
	}
	if n, err := unclaimIDs(ctx, rdb, mine, []string{"h1"}, "t2"); err != nil || n != 0 {
		t.Fatalf("unclaim under another token: %d deleted (%v), want none", n, err)
	}
	n, err := unclaimIDs(ctx, rdb, slices.Concat(mine, theirs, none), []string{"h1", "h1", "h1"}, "t1")
	if err != nil || n != 1 {
		t.Fatalf("unclaim: %d deleted (%v), want 1", n, err)
	}
	if rdb.Exists(ctx, mine...).Val() != 0 || rdb.Get(ctx, theirs[0]).Val() != "h2" {
		t.Errorf("after unclaim: %v exist %d, %s holds %q; want the first record and claim gone, the second h2",
			mine, rdb.Exists(ctx, mine...).Val(), theirs[0], rdb.Get(ctx, theirs[0]).Val())
	}
	if _, err := unclaimIDs(ctx, rdb, mine, nil, "t1"); err == nil {
		t.Error("keys without their hashes were taken")
	}
	if _, err := unclaimIDs(ctx, rdb, mine[:1], []string{"h1"}, "t1"); err == nil {
		t.Error("a record without its claim was taken")
	}
	if _, err := claimIDs(ctx, rdb, mine[:1], []string{"h1"}, "t1", time.Hour, time.Minute); err == nil {
		t.Error("a claim of a record without its claim key was taken")
	}
}

// TestUnclaimKeepsAnIDARetryFound: a retry of the same job that finds the
// id claimed (idSame) may store the job while the first request's publish
// fails; the first request's unclaim must then keep the record, whichever
// of the two comes first, or the stored job's id would be free for another
// job within idempotency_ttl. An unclaim that comes before the retry's
// claim frees the id, and the retry is the job's new holder.
func TestUnclaimKeepsAnIDARetryFound(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t).Client()
	ctx := context.Background()
	keys := []string{IDKey("rejoin:", "acme", "j"), idClaimKey("rejoin:", "acme", "j")}
	claim := func(token string) idClaim {
		t.Helper()
		got, err := claimIDs(ctx, rdb, keys, []string{"h"}, token, time.Hour, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return got[0]
	}
	if a, b := claim("first"), claim("retry"); a != idNew || b != idSame {
		t.Fatalf("first and retry: %d, %d, want new, same", a, b)
	}
	if n, err := unclaimIDs(ctx, rdb, keys, []string{"h"}, "first"); err != nil || n != 0 {
		t.Fatalf("the first request's unclaim after the retry's claim: %d deleted (%v), want none", n, err)
	}
	if v := rdb.Get(ctx, keys[0]).Val(); v != "h" {
		t.Fatalf("record after the unclaim: %q, want h (the retry may have stored the job)", v)
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	if a := claim("first"); a != idNew {
		t.Fatalf("first: %d, want new", a)
	}
	if n, err := unclaimIDs(ctx, rdb, keys, []string{"h"}, "first"); err != nil || n != 1 {
		t.Fatalf("unclaim with no retry: %d deleted (%v), want 1", n, err)
	}
	if b := claim("retry"); b != idNew {
		t.Fatalf("a retry after the unclaim: %d, want new (it holds the id now)", b)
	}
	if v := rdb.Get(ctx, keys[1]).Val(); v != "retry" {
		t.Fatalf("claim after the retry: %q, want the retry's token", v)
	}
}

// TestNotSentOnlyWhenNothingLeft: an id is given back (and the 503 says
// nothing was published) only for errors that mean the message never left
// or found no stream. nats.ErrDisconnected is not one: nats.go fails every
// publish awaiting its acknowledgement with it when the connection comes
// back, sent (maybe stored) or buffered (to be sent) alike (found in review).
func TestNotSentOnlyWhenNothingLeft(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]bool{
		nats.ErrConnectionClosed: true,
		fmt.Errorf("publish: %w: %w", queue.ErrNotSent, context.Canceled): true,
		fmt.Errorf("publish: %w", nats.ErrNoResponders):                   true,
		jetstream.ErrNoStreamResponse:                                     true,
		nats.ErrDisconnected:                                              false,
		fmt.Errorf("publish: %w", nats.ErrDisconnected):                   false,
		context.DeadlineExceeded:                                          false,
		fmt.Errorf("ack: %w", jetstream.ErrInvalidJSAck):                  false,
	} {
		if got := notSent(err); got != want {
			t.Errorf("notSent(%v) = %v, want %v", err, got, want)
		}
	}
}

// TestPeersOfOneSlashSixtyFourAreOneAddress: the connection bounds count
// two IPv6 peers of one /64 as one address, and an IPv4 peer (mapped or
// not) as itself.
func TestPeersOfOneSlashSixtyFourAreOneAddress(t *testing.T) {
	t.Parallel()
	peer := func(s string) netip.Addr { return peerAddr(&net.TCPAddr{IP: net.ParseIP(s), Port: 4711}) }
	if a, b := peer("2001:db8:1:2::1"), peer("2001:db8:1:2:ffff:ffff:ffff:fffe"); a != b || a.String() != "2001:db8:1:2::" {
		t.Errorf("two peers of 2001:db8:1:2::/64: %s and %s, want both 2001:db8:1:2::", a, b)
	}
	if a, b := peer("2001:db8:1:2::1"), peer("2001:db8:1:3::1"); a == b {
		t.Errorf("peers of two /64s are one address: %s", a)
	}
	if a, b := peer("192.0.2.1"), peer("::ffff:192.0.2.1"); a != b || a.String() != "192.0.2.1" {
		t.Errorf("an IPv4 peer: %s, mapped %s, want 192.0.2.1 for both", a, b)
	}
	if a, b := peer("192.0.2.1"), peer("192.0.2.2"); a == b {
		t.Errorf("two IPv4 peers are one address: %s", a)
	}
	if s := ipString(peer("2001:db8:1:2::1")); s != "2001:db8:1:2::/64" {
		t.Errorf("an IPv6 peer's failure key names %q, want 2001:db8:1:2::/64", s)
	}
}
