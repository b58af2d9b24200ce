package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifier/notifier/internal/localenv"
	"github.com/notifier/notifier/limits"
	"github.com/notifier/notifier/limits/fleet"
	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/testenv"
)

// Tests of what the dispatcher does with each kind of provider answer that
// is neither a send nor a plain failure (issue 17): a refused sender, a
// throttled recipient, a transient failure that says when to come back. The
// answers are injected in front of the real webhook provider (answering),
// so each case is exact; the kinds' own mapping of their providers'
// answers is tested in providers/ against fakes that answer as the
// providers document.

// answering is a registry whose providers ask answer first: a non-nil error
// is the send's answer and the provider is not called; nil calls it.
type answering struct {
	Registry
	answer func(m *providers.Message) error
}

func (r *answering) wrap(p providers.Provider, c providers.Config, ok bool) (providers.Provider, providers.Config, bool) {
	if !ok {
		return p, c, ok
	}
	return &answeringProvider{Provider: p, r: r}, c, ok
}

func (r *answering) Get(name string) (providers.Provider, providers.Config, bool) {
	return r.wrap(r.Registry.Get(name))
}

func (r *answering) Default(channel string) (providers.Provider, providers.Config, bool) {
	return r.wrap(r.Registry.Default(channel))
}

type answeringProvider struct {
	providers.Provider
	r *answering
}

func (p *answeringProvider) Send(ctx context.Context, m *providers.Message) error {
	if err := p.r.answer(m); err != nil {
		return err
	}
	return p.Provider.Send(ctx, m)
}

// asked records when each job was put to the provider (answered by the
// injection or not).
type asked struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (a *asked) note(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.at == nil {
		a.at = map[string][]time.Time{}
	}
	a.at[id] = append(a.at[id], time.Now())
}

func (a *asked) times(id string) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at[id]...)
}

// TestRecipientThrottleDefersThatJobAlone: a 429 that names one recipient
// (APNs TooManyRequests, FCM's device quota) puts off that job alone, by at
// least what the provider asked and without using an attempt; the provider
// is not paused and the other jobs go on meanwhile.
func TestRecipientThrottleDefersThatJobAlone(t *testing.T) {
	measures(t)
	b := setup(t, setupOpts{})
	var a asked
	var mu sync.Mutex
	throttled := 0
	p := b.start(func(o *Options) {
		o.Retry.MaxAttempts = 1 // a throttle that used an attempt would dead-letter the job
		o.Providers = &answering{Registry: o.Providers, answer: func(m *providers.Message) error {
			a.note(m.ID)
			mu.Lock()
			defer mu.Unlock()
			if m.ID == "busy" && throttled < 2 {
				throttled++
				return &providers.RateLimitedError{Provider: "sms-gw", Status: 429, RetryAfter: 700 * time.Millisecond,
					Explicit: true, Detail: "429 TooManyRequests", Scope: providers.ScopeRecipient}
			}
			return nil
		}}
	})
	b.publish(newJob("busy", "sms", "u-busy"))
	testenv.WaitFor(t, 10*time.Second, "the first throttle", func() bool { return len(a.times("busy")) >= 1 })
	ids := b.publishN("other", "sms", 20, 20)
	testenv.WaitFor(t, 20*time.Second, "every job sent", func() bool { return len(b.fake.AcceptedIDs()) == 21 })
	b.acceptedOnce(append(ids, "busy"))
	at := a.times("busy")
	if len(at) != 3 {
		t.Fatalf("busy was put to the provider %d times, want 3 (two throttled, one sent)", len(at))
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < 700*time.Millisecond {
			t.Errorf("busy asked again %s after its throttle, sooner than the 700ms the provider asked", gap.Round(time.Millisecond))
		}
	}
	// The others did not wait for it: all were sent before busy's last try.
	for _, r := range b.fake.Requests() {
		if r.ID != "busy" && r.At.After(at[2]) {
			t.Errorf("%s sent at %s, after busy's last try: the throttle held up other recipients", r.ID, r.At.Format(time.StampMilli))
		}
	}
	if n := p.count(p.d.m.ProviderPaused.WithLabelValues("sms-gw", fleet.PauseRateLimited)); n != 0 {
		t.Errorf("provider paused (%v) for one recipient's throttle", n)
	}
	if n := p.count(p.d.m.Deferrals.WithLabelValues(LayerProvider, "recipient_throttled")); n != 2 {
		t.Errorf("deferrals{provider,recipient_throttled} = %v, want 2", n)
	}
	if dl := b.deadLetters(); len(dl) != 0 {
		t.Errorf("dead letters %v, want none", dl)
	}
}

// TestTransientRetryAfterIsHonoured: a transient failure whose answer says
// when to come back (a 503's Retry-After, FCM UNAVAILABLE) is retried no
// sooner, though the backoff alone would be far shorter (at most 200 ms).
func TestTransientRetryAfterIsHonoured(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	var a asked
	var mu sync.Mutex
	failed := false
	b.start(func(o *Options) {
		o.Providers = &answering{Registry: o.Providers, answer: func(m *providers.Message) error {
			a.note(m.ID)
			mu.Lock()
			defer mu.Unlock()
			if !failed {
				failed = true
				return &providers.Error{Provider: "sms-gw", Class: providers.ErrTransient, Status: 503,
					Detail: "503 Service Unavailable", RetryAfter: 1500 * time.Millisecond}
			}
			return nil
		}}
	})
	b.publish(newJob("unavailable", "sms", "u1"))
	testenv.WaitFor(t, 20*time.Second, "the job sent", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	at := a.times("unavailable")
	if len(at) != 2 {
		t.Fatalf("asked %d times, want 2", len(at))
	}
	if gap := at[1].Sub(at[0]); gap < 1500*time.Millisecond {
		t.Errorf("retried %s after a 503 with Retry-After 1.5s", gap.Round(time.Millisecond))
	}
}

// TestSenderRefusedPausesTheProviderAndKeepsItsJobs: a provider that
// refuses the sender (its credentials) dead-letters no job: it is paused
// fleet-wide for max_pause (notifier_provider_paused{reason="credentials"}
// in both processes, the one that saw the refusal and the one that did
// not), its jobs wait in JetStream, and a reload lifts the pause at once:
// every job is then sent once.
func TestSenderRefusedPausesTheProviderAndKeepsItsJobs(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	for i := range b.pcfgs {
		b.pcfgs[i].MaxPause = time.Hour
	}
	var mu sync.Mutex
	refusing := true
	refusals := 0
	wrap := func(o *Options) {
		o.Retry.MaxAttempts = 1
		o.Providers = &answering{Registry: o.Providers, answer: func(m *providers.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if refusing {
				refusals++
				return &providers.Error{Provider: "sms-gw", Class: providers.ErrSender, Status: 401,
					Detail: "Twilio error 20003: Authenticate"}
			}
			return nil
		}}
	}
	p1 := b.start(wrap)
	p2 := b.start(wrap)
	ids := b.publishN("cred", "sms", 30, 30)
	for _, p := range []*proc{p1, p2} {
		testenv.WaitFor(t, 10*time.Second, "both processes see the credentials pause", func() bool {
			return p.count(p.d.m.ProviderPaused.WithLabelValues("sms-gw", fleet.PauseCredentials)) == 1
		})
	}
	time.Sleep(2 * time.Second)
	mu.Lock()
	n := refusals
	refusing = false // the credentials are fixed
	mu.Unlock()
	if n == 0 || n > 16 {
		t.Errorf("%d sends refused: want at least one, and no more than the jobs under way at the refusal (16 workers)", n)
	}
	if got := len(b.fake.AcceptedIDs()); got != 0 {
		t.Fatalf("%d sent during the pause", got)
	}
	if dl := b.deadLetters(); len(dl) != 0 {
		t.Fatalf("dead letters %v: a refused sender must not dead-letter jobs", dl)
	}
	if !strings.Contains(b.logs.String(), `"level":"ERROR"`) {
		t.Errorf("no error logged for the refused sender")
	}
	// The operator fixes the credentials and reloads one process: the
	// pause is lifted fleet-wide.
	if err := p1.d.Reload(Reload{Providers: p1.d.live.Load().providers}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "every job sent after the reload", func() bool { return len(b.fake.AcceptedIDs()) == len(ids) })
	b.acceptedOnce(ids)
	if dl := b.deadLetters(); len(dl) != 0 {
		t.Errorf("dead letters %v", dl)
	}
	for _, p := range []*proc{p1, p2} {
		testenv.WaitFor(t, 5*time.Second, "the gauge cleared", func() bool {
			return p.count(p.d.m.ProviderPaused.WithLabelValues("sms-gw", fleet.PauseCredentials)) == 0
		})
	}
}

// TestSenderRefusedIsProbedAfterMaxPause: without a reload, a provider
// paused for its credentials is asked again after max_pause; once they are
// right again every job goes out, none dead-lettered.
func TestSenderRefusedIsProbedAfterMaxPause(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	for i := range b.pcfgs {
		b.pcfgs[i].MaxPause = 1500 * time.Millisecond
	}
	var mu sync.Mutex
	var until time.Time
	b.start(func(o *Options) {
		o.Retry.MaxAttempts = 1
		o.Providers = &answering{Registry: o.Providers, answer: func(m *providers.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if until.IsZero() {
				until = time.Now().Add(2 * time.Second) // refused for 2 s: a pause, a probe refused, a pause, then right
			}
			if time.Now().Before(until) {
				return &providers.Error{Provider: "sms-gw", Class: providers.ErrSender, Status: 535, Detail: "SMTP 535 5.7.8 authentication failed"}
			}
			return nil
		}}
	})
	ids := b.publishN("probe", "sms", 10, 10)
	testenv.WaitFor(t, 40*time.Second, "every job sent", func() bool { return len(b.fake.AcceptedIDs()) == len(ids) })
	b.acceptedOnce(ids)
	if dl := b.deadLetters(); len(dl) != 0 {
		t.Errorf("dead letters %v", dl)
	}
}

// TestReportDelivery: a provider's delivery reports are counted by status
// (an unknown status as "other"); a job reported undelivered or failed is
// dead-lettered with reason undelivered and the provider's detail, once
// however often the provider calls back, and as its tenant's (another
// tenant's job of the same id is another letter; the two collapsed into
// one, the tenant lost: found in review); a report for a provider not
// configured is refused.
func TestReportDelivery(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	p := b.start(nil)
	ctx := context.Background()
	detail := "Twilio error 30003: Unreachable destination handset"
	for _, r := range []struct{ tenant, id, status string }{
		{"", "otp-1", "sent"}, {"", "otp-1", "delivered"}, {"", "otp-2", "sent"}, {"", "otp-2", "undelivered"},
		{"", "otp-2", "undelivered"}, {"", "otp-3", "failed"}, {"", "otp-4", "teleported"}, {"acme", "otp-2", "undelivered"},
	} {
		if err := p.d.ReportDelivery(ctx, "sms-gw", r.tenant, r.id, r.status, 30003, detail); err != nil {
			t.Fatalf("report %s %s: %v", r.id, r.status, err)
		}
	}
	for status, want := range map[string]float64{"sent": 2, "delivered": 1, "undelivered": 3, "failed": 1, "other": 1} {
		if got := p.count(p.d.m.Deliveries.WithLabelValues("sms-gw", status)); got != want {
			t.Errorf("deliveries{sms-gw,%s} = %v, want %v", status, got, want)
		}
	}
	dl := b.deadLetters()
	if len(dl) != 3 {
		t.Fatalf("%d dead letters, want 3 (otp-2 once, otp-3, acme's otp-2): %v", len(dl), dl)
	}
	tenants := map[string]int{}
	for _, d := range dl {
		if d.Subject != "notify.dead.sms" || d.Reason != ledger.ReasonUndelivered || d.Detail != detail {
			t.Errorf("dead letter %s reason %q detail %q", d.Subject, d.Reason, d.Detail)
		}
		var body struct{ ID, Tenant string }
		if err := json.Unmarshal(d.Data, &body); err != nil {
			t.Fatal(err)
		}
		tenants[body.Tenant+"/"+body.ID]++
	}
	if tenants["acme/otp-2"] != 1 || tenants["/otp-2"] != 1 || tenants["/otp-3"] != 1 {
		t.Errorf("dead letters by tenant/id: %v, want acme/otp-2, /otp-2 and /otp-3 once each", tenants)
	}
	if err := p.d.ReportDelivery(ctx, "fax-gw", "", "x", "failed", 0, ""); err == nil {
		t.Error("a report for an unknown provider was taken")
	}
}

// TestStartLiftsACredentialsPause: a process that starts (with a new
// secret in its environment, say) lifts a pause left for refused
// credentials, fleet-wide, as a reload does; a 429's pause it leaves.
func TestStartLiftsACredentialsPause(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	ctx := context.Background()
	rdb := b.redis.Client()
	q := leakyRedis(t, rdb, b.prefix)
	if err := fleet.RedisPauseReasons(rdb, b.prefix).SetCredentials(ctx, "sms-gw", time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"sms-gw", "push-gw"} {
		if err := q.Pause(ctx, p, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	b.start(nil)
	b.publish(newJob("after-start", "sms", "u1"))
	testenv.WaitFor(t, 10*time.Second, "the job sent", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	if d, err := q.PausedFor(ctx, "push-gw"); err != nil || d < 50*time.Minute {
		t.Errorf("push-gw's 429 pause: %v left (%v), want it kept", d, err)
	}
}

// TestRefusedSenderIsProbedAndResumed is the scenario: a webhook
// whose token the provider refuses (401) for 10 s, then accepts again,
// with max_pause at its default 5 minutes and no reload. Two dispatchers.
// The provider is paused fleet-wide at the first refusal; once per
// probe_interval one job goes through as the fleet's probe; the first
// probe after the recovery resumes the provider everywhere. No job is
// dead-lettered, only a few requests were answered 401, and every job is
// sent once within probe_interval (and its jitter) of the recovery.
func TestRefusedSenderIsProbedAndResumed(t *testing.T) {
	measures(t)
	b := setup(t, setupOpts{getenv: envOf(map[string]string{"HOOK_TOKEN": "s3cret"})})
	const probe = 3 * time.Second
	for i := range b.pcfgs {
		b.pcfgs[i].ProbeInterval = probe
		b.pcfgs[i].CredentialsEnv = "HOOK_TOKEN"
	}
	p1 := b.start(nil)
	p2 := b.start(nil)
	b.fake.FailFor(10*time.Second, http.StatusUnauthorized)
	ids := b.publishN("key", "sms", 200, 200)
	recovered := time.Now().Add(10 * time.Second)
	if localenv.WaitFor(60*time.Second, func() error {
		if len(b.fake.AcceptedIDs()) < len(ids) {
			return errors.New("not every job sent")
		}
		return nil
	}) != nil {
		t.Fatalf("waited 60s for every job sent: %d of %d sent, %d answered 401, %d dead letters; the log on probes and on the jobs not sent:\n%s",
			len(b.fake.AcceptedIDs()), len(ids), b.fake.Count(http.StatusUnauthorized), len(b.deadLetters()), b.logOfUnsent(ids, "probe", "resum"))
	}
	after := time.Since(recovered)
	b.acceptedOnce(ids)
	if dl := b.deadLetters(); len(dl) != 0 {
		t.Fatalf("%d dead letters, want none: a refused key pauses", len(dl))
	}
	refused := b.fake.Count(http.StatusUnauthorized)
	probes := 0.0
	for _, p := range []*proc{p1, p2} {
		probes += p.count(p.d.m.Probes.WithLabelValues("sms-gw", "sent")) + p.count(p.d.m.Probes.WithLabelValues("sms-gw", "refused"))
	}
	t.Logf("401 answers: %d; probes: %v; every job sent %s after the recovery", refused, probes, after.Round(time.Millisecond))
	if refused > 2*16+int(10*time.Second/probe)+2 {
		t.Errorf("%d requests answered 401: more than the jobs under way at the first refusal and one probe per interval", refused)
	}
	if after > probe+probe/2+5*time.Second {
		t.Errorf("every job sent %s after the recovery, want within probe_interval (%s) and its jitter, plus the sends", after.Round(time.Millisecond), probe)
	}
	if probes < 1 {
		t.Errorf("no probe counted")
	}
}

// TestAPauseNotHeardOfHoldsNoWorker: a provider paused for an hour by
// another process, which this one's pause watcher has not heard of (its
// watcher is never fed here), refuses the job's reservation for the
// pause's length. The job goes back to JetStream (a provider_paused
// deferral) instead of holding its worker for the hour, so once the pause
// is lifted it is sent within the hand-back's wait. Before, a worker slept
// through the pause and a probe's resume (TestRefusedSenderIsProbedAndResumed
// on a loaded machine).
func TestAPauseNotHeardOfHoldsNoWorker(t *testing.T) {
	waits(t)
	b := setup(t, setupOpts{})
	ctx := context.Background()
	q := leakyRedis(t, b.redis.Client(), b.prefix)
	p := b.start(func(o *Options) { o.Limits.Watch = nil })
	if err := q.Pause(ctx, "sms-gw", time.Hour); err != nil {
		t.Fatal(err)
	}
	b.publish(newJob("unheard", "sms", "u1"))
	testenv.WaitFor(t, 10*time.Second, "the job handed back as paused", func() bool {
		return p.count(p.d.m.Deferrals.WithLabelValues(LayerProvider, "paused")) >= 1 && p.d.inFlight.Load() == 0
	})
	if _, err := q.Resume(ctx, "sms-gw", limits.Contract(b.pcfgs[0])); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, handBackMax+5*time.Second, "the job sent after the resume", func() bool { return len(b.fake.AcceptedIDs()) == 1 })
	b.acceptedOnce([]string{"unheard"})
}

// logOfUnsent is the log's lines about the jobs of ids the fake has not
// accepted, and those holding any of words: what a test that waited in
// vain prints for its reader.
func (b *bundle) logOfUnsent(ids []string, words ...string) string {
	sent := map[string]bool{}
	for _, id := range b.fake.AcceptedIDs() {
		sent[id] = true
	}
	for _, id := range ids {
		if !sent[id] {
			words = append(words, `"job":"`+id+`"`)
		}
	}
	var lines []string
	for _, l := range strings.Split(b.logs.String(), "\n") {
		if slices.ContainsFunc(words, func(w string) bool { return strings.Contains(l, w) }) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}
