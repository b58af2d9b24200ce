package dispatch

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
)

// TestReloadChangesContractsAndCaps: a running dispatcher takes a new
// contract, a new per-user cap and a fleet bucket from Reload, without a
// restart and without dropping a job.
func TestReloadChangesContractsAndCaps(t *testing.T) {
	measures(t)
	b := setup(t, setupOpts{rate: 20, maxQueueDelay: time.Second})
	ids := b.publishN("rl", "sms", 200, 200)
	p := b.start(func(o *Options) {
		o.UserLimits = map[string]userlimit.Rule{"push": userlimit.Rule{Limit: 1, Window: time.Hour, OnExceed: userlimit.Drop}.WithDefaults()}
	})
	testenv.WaitFor(t, 30*time.Second, "40 sent at the old contract", func() bool { return len(b.fake.AcceptedIDs()) >= 40 })
	before := b.fake.MaxInWindow(time.Second)

	cfgs := make([]providers.Config, len(b.pcfgs))
	copy(cfgs, b.pcfgs)
	for i := range cfgs {
		cfgs[i].Rate = 60
	}
	reg, err := providers.NewRegistry(cfgs, providers.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	err = p.d.Reload(Reload{
		UserLimits: map[string]userlimit.Rule{"push": userlimit.Rule{Limit: 3, Window: time.Hour, OnExceed: userlimit.Drop}.WithDefaults()},
		Providers:  reg,
		Global:     &globallimit.Config{Rate: 1000, Burst: 10},
	})
	if err != nil {
		t.Fatal(err)
	}
	reloaded := time.Now()
	testenv.WaitFor(t, 30*time.Second, "all 200 sent", func() bool { return len(b.fake.AcceptedIDs()) >= 200 })
	b.acceptedOnce(ids)
	var after int
	for _, r := range b.fake.Accepted() {
		if r.At.After(reloaded.Add(1500 * time.Millisecond)) {
			after++
		}
	}
	if before > 20 {
		t.Fatalf("before the reload: %d in a 1 s window, contract 20", before)
	}
	if most := b.fake.MaxInWindow(time.Second); most < 40 || most > 60 {
		t.Fatalf("after the reload: most %d in a 1 s window, want near the new contract 60", most)
	}
	if got := p.count(p.d.m.Contract.WithLabelValues("sms-gw")); got != 60 {
		t.Fatalf("notifier_provider_contract = %v, want 60", got)
	}
	// The new cap: 3 per user instead of 1.
	var jobs []*queue.Job
	for i := 0; i < 5; i++ {
		jobs = append(jobs, newJob(fmt.Sprintf("rp-%d", i), "push", "dora"))
	}
	b.publish(jobs...)
	testenv.WaitFor(t, 20*time.Second, "the push jobs handled", func() bool { return b.remaining() == 0 })
	if n := len(b.fake.AcceptedIDs()); n != 203 {
		t.Fatalf("accepted %d, want 200 + 3 under the reloaded cap", n)
	}
	if l := p.d.be.currentLimits(); l.Bucket() == nil {
		t.Fatal("the fleet bucket was not switched on by the reload")
	}
	t.Logf("most in 1 s: %d before the reload (contract 20), %d after (60); %d sent after it", before, b.fake.MaxInWindow(time.Second), after)
}

func TestNewAndReloadRefuseInvalidCaps(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	bad := map[string]userlimit.Rule{"sms": {Limit: 500_000, Window: time.Hour, Algorithm: userlimit.SlidingLog}}
	_, err := New(Options{Source: nil})
	if err == nil {
		t.Fatal("New without a source succeeded")
	}
	p := b.start(nil)
	reg, err := providers.NewRegistry(b.pcfgs, providers.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	if err := p.d.Reload(Reload{UserLimits: bad, Providers: reg}); err == nil {
		t.Fatal("a reload with a sliding_log limit of 500000 was taken")
	}
	o := p.d.o
	o.UserLimits = bad
	if _, err := New(o); err == nil || !strings.Contains(err.Error(), "user limit sms: limit: 500000") {
		t.Fatalf("New with an invalid cap: %v", err)
	}
}
