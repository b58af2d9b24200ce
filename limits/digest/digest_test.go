package digest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/notifier/notifier/limits/digest"
	"github.com/notifier/notifier/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// TestStoresAgree drives the Redis store and the Memory store with the
// same random steps (jobs held, with and without expiries, digests taken
// by a trigger the cap allowed now or seconds before, published, asked
// about) on one clock, and checks they answer alike, and what a digest
// promises: its members are the jobs held when the trigger was allowed,
// not expired, and the trigger, each in one digest only; a digest of the
// same members has the same id; fewer than two go alone; a job already in
// a digest is never held again. Their bounds are drawn small, so both are
// reached: past the most held a new job is refused (ErrTooManyHeld) on
// both; a membership carries the digest's first members only, and none
// once it is published; both count the held jobs alike after every step.
func TestStoresAgree(t *testing.T) {
	srv := testenv.Redis(t)
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		c := testenv.NewClock(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
		maxHeld, maxMembers := rapid.IntRange(1, 12).Draw(rt, "max_held"), rapid.IntRange(1, 6).Draw(rt, "max_members")
		red := digest.NewRedis(srv.Client(), fmt.Sprintf("p%d:", n)).WithNow(c.Now).WithLimits(maxHeld, maxMembers)
		mem := digest.NewMemory(c.Now).WithLimits(maxHeld, maxMembers)
		taken := map[string][]string{} // a digest's members, as Take said
		ctx := context.Background()
		keys := []digest.Key{digest.KeyOf("push", "", "u1"), digest.KeyOf("push", "", "u2")}
		inDigest := map[string]string{} // by key and job id (a job has one user)
		next := 0
		for range rapid.IntRange(1, 40).Draw(rt, "steps") {
			key := keys[rapid.IntRange(0, 1).Draw(rt, "user")]
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0, 1: // hold a new job, or one seen before
				id := fmt.Sprintf("j%d", next)
				if next > 0 && rapid.Bool().Draw(rt, "again") {
					id = fmt.Sprintf("j%d", rapid.IntRange(0, next-1).Draw(rt, "old"))
				} else {
					next++
				}
				var exp time.Time
				if rapid.Bool().Draw(rt, "expires") {
					exp = c.Now().Add(time.Duration(rapid.IntRange(1, 20).Draw(rt, "exp_s")) * time.Second)
				}
				hr, mr, err := red.Hold(ctx, key, id, exp, time.Hour)
				if err != nil && !errors.Is(err, digest.ErrTooManyHeld) {
					rt.Fatal(err)
				}
				hm, mm, merr := mem.Hold(ctx, key, id, exp, time.Hour)
				if hr != hm || !sameMembership(mr, mm) || errors.Is(err, digest.ErrTooManyHeld) != errors.Is(merr, digest.ErrTooManyHeld) {
					rt.Fatalf("hold %s: redis %d %+v %v, memory %d %+v %v", id, hr, mr, err, hm, mm, merr)
				}
				if err != nil && (hr != maxHeld || mr.Digest != "") {
					rt.Fatalf("hold %s refused with %d held (most %d), %+v", id, hr, maxHeld, mr)
				}
				if hr > maxHeld {
					rt.Fatalf("hold %s: %d held, most %d", id, hr, maxHeld)
				}
				checkMembers(rt, mr, taken, maxMembers)
				if d := inDigest[string(key)+id]; d != "" && mr.Digest != d {
					rt.Fatalf("%s went into %s, hold says %+v", id, d, mr)
				}
			case 2: // a trigger: a new job, or one seen before (taken meanwhile by another process)
				id := fmt.Sprintf("j%d", next)
				if next > 0 && rapid.IntRange(0, 2).Draw(rt, "old trigger") == 0 {
					id = fmt.Sprintf("j%d", rapid.IntRange(0, next-1).Draw(rt, "which"))
				} else {
					next++
				}
				var allowed time.Time // zero: now
				if rapid.Bool().Draw(rt, "allowed before") {
					allowed = c.Now().Add(-time.Duration(rapid.IntRange(0, 10).Draw(rt, "allowed_s_ago")) * time.Second)
				}
				tr, err := red.Take(ctx, key, id, time.Time{}, allowed, time.Hour)
				if err != nil {
					rt.Fatal(err)
				}
				tm, _ := mem.Take(ctx, key, id, time.Time{}, allowed, time.Hour)
				if tr.Digest != tm.Digest || !slices.Equal(tr.Members, tm.Members) {
					rt.Fatalf("take %s: redis %+v, memory %+v", id, tr, tm)
				}
				if tr.Already != tm.Already {
					rt.Fatalf("take %s: redis %+v, memory %+v", id, tr, tm)
				}
				if tr.Already {
					if d := inDigest[string(key)+id]; d != tr.Digest {
						rt.Fatalf("take %s: already in %s, it went into %q", id, tr.Digest, d)
					}
					continue
				}
				if tr.Digest == "" {
					continue
				}
				if len(tr.Members) < 2 || !slices.Contains(tr.Members, id) || !slices.IsSorted(tr.Members) || !strings.HasPrefix(tr.Digest, "digest-") {
					rt.Fatalf("digest %+v of trigger %s", tr, id)
				}
				for _, m := range tr.Members {
					if d := inDigest[string(key)+m]; d != "" {
						rt.Fatalf("%s is in two digests: %s and %s", m, d, tr.Digest)
					}
					inDigest[string(key)+m] = tr.Digest
				}
				taken[tr.Digest] = tr.Members
				if held, _ := red.Held(ctx, key); held != 0 && allowed.IsZero() {
					rt.Fatalf("%d held after the digest took them", held)
				}
				if rapid.Bool().Draw(rt, "publish") {
					if err := red.Publish(ctx, key, tr.Digest); err != nil {
						rt.Fatal(err)
					}
					_ = mem.Publish(ctx, key, tr.Digest)
				}
			case 3: // ask
				if next == 0 {
					continue
				}
				id := fmt.Sprintf("j%d", rapid.IntRange(0, next-1).Draw(rt, "ask"))
				mr, err := red.Of(ctx, key, id)
				if err != nil {
					rt.Fatal(err)
				}
				mm, _ := mem.Of(ctx, key, id)
				if !sameMembership(mr, mm) {
					rt.Fatalf("of %s: redis %+v, memory %+v", id, mr, mm)
				}
				checkMembers(rt, mr, taken, maxMembers)
			case 4:
				c.Advance(time.Duration(rapid.IntRange(1, 10).Draw(rt, "advance_s")) * time.Second)
			}
			hr, err := red.Held(ctx, key)
			if err != nil {
				rt.Fatal(err)
			}
			if hm, _ := mem.Held(ctx, key); hr != hm {
				rt.Fatalf("held: redis %d, memory %d", hr, hm)
			}
		}
	})
}

// TestDigestOfTheSameJobsIsTheSame: the digest's id is derived from its
// members: a store that lost the state and took the same jobs again (a
// crash between take and publish, on another store) names the same
// digest, which JetStream's duplicate window and the ledger then take as
// one.
func TestDigestOfTheSameJobsIsTheSame(t *testing.T) {
	ctx := context.Background()
	var ids []string
	for range 2 {
		m := digest.NewMemory(nil)
		k := digest.KeyOf("sms", "", "u")
		for _, id := range []string{"acme/j-3", "acme/j-1"} {
			if _, _, err := m.Hold(ctx, k, id, time.Time{}, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		tk, err := m.Take(ctx, k, "acme/j-2", time.Time{}, time.Time{}, time.Hour)
		if err != nil || len(tk.Members) != 3 {
			t.Fatalf("take: %+v, %v", tk, err)
		}
		ids = append(ids, tk.Digest)
	}
	if ids[0] != ids[1] {
		t.Fatalf("digests %v, want one id", ids)
	}
	if k1, k2 := digest.KeyOf("sms", "", "u"), digest.KeyOf("sms", "marketing", "u"); k1 == k2 || !hexKey(k1) || !hexKey(k2) {
		t.Fatalf("keys %s %s", k1, k2)
	}
}

// TestKeyNamesNoUser: a Key is 32 lower-case hex digits whatever the user
// id, so no user id reaches a Redis key.
func TestKeyNamesNoUser(t *testing.T) {
	for _, user := range []string{"u", "alice@example.com", "user 42 / ünïcode", strings.Repeat("x", 200), ""} {
		k := digest.KeyOf("push", "marketing", user)
		if !hexKey(k) || user != "" && strings.Contains(string(k), user) {
			t.Errorf("KeyOf(%q) = %q: want 32 hex digits", user, k)
		}
	}
}

// hexKey: k is 32 lower-case hex digits.
func hexKey(k digest.Key) bool {
	if len(k) != 32 {
		return false
	}
	for _, c := range k {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// TestJobsHeldAfterTheTriggerWait: a trigger takes only the jobs held when
// the cap allowed it. The jobs refused after it (because it took the cap)
// stay held for the next window's digest, so a user's first job goes
// alone, not as a digest of the jobs that came with it (TestDigestThroughAKill
// saw "a digest of 3" first). On both stores.
func TestJobsHeldAfterTheTriggerWait(t *testing.T) {
	srv := testenv.Redis(t)
	ctx := context.Background()
	c := testenv.NewClock(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	for name, s := range map[string]digest.Store{
		"redis":  digest.NewRedis(srv.Client(), "held:").WithNow(c.Now),
		"memory": digest.NewMemory(c.Now),
	} {
		k := digest.KeyOf("sms", "", "u")
		allowed := c.Now()
		c.Advance(time.Millisecond)
		for _, id := range []string{"j0", "j1"} { // refused after j2 was allowed
			if _, _, err := s.Hold(ctx, k, id, time.Time{}, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		tk, err := s.Take(ctx, k, "j2", time.Time{}, allowed, time.Hour)
		if err != nil || tk.Digest != "" {
			t.Fatalf("%s: the trigger allowed before the others were held: %+v, %v; want it alone", name, tk, err)
		}
		if held, _ := s.Held(ctx, k); held != 2 {
			t.Fatalf("%s: %d held after the trigger went alone, want 2", name, held)
		}
		// The next window: j0 comes back, is allowed, and takes j1 (held
		// before) with it; j0's hold is not renewed by a second refusal.
		c.Advance(10 * time.Second)
		if _, _, err := s.Hold(ctx, k, "j0", time.Time{}, time.Hour); err != nil {
			t.Fatal(err)
		}
		tk, err = s.Take(ctx, k, "j0", time.Time{}, c.Now().Add(-time.Second), time.Hour)
		if err != nil || !slices.Equal(tk.Members, []string{"j0", "j1"}) {
			t.Fatalf("%s: the next window's trigger: %+v, %v; want j0 and j1", name, tk, err)
		}
		c.Advance(time.Second)
	}
}

// checkMembers: m, a membership of a digest taken with members (taken),
// counts them all and lists the first max of them while pending, none once
// published.
func checkMembers(rt *rapid.T, m digest.Membership, taken map[string][]string, max int) {
	if m.Digest == "" {
		return
	}
	all := taken[m.Digest]
	want := all[:min(len(all), max)]
	if m.State == digest.Published {
		want = nil
	}
	if m.Count != len(all) || !slices.Equal(m.Members, want) {
		rt.Fatalf("membership %+v of a digest of %v (at most %d listed)", m, all, max)
	}
}

// sameMembership: a and b name the same digest, state, count and members.
func sameMembership(a, b digest.Membership) bool {
	return a.Digest == b.Digest && a.State == b.State && a.Count == b.Count && slices.Equal(a.Members, b.Members)
}

// TestBounds: on both stores with their real bounds, a user's held jobs
// stop at MaxHeld (the next new job is refused with ErrTooManyHeld, one
// held already is answered as before), and a digest of more than
// MaxMembers jobs counts them all, takes them all, and lists the first
// MaxMembers while pending, none once published.
func TestBounds(t *testing.T) {
	srv := testenv.Redis(t)
	ctx := context.Background()
	for name, s := range map[string]digest.Store{
		"redis":  digest.NewRedis(srv.Client(), "bounds:"),
		"memory": digest.NewMemory(nil),
	} {
		k := digest.KeyOf("push", "", "flooded")
		for i := range digest.MaxHeld {
			if held, _, err := s.Hold(ctx, k, fmt.Sprintf("j%05d", i), time.Time{}, time.Hour); err != nil || held != i+1 {
				t.Fatalf("%s: hold %d: %d held, %v", name, i, held, err)
			}
		}
		if held, m, err := s.Hold(ctx, k, "one-too-many", time.Time{}, time.Hour); !errors.Is(err, digest.ErrTooManyHeld) || held != digest.MaxHeld || m.Digest != "" {
			t.Fatalf("%s: hold past the bound: %d, %+v, %v; want ErrTooManyHeld", name, held, m, err)
		}
		if held, _, err := s.Hold(ctx, k, "j00007", time.Time{}, time.Hour); err != nil || held != digest.MaxHeld {
			t.Fatalf("%s: a held job again at the bound: %d, %v", name, held, err)
		}
		tk, err := s.Take(ctx, k, "trigger", time.Time{}, time.Time{}, time.Hour)
		if err != nil || len(tk.Members) != digest.MaxHeld+1 {
			t.Fatalf("%s: take: %d members, %v", name, len(tk.Members), err)
		}
		if held, _ := s.Held(ctx, k); held != 0 {
			t.Fatalf("%s: %d held after the take", name, held)
		}
		m, err := s.Of(ctx, k, "j09999")
		if err != nil || m.Count != digest.MaxHeld+1 || m.State != digest.Pending || !slices.Equal(m.Members, tk.Members[:digest.MaxMembers]) {
			t.Fatalf("%s: of a member: %s %d %d members, %v; want the first %d of %d", name, m.State, m.Count, len(m.Members), err, digest.MaxMembers, digest.MaxHeld+1)
		}
		if _, m, err := s.Hold(ctx, k, "j00001", time.Time{}, time.Hour); err != nil || m.Count != digest.MaxHeld+1 || len(m.Members) != digest.MaxMembers {
			t.Fatalf("%s: hold of a member: %+v, %v", name, m.Count, err)
		}
		if err := s.Publish(ctx, k, tk.Digest); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"j00001", "trigger"} {
			m, err := s.Of(ctx, k, id)
			if err != nil || m.State != digest.Published || m.Count != digest.MaxHeld+1 || m.Members != nil {
				t.Fatalf("%s: of %s once published: %s %d %d members, %v; want the count, no members", name, id, m.State, m.Count, len(m.Members), err)
			}
		}
		if m, ok, err := s.Digest(ctx, k, tk.Digest); err != nil || !ok || m.Count != digest.MaxHeld+1 || m.Members != nil {
			t.Fatalf("%s: digest once published: %+v, %v, %v", name, m.Count, ok, err)
		}
		if held, _, err := s.Hold(ctx, k, "one-too-many", time.Time{}, time.Hour); err != nil || held != 1 {
			t.Fatalf("%s: hold after the take: %d, %v", name, held, err)
		}
	}
}

// TestHashWithoutHeldCount: a user's hash written before the held count
// was kept (h: fields, no held field; D: as "<state> <count>") is counted
// once and then kept count of.
func TestHashWithoutHeldCount(t *testing.T) {
	srv := testenv.Redis(t)
	rdb := srv.Client()
	ctx := context.Background()
	s := digest.NewRedis(rdb, "old:")
	k := digest.KeyOf("sms", "", "u")
	hash := "{old:dg:" + string(k) + "}"
	if err := rdb.HSet(ctx, hash, "h:j1", "0 1", "h:j2", "0", "d:j0", "digest-x", "D:digest-x", "pending 2", "I:digest-x", "j0 j9").Err(); err != nil {
		t.Fatal(err)
	}
	if held, err := s.Held(ctx, k); err != nil || held != 2 {
		t.Fatalf("held: %d, %v; want 2", held, err)
	}
	if _, m, err := s.Hold(ctx, k, "j0", time.Time{}, time.Hour); err != nil || m.Digest != "digest-x" || m.Count != 2 || !slices.Equal(m.Members, []string{"j0", "j9"}) {
		t.Fatalf("hold of a member: %+v, %v", m, err)
	}
	if held, _, err := s.Hold(ctx, k, "j3", time.Time{}, time.Hour); err != nil || held != 3 {
		t.Fatalf("hold: %d, %v; want 3", held, err)
	}
	tk, err := s.Take(ctx, k, "j4", time.Time{}, time.Time{}, time.Hour)
	if err != nil || !slices.Equal(tk.Members, []string{"j1", "j2", "j3", "j4"}) {
		t.Fatalf("take: %+v, %v", tk, err)
	}
	if held, err := s.Held(ctx, k); err != nil || held != 0 {
		t.Fatalf("held after the take: %d, %v", held, err)
	}
}

// TestOldDigestsAreForgotten: a user who never pauses for a TTL keeps only
// the digests taken within a TTL: a take that finds jobs held drops the
// older ones, and which jobs went into them, on both stores alike. A
// digest written before its taken instant was kept gets one at the next
// take, and is kept a TTL from then.
func TestOldDigestsAreForgotten(t *testing.T) {
	srv := testenv.Redis(t)
	rdb := srv.Client()
	ctx := context.Background()
	c := testenv.NewClock(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	const ttl = time.Minute
	k := digest.KeyOf("push", "", "busy")
	hash := "{forget:dg:" + string(k) + "}"
	stores := []struct {
		name string
		s    digest.Store
	}{
		{"redis", digest.NewRedis(rdb, "forget:").WithNow(c.Now)},
		{"memory", digest.NewMemory(c.Now)},
	}
	take := func(trigger string, held ...string) string {
		t.Helper()
		var ds []string
		for _, st := range stores {
			for _, id := range held {
				if _, _, err := st.s.Hold(ctx, k, id, time.Time{}, ttl); err != nil {
					t.Fatal(err)
				}
			}
			tk, err := st.s.Take(ctx, k, trigger, time.Time{}, time.Time{}, ttl)
			if err != nil || tk.Digest == "" {
				t.Fatalf("%s: take %s: %+v, %v", st.name, trigger, tk, err)
			}
			ds = append(ds, tk.Digest)
		}
		return ds[0]
	}
	of := func(id, want string) {
		t.Helper()
		for _, st := range stores {
			if m, err := st.s.Of(ctx, k, id); err != nil || m.Digest != want {
				t.Errorf("%s: of %s: %q, %v; want %q", st.name, id, m.Digest, err, want)
			}
		}
	}
	d1 := take("c", "a", "b") // at 0 s
	c.Advance(30 * time.Second)
	d2 := take("r", "p", "q") // at 30 s
	c.Advance(20 * time.Second)
	d3 := take("y", "x") // at 50 s: nothing is old yet
	of("a", d1)
	// An old store's digest, its state and count only.
	if err := rdb.HSet(ctx, hash, "d:o1", "digest-old", "D:digest-old", "published 2").Err(); err != nil {
		t.Fatal(err)
	}
	c.Advance(11 * time.Second)
	take("z", "w") // at 61 s: d1, taken 61 s ago, goes; d2 and d3 stay
	of("a", "")
	of("c", "")
	of("p", d2)
	of("x", d3)
	if _, ok, _ := stores[0].s.Digest(ctx, k, d1); ok {
		t.Error("redis: the old digest is still known")
	}
	if st, err := rdb.HGet(ctx, hash, "D:digest-old").Result(); err != nil || len(strings.Fields(st)) != 3 {
		t.Errorf("the digest written without its instant: %q, %v; want one given", st, err)
	}
	c.Advance(30 * time.Second)
	take("v", "u") // at 91 s: d2 goes (and the old store's digest stays: its minute began at 61 s)
	of("p", "")
	of("x", d3)
	if d, _ := rdb.HGet(ctx, hash, "d:o1").Result(); d != "digest-old" {
		t.Errorf("the old store's digest went at once: %q", d)
	}
	fields, _ := rdb.HKeys(ctx, hash).Result()
	for _, f := range fields {
		if strings.Contains(f, d1) || strings.Contains(f, d2) || f == "d:a" || f == "d:p" {
			t.Errorf("field %s of a forgotten digest", f)
		}
	}
}
