package dispatch

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/limits/fleet"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/testenv"
)

// The provider answers of issue 17 end to end: the real kinds against
// fakes that answer as the providers document, through the whole
// dispatcher.

// TestCredentialRotationGoneWrong: Twilio answers 401 (error 20003) to
// every request for 10 s, as after a bad key rotation. No job is
// dead-lettered: the provider is paused fleet-wide for its credentials,
// the jobs wait in JetStream, a handful of sends at most reach Twilio
// meanwhile, and the reload that follows the fix lifts the pause: every
// job is then sent, once.
func TestCredentialRotationGoneWrong(t *testing.T) {
	waits(t)
	tw := testenv.FakeTwilio(t)
	b := setup(t, setupOpts{
		extra: []providers.Config{{Name: "tw", Channel: "sms", Kind: "twilio", URL: tw.URL(), AccountSID: tw.AccountSID(),
			From: "+15005550006", CredentialsEnv: "TW_TOKEN", Rate: 50, MaxQueueDelay: time.Second, Timeout: 2 * time.Second}},
		getenv: envOf(map[string]string{"TW_TOKEN": tw.AuthToken()}),
	})
	p := b.start(func(o *Options) {
		closeRegistry(t)(o)
		o.Retry.MaxAttempts = 2 // a refusal counted as a failure would dead-letter at once
	})
	broken := time.Now()
	tw.FailFor(10*time.Second, 401)
	jobs, ids := kindJobs("rot", "sms", "tw", 30, func(i int) string { return fmt.Sprintf("+4477009%05d", i) })
	b.publish(jobs...)
	testenv.WaitFor(t, 10*time.Second, "the credentials pause", func() bool {
		return p.count(p.d.m.ProviderPaused.WithLabelValues("tw", fleet.PauseCredentials)) == 1
	})
	if !strings.Contains(b.logs.String(), `"level":"ERROR"`) || !strings.Contains(b.logs.String(), "20003") {
		t.Errorf("no error line naming Twilio's 20003")
	}
	time.Sleep(time.Until(broken.Add(10 * time.Second)))
	if n := len(tw.Messages()); n != 0 {
		t.Fatalf("%d messages accepted while the credentials were refused", n)
	}
	if n := tw.Count(401); n == 0 || n > 10 {
		t.Errorf("%d requests refused with 401: want a few (the sends under way at the first refusal), not the backlog", n)
	}
	if dl := b.deadLetters(); len(dl) != 0 {
		t.Fatalf("%d dead letters (first: %s %s): a refused sender must not dead-letter its jobs", len(dl), dl[0].Reason, dl[0].Detail)
	}
	// The fix is deployed and the configuration reloaded.
	if err := p.d.Reload(Reload{Providers: p.d.Providers()}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "every job at Twilio after the reload", func() bool { return len(tw.Messages()) >= len(ids) })
	var bodies []string
	for _, m := range tw.Messages() {
		bodies = append(bodies, strings.TrimPrefix(m.Body, "code for "))
	}
	exactlyOnce(t, "twilio", bodies, ids)
	if dl := b.deadLetters(); len(dl) != 0 {
		t.Errorf("dead letters after the recovery: %v", dl)
	}
}

// TestAmbiguousTimeout: Twilio takes a message and never answers (the
// request timed out after it was written whole). The request is counted
// as ambiguous; by default the job is retried, which Twilio, having no
// idempotency key, delivers a second time: that is the documented window.
// With retry_on_timeout: false it is not retried: it is dead-lettered with
// reason ambiguous, and Twilio holds it once.
func TestAmbiguousTimeout(t *testing.T) {
	waits(t)
	retrying, strict := testenv.FakeTwilio(t), testenv.FakeTwilio(t)
	no := false
	tw := func(name string, f *testenv.TwilioFake, env string) providers.Config {
		return providers.Config{Name: name, Channel: "sms", Kind: "twilio", URL: f.URL(), AccountSID: f.AccountSID(),
			From: "+15005550006", CredentialsEnv: env, Rate: 50, MaxQueueDelay: time.Second, Timeout: 500 * time.Millisecond}
	}
	strictCfg := tw("tw-strict", strict, "STRICT_TOKEN")
	strictCfg.RetryOnTimeout = &no
	b := setup(t, setupOpts{
		extra:  []providers.Config{tw("tw", retrying, "TW_TOKEN"), strictCfg},
		getenv: envOf(map[string]string{"TW_TOKEN": retrying.AuthToken(), "STRICT_TOKEN": strict.AuthToken()}),
	})
	p := b.start(closeRegistry(t))
	// Warm both queues (a fresh queue's first slot is max_queue_delay
	// away), so the jobs below are sent at once, inside the hang.
	w1, _ := kindJobs("warm-tw", "sms", "tw", 1, func(int) string { return "+447700900000" })
	w2, _ := kindJobs("warm-strict", "sms", "tw-strict", 1, func(int) string { return "+447700900000" })
	b.publish(w1[0], w2[0])
	testenv.WaitFor(t, 20*time.Second, "the warm-up jobs", func() bool { return len(retrying.Messages()) == 1 && len(strict.Messages()) == 1 })
	retrying.AcceptThenHang(400 * time.Millisecond)
	strict.AcceptThenHang(400 * time.Millisecond)
	j1, _ := kindJobs("amb", "sms", "tw", 1, func(int) string { return "+447700900001" })
	j2, _ := kindJobs("strict", "sms", "tw-strict", 1, func(int) string { return "+447700900002" })
	b.publish(j1[0], j2[0])
	testenv.WaitFor(t, 20*time.Second, "the retried job accepted twice (beside the warm-up)", func() bool { return len(retrying.Messages()) == 3 })
	testenv.WaitFor(t, 20*time.Second, "the strict job dead-lettered", func() bool { return len(b.deadLetters()) == 1 })
	dl := b.deadLetters()[0]
	if dl.Reason != ledger.ReasonAmbiguous || !strings.Contains(string(dl.Data), `"strict-0"`) {
		t.Errorf("dead letter %s %q %s, want strict-0 with reason ambiguous", dl.Subject, dl.Reason, dl.Data)
	}
	time.Sleep(time.Second) // no retry of the strict job follows
	if n := len(strict.Messages()); n != 2 {
		t.Errorf("the strict provider holds %d messages, want 2 (the warm-up, and the job once: no retry after the timeout)", n)
	}
	for name, want := range map[string]float64{"tw": 1, "tw-strict": 1} {
		if got := p.count(p.d.m.Ambiguous.WithLabelValues(name)); got != want {
			t.Errorf("notifier_provider_ambiguous_total{%s} = %v, want %v", name, got, want)
		}
	}
}

// TestAPNsDeviceThrottleDefersThatDeviceAlone: APNs answers 429
// TooManyRequests for one device token (too many pushes to it). That
// device's push waits; the other devices' pushes go on at once, the
// provider is not paused, and nothing is dead-lettered.
func TestAPNsDeviceThrottleDefersThatDeviceAlone(t *testing.T) {
	waits(t)
	ios := testenv.FakeAPNs(t)
	b := setup(t, setupOpts{
		extra: []providers.Config{{Name: "ios", Channel: "push", Kind: "apns", URL: ios.URL(), TLSCAFile: ios.CAFile(),
			KeyFile: ios.KeyFile(), KeyID: ios.KeyID(), TeamID: ios.TeamID(), Topic: ios.Topic(),
			Rate: 50, MaxQueueDelay: time.Second, Timeout: 2 * time.Second}},
	})
	busy := strings.Repeat("ab", 32)
	ios.ThrottleDevice(busy)
	p := b.start(closeRegistry(t))
	jobs, ids := kindJobs("dev", "push", "ios", 20, func(i int) string {
		if i == 0 {
			return busy
		}
		return fmt.Sprintf("%064x", i)
	})
	b.publish(jobs...)
	testenv.WaitFor(t, 20*time.Second, "the other devices' pushes", func() bool { return len(ios.Notifications()) == len(ids)-1 })
	testenv.WaitFor(t, 10*time.Second, "the busy device deferred", func() bool {
		return p.count(p.d.m.Deferrals.WithLabelValues(LayerProvider, "recipient_throttled")) >= 1
	})
	for _, n := range ios.Notifications() {
		if n.Token == busy {
			t.Errorf("a push reached the throttled device")
		}
	}
	if v := p.count(p.d.m.ProviderPaused.WithLabelValues("ios", fleet.PauseRateLimited)); v != 0 {
		t.Errorf("APNs paused fleet-wide for one device's throttle")
	}
	if dl := b.deadLetters(); len(dl) != 0 {
		t.Errorf("dead letters %v", dl)
	}
}
