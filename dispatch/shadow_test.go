package dispatch

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/notifier/notifier/globallimit"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
)

// TestShadowCapCountsWhatTheEnforcedCapDenies: "a shadow cap counts exactly
// the denials the enforced cap would have made on the same jobs, while all
// of them are sent". The same jobs (users, order, publish times) go to two
// channels of one fleet of two dispatchers: push under a cap enforced with
// on_exceed drop, sms under the same cap in shadow mode. For every
// algorithm, every sms job is sent once; the shadow denials, per user (top
// --shadow) and in total (the metric's shadow_deny), are exactly the push
// jobs the enforced cap suppressed.
func TestShadowCapCountsWhatTheEnforcedCapDenies(t *testing.T) {
	group(t)
	for _, alg := range []userlimit.Algorithm{userlimit.SlidingLog, userlimit.SlidingWindow, userlimit.FixedWindow, userlimit.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			waits(t)
			b := setup(t, setupOpts{})
			// The longest window: no window boundary falls in the run, so
			// the two channels' decisions cannot differ by when they were
			// asked.
			rule := userlimit.Rule{Limit: 3, Window: userlimit.MaxWindow, Algorithm: alg, OnExceed: userlimit.Drop}
			shadow := rule
			shadow.Mode = userlimit.Shadow
			var jobs []*queue.Job
			var smsIDs []string
			perUser := []int{7, 5, 3, 2, 6, 1, 4, 8}
			for k := 0; k < 8; k++ { // interleaved: job k of every user, then job k+1
				for u, n := range perUser {
					if k >= n {
						continue
					}
					user := fmt.Sprintf("u%d", u)
					jobs = append(jobs, newJob(fmt.Sprintf("push-%s-%d", user, k), "push", user),
						newJob(fmt.Sprintf("sms-%s-%d", user, k), "sms", user))
					smsIDs = append(smsIDs, fmt.Sprintf("sms-%s-%d", user, k))
				}
			}
			var procs []*proc
			for range 2 {
				procs = append(procs, b.start(func(o *Options) {
					o.UserLimits = map[string]userlimit.Rule{"push": rule, "sms": shadow}
					o.Denials = limits.NewDenials(b.redis.Client(), b.prefix)
				}))
			}
			b.publish(jobs...)
			testenv.WaitFor(t, 30*time.Second, "every job handled", func() bool { return b.remaining() == 0 })
			testenv.WaitFor(t, 10*time.Second, "every sms job sent", func() bool {
				n := 0
				for _, r := range b.fake.Accepted() {
					if len(r.ID) > 4 && r.ID[:4] == "sms-" {
						n++
					}
				}
				return n >= len(smsIDs)
			})
			var suppressed, shadowDenied, userDenied float64
			for _, p := range procs {
				suppressed += p.count(p.d.m.Jobs.WithLabelValues("push", "push-gw", OutcomeSuppressed))
				shadowDenied += p.count(p.d.m.LimitDecisions.WithLabelValues(LayerUser, DecisionShadowDeny))
				userDenied += p.count(p.d.m.LimitDecisions.WithLabelValues(LayerUser, "deny"))
			}
			want := 0
			for _, n := range perUser {
				want += max(0, n-3)
			}
			if int(suppressed) != want || len(b.deadLetters()) != want {
				t.Fatalf("enforced cap: %v suppressed (%d dead letters), want %d", suppressed, len(b.deadLetters()), want)
			}
			if shadowDenied != suppressed || userDenied != suppressed {
				t.Errorf("shadow_deny %v and deny %v, want both %v (what the enforced cap suppressed)", shadowDenied, userDenied, suppressed)
			}
			for _, r := range b.fake.Requests() {
				if r.Status != http.StatusOK {
					t.Errorf("the provider answered %d to %s", r.Status, r.ID)
				}
			}
			b.acceptedOnceOf(smsIDs)
			den := limits.NewDenials(b.redis.Client(), b.prefix)
			enforced, err := den.Top(context.Background(), "push", time.Hour, 100)
			if err != nil {
				t.Fatal(err)
			}
			shadowed, err := den.TopShadow(context.Background(), "sms", time.Hour, 100)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(enforced, shadowed) || len(enforced) != 5 {
				t.Errorf("per user: the enforced cap denied %v, the shadow cap would have %v", enforced, shadowed)
			}
			if none, _ := den.TopShadow(context.Background(), "push", time.Hour, 100); len(none) != 0 {
				t.Errorf("shadow denials counted for the enforced cap: %v", none)
			}
		})
	}
}

// acceptedOnceOf checks that each of ids was accepted exactly once (the
// fake may have accepted other jobs too).
func (b *bundle) acceptedOnceOf(ids []string) {
	b.t.Helper()
	got := map[string]int{}
	for _, id := range b.fake.AcceptedIDs() {
		got[id]++
	}
	for _, id := range ids {
		if got[id] != 1 {
			b.t.Errorf("job %s accepted %d times, want once", id, got[id])
		}
	}
}

// TestShadowFleetRateCountsNeverHolds: global.shadow_rate is counted, never
// enforced. 100 jobs meet an enforced fleet bucket of 1000/s (burst 10)
// and a shadow rate of 2/s: every job is sent as fast as the enforced
// bucket lets it, and the shadow bucket refuses what it would not have
// granted: all but its burst of 10 and 2/s over the run (+ a lease).
func TestShadowFleetRateCountsNeverHolds(t *testing.T) {
	measures(t)
	b := setup(t, setupOpts{})
	ids := b.publishN("shadowg", "push", 100, 100)
	start := time.Now()
	p := b.start(func(o *Options) {
		o.Workers = 16
		o.Limits = redisLimits(t, b.redis.Client(), limits.Config{Prefix: b.prefix, DedupTTL: time.Hour,
			Global: &globallimit.Config{Rate: 1000, Burst: 10, ShadowRate: 2}})
	})
	testenv.WaitFor(t, 30*time.Second, "all 100 sent", func() bool { return len(b.fake.AcceptedIDs()) == 100 })
	elapsed := time.Since(start).Seconds() // the shadow was asked within it
	b.acceptedOnce(ids)
	denied := p.count(p.d.m.LimitDecisions.WithLabelValues(LayerGlobal, DecisionShadowDeny))
	granted := 100 - denied
	if most := 10 + 2*elapsed + 1; granted < 10 || granted > most {
		t.Errorf("the shadow bucket (2/s, burst 10) granted %v of 100 jobs over %.2f s, want from 10 to %.0f", granted, elapsed, most)
	}
	t.Logf("shadow 2/s: %v of 100 jobs would have waited; all sent within %.2f s", denied, elapsed)
}
