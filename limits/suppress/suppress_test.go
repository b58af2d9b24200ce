package suppress_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/limits/suppress"
	"github.com/notifier/notifier/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// TestStores runs the same checks on every store: a listed recipient is
// found by its channel and hash only (not on another channel), listed anew
// when added again, removed at once, listed newest first, and gone when
// its time is over; a malformed channel, hash or ttl is refused.
func TestStores(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		store  func(t *testing.T) suppress.Store
		expire func(t *testing.T, s suppress.Store) // pass 2 s
	}{
		{"memory", func(t *testing.T) suppress.Store { return suppress.NewMemory(memClock.Now) },
			func(t *testing.T, _ suppress.Store) { memClock.Advance(2 * time.Second) }},
		{"redis", func(t *testing.T) suppress.Store { return suppress.NewRedis(testenv.Redis(t).Client(), "t:") },
			func(t *testing.T, _ suppress.Store) { time.Sleep(2100 * time.Millisecond) }},
		{"redis cluster", func(t *testing.T) suppress.Store {
			return suppress.NewRedis(testenv.RedisCluster(t).Client(), "t:")
		}, func(t *testing.T, _ suppress.Store) { time.Sleep(2100 * time.Millisecond) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := tc.store(t)
			sms := suppress.Hash("sms", "+14155550123")
			push := suppress.Hash("push", "+14155550123")
			if sms == push || !suppress.ValidHash(sms) || strings.Contains(sms, "4155550123") {
				t.Fatalf("hashes %s, %s", sms, push)
			}
			if ok, err := s.Has(ctx, "sms", sms); err != nil || ok {
				t.Fatalf("empty list: %v, %v", ok, err)
			}
			if err := s.Add(ctx, suppress.Entry{Channel: "sms", Hash: sms, Provider: "tw", Detail: "21610 replied STOP", Job: "acme/j-1", Tenant: "acme"}, time.Hour); err != nil {
				t.Fatal(err)
			}
			if err := s.Add(ctx, suppress.Entry{Channel: "push", Hash: push, Provider: "fcm"}, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			if ok, err := s.Has(ctx, "sms", sms); err != nil || !ok {
				t.Fatalf("listed: %v, %v", ok, err)
			}
			if ok, _ := s.Has(ctx, "email", sms); ok {
				t.Fatal("listed on another channel")
			}
			e, ok, err := s.Get(ctx, "sms", sms)
			if err != nil || !ok || e.Provider != "tw" || e.Job != "acme/j-1" || e.Until.Sub(e.At) != time.Hour {
				t.Fatalf("get: %+v, %v, %v", e, ok, err)
			}
			all, err := s.List(ctx, "", 0)
			if err != nil || len(all) != 2 || all[0].Channel != "push" {
				t.Fatalf("list: %+v, %v; want 2, the push one (listed last) first", all, err)
			}
			if only, err := s.List(ctx, "sms", 0); err != nil || len(only) != 1 || only[0].Hash != sms {
				t.Fatalf("list sms: %+v, %v", only, err)
			}
			tc.expire(t, s)
			if ok, _ := s.Has(ctx, "push", push); ok {
				t.Error("the push entry outlived its 2 s")
			}
			if removed, err := s.Remove(ctx, "sms", sms); err != nil || !removed {
				t.Fatalf("remove: %v, %v", removed, err)
			}
			if removed, err := s.Remove(ctx, "sms", sms); err != nil || removed {
				t.Fatalf("remove again: %v, %v", removed, err)
			}
			if ok, _ := s.Has(ctx, "sms", sms); ok {
				t.Error("listed after its removal")
			}
			for _, bad := range []struct {
				channel, hash string
				ttl           time.Duration
			}{
				{"sms", "not-a-hash", time.Hour},
				{"sms", strings.ToUpper(sms), time.Hour},
				{"s*", sms, time.Hour},
				{"", sms, time.Hour},
				{"sms", sms, 0},
				{"sms", sms, suppress.MaxTTL + time.Hour},
			} {
				if err := s.Add(ctx, suppress.Entry{Channel: bad.channel, Hash: bad.hash}, bad.ttl); !errors.Is(err, suppress.ErrInvalid) {
					t.Errorf("add %+v: %v, want ErrInvalid", bad, err)
				}
			}
			if _, err := s.Has(ctx, "sms", "x"); !errors.Is(err, suppress.ErrInvalid) {
				t.Errorf("has a bad hash: %v", err)
			}
		})
	}
}

// memClock is the Memory store's clock (the Redis one expires on the
// server's own).
var memClock = testenv.NewClock(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))

// TestHasIsGetsOk: on every store Has answers as Get's ok, listed, not
// listed, expired and removed, and both refuse a malformed hash; Remove
// says whether it found the entry.
func TestHasIsGetsOk(t *testing.T) {
	t.Parallel()
	c := testenv.NewClock(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	srv := testenv.Redis(t)
	for name, s := range map[string]suppress.Store{
		"memory": suppress.NewMemory(c.Now),
		"redis":  suppress.NewRedis(srv.Client(), "has:"),
	} {
		ctx := context.Background()
		h := suppress.Hash("push", "device-token-1")
		agree := func(when string, want bool) {
			t.Helper()
			has, herr := s.Has(ctx, "push", h)
			_, ok, gerr := s.Get(ctx, "push", h)
			if herr != nil || gerr != nil || has != ok || has != want {
				t.Errorf("%s, %s: has %v %v, get %v %v; want %v", name, when, has, herr, ok, gerr, want)
			}
		}
		agree("empty", false)
		if err := s.Add(ctx, suppress.Entry{Channel: "push", Hash: h, Provider: "fcm"}, time.Hour); err != nil {
			t.Fatal(err)
		}
		agree("listed", true)
		if removed, err := s.Remove(ctx, "push", h); err != nil || !removed {
			t.Fatalf("%s: remove: %v, %v", name, removed, err)
		}
		agree("removed", false)
		if _, err := s.Has(ctx, "push", "x"); !errors.Is(err, suppress.ErrInvalid) {
			t.Errorf("%s: has a bad hash: %v", name, err)
		}
		if _, _, err := s.Get(ctx, "push", "x"); !errors.Is(err, suppress.ErrInvalid) {
			t.Errorf("%s: get a bad hash: %v", name, err)
		}
		if _, err := s.Remove(ctx, "p*", h); !errors.Is(err, suppress.ErrInvalid) {
			t.Errorf("%s: remove on a bad channel: %v", name, err)
		}
	}
	m := suppress.NewMemory(c.Now)
	h := suppress.Hash("sms", "+14155550123")
	if err := m.Add(context.Background(), suppress.Entry{Channel: "sms", Hash: h}, time.Second); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second)
	if has, _ := m.Has(context.Background(), "sms", h); has {
		t.Error("memory: has an expired entry")
	}
}

// TestListKeepsTheNewest: over more entries than a scan page, on one
// server and on a Cluster, List with a limit is the first limit of the
// whole list (newest first, a tie by hash), and the whole list has every
// entry once.
func TestListKeepsTheNewest(t *testing.T) {
	t.Parallel()
	const n = 2500
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for name, rdb := range map[string]redis.UniversalClient{
		"redis":         testenv.Redis(t).Client(),
		"redis cluster": testenv.RedisCluster(t).Client(),
	} {
		fill(t, rdb, "many:", n, 3, at) // three listed each second: ties
		s := suppress.NewRedis(rdb, "many:")
		all, err := s.List(context.Background(), "", 0)
		if err != nil || len(all) != n {
			t.Fatalf("%s: list all: %d, %v; want %d", name, len(all), err, n)
		}
		seen := map[string]bool{}
		for i, e := range all {
			if seen[e.Hash] {
				t.Fatalf("%s: %s listed twice", name, e.Hash)
			}
			seen[e.Hash] = true
			if i > 0 && (all[i-1].At.Before(e.At) || all[i-1].At.Equal(e.At) && all[i-1].Hash > e.Hash) {
				t.Fatalf("%s: %d and %d out of order: %+v, %+v", name, i-1, i, all[i-1], e)
			}
		}
		if !all[0].At.Equal(at.Add((n - 1) / 3 * time.Second)) {
			t.Fatalf("%s: the newest is %v", name, all[0].At)
		}
		// The newest stands alone (2,499 = 3 × 833); then three a second:
		// limits 1, 100 and 1,000 end where a second does, 2 and 101 cut
		// a second's three, which the index holds in another order than
		// List's (found in review: 2 and 101 were not asked, and a cut
		// tie gave the wrong ones).
		for _, limit := range []int{1, 2, 100, 101, 1000, n + 1} {
			some, err := s.List(context.Background(), "sms", limit)
			if err != nil || len(some) != min(limit, n) {
				t.Fatalf("%s: list %d: %d, %v", name, limit, len(some), err)
			}
			for i := range some {
				if some[i].Hash != all[i].Hash {
					t.Fatalf("%s: list %d: %d is %s, want %s", name, limit, i, some[i].Hash, all[i].Hash)
				}
			}
		}
		if none, err := s.List(context.Background(), "push", 10); err != nil || len(none) != 0 {
			t.Fatalf("%s: list push: %d, %v", name, len(none), err)
		}
	}
}

// TestEmailHashIgnoresCase: an email address is one recipient whatever its
// ASCII letters' case (local part and domain); a device token's case
// matters, and a channel's hash is still its own.
func TestEmailHashIgnoresCase(t *testing.T) {
	lower := suppress.Hash("email", "bob@example.com")
	for _, to := range []string{"Bob@Example.com", "BOB@EXAMPLE.COM", "bob@Example.COM"} {
		if h := suppress.Hash("email", to); h != lower {
			t.Errorf("Hash(email, %s) = %s, want %s (bob@example.com's)", to, h, lower)
		}
	}
	if suppress.Hash("email", "alice@example.com") == lower {
		t.Error("two addresses, one hash")
	}
	// Only ASCII letters fold: Unicode's folding maps the Kelvin sign (K)
	// and the long s (ſ) onto k and s, and a gone address spelled with them
	// would list another, real mailbox (found in review).
	for _, pair := range [][2]string{{"\u212Aate@example.com", "kate@example.com"}, {"bo\u017F@example.com", "bos@example.com"}} {
		if suppress.Hash("email", pair[0]) == suppress.Hash("email", pair[1]) {
			t.Errorf("%q and %q, two mailboxes, one hash", pair[0], pair[1])
		}
	}
	if suppress.Hash("push", "AbCdEf0123456789") == suppress.Hash("push", "abcdef0123456789") {
		t.Error("a device token's case folded")
	}
	if suppress.Hash("push", "Bob@Example.com") == suppress.Hash("push", "bob@example.com") {
		t.Error("case folded off the email channel")
	}
	s := suppress.NewMemory(nil)
	ctx := context.Background()
	if err := s.Add(ctx, suppress.Entry{Channel: "email", Hash: suppress.Hash("email", "Bob@Example.com"), Provider: "smtp"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if removed, err := s.Remove(ctx, "email", suppress.Hash("email", "bob@example.com")); err != nil || !removed {
		t.Fatalf("remove in another case: %v, %v", removed, err)
	}
}
