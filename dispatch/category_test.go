package dispatch

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
)

// configs is a Registry of configurations only, for the scheduler's unit
// tests (they never call a provider).
type configs []providers.Config

func (c configs) Get(name string) (providers.Provider, providers.Config, bool) {
	for _, p := range c {
		if p.Name == name {
			return nil, p, true
		}
	}
	return nil, providers.Config{}, false
}

func (c configs) Default(ch string) (providers.Provider, providers.Config, bool) {
	for _, p := range c {
		if p.Channel == ch {
			return nil, p, true
		}
	}
	return nil, providers.Config{}, false
}

func (c configs) All() []providers.Config { return c }

// wantsOf sums a plan by subject.
func wantsOf(ws []queue.Want) map[string]int {
	out := map[string]int{}
	for _, w := range ws {
		out[w.Subject] += w.N
	}
	return out
}

// TestPlanKeepsTheReserveForTransactional: the fetch loop's plan for a
// channel whose provider reserves 30 % for transactional jobs (budget 26 at
// 100/s): marketing alone takes the whole budget; transactional jobs go
// first whenever they wait; and while they wait but cannot be had (their
// queue delivered less than asked: another process holds them), marketing
// takes no more than 70 % of the budget (18 jobs) in all.
func TestPlanKeepsTheReserveForTransactional(t *testing.T) {
	t.Parallel()
	reg := configs{{Name: "sms-gw", Channel: "sms", Rate: 100, Reserve: map[string]float64{"transactional": 0.3}}}
	d := wire(Options{})
	d.live.Store(&liveConfig{providers: reg, breakers: map[string]*breaker{}})
	const mkt, trx = "notify.jobs.sms.marketing", "notify.jobs.sms"
	mq := queue.Queue{Subject: mkt, Key: queue.Key{Channel: "sms", Category: queue.Marketing}, Stored: 1000}
	tq := func(stored uint64) queue.Queue {
		return queue.Queue{Subject: trx, Key: queue.Key{Channel: "sms"}, Stored: stored}
	}
	hold := func(marketing, transactional int) {
		d.fetch.busy.add("sms", marketing+transactional)
		d.fetch.busy.add("sms"+marketingSuffix, marketing)
	}
	if b := d.fetch.budget("sms", d.live.Load(), nil, 1); b != 26 || marketingCap(b, 0.3) != 18 {
		t.Fatalf("budget %d, marketing cap %d: want 26 and 18", b, marketingCap(b, 0.3))
	}
	s := newScheduler(func(string) float64 { return 1 })

	// Marketing alone: everything.
	s.queues = []queue.Queue{mq}
	if got := wantsOf(d.fetch.plan(s, 100)); got[mkt] != 26 {
		t.Fatalf("marketing alone: plan %v, want 26 marketing jobs (the whole budget)", got)
	}
	hold(26, 0)

	// 40 transactional jobs come; 10 marketing jobs finish: the 10 freed go
	// to transactional jobs.
	s.queues = []queue.Queue{tq(40), mq}
	hold(-10, 0)
	if got := wantsOf(d.fetch.plan(s, 100)); got[trx] != 10 || got[mkt] != 0 {
		t.Fatalf("transactional waiting: plan %v, want the 10 free to transactional jobs", got)
	}

	// 25 of the transactional jobs are held elsewhere: this process gets
	// none (its pull comes back short) though they still wait. 16
	// marketing held, 10 free: marketing may take 2 (18 in all), no more.
	hold(0, 0)
	s.short[trx] = true
	if got := wantsOf(d.fetch.plan(s, 100)); got[mkt] != 2 || got[trx] != 0 {
		t.Fatalf("transactional waiting, none to be had: plan %v, want 2 marketing (70 %% of 26 = 18 held)", got)
	}

	// No transactional job waits (the stream holds only what is under
	// way here): marketing takes everything again.
	clear(s.short)
	s.queues = []queue.Queue{tq(0), mq}
	if got := wantsOf(d.fetch.plan(s, 100)); got[mkt] != 10 {
		t.Fatalf("no transactional job waiting: plan %v, want the 10 free to marketing", got)
	}

	// Without a reserve, marketing waits behind transactional jobs only.
	d.live.Store(&liveConfig{providers: configs{{Name: "sms-gw", Channel: "sms", Rate: 100}}, breakers: map[string]*breaker{}})
	s.queues = []queue.Queue{tq(40), mq}
	s.short[trx] = true
	if got := wantsOf(d.fetch.plan(s, 100)); got[mkt] != 10 {
		t.Fatalf("no reserve: plan %v, want the 10 free to marketing", got)
	}
}

// TestPlanCategoryOfTheNormalLane: a channel whose category is marketing
// (categories.email: marketing) has its normal lane scheduled as
// marketing, behind its transactional lane.
func TestPlanCategoryOfTheNormalLane(t *testing.T) {
	t.Parallel()
	reg := configs{{Name: "email-gw", Channel: "email", Rate: 100, Reserve: map[string]float64{"transactional": 0.5}}}
	d := wire(Options{})
	d.live.Store(&liveConfig{caps: limits.Caps{Defaults: map[string]queue.Category{"email": queue.Marketing}}, providers: reg, breakers: map[string]*breaker{}})
	s := newScheduler(func(string) float64 { return 1 })
	s.queues = []queue.Queue{
		{Subject: "notify.jobs.email", Key: queue.Key{Channel: "email"}, Stored: 1000},
		{Subject: "notify.jobs.email.transactional", Key: queue.Key{Channel: "email", Category: queue.Transactional}, Stored: 5},
	}
	got := wantsOf(d.fetch.plan(s, 100))
	if got["notify.jobs.email.transactional"] != 5 || got["notify.jobs.email"] != 13 {
		t.Fatalf("plan %v, want the 5 transactional jobs, then marketing up to half the budget of 26 (13), the rest kept", got)
	}
}

// TestCategoryCaps: a category's own cap (user_limits.sms.marketing) caps
// that category's jobs instead of the channel's, counted apart; a channel
// whose category is marketing (categories.push) caps its unnamed jobs as
// marketing; a job naming a category other than its channel's on the
// normal lane is dead-lettered as invalid, naming the subject to use.
func TestCategoryCaps(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	for i := range 3 {
		m := newJob(fmt.Sprintf("sms-mkt-%d", i), "sms", "u1")
		m.Category = queue.Marketing
		b.publish(m, newJob(fmt.Sprintf("sms-trx-%d", i), "sms", "u1"), newJob(fmt.Sprintf("push-%d", i), "push", "u1"))
	}
	bad := newJob("sms-misrouted", "sms", "u2")
	bad.Category = queue.Marketing
	data, err := bad.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pub.PublishRaw(t.Context(), "notify.jobs.sms", data, bad.ID); err != nil {
		t.Fatal(err)
	}
	ok := newJob("sms-named-own", "sms", "u2")
	ok.Category = queue.Transactional
	data, _ = ok.Marshal()
	if _, err := b.pub.PublishRaw(t.Context(), "notify.jobs.sms", data, ok.ID); err != nil {
		t.Fatal(err)
	}
	b.start(func(o *Options) {
		o.UserLimits = map[string]userlimit.Rule{
			"sms":  {Limit: 5, Window: time.Hour, OnExceed: userlimit.Drop},
			"push": {Limit: 5, Window: time.Hour, OnExceed: userlimit.Drop},
		}
		o.CategoryLimits = map[limits.CategoryCap]userlimit.Rule{
			{Channel: "sms", Category: queue.Marketing}:  {Limit: 1, Window: time.Hour, OnExceed: userlimit.Drop},
			{Channel: "push", Category: queue.Marketing}: {Limit: 2, Window: time.Hour, OnExceed: userlimit.Drop},
		}
		o.Categories = map[string]queue.Category{"push": queue.Marketing}
	})
	testenv.WaitFor(t, 20*time.Second, "every job handled", func() bool { return b.remaining() == 0 })
	// Which of a user's jobs over a cap is refused depends on which worker
	// asks first; how many is the promise.
	sent := map[string]int{}
	got := b.fake.AcceptedIDs()
	for _, id := range got {
		sent[strings.TrimRight(id, "0123456789")]++
	}
	want := map[string]int{"push-": 2, "sms-mkt-": 1, "sms-trx-": 3, "sms-named-own": 1}
	if !maps.Equal(sent, want) {
		t.Errorf("sent %v (%v), want %v (marketing SMS capped at 1, push as marketing at 2, transactional SMS at 5)", sent, got, want)
	}
	reasons := map[string]int{}
	for _, dl := range b.deadLetters() {
		reasons[dl.Reason]++
		if dl.Reason == ledger.ReasonInvalid && !strings.Contains(dl.Detail, "publish on notify.jobs.sms.marketing") {
			t.Errorf("the misrouted job's detail %q does not name its subject", dl.Detail)
		}
	}
	if reasons[ledger.ReasonUserLimit] != 3 || reasons[ledger.ReasonInvalid] != 1 {
		t.Errorf("dead letters by reason %v, want 3 user_limit (2 marketing SMS, 1 push) and 1 invalid", reasons)
	}
}

// TestReserveUnderMarketingBacklog: "the reserved share holds under a
// marketing backlog". An SMS gateway of 100/s reserves 30 % for
// transactional jobs; 1,500 marketing SMS wait (15 s of it); two
// dispatchers of 16 workers. Alone, marketing takes the whole contract.
// Then one-time codes come at 50/s for 3 s: each reaches the provider
// within max_queue_delay (3 s) of its publish, within 1 s at p95; the
// contract is used in full meanwhile, marketing taking at most 70 % of it.
// "The whole contract" and "in full" are measured against a reference in
// the same run: 300 transactional SMS alone, first, on the same
// dispatchers (referenceRate). It measures alone: beside two other tests
// that measure (and cli's), CI's run held the reference and marketing alone
// at 98/s but the mixed phase at 0.70 of it, codes' p95 at 1.28 s — a bound
// on absolute latency needs the machine it was sized on.
func TestReserveUnderMarketingBacklog(t *testing.T) {
	measuresAlone(t)
	w := newIsolation(t, 100, 250)
	w.pcfgs[0].Reserve = map[string]float64{"transactional": 0.3}
	w.procs(2, 16)
	w.warm()
	_, ref := w.referenceRate(w.fake, "ref", "sms", 300)
	batch := w.pub.NewBatch(256, 10*time.Second)
	for i := range 1500 {
		j := newJob(fmt.Sprintf("mkt-%d", i), "sms", fmt.Sprintf("mkt-u%d", i))
		j.Category = queue.Marketing
		if err := batch.Publish(t.Context(), j, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := batch.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	alone, _ := rateOf(w.fake, time.Now().Add(-1500*time.Millisecond), time.Now())
	waits, last := w.waits("every code sent", w.pace("otp", "", 150, 20*time.Millisecond, false))
	p95 := waits[len(waits)*95/100]
	var first time.Time
	mkt, otp := 0, 0
	for _, r := range w.fake.Accepted() {
		if strings.HasPrefix(r.ID, "otp-") && (first.IsZero() || r.At.Before(first)) {
			first = r.At
		}
	}
	for _, r := range w.fake.Accepted() {
		if r.At.Before(first) || r.At.After(last) {
			continue
		}
		if strings.HasPrefix(r.ID, "mkt-") {
			mkt++
		} else if strings.HasPrefix(r.ID, "otp-") {
			otp++
		}
	}
	rate := float64(mkt+otp-1) / last.Sub(first).Seconds()
	share := float64(mkt) / float64(mkt+otp)
	t.Logf("reference (transactional alone) %.1f/s; marketing alone at %.1f/s (%.2f of it); with codes at 50/s: codes p95 %s, max %s from publish; provider at %.1f/s (%.2f of the reference), marketing %.0f %% (%d of %d sends)",
		ref, alone, alone/ref, p95.Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond), rate, rate/ref, 100*share, mkt, mkt+otp)
	if alone < 0.9*ref {
		t.Errorf("marketing alone ran at %.1f/s, want at least 90 %% of the %.1f/s transactional jobs reach alone (it takes everything when no transactional job waits)", alone, ref)
	}
	if worst := waits[len(waits)-1]; worst > 3*time.Second {
		t.Errorf("a code waited %s, want at most max_queue_delay (3 s)", worst.Round(time.Millisecond))
	}
	if p95 > time.Second {
		t.Errorf("codes' p95 %s, want at most 1 s", p95.Round(time.Millisecond))
	}
	if rate < 0.9*ref {
		t.Errorf("the provider ran at %.1f/s while codes waited, want at least 90 %% of the %.1f/s transactional jobs reach alone (the contract in full)", rate, ref)
	}
	if ref < 50 {
		t.Errorf("the reference ran at %.1f/s of a 100/s contract: the dispatchers are broken, not the machine slow", ref)
	}
	if share > 0.7+0.05 {
		t.Errorf("marketing had %.0f %% of the sends while codes waited, want at most 70 %% (+5 points)", 100*share)
	}
	arrivalsPaced(t, "sms-gw", w.fake, 100)
}
