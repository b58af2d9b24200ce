package dispatch

import (
	"bytes"
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

// paced checks arrival times against a contract of perSecond: never more
// in any 1 s window (most is the fake's MaxInWindow), no refusal by the
// fake's own contract, and the contract reached: the sustained rate
// between the first and the last arrival is at least 90 % of it.
func paced(t *testing.T, name string, arrivals []time.Time, most, perSecond, refused int) {
	t.Helper()
	if most > perSecond {
		t.Errorf("%s: %d arrivals in one 1 s window over a contract of %d/s", name, most, perSecond)
	}
	if refused != 0 {
		t.Errorf("%s: the fake refused %d sends over its contract", name, refused)
		var gaps []string
		for i := 1; i < len(arrivals); i++ {
			gaps = append(gaps, arrivals[i].Sub(arrivals[i-1]).Round(100*time.Microsecond).String())
		}
		t.Logf("%s: gaps between arrivals %v", name, gaps)
	}
	if len(arrivals) < 2 {
		t.Fatalf("%s: %d arrivals", name, len(arrivals))
	}
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	rate := float64(len(arrivals)-1) / arrivals[len(arrivals)-1].Sub(arrivals[0]).Seconds()
	if rate < 0.9*float64(perSecond) {
		t.Errorf("%s: sustained %.1f/s, want at least 90 %% of the %d/s contract", name, rate, perSecond)
	}
	t.Logf("%s: %d arrivals, sustained %.2f/s on a %d/s contract, most in a 1 s window %d", name, len(arrivals), rate, perSecond, most)
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

// warmUp publishes one job, waits until the fake has it, and then until it
// is more than a second old. A provider's first send opens its connection
// (TCP, TLS, the SMTP dialogue; for fcm with a service account it also
// fetches the first OAuth token) inside the send, so it arrives later than
// its slot: the sends paced behind it would look bunched against it (one
// over the contract in the first second). The pacing tests measure a warm
// provider; the warm-up job is left out of their counts and out of every
// 1 s window with them.
func warmUp(t *testing.T, b *bundle, j *queue.Job, arrivals func() []time.Time) {
	t.Helper()
	b.publish(j)
	testenv.WaitFor(t, 20*time.Second, "the warm-up job at the provider", func() bool { return len(arrivals()) >= 1 })
	at := arrivals()[0]
	testenv.WaitFor(t, 5*time.Second, "the warm-up job out of the 1 s window", func() bool { return time.Since(at) > time.Second })
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

func TestTwilioEndToEnd(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeTwilio(t, testenv.WithContract(kindsContract))
	b := setup(t, setupOpts{
		extra: []providers.Config{{Name: "tw", Channel: "sms", Kind: "twilio", URL: fake.URL(), AccountSID: fake.AccountSID(),
			From: "+15005550006", CredentialsEnv: "TWILIO_AUTH_TOKEN", Rate: kindsContract, MaxQueueDelay: time.Second, Timeout: 2 * time.Second}},
		getenv: envOf(map[string]string{"TWILIO_AUTH_TOKEN": fake.AuthToken()}),
	})
	jobs, ids := kindJobs("tw", "sms", "tw", 3*kindsContract, func(i int) string { return fmt.Sprintf("+4477009%05d", i) })
	p := b.start(closeRegistry(t))
	warm, _ := kindJobs("warm", "sms", "tw", 1, func(int) string { return "+447700900999" })
	warmUp(t, b, warm[0], func() []time.Time {
		return arrivalsOf(fake.Messages(), func(m testenv.TwilioMessage) time.Time { return m.At })
	})
	b.publish(jobs...)
	testenv.WaitFor(t, 30*time.Second, "every job at Twilio", func() bool { return len(fake.Messages()) >= len(ids)+1 })
	testenv.WaitFor(t, 10*time.Second, "job stream empty", func() bool { return b.remaining() == 0 })

	var bodies []string
	var at []time.Time
	for _, m := range fake.Messages()[1:] {
		bodies = append(bodies, strings.TrimPrefix(m.Body, "code for "))
		at = append(at, m.At)
		if m.From != "+15005550006" {
			t.Errorf("message from %q", m.From)
		}
	}
	exactlyOnce(t, "twilio", bodies, ids)
	paced(t, "twilio", at, fake.MaxInWindow(time.Second), kindsContract, fake.Count(http.StatusTooManyRequests))
	if got := p.count(p.d.m.Jobs.WithLabelValues("sms", "tw", OutcomeSent)); got != float64(len(ids)+1) {
		t.Errorf("sent %v, want %d", got, len(ids)+1)
	}
}

// TestTwilioSegmentsEndToEnd: with unit: segments each job reserves as
// many leaky units as its body has SMS segments, so 3-segment messages on a
// 30 segments/s contract arrive at no more than 10 messages a second, the
// rate Twilio (enforcing 10 messages/s here) accepts.
func TestTwilioSegmentsEndToEnd(t *testing.T) {
	t.Parallel()
	const segments, perSecond = 30, 10
	fake := testenv.FakeTwilio(t, testenv.WithContract(perSecond))
	b := setup(t, setupOpts{
		extra: []providers.Config{{Name: "tw", Channel: "sms", Kind: "twilio", URL: fake.URL(), AccountSID: fake.AccountSID(),
			From: "+15005550006", CredentialsEnv: "TWILIO_AUTH_TOKEN", Rate: segments, Unit: "segments",
			MaxQueueDelay: time.Second, Timeout: 2 * time.Second}},
		getenv: envOf(map[string]string{"TWILIO_AUTH_TOKEN": fake.AuthToken()}),
	})
	jobs, ids := kindJobs("seg", "sms", "tw", 4*perSecond, func(int) string { return "+447700900123" })
	for _, j := range jobs {
		j.Body = strings.Repeat("Long [message] ", 26) + j.ID // 442 GSM-7 septets and the id: 3 segments
		if n := providers.Segments(j.Body); n != 3 {
			t.Fatalf("body of %s has %d segments, want 3", j.ID, n)
		}
	}
	b.start(closeRegistry(t))
	warm, _ := kindJobs("warm", "sms", "tw", 1, func(int) string { return "+447700900999" })
	warmUp(t, b, warm[0], func() []time.Time {
		return arrivalsOf(fake.Messages(), func(m testenv.TwilioMessage) time.Time { return m.At })
	})
	b.publish(jobs...)
	testenv.WaitFor(t, 30*time.Second, "every job at Twilio", func() bool { return len(fake.Messages()) >= len(ids)+1 })

	var got []string
	var at []time.Time
	for _, m := range fake.Messages()[1:] {
		got = append(got, m.Body[strings.LastIndexByte(m.Body, ' ')+1:])
		at = append(at, m.At)
	}
	exactlyOnce(t, "twilio segments", got, ids)
	paced(t, "twilio segments", at, fake.MaxInWindow(time.Second), perSecond, fake.Count(http.StatusTooManyRequests))
}

func TestFCMEndToEnd(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeFCM(t, testenv.WithContract(kindsContract))
	b := setup(t, setupOpts{
		extra: []providers.Config{{Name: "android", Channel: "push", Kind: "fcm", URL: fake.URL(), ProjectID: fake.ProjectID(),
			CredentialsFile: fake.ServiceAccountFile(), Rate: kindsContract, MaxQueueDelay: time.Second, Timeout: 2 * time.Second}},
	})
	jobs, ids := kindJobs("fcm", "push", "android", 3*kindsContract, func(i int) string { return fmt.Sprintf("fcm:APA91b-%040d", i) })
	for _, j := range jobs {
		j.Title, j.Data = "Hello", map[string]string{"job": j.ID}
	}
	b.start(closeRegistry(t))
	warm, _ := kindJobs("warm", "push", "android", 1, func(int) string { return "fcm:warm-" + strings.Repeat("w", 30) })
	warm[0].Title, warm[0].Data = "Hello", map[string]string{"job": "warm-0"}
	warmUp(t, b, warm[0], func() []time.Time {
		return arrivalsOf(fake.Messages(), func(m testenv.FCMMessage) time.Time { return m.At })
	})
	b.publish(jobs...)
	testenv.WaitFor(t, 30*time.Second, "every job at FCM", func() bool { return len(fake.Messages()) >= len(ids)+1 })

	var got []string
	var at []time.Time
	for _, m := range fake.Messages()[1:] {
		got = append(got, m.Data["job"])
		at = append(at, m.At)
		if !m.OAuth || m.Title != "Hello" || m.Body != "code for "+m.Data["job"] {
			t.Errorf("message %+v", m)
		}
	}
	exactlyOnce(t, "fcm", got, ids)
	paced(t, "fcm", at, fake.MaxInWindow(time.Second), kindsContract, fake.Count(http.StatusTooManyRequests))
	if n := fake.TokenRequests(); n != 1 {
		t.Errorf("%d OAuth token requests for %d sends, want 1 (cached)", n, len(ids))
	}
}

func TestAPNsEndToEnd(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeAPNs(t, testenv.WithContract(kindsContract))
	b := setup(t, setupOpts{
		extra: []providers.Config{{Name: "ios", Channel: "push", Kind: "apns", URL: fake.URL(), TLSCAFile: fake.CAFile(),
			KeyFile: fake.KeyFile(), KeyID: fake.KeyID(), TeamID: fake.TeamID(), Topic: fake.Topic(),
			Rate: kindsContract, MaxQueueDelay: time.Second, Timeout: 2 * time.Second}},
	})
	jobs, ids := kindJobs("ios", "push", "ios", 3*kindsContract, func(i int) string { return fmt.Sprintf("%064x", i+1) })
	b.start(closeRegistry(t))
	warm, _ := kindJobs("warm", "push", "ios", 1, func(int) string { return strings.Repeat("ff", 32) })
	warmUp(t, b, warm[0], func() []time.Time {
		return arrivalsOf(fake.Notifications(), func(n testenv.APNsNotification) time.Time { return n.At })
	})
	b.publish(jobs...)
	testenv.WaitFor(t, 30*time.Second, "every job at APNs", func() bool { return len(fake.Notifications()) >= len(ids)+1 })

	apnsIDs := make([]string, len(ids))
	for i, id := range ids {
		apnsIDs[i] = providers.APNsID(id)
	}
	var got []string
	var at []time.Time
	for _, n := range fake.Notifications()[1:] {
		got = append(got, n.ID)
		at = append(at, n.At)
	}
	exactlyOnce(t, "apns", got, apnsIDs)
	paced(t, "apns", at, fake.MaxInWindow(time.Second), kindsContract, fake.Count(http.StatusTooManyRequests))
	if n := fake.ProviderTokens(); n != 1 {
		t.Errorf("%d provider tokens, want 1", n)
	}
	for _, r := range fake.Requests() {
		if r.Proto != "HTTP/2.0" {
			t.Fatalf("a request over %s", r.Proto)
		}
	}
}

func TestSMTPEndToEnd(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeSMTP(t, testenv.WithContract(kindsContract))
	b := setup(t, setupOpts{
		extra: []providers.Config{{Name: "mail", Channel: "email", Kind: "smtp", Host: fake.Host(), Port: fake.Port(),
			TLSCAFile: fake.CAFile(), From: "Notifier <no-reply@example.com>", Username: fake.Username(), PasswordEnv: "SMTP_PASSWORD",
			Rate: kindsContract, MaxQueueDelay: time.Second, Timeout: 2 * time.Second}},
		getenv: envOf(map[string]string{"SMTP_PASSWORD": fake.Password()}),
	})
	jobs, ids := kindJobs("mail", "email", "mail", 3*kindsContract, func(i int) string { return fmt.Sprintf("user%d@example.org", i) })
	for _, j := range jobs {
		j.Title = "Your code"
	}
	b.start(closeRegistry(t)) // 8 workers
	warm, _ := kindJobs("warm", "email", "mail", 1, func(int) string { return "warm@example.org" })
	warm[0].Title = "Your code"
	warmUp(t, b, warm[0], func() []time.Time {
		return arrivalsOf(fake.Messages(), func(m testenv.SMTPMessage) time.Time { return m.At })
	})
	b.publish(jobs...)
	testenv.WaitFor(t, 30*time.Second, "every mail at the server", func() bool { return len(fake.Messages()) >= len(ids)+1 })

	msgIDs := make([]string, len(ids))
	for i, id := range ids {
		msgIDs[i] = providers.SMTPMessageID(id, "example.com")
	}
	var got []string
	var at []time.Time
	for _, m := range fake.Messages()[1:] {
		got = append(got, m.MessageID)
		at = append(at, m.At)
		if m.Subject != "Your code" || !strings.HasPrefix(m.Body, "code for ") {
			t.Errorf("mail %q: subject %q body %q", m.MessageID, m.Subject, m.Body)
		}
	}
	exactlyOnce(t, "smtp", got, msgIDs)
	paced(t, "smtp", at, fake.MaxInWindow(time.Second), kindsContract, 0)
	if n := fake.Connections(); n > 8 {
		t.Errorf("%d SMTP connections for %d mails by 8 workers: sessions are not reused", n, len(ids))
	}
	t.Logf("%d mails over %d SMTP connections", len(ids), fake.Connections())
}

// TestKindsRefusalsAreDeadLettered: each kind's permanent refusal, in its
// own format, dead-letters the job with reason rejected and the provider's
// reason in the detail; the other jobs are sent.
func TestKindsRefusalsAreDeadLettered(t *testing.T) {
	t.Parallel()
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
		if dl.Reason != ReasonRejected || !strings.Contains(dl.Detail, want[j.ID]) || want[j.ID] == "" {
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
	t.Parallel()
	tw, fcm, ios, mail := testenv.FakeTwilio(t), testenv.FakeFCM(t), testenv.FakeAPNs(t), testenv.FakeSMTP(t)
	b := setup(t, setupOpts{extra: kindsConfigs(tw, fcm, ios, mail), getenv: kindsEnv(tw, fcm, mail)})
	for _, f := range []interface{ FailNext(int, int) }{tw, fcm, ios} {
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
