package dispatch

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

// End-to-end tests of the real provider kinds (twilio, fcm, apns, smtp):
// jobs published to NATS go through the whole pipeline and arrive at the
// kind's testenv fake, paced at the configured contract, which the fake
// enforces too (it answers 429, or SMTP 451, over it).

// kindsContract is the contract of the pacing tests, in units per second.
const kindsContract = 20

// smtpJitterBudget is the SMTP provider's jitter_budget in these tests. A
// mail reaches the server's count at the end of DATA, after MAIL, RCPT and
// DATA round trips over TLS, so it arrives later after its slot, and less
// evenly, than an HTTP request: CI, under -race on a loaded machine, saw
// 21 arrivals in a window of 1 s − 15.2 ms (the default budget) and two
// 451s, the slots themselves paced. docs/providers.md advises a budget of
// the transaction's p99 for smtp; 50 ms paces at 95.2 % of the contract.
const smtpJitterBudget = 50 * time.Millisecond

// paced checks a kind's fake against a contract of perSecond: no window of
// 1 s − budget (the provider's jitter_budget) holds more of its arrivals
// (every send attempt it saw, refusals included: arrivalsPacedWithin), it refused (refused: its 429s, or
// SMTP 451s) at most max429s of the sends, and the contract was reached:
// between the first and the last accepted arrival, less the holds its
// refusals ordered (pausedByRefusals), the queue ran at 90 % of it or
// more. accepted are the accepted arrivals of this run (the warm-up send
// before them is left out). The leaky queue paces at 1 − leaky.DefaultHeadroom
// of the contract; on a loaded machine a worker that wakes more than
// LateTolerance after its slot gives the slot up and takes a later one,
// which costs rate, never the contract. late is how many slots were given
// up: they count as slots the queue ran, the arrivals alone are only
// logged.
//
// It used to compare the fake's MaxInWindow, which counts accepted requests
// only and so can never exceed the contract the fake enforces, and to
// demand no refusal at all, which one arrival a few ms late turns into a
// flake; the arrival window is the promise.
func paced(t *testing.T, name string, f arrivalCounter, accepted []time.Time, perSecond, refused int, late float64, budget time.Duration) {
	t.Helper()
	most := arrivalsPacedWithin(t, name, f, perSecond, budget)
	if len(accepted) < 2 {
		t.Fatalf("%s: %d arrivals", name, len(accepted))
	}
	slices.SortFunc(accepted, func(a, b time.Time) int { return a.Compare(b) })
	if refused > max429s(len(accepted)) {
		t.Errorf("%s: the fake refused %d sends over its contract, more than %d", name, refused, max429s(len(accepted)))
	}
	if refused != 0 {
		var gaps []string
		for i := 1; i < len(accepted); i++ {
			gaps = append(gaps, accepted[i].Sub(accepted[i-1]).Round(100*time.Microsecond).String())
		}
		t.Logf("%s: %d refused; gaps between accepted arrivals %v", name, refused, gaps)
	}
	var arrivals []time.Time // this run's, without the warm-up
	for _, at := range f.Arrivals() {
		if !at.Before(accepted[0]) {
			arrivals = append(arrivals, at)
		}
	}
	paused := pausedByRefusals(arrivals, accepted)
	span := (accepted[len(accepted)-1].Sub(accepted[0]) - paused).Seconds()
	rate := float64(len(accepted)-1) / span
	slots := (float64(len(accepted)-1) + late) / span
	if slots < 0.9*float64(perSecond) {
		t.Errorf("%s: the queue ran at %.1f slots/s (%.1f arrivals/s and %v slots given up late, %s held by refusals left out), want at least 90 %% of the %d/s contract",
			name, slots, rate, late, paused.Round(time.Millisecond), perSecond)
	}
	t.Logf("%s: %d arrivals, sustained %.2f/s (%.2f slots/s with %v given up late) on a %d/s contract, most in a 1 s − %s window %d",
		name, len(accepted), rate, slots, late, perSecond, budget.Round(100*time.Microsecond), most)
}

// exactlyOnce checks that got holds each of want once.
func exactlyOnce(t *testing.T, name string, got, want []string) {
	t.Helper()
	count := map[string]int{}
	for _, g := range got {
		count[g]++
	}
	for _, w := range want {
		if count[w] != 1 {
			t.Errorf("%s: %q arrived %d times, want once", name, w, count[w])
		}
		delete(count, w)
	}
	if len(count) > 0 {
		t.Errorf("%s: unexpected arrivals %v", name, count)
	}
}

// warmUp is the dispatcher option hook of the pacing tests: before the
// dispatcher runs, it sends one message straight through each provider of
// warm (and closes the registry when the test ends). A provider's first
// send opens its connection (TCP, TLS, HTTP/2, the SMTP dialogue; for fcm
// with a service account it also fetches the first OAuth token) inside the
// send, so it reaches the provider later than the slot it left on, and the
// sends paced behind it would look bunched against it: one over the
// contract in that first second (docs/providers.md, "Pacing and the first
// send"). The pacing tests measure warm providers: each warm-up arrives
// before the provider's first slot, which a fresh leaky queue puts more
// than max_queue_delay (1 s here) after its first reservation, and it is
// left out of the counts.
func warmUp(t *testing.T, warm map[string]*queue.Job) func(*Options) {
	return func(o *Options) {
		closeRegistry(t)(o)
		for provider, j := range warm {
			p, _, ok := o.Providers.Get(provider)
			if !ok {
				t.Fatalf("no provider %q", provider)
			}
			m := &providers.Message{Job: queue.Job{ID: j.ID, UserID: j.UserID, Channel: j.Channel, To: j.To, Body: j.Body, Title: j.Title, Data: j.Data}}
			if err := p.Send(context.Background(), m); err != nil {
				t.Fatalf("warm-up send through %s: %v", provider, err)
			}
		}
	}
}

// arrivalsOf is the arrival times of a fake's records.
func arrivalsOf[T any](records []T, at func(T) time.Time) []time.Time {
	out := make([]time.Time, len(records))
	for i, r := range records {
		out[i] = at(r)
	}
	return out
}

// kindJobs makes n jobs of channel for provider, with ids prefix-0… and
// the recipient to(i).
func kindJobs(prefix, channel, provider string, n int, to func(i int) string) ([]*queue.Job, []string) {
	jobs := make([]*queue.Job, n)
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		j := newJob(ids[i], channel, fmt.Sprintf("u%d", i%7))
		j.Provider, j.To = provider, to(i)
		j.Body = "code for " + ids[i]
		jobs[i] = j
	}
	return jobs, ids
}

// closeRegistry closes the registry a dispatcher was given when the test
// ends (after the dispatcher stopped: cleanups run last-registered first).
func closeRegistry(t *testing.T) func(*Options) {
	return func(o *Options) {
		if r, ok := o.Providers.(*providers.Registry); ok {
			t.Cleanup(func() { _ = r.Close() })
		}
	}
}

func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// TestKindsEndToEnd: for each real kind, jobs published to NATS arrive at
// its fake exactly once, never more than the contract in any 1 s window
// (counting every arrival, refusals included, with jitterBudget: paced) and
// at the contract's rate.
// One world (NATS, Redis, a dispatcher of 8 workers) serves the kinds one
// after the other, so their timings do not disturb each other. The
// twilio-segments case meters unit: segments: 3-segment messages on a 30
// segments/s contract arrive at no more than 10 messages a second, which
// its Twilio fake (enforcing 10 messages/s) accepts.
func TestKindsEndToEnd(t *testing.T) {
	measures(t)
	const segContract, segPerSecond = 30, 10
	contract := testenv.WithContract(kindsContract)
	tw, twSeg := testenv.FakeTwilio(t, contract), testenv.FakeTwilio(t, testenv.WithContract(segPerSecond))
	fcm, ios, mail := testenv.FakeFCM(t, contract), testenv.FakeAPNs(t, contract), testenv.FakeSMTP(t, contract)
	common := providers.Config{Rate: kindsContract, MaxQueueDelay: time.Second, Timeout: 2 * time.Second}
	with := func(c providers.Config) providers.Config {
		c.Rate, c.MaxQueueDelay, c.Timeout = common.Rate, common.MaxQueueDelay, common.Timeout
		return c
	}
	seg := with(providers.Config{Name: "tw-seg", Channel: "sms", Kind: "twilio", URL: twSeg.URL(), AccountSID: twSeg.AccountSID(),
		From: "+15005550006", CredentialsEnv: "TWILIO_SEG_TOKEN", Unit: "segments"})
	seg.Rate = segContract
	b := setup(t, setupOpts{
		extra: []providers.Config{
			with(providers.Config{Name: "tw", Channel: "sms", Kind: "twilio", URL: tw.URL(), AccountSID: tw.AccountSID(),
				From: "+15005550006", CredentialsEnv: "TWILIO_AUTH_TOKEN"}),
			seg,
			with(providers.Config{Name: "android", Channel: "push", Kind: "fcm", URL: fcm.URL(), ProjectID: fcm.ProjectID(),
				CredentialsFile: fcm.ServiceAccountFile()}),
			with(providers.Config{Name: "ios", Channel: "push", Kind: "apns", URL: ios.URL(), TLSCAFile: ios.CAFile(),
				KeyFile: ios.KeyFile(), KeyID: ios.KeyID(), TeamID: ios.TeamID(), Topic: ios.Topic()}),
			with(providers.Config{Name: "mail", Channel: "email", Kind: "smtp", Host: mail.Host(), Port: mail.Port(),
				TLSCAFile: mail.CAFile(), From: "Notifier <no-reply@example.com>", Username: mail.Username(), PasswordEnv: "SMTP_PASSWORD",
				JitterBudget: smtpJitterBudget}),
		},
		getenv: envOf(map[string]string{"TWILIO_AUTH_TOKEN": tw.AuthToken(), "TWILIO_SEG_TOKEN": twSeg.AuthToken(),
			"SMTP_PASSWORD": mail.Password()}),
	})
	warm := map[string]*queue.Job{}
	for provider, spec := range map[string]struct{ channel, to string }{
		"tw": {"sms", "+447700900999"}, "tw-seg": {"sms", "+447700900999"}, "android": {"push", "fcm:warm-" + strings.Repeat("w", 30)},
		"ios": {"push", strings.Repeat("ff", 32)}, "mail": {"email", "warm@example.org"},
	} {
		jobs, _ := kindJobs("warm-"+provider, spec.channel, provider, 1, func(int) string { return spec.to })
		jobs[0].Title, jobs[0].Data = "Hello", map[string]string{"job": jobs[0].ID}
		warm[provider] = jobs[0]
	}
	p := b.start(warmUp(t, warm))
	const n = 2 * kindsContract
	lateSoFar := 0.0
	late := func() float64 { // slots given up late since the last call
		now := p.count(p.d.m.Deferrals.WithLabelValues(LayerLeaky, "late"))
		d := now - lateSoFar
		lateSoFar = now
		return d
	}

	t.Run("twilio", func(t *testing.T) {
		jobs, ids := kindJobs("tw", "sms", "tw", n, func(i int) string { return fmt.Sprintf("+4477009%05d", i) })
		b.publish(jobs...)
		testenv.WaitFor(t, 30*time.Second, "every job at Twilio", func() bool { return len(tw.Messages()) >= n+1 })
		var bodies []string
		for _, m := range tw.Messages()[1:] {
			bodies = append(bodies, strings.TrimPrefix(m.Body, "code for "))
			if m.From != "+15005550006" {
				t.Errorf("message from %q", m.From)
			}
		}
		exactlyOnce(t, "twilio", bodies, ids)
		paced(t, "twilio", tw, arrivalsOf(tw.Messages()[1:], func(m testenv.TwilioMessage) time.Time { return m.At }),
			kindsContract, tw.Count(http.StatusTooManyRequests), late(), jitterBudget)
		testenv.WaitFor(t, 10*time.Second, "sent counted", func() bool {
			return p.count(p.d.m.Jobs.WithLabelValues("sms", "tw", OutcomeSent)) == n
		})
	})

	t.Run("twilio segments", func(t *testing.T) {
		const m = 3 * segPerSecond
		jobs, ids := kindJobs("seg", "sms", "tw-seg", m, func(int) string { return "+447700900123" })
		for _, j := range jobs {
			j.Body = strings.Repeat("Long [message] ", 26) + j.ID // 442 GSM-7 septets and the id: 3 segments
			if n := providers.Segments(j.Body); n != 3 {
				t.Fatalf("body of %s has %d segments, want 3", j.ID, n)
			}
		}
		b.publish(jobs...)
		testenv.WaitFor(t, 30*time.Second, "every job at Twilio", func() bool { return len(twSeg.Messages()) >= m+1 })
		var got []string
		for _, msg := range twSeg.Messages()[1:] {
			got = append(got, msg.Body[strings.LastIndexByte(msg.Body, ' ')+1:])
		}
		exactlyOnce(t, "twilio segments", got, ids)
		paced(t, "twilio segments", twSeg, arrivalsOf(twSeg.Messages()[1:], func(m testenv.TwilioMessage) time.Time { return m.At }),
			segPerSecond, twSeg.Count(http.StatusTooManyRequests), late(), jitterBudget)
	})

	t.Run("fcm", func(t *testing.T) {
		jobs, ids := kindJobs("fcm", "push", "android", n, func(i int) string { return fmt.Sprintf("fcm:APA91b-%040d", i) })
		for _, j := range jobs {
			j.Title, j.Data = "Hello", map[string]string{"job": j.ID}
		}
		b.publish(jobs...)
		testenv.WaitFor(t, 30*time.Second, "every job at FCM", func() bool { return len(fcm.Messages()) >= n+1 })
		var got []string
		for _, m := range fcm.Messages()[1:] {
			got = append(got, m.Data["job"])
			if !m.OAuth || m.Title != "Hello" || m.Body != "code for "+m.Data["job"] {
				t.Errorf("message %+v", m)
			}
		}
		exactlyOnce(t, "fcm", got, ids)
		paced(t, "fcm", fcm, arrivalsOf(fcm.Messages()[1:], func(m testenv.FCMMessage) time.Time { return m.At }),
			kindsContract, fcm.Count(http.StatusTooManyRequests), late(), jitterBudget)
		if got := fcm.TokenRequests(); got != 1 {
			t.Errorf("%d OAuth token requests for %d sends, want 1 (cached)", got, n+1)
		}
	})

	t.Run("apns", func(t *testing.T) {
		jobs, ids := kindJobs("ios", "push", "ios", n, func(i int) string { return fmt.Sprintf("%064x", i+1) })
		b.publish(jobs...)
		testenv.WaitFor(t, 30*time.Second, "every job at APNs", func() bool { return len(ios.Notifications()) >= n+1 })
		apnsIDs := make([]string, len(ids))
		for i, id := range ids {
			apnsIDs[i] = providers.APNsID(id)
		}
		var got []string
		for _, note := range ios.Notifications()[1:] {
			got = append(got, note.ID)
		}
		exactlyOnce(t, "apns", got, apnsIDs)
		paced(t, "apns", ios, arrivalsOf(ios.Notifications()[1:], func(n testenv.APNsNotification) time.Time { return n.At }),
			kindsContract, ios.Count(http.StatusTooManyRequests), late(), jitterBudget)
		if got := ios.ProviderTokens(); got != 1 {
			t.Errorf("%d provider tokens, want 1", got)
		}
		for _, r := range ios.Requests() {
			if r.Proto != "HTTP/2.0" {
				t.Fatalf("a request over %s", r.Proto)
			}
		}
	})

	t.Run("smtp", func(t *testing.T) {
		jobs, ids := kindJobs("mail", "email", "mail", n, func(i int) string { return fmt.Sprintf("user%d@example.org", i) })
		for _, j := range jobs {
			j.Title = "Your code"
		}
		b.publish(jobs...)
		testenv.WaitFor(t, 30*time.Second, "every mail at the server", func() bool { return len(mail.Messages()) >= n+1 })
		msgIDs := make([]string, len(ids))
		for i, id := range ids {
			msgIDs[i] = providers.SMTPMessageID(id, "example.com")
		}
		var got []string
		for _, m := range mail.Messages()[1:] {
			got = append(got, m.MessageID)
			if m.Subject != "Your code" || !strings.HasPrefix(m.Body, "code for ") {
				t.Errorf("mail %q: subject %q body %q", m.MessageID, m.Subject, m.Body)
			}
		}
		exactlyOnce(t, "smtp", got, msgIDs)
		// The SMTP fake answers 451 4.7.1 over its contract.
		paced(t, "smtp", mail, arrivalsOf(mail.Messages()[1:], func(m testenv.SMTPMessage) time.Time { return m.At }),
			kindsContract, mail.Count(451), late(), smtpJitterBudget)
		if c := mail.Connections(); c > 8 {
			t.Errorf("%d SMTP connections for %d mails by 8 workers: sessions are not reused", c, n+1)
		}
		t.Logf("%d mails over %d SMTP connections", n+1, mail.Connections())
	})

	testenv.WaitFor(t, 10*time.Second, "job stream empty", func() bool { return b.remaining() == 0 })
	if dead := b.deadLetters(); len(dead) != 0 {
		t.Errorf("%d dead letters, e.g. %s %s", len(dead), dead[0].Reason, dead[0].Detail)
	}
}

// TestKindsRefusalsAreDeadLettered: each kind's permanent refusal, in its
// own format, dead-letters the job with reason rejected and the provider's
// reason in the detail; the other jobs are sent.
func TestKindsRefusalsAreDeadLettered(t *testing.T) {
	waits(t)
	tw, fcm, ios, mail := testenv.FakeTwilio(t), testenv.FakeFCM(t), testenv.FakeAPNs(t), testenv.FakeSMTP(t)
	b := setup(t, setupOpts{extra: kindsConfigs(tw, fcm, ios, mail), getenv: kindsEnv(tw, fcm, mail)})
	tw.RefuseNumber("+447700900666", providers.TwilioUnsubscribed)
	fcm.Unregister("fcm:uninstalled-" + strings.Repeat("z", 30))
	ios.Unregister(strings.Repeat("ee", 32))
	mail.Reject("gone@example.org", 550)
	job := func(id, channel, provider, to string) *queue.Job {
		j := newJob(id, channel, "u-"+id)
		j.Provider, j.To = provider, to
		return j
	}
	b.publish(
		job("tw-bad", "sms", "tw", "+447700900666"), job("tw-ok", "sms", "tw", "+447700900123"),
		job("fcm-bad", "push", "android", "fcm:uninstalled-"+strings.Repeat("z", 30)), job("fcm-ok", "push", "android", "fcm:ok-"+strings.Repeat("y", 30)),
		job("ios-bad", "push", "ios", strings.Repeat("ee", 32)), job("ios-ok", "push", "ios", strings.Repeat("0f", 32)),
		job("mail-bad", "email", "mail", "gone@example.org"), job("mail-ok", "email", "mail", "fine@example.org"),
	)
	b.start(closeRegistry(t))
	testenv.WaitFor(t, 30*time.Second, "every job handled", func() bool { return b.remaining() == 0 && len(b.deadLetters()) >= 4 })

	want := map[string]string{
		"tw-bad":   "Twilio error 21610",
		"fcm-bad":  "UNREGISTERED (NOT_FOUND)",
		"ios-bad":  "HTTP 410 Gone: Unregistered",
		"mail-bad": "rcpt: SMTP 550 5.1.1",
	}
	dead := b.deadLetters()
	if len(dead) != len(want) {
		t.Errorf("%d dead letters, want %d", len(dead), len(want))
	}
	for _, dl := range dead {
		var j queue.Job
		if err := json.Unmarshal(dl.Data, &j); err != nil {
			t.Fatal(err)
		}
		if dl.Reason != ledger.ReasonRejected || !strings.Contains(dl.Detail, want[j.ID]) || want[j.ID] == "" {
			t.Errorf("dead letter %s: reason %q detail %q, want rejected with %q", j.ID, dl.Reason, dl.Detail, want[j.ID])
		}
		t.Logf("%s: %s", j.ID, dl.Detail)
	}
	if len(tw.Messages()) != 1 || len(fcm.Messages()) != 1 || len(ios.Notifications()) != 1 || len(mail.Messages()) != 1 {
		t.Errorf("accepted: twilio %d, fcm %d, apns %d, smtp %d, want 1 each",
			len(tw.Messages()), len(fcm.Messages()), len(ios.Notifications()), len(mail.Messages()))
	}
}

// kindsConfigs is one provider of each real kind against the fakes, none
// a channel default (the harness's webhooks are).
func kindsConfigs(tw *testenv.TwilioFake, fcm *testenv.FCMFake, ios *testenv.APNsFake, mail *testenv.SMTPFake) []providers.Config {
	return []providers.Config{
		{Name: "tw", Channel: "sms", Kind: "twilio", URL: tw.URL(), AccountSID: tw.AccountSID(), From: "+15005550006",
			CredentialsEnv: "TWILIO_AUTH_TOKEN", Rate: 50, MaxQueueDelay: time.Second, Timeout: 2 * time.Second},
		{Name: "android", Channel: "push", Kind: "fcm", URL: fcm.URL(), ProjectID: fcm.ProjectID(),
			CredentialsFile: fcm.ServiceAccountFile(), Rate: 50, MaxQueueDelay: time.Second, Timeout: 2 * time.Second},
		{Name: "ios", Channel: "push", Kind: "apns", URL: ios.URL(), TLSCAFile: ios.CAFile(), KeyFile: ios.KeyFile(),
			KeyID: ios.KeyID(), TeamID: ios.TeamID(), Topic: ios.Topic(), Rate: 50, MaxQueueDelay: time.Second, Timeout: 2 * time.Second},
		{Name: "mail", Channel: "email", Kind: "smtp", Host: mail.Host(), Port: mail.Port(), TLSCAFile: mail.CAFile(),
			From: "no-reply@example.com", Username: mail.Username(), PasswordEnv: "SMTP_PASSWORD", Rate: 50,
			MaxQueueDelay: time.Second, Timeout: 2 * time.Second},
	}
}

func kindsEnv(tw *testenv.TwilioFake, fcm *testenv.FCMFake, mail *testenv.SMTPFake) func(string) string {
	return envOf(map[string]string{"TWILIO_AUTH_TOKEN": tw.AuthToken(), "SMTP_PASSWORD": mail.Password()})
}

// TestKindsLogsCarryNoSecrets runs every kind through sends, retries,
// rate limits and refusals, then greps the log output, the dead letters'
// details and the metrics' label values for every secret: the Twilio auth
// token (and its basic-auth form), the FCM service-account key and the
// access tokens issued for it, the APNs .p8 key and any JWT, the SMTP
// password (and its AUTH PLAIN form).
func TestKindsLogsCarryNoSecrets(t *testing.T) {
	waits(t)
	tw, fcm, ios, mail := testenv.FakeTwilio(t), testenv.FakeFCM(t), testenv.FakeAPNs(t), testenv.FakeSMTP(t)
	b := setup(t, setupOpts{extra: kindsConfigs(tw, fcm, ios, mail), getenv: kindsEnv(tw, fcm, mail)})
	// A 5xx each (not APNs's: after one Apple asks for 15 minutes before a
	// retry, which the dispatcher honours; TestAPNs5xxWaitsAsAppleAsks).
	for _, f := range []interface{ FailNext(int, int) }{tw, fcm} {
		f.FailNext(1, http.StatusServiceUnavailable)
	}
	mail.FailNext(1, 451)
	tw.RefuseNumber("+447700900666", providers.TwilioInvalidNumber)
	mail.Reject("gone@example.org", 550)
	var jobs []*queue.Job
	for i, spec := range []struct{ channel, provider, to string }{
		{"sms", "tw", "+447700900123"}, {"sms", "tw", "+447700900666"}, {"push", "android", "fcm:tok-" + strings.Repeat("q", 30)},
		{"push", "ios", strings.Repeat("ab", 32)}, {"push", "ios", "not-a-device-token"}, {"email", "mail", "fine@example.org"},
		{"email", "mail", "gone@example.org"},
	} {
		for k := range 3 {
			j := newJob(fmt.Sprintf("sec-%d-%d", i, k), spec.channel, "u1")
			j.Provider, j.To = spec.provider, spec.to
			jobs = append(jobs, j)
		}
	}
	b.publish(jobs...)
	p := b.start(closeRegistry(t))
	testenv.WaitFor(t, 30*time.Second, "every job handled", func() bool { return b.remaining() == 0 })
	// A rate limit too.
	tw.RateLimitFor(time.Hour, "1")
	b.publish(&queue.Job{ID: "sec-rl", UserID: "u1", Channel: "sms", To: "+447700900123", Body: "x", Provider: "tw"})
	testenv.WaitFor(t, 10*time.Second, "the rate-limited job tried", func() bool { return tw.Count(http.StatusTooManyRequests) > 0 })
	tw.Reset()
	testenv.WaitFor(t, 10*time.Second, "every job handled", func() bool { return b.remaining() == 0 })

	var text bytes.Buffer
	text.WriteString(b.logs.String())
	for _, dl := range b.deadLetters() {
		text.WriteString(dl.Reason + " " + dl.Detail + "\n")
	}
	mfs, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				text.WriteString(l.GetName() + "=" + l.GetValue() + "\n")
			}
		}
	}
	all := text.String()
	if !strings.Contains(all, "Twilio error 21211") || !strings.Contains(all, "BadDeviceToken") || !strings.Contains(all, "SMTP 550") {
		t.Fatalf("the run did not produce the expected refusals; output:\n%.3000s", all)
	}

	sa, err := os.ReadFile(fcm.ServiceAccountFile())
	if err != nil {
		t.Fatal(err)
	}
	var key struct {
		PrivateKey string `json:"private_key"`
	}
	if err := json.Unmarshal(sa, &key); err != nil {
		t.Fatal(err)
	}
	p8, err := os.ReadFile(ios.KeyFile())
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{
		"twilio auth token": tw.AuthToken(),
		"twilio basic auth": basicAuth(tw.AccountSID(), tw.AuthToken()),
		"fcm bearer token":  fcm.BearerToken(),
		"smtp password":     mail.Password(),
		"smtp auth plain":   plainAuth(mail.Username(), mail.Password()),
	}
	for i, line := range keyLines(key.PrivateKey) {
		secrets[fmt.Sprintf("service-account key line %d", i)] = line
	}
	for i, line := range keyLines(string(p8)) {
		secrets[fmt.Sprintf(".p8 key line %d", i)] = line
	}
	for name, s := range secrets {
		if strings.Contains(all, s) {
			t.Errorf("the output carries the %s", name)
		}
	}
	for name, re := range map[string]*regexp.Regexp{
		"a JWT":                regexp.MustCompile(`eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}`),
		"an FCM access token":  regexp.MustCompile(`ya29\.`),
		"a PEM block":          regexp.MustCompile(`-----BEGIN`),
		"a bearer credential":  regexp.MustCompile(`(?i)bearer [A-Za-z0-9._-]{8,}`),
		"a basic credential":   regexp.MustCompile(`(?i)basic [A-Za-z0-9+/=]{8,}`),
		"a full phone number":  regexp.MustCompile(`\+?447700900(123|666)`),
		"a full email address": regexp.MustCompile(`(fine|gone)@example\.org`),
		"a full device token":  regexp.MustCompile(`abababababababab|qqqqqqqqqqqqqqqq`),
	} {
		if m := re.FindString(all); m != "" {
			t.Errorf("the output carries %s: %q", name, m)
		}
	}
}

// keyLines are the base64 lines of a PEM key, each long enough to be
// recognisable.
func keyLines(pemText string) []string {
	var out []string
	for _, line := range strings.Split(pemText, "\n") {
		if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
			out = append(out, line)
		}
	}
	return out
}

func basicAuth(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}

func plainAuth(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte("\x00" + user + "\x00" + password))
}
