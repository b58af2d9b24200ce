package inspect_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/notifier/notifier/inspect"
	"github.com/notifier/notifier/leaky"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/digest"
	"github.com/notifier/notifier/limits/fleet"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
)

// setup is a fresh prefix on a private Redis and an Inspector reading it.
type setup struct {
	ctx    context.Context
	srv    *testenv.RedisServer
	prefix string
	cfg    inspect.Config
	in     *inspect.Inspector
}

func newSetup(t *testing.T, cfg inspect.Config) *setup {
	t.Helper()
	s := &setup{ctx: context.Background(), srv: testenv.Redis(t), prefix: newPrefix(t.Name())}
	cfg.Limits.Prefix, cfg.Limits.DedupTTL = s.prefix, time.Hour
	s.cfg = cfg
	var err error
	if s.in, err = inspect.New(s.srv.Client(), nil, cfg); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestUserAgreesWithTheCap: for every algorithm, a user under the cap is
// allowed with the window's count, one at the cap is not, until the
// instant Allow then also gives; asking changes nothing.
func TestUserAgreesWithTheCap(t *testing.T) {
	t.Parallel()
	for _, alg := range []userlimit.Algorithm{userlimit.SlidingLog, userlimit.SlidingWindow, userlimit.FixedWindow, userlimit.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			rule := userlimit.Rule{Limit: 3, Window: time.Hour, Algorithm: alg, OnExceed: userlimit.Defer}
			s := newSetup(t, inspect.Config{UserLimits: map[string]userlimit.Rule{"sms": rule}})
			users := userlimit.NewRedis(s.srv.Client(), s.prefix)
			key := userlimit.Key{Channel: "sms", User: "u42"}
			a, err := s.in.User(s.ctx, "sms", "u42")
			if err != nil || !a.Capped || !a.Allowed || a.Used != 0 || a.Remaining != 3 || !a.NextAllowed.Now {
				t.Fatalf("a new user: %+v, %v; want allowed, 0 used, 3 remaining, next now", a, err)
			}
			if a.Rule == nil || a.Rule.Limit != 3 || a.Rule.Algorithm != string(alg) || a.Rule.OnExceed != "defer" || a.Rule.WindowSeconds != 3600 {
				t.Fatalf("rule: %+v", a.Rule)
			}
			if _, err := users.Allow(s.ctx, key, "job-1", rule); err != nil {
				t.Fatal(err)
			}
			if a, err = s.in.User(s.ctx, "sms", "u42"); err != nil || !a.Allowed || a.Used != 1 || a.Remaining != 2 {
				t.Fatalf("after one send: %+v, %v; want 1 used, 2 remaining", a, err)
			}
			for _, job := range []string{"job-2", "job-3"} {
				if _, err := users.Allow(s.ctx, key, job, rule); err != nil {
					t.Fatal(err)
				}
			}
			for range 2 { // asked twice: the same answer (a peek counts nothing)
				if a, err = s.in.User(s.ctx, "sms", "u42"); err != nil || a.Allowed || a.Used != 3 || a.Remaining != 0 || a.NextAllowed.Now {
					t.Fatalf("at the cap: %+v, %v; want not allowed, 3 used", a, err)
				}
			}
			got, err := users.Allow(s.ctx, key, "job-4", rule)
			if err != nil || got.Allowed {
				t.Fatalf("allow at the cap: %+v, %v", got, err)
			}
			// The instant explain named is the one Allow names (to the
			// milliseconds between the two reads).
			want := a.At.Add(got.RetryAfter)
			if d := a.NextAllowed.At.Sub(want); d < -50*time.Millisecond || d > 50*time.Millisecond {
				t.Fatalf("next allowed %s, Allow's retry gives %s", a.NextAllowed.At, want)
			}
		})
	}
}

// TestUserWithoutCapAndBadQuestions: a channel without a cap allows
// everything; a bad channel or user is ErrInvalid.
func TestUserWithoutCapAndBadQuestions(t *testing.T) {
	t.Parallel()
	s := newSetup(t, inspect.Config{})
	a, err := s.in.User(s.ctx, "push", "u1")
	if err != nil || a.Capped || !a.Allowed || a.Rule != nil || !a.NextAllowed.Now {
		t.Fatalf("uncapped: %+v, %v", a, err)
	}
	for _, q := range [][2]string{{"fax", "u1"}, {"sms", ""}} {
		if _, err := s.in.User(s.ctx, q[0], q[1]); !errors.Is(err, inspect.ErrInvalid) {
			t.Errorf("user(%q, %q): %v, want ErrInvalid", q[0], q[1], err)
		}
	}
}

// TestDenialsReadWhatTopCounts: the denials explain reports are the ones
// the dispatcher counts for `notifier top` (limits.Denials), per user.
func TestDenialsReadWhatTopCounts(t *testing.T) {
	t.Parallel()
	s := newSetup(t, inspect.Config{})
	den := limits.NewDenials(s.srv.Client(), s.prefix)
	for _, u := range []string{"u42", "u42", "u42", "u7"} {
		if err := den.Record(s.ctx, "sms", u); err != nil {
			t.Fatal(err)
		}
	}
	a, err := s.in.User(s.ctx, "sms", "u42")
	if err != nil {
		t.Fatal(err)
	}
	if a.Denials.ThisHour != 3 || a.Denials.Last24h != 3 || len(a.Denials.ByHour) != 1 || a.Denials.ByHour[0].Denials != 3 {
		t.Fatalf("denials of u42: %+v, want 3 this hour", a.Denials)
	}
	top, err := den.Top(s.ctx, "sms", time.Hour, 1)
	if err != nil || len(top) != 1 || top[0].User != "u42" || top[0].Denials != a.Denials.ThisHour {
		t.Fatalf("top says %+v, %v; explain %d", top, err, a.Denials.ThisHour)
	}
	if b, err := s.in.User(s.ctx, "push", "u42"); err != nil || b.Denials.Last24h != 0 {
		t.Fatalf("another channel: %+v, %v", b.Denials, err)
	}
}

// TestProviderReadsQueuePauseFleet: the queue's depth and next slot as the
// dispatcher's queue reserved them, a pause with its reason, each
// instance's breaker and the tenants waiting from the heartbeats; an
// unknown provider is ErrUnknownProvider.
func TestProviderReadsQueuePauseFleet(t *testing.T) {
	t.Parallel()
	p := providers.Config{Name: "sms-gateway", Channel: "sms", Rate: 20, MaxQueueDelay: 2 * time.Second, JitterBudget: 10 * time.Millisecond}
	s := newSetup(t, inspect.Config{Providers: []providers.Config{p}})
	rdb := s.srv.Client()
	l, err := limits.Redis(rdb, s.cfg.Limits)
	if err != nil {
		t.Fatal(err)
	}
	c := limits.Contract(p)
	zero := time.Duration(0)
	c.ColdStart = &zero
	var last int64
	first := time.Now()
	for range 10 {
		r, err := l.Leaky.Reserve(s.ctx, p.Name, c, 1)
		if err != nil || !r.OK {
			t.Fatalf("reserve: %+v, %v", r, err)
		}
		last = r.Slot
	}
	asked := time.Now()
	a, err := s.in.Provider(s.ctx, "sms-gateway")
	took := time.Since(asked)
	if err != nil {
		t.Fatal(err)
	}
	if h := a.Contract.Headroom; h != c.Headroom || h == leaky.DefaultHeadroom {
		t.Fatalf("headroom %g, want the jitter budget's %g", h, c.Headroom)
	}
	if a.Contract.Burst != 40 || a.EffectiveRate != 20 || a.Pause != nil || a.Queue.Full {
		t.Fatalf("answer: %+v", a)
	}
	// Ten slots 50 ms apart from the first reservation on: the queue
	// drains one for each 50 ms that passed until explain read it.
	if least := 9 - time.Since(first).Seconds()*p.Rate; a.Queue.Depth < least || a.Queue.Depth > 10 {
		t.Fatalf("depth %g, want 10 less what %s at %g/s drained (at least %.2f)", a.Queue.Depth, time.Since(first), p.Rate, least)
	}
	// The next slot a reservation gets is the one explain named: never
	// before it (to the µs rounding), later by at most the gap between the
	// queue's read and the clock's that follows it: a round trip, within
	// the whole call (1.2 ms was seen on a loaded machine, 11 ms once in a
	// full run under -race; the bound is the call's own duration).
	r, err := l.Leaky.Reserve(s.ctx, p.Name, c, 1)
	if err != nil || !r.OK || r.Slot <= last {
		t.Fatalf("reserve: %+v, %v", r, err)
	}
	if d := a.NextFreeSlot.At.Sub(time.UnixMicro(r.Slot)); d < -time.Millisecond || d > max(5*time.Millisecond, took+time.Millisecond) {
		t.Fatalf("explain's next free slot %s, the reservation's %s (explain took %s)", a.NextFreeSlot.At, time.UnixMicro(r.Slot).UTC(), took)
	}

	// A pause for the credentials, and two instances' heartbeats.
	if err := l.Reasons.SetCredentials(s.ctx, p.Name, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Leaky.Pause(s.ctx, p.Name, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, inst := range []struct {
		id, breaker string
		queued      uint64
	}{{"i-1", "closed", 12}, {"i-2", "open", 15}} {
		info := fleet.InstanceInfo{Providers: map[string]fleet.ProviderActivity{p.Name: {Breaker: inst.breaker}},
			Channels: map[string]fleet.ChannelActivity{"sms": {Queued: map[string]uint64{"acme": inst.queued, "default": 1}}}}
		if _, err := fleet.NewHeartbeat(rdb, s.prefix, inst.id, func() fleet.InstanceInfo { return info }, log).Beat(s.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if a, err = s.in.Provider(s.ctx, "sms-gateway"); err != nil {
		t.Fatal(err)
	}
	if a.Pause == nil || a.Pause.Reason != fleet.PauseCredentials || a.Pause.ForSeconds <= 2.5 || a.NextFreeSlot.InSeconds < a.Pause.ForSeconds || !a.Queue.Full {
		t.Fatalf("paused: %+v pause %+v", a, a.Pause)
	}
	b, _ := json.Marshal(a.Breakers)
	if string(b) != `[{"instance":"i-1","state":"closed"},{"instance":"i-2","state":"open"}]` {
		t.Fatalf("breakers %s", b)
	}
	if w := a.TenantsWaiting; len(w) != 2 || w[0] != (inspect.TenantWaiting{Tenant: "acme", Queued: 15}) || w[1] != (inspect.TenantWaiting{Tenant: "default", Queued: 1}) {
		t.Fatalf("tenants waiting %+v", w)
	}
	if _, err := s.in.Provider(s.ctx, "nope"); !errors.Is(err, inspect.ErrUnknownProvider) {
		t.Fatalf("unknown provider: %v", err)
	}
}

// TestJobReadsTheLedger: a job's state as the ledger holds it, claimed,
// ended suppressed, sent, or unknown; a malformed id is ErrInvalid.
func TestJobReadsTheLedger(t *testing.T) {
	t.Parallel()
	s := newSetup(t, inspect.Config{})
	led := ledger.NewRedis(s.srv.Client(), s.prefix, time.Hour)
	if a, err := s.in.Job(s.ctx, "j-unknown"); err != nil || a.State != inspect.StateUnknown || a.Ledger.Found {
		t.Fatalf("unknown: %+v, %v", a, err)
	}
	if _, err := led.Claim(s.ctx, "j-1", "i-1/7", time.Minute); err != nil {
		t.Fatal(err)
	}
	a, err := s.in.Job(s.ctx, "j-1")
	if err != nil || a.State != inspect.StateSending || a.Ledger.LeaseOwner != "i-1/7" || a.Ledger.LeaseUntil == nil {
		t.Fatalf("claimed: %+v, %v", a, err)
	}
	if d := a.Ledger.LeaseUntil.Sub(a.At); d < 59*time.Second || d > time.Minute {
		t.Fatalf("lease until %s, read at %s", a.Ledger.LeaseUntil, a.At)
	}
	if _, err := led.Failed(s.ctx, "j-1", "i-1/7", "5xx"); err != nil {
		t.Fatal(err)
	}
	if a, err = s.in.Job(s.ctx, "j-1"); err != nil || a.State != inspect.StateWaiting || a.Ledger.Attempts != 1 || a.Ledger.LastError != "5xx" || a.Ledger.LeaseOwner != "" {
		t.Fatalf("after a failure: %+v, %v", a, err)
	}
	if _, err := led.Claim(s.ctx, "j-1", "i-1/8", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := led.Ended(s.ctx, "j-1", "i-1/8", ledger.EndSuppressed, ledger.ReasonUserLimit); err != nil {
		t.Fatal(err)
	}
	if a, err = s.in.Job(s.ctx, "j-1"); err != nil || a.State != inspect.StateSuppressed || a.Ledger.Reason != ledger.ReasonUserLimit {
		t.Fatalf("suppressed: %+v, %v", a, err)
	}
	if err := led.Sent(s.ctx, "j-2", ""); err != nil {
		t.Fatal(err)
	}
	if a, err = s.in.Job(s.ctx, "j-2"); err != nil || a.State != inspect.StateSent || !a.Ledger.Sent || a.Ledger.KeptForSeconds <= 3500 {
		t.Fatalf("sent: %+v, %v", a, err)
	}
	for _, id := range []string{"", "has space", string(make([]byte, 129))} {
		if _, err := s.in.Job(s.ctx, id); !errors.Is(err, inspect.ErrInvalid) {
			t.Errorf("job %q: %v, want ErrInvalid", id, err)
		}
	}
	// A job id is unique within its tenant: acme's j-2 is not the default
	// tenant's j-2 (sent above), and a bad tenant is ErrInvalid.
	if a, err = s.in.JobOf(s.ctx, "acme", "j-2"); err != nil || a.State != inspect.StateUnknown || a.Tenant != "acme" {
		t.Fatalf("acme's j-2: %+v, %v; want unknown", a, err)
	}
	if err := led.Sent(s.ctx, queue.MsgID("acme", "j-3"), ""); err != nil {
		t.Fatal(err)
	}
	if a, err = s.in.JobOf(s.ctx, "acme", "j-3"); err != nil || a.State != inspect.StateSent {
		t.Fatalf("acme's j-3: %+v, %v; want sent", a, err)
	}
	if a, err = s.in.Job(s.ctx, "j-3"); err != nil || a.State != inspect.StateUnknown {
		t.Fatalf("the default tenant's j-3: %+v, %v; want unknown", a, err)
	}
	if _, err := s.in.JobOf(s.ctx, "a b", "j-3"); !errors.Is(err, inspect.ErrInvalid) {
		t.Errorf("tenant %q: %v, want ErrInvalid", "a b", err)
	}
	// A digest job let past its cap is kept under its id alone, whatever
	// tenant it names (SPEC §4): asked with its tenant, it is found there.
	const d = "digest-0123456789abcdef01234567"
	if err := led.Sent(s.ctx, d, ""); err != nil {
		t.Fatal(err)
	}
	if a, err = s.in.JobOf(s.ctx, "acme", d); err != nil || a.State != inspect.StateSent {
		t.Fatalf("acme's digest: %+v, %v; want sent", a, err)
	}
}

// TestUserInCategory: a category with a cap of its own is answered with
// that cap and its own count (under the key the dispatcher counts it,
// limits.Caps.CapFor), the channel's category with the channel's cap; a
// channel whose category is marketing answers for marketing by default.
func TestUserInCategory(t *testing.T) {
	t.Parallel()
	chanRule := userlimit.Rule{Limit: 5, Window: time.Hour}
	mktRule := userlimit.Rule{Limit: 1, Window: 24 * time.Hour}
	caps := limits.Caps{
		Channels:   map[string]userlimit.Rule{"sms": chanRule},
		Categories: map[limits.CategoryCap]userlimit.Rule{{Channel: "sms", Category: queue.Marketing}: mktRule},
		Defaults:   map[string]queue.Category{"email": queue.Marketing},
	}
	s := newSetup(t, inspect.Config{UserLimits: caps.Channels, CategoryLimits: caps.Categories, Categories: caps.Defaults})
	users := userlimit.NewRedis(s.srv.Client(), s.prefix)
	rule, _, key := caps.CapFor("sms", queue.Marketing, "u42")
	if _, err := users.Allow(s.ctx, key, "promo-1", rule.WithDefaults()); err != nil {
		t.Fatal(err)
	}
	a, err := s.in.UserIn(s.ctx, "sms", queue.Marketing, "u42")
	if err != nil || a.Category != "marketing" || a.Rule == nil || a.Rule.Limit != 1 || a.Allowed || a.Used != 1 {
		t.Fatalf("marketing: %+v %v; want its own cap of 1, used up", a, err)
	}
	if a, err = s.in.User(s.ctx, "sms", "u42"); err != nil || a.Category != "transactional" || a.Rule.Limit != 5 || a.Used != 0 || !a.Allowed {
		t.Fatalf("the channel's category: %+v %v; want the channel's cap of 5, unused", a, err)
	}
	if a, err = s.in.User(s.ctx, "email", "u42"); err != nil || a.Category != "marketing" || a.Capped {
		t.Fatalf("email (marketing by default, no cap): %+v %v", a, err)
	}
	if _, err := s.in.UserIn(s.ctx, "sms", "promo", "u42"); !errors.Is(err, inspect.ErrInvalid) {
		t.Fatalf("a bad category: %v, want ErrInvalid", err)
	}
}

// TestUserWithHeldJobs: with on_exceed: digest, explain says how many of
// the user's jobs are held for the next digest and when it is due (the
// cap's next allowed instant); with none held, neither.
func TestUserWithHeldJobs(t *testing.T) {
	t.Parallel()
	rule := userlimit.Rule{Limit: 1, Window: time.Hour, OnExceed: userlimit.Digest}
	s := newSetup(t, inspect.Config{UserLimits: map[string]userlimit.Rule{"push": rule}})
	if a, err := s.in.User(s.ctx, "push", "u7"); err != nil || a.Held != 0 || a.DigestDue != nil || a.Rule.OnExceed != "digest" {
		t.Fatalf("nothing held: %+v, %v", a, err)
	}
	users := userlimit.NewRedis(s.srv.Client(), s.prefix)
	if r, err := users.Allow(s.ctx, userlimit.Key{Channel: "push", User: "u7"}, "j-0", rule.WithDefaults()); err != nil || !r.Allowed {
		t.Fatalf("the window's job: %+v, %v", r, err)
	}
	store := digest.NewRedis(s.srv.Client(), s.prefix)
	for _, id := range []string{"j-1", "j-2", "j-3"} {
		if _, _, err := store.Hold(s.ctx, digest.KeyOf("push", "", "u7"), id, time.Time{}, 2*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	a, err := s.in.User(s.ctx, "push", "u7")
	if err != nil || a.Held != 3 || a.DigestDue == nil || *a.DigestDue != a.NextAllowed || a.NextAllowed.Now {
		t.Fatalf("3 held: %+v, %v; want held 3, the digest due when the next job is allowed", a, err)
	}
}
