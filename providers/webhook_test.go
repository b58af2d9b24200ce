package providers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/providers/providertest"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

const hookToken = "hook-s3cret-token-value"

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func newWebhook(t *testing.T, url string, timeout time.Duration, edits ...func(*providers.Config)) *providers.Webhook {
	t.Helper()
	cfg := providers.Config{
		Name: "sms-gateway", Channel: "sms", Kind: "webhook", URL: url, Rate: 100,
		Timeout: timeout, CredentialsEnv: "HOOK_TOKEN",
	}
	for _, edit := range edits {
		edit(&cfg)
	}
	w, err := providers.NewWebhook(cfg, providers.Options{Getenv: env(map[string]string{"HOOK_TOKEN": hookToken}), Version: "1.2.3"})
	if err != nil {
		t.Fatalf("NewWebhook: %v", err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// noRetryOnTimeout sets retry_on_timeout: false.
func noRetryOnTimeout(c *providers.Config) { c.RetryOnTimeout = new(false) }

func smsMessage() *providers.Message {
	return &providers.Message{Job: queue.Job{
		ID: "job-42", UserID: "user-7", Channel: "sms", To: "+447700900123",
		Body: "Your code is 493817", Data: map[string]string{"k": "v"},
	}}
}

func TestWebhookConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Target{
		New: func(t *testing.T, url string, timeout time.Duration) providers.Provider {
			return newWebhook(t, url, timeout)
		},
		Message: smsMessage,
		Refusal: providertest.Reply{Status: 400, Header: http.Header{"Content-Type": {"application/json"}},
			Body: `{"error":{"code":"invalid_number","message":"number is not reachable"}}`},
		RefusalReason:  "number is not reachable",
		Secrets:        []string{hookToken},
		SenderStatuses: []int{401}, // the request's authentication refused
		NoRetryOnTimeout: func(t *testing.T, url string, timeout time.Duration) providers.Provider {
			return newWebhook(t, url, timeout, noRetryOnTimeout)
		},
		Gone:         providertest.Reply{Status: 410, Body: `{"reason":"no such recipient"}`},
		GoneStatuses: []int{410},
	})
}

func TestWebhookWireProtocol(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeProvider(t)
	w := newWebhook(t, fake.URL(), 5*time.Second)
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	created := exp.Add(-time.Minute)
	full := &providers.Message{Job: queue.Job{
		ID: "job-1", UserID: "u-1", Channel: "push", To: "tok-abcdefghijkl", Body: "hello <b>&</b> ünïcode 🎉",
		Title: "Hi", Data: map[string]string{"a": "1", "b": "2"}, Provider: "sms-gateway",
		Tenant: "acme", Category: "transactional", ExpiresAt: exp, CreatedAt: created,
	}}
	minimal := &providers.Message{Job: queue.Job{ID: "job-2", UserID: "u-2", Channel: "sms", To: "+447700900123", Body: "x"}}
	for _, m := range []*providers.Message{full, minimal} {
		if err := w.Send(context.Background(), m); err != nil {
			t.Fatalf("Send %s: %v", m.ID, err)
		}
	}

	reqs := fake.Accepted()
	if len(reqs) != 2 {
		t.Fatalf("fake accepted %d requests, want 2", len(reqs))
	}
	for i, m := range []*providers.Message{full, minimal} {
		r := reqs[i]
		for header, want := range map[string]string{
			"Content-Type":    "application/json",
			"Idempotency-Key": `"` + m.ID + `"`, // a structured-field String
			"User-Agent":      "notifier/1.2.3",
			"Authorization":   "Bearer " + hookToken,
		} {
			if got := r.Header.Get(header); got != want {
				t.Errorf("%s: header %s = %q, want %q", m.ID, header, got, want)
			}
		}
		if r.ID != m.ID || r.Method != http.MethodPost || r.Path != "/send" {
			t.Errorf("%s: recorded id %q %s %s", m.ID, r.ID, r.Method, r.Path)
		}
		var got providers.Message
		if err := json.Unmarshal(r.Body, &got); err != nil {
			t.Fatalf("%s: body is not JSON: %v", m.ID, err)
		}
		if fmt.Sprint(got.ExpiresAt) != fmt.Sprint(m.ExpiresAt) || fmt.Sprint(got.CreatedAt) != fmt.Sprint(m.CreatedAt) {
			t.Errorf("%s: times %v %v, want %v %v", m.ID, got.ExpiresAt, got.CreatedAt, m.ExpiresAt, m.CreatedAt)
		}
		got.ExpiresAt, got.CreatedAt = m.ExpiresAt, m.CreatedAt
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", *m) {
			t.Errorf("%s: body decodes to %+v, want %+v", m.ID, got, *m)
		}
	}

	// The body's keys are exactly SPEC §2's field names; optional ones are
	// left out when empty.
	keysOf := func(b []byte) []string {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return keys
	}
	spec := []string{"body", "category", "channel", "created_at", "data", "expires_at", "id", "provider", "tenant", "title", "to", "user_id"}
	if got := keysOf(reqs[0].Body); !slices.Equal(got, spec) {
		t.Errorf("full message keys %v, want %v", got, spec)
	}
	if got, want := keysOf(reqs[1].Body), []string{"body", "channel", "id", "to", "user_id"}; !slices.Equal(got, want) {
		t.Errorf("minimal message keys %v, want %v", got, want)
	}
	if !strings.Contains(string(reqs[0].Body), `"expires_at":"2030-01-02T03:04:05Z"`) ||
		!strings.Contains(string(reqs[0].Body), `<b>&</b>`) {
		t.Errorf("body %s: want RFC 3339 times and unescaped text", reqs[0].Body)
	}
}

func TestWebhookAgainstFakeProviderErrors(t *testing.T) {
	t.Parallel()
	// A frozen clock: every request arrives at the same instant, so the
	// contract's window never moves on.
	frozen := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	fake := testenv.FakeProvider(t, testenv.WithContract(2), testenv.WithClock(func() time.Time { return frozen }))
	w := newWebhook(t, fake.URL(), 200*time.Millisecond)
	ctx := context.Background()

	fake.FailNext(1, 503)
	if err := w.Send(ctx, smsMessage()); !errors.Is(err, providers.ErrTransient) {
		t.Errorf("injected 503: %v, want transient", err)
	}
	fake.FailNext(1, 400)
	err := w.Send(ctx, smsMessage())
	if !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "injected 400") {
		t.Errorf("injected 400: %v, want permanent with the fake's reason", err)
	}
	fake.RateLimitFor(time.Hour, "12")
	var rl *providers.RateLimitedError
	if err := w.Send(ctx, smsMessage()); !errors.As(err, &rl) || rl.RetryAfter != 12*time.Second || !rl.Explicit {
		t.Errorf("rate limited: %v, want RetryAfter 12s", err)
	}
	fake.Reset()
	fake.HangFor(time.Hour)
	if err := w.Send(ctx, smsMessage()); !errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("hung provider: %v, want a transient timeout", err)
	}
	fake.Reset()

	// The contract: two accepted, the third in the same second is a 429
	// whose Retry-After is at most a second.
	for i := range 2 {
		if err := w.Send(ctx, smsMessage()); err != nil {
			t.Fatalf("send %d within the contract: %v", i, err)
		}
	}
	if err := w.Send(ctx, smsMessage()); !errors.As(err, &rl) || rl.RetryAfter != time.Second || !rl.Explicit {
		t.Errorf("third send in the same second: %v, want rate limited for 1s", err)
	}
	if got := fake.Duplicates(); !slices.Equal(got, []string{"job-42"}) {
		t.Errorf("duplicates %v: the same job accepted twice must show up", got)
	}
}

// TestWebhookAmbiguous: the receiver took the request and its answer never
// came: transient and ambiguous. A request that never reached it is not.
func TestWebhookAmbiguous(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeProvider(t)
	p := newWebhook(t, fake.URL(), time.Second)
	fake.AcceptThenHang(time.Hour)
	err := p.Send(context.Background(), smsMessage())
	var pe *providers.Error
	if !errors.As(err, &pe) || !errors.Is(err, providers.ErrTransient) || !pe.Ambiguous {
		t.Fatalf("accepted, then no answer: %v, want transient and ambiguous", err)
	}
	if got := fake.AcceptedIDs(); !slices.Equal(got, []string{"job-42"}) {
		t.Errorf("AcceptedIDs = %v", got)
	}
	fake.Reset()
	fake.FailNext(1, 503)
	if err := p.Send(context.Background(), smsMessage()); !errors.As(err, &pe) || pe.Ambiguous {
		t.Errorf("503: %v, want not ambiguous (an answer came back)", err)
	}
	fake.Close()
	if err := p.Send(context.Background(), smsMessage()); !errors.As(err, &pe) || pe.Ambiguous {
		t.Errorf("connection refused: %v, want not ambiguous", err)
	}
}

func TestWebhookRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeProvider(t)
	srv := newRedirector(t, fake.URL())
	w := newWebhook(t, srv, 5*time.Second)
	err := w.Send(context.Background(), smsMessage())
	if !errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "302") {
		t.Fatalf("redirect: %v, want a transient error naming the status", err)
	}
	if n := len(fake.Requests()); n != 0 {
		t.Fatalf("the redirect was followed: the target got %d requests", n)
	}
}

func TestWebhookSecretIsNotPrinted(t *testing.T) {
	t.Parallel()
	w := newWebhook(t, "http://127.0.0.1:1/send", time.Second)
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(format, w); strings.Contains(s, hookToken) {
			t.Errorf("Sprintf(%q, webhook) prints the token: %s", format, s)
		}
	}
	if s := fmt.Sprintf("%+v", *w); strings.Contains(s, hookToken) {
		t.Errorf("printing the struct value prints the token: %s", s)
	}
}

func TestNewWebhookErrors(t *testing.T) {
	t.Parallel()
	base := providers.Config{Name: "hook", Channel: "sms", Kind: "webhook", URL: "http://127.0.0.1:1/", Rate: 1}
	missing := base
	missing.CredentialsEnv = "HOOK_TOKEN"
	_, err := providers.NewWebhook(missing, providers.Options{Getenv: env(nil)})
	if err == nil || !strings.Contains(err.Error(), "HOOK_TOKEN is not set") {
		t.Errorf("missing token: %v", err)
	}
	wrongKind := base
	wrongKind.Kind = "log"
	wrongKind.URL = ""
	if _, err := providers.NewWebhook(wrongKind, providers.Options{}); err == nil {
		t.Error("NewWebhook accepted a log entry")
	}
	bad := base
	bad.URL = "ftp://x"
	if _, err := providers.NewWebhook(bad, providers.Options{}); err == nil || !strings.Contains(err.Error(), "url:") {
		t.Errorf("bad url: %v", err)
	}
}

// TestWebhookTLSCAFile: tls_ca_file replaces the system roots; without it
// the test CA is not trusted.
func TestWebhookTLSCAFile(t *testing.T) {
	t.Parallel()
	certs := testenv.NewCerts(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(202) }))
	srv.TLS = serverTLS(t, certs)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	srv.StartTLS()
	t.Cleanup(srv.Close)
	build := func(ca string) *providers.Webhook {
		w, err := providers.NewWebhook(providers.Config{Name: "hook", Channel: "sms", Kind: "webhook", URL: srv.URL, Rate: 1,
			TLSCAFile: ca}, providers.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close() })
		return w
	}
	if err := build(certs.CAFile).Send(context.Background(), smsMessage()); err != nil {
		t.Errorf("trusting the CA: %v", err)
	}
	if err := build("").Send(context.Background(), smsMessage()); !errors.Is(err, providers.ErrTransient) ||
		!strings.Contains(err.Error(), "certificate") {
		t.Errorf("system roots: %v, want a transient certificate error", err)
	}
}

// TestWebhookRefusedTokenIsTheSender: a 401 is about the request's
// authentication, never about the job: with a bearer token configured it
// says the token was refused, and without one that the receiver wants
// something the configuration does not give (a token, a signature, an
// allowed address). Either way ErrSender (the dispatcher pauses the
// provider and keeps its jobs), not a refusal of the message: an outside
// test saw 500 of 500 jobs dead-lettered by a 401 without credentials_env.
// A 403 stays permanent (the receiver may refuse that one message).
func TestWebhookRefusedTokenIsTheSender(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeProvider(t)
	w := newWebhook(t, fake.URL(), time.Second)
	ctx := context.Background()
	fake.FailNext(1, 401)
	err := w.Send(ctx, smsMessage())
	if !errors.Is(err, providers.ErrSender) || errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "bearer token was refused") {
		t.Errorf("401 with a token: %v, want ErrSender naming the token", err)
	}
	fake.FailNext(1, 403)
	if err := w.Send(ctx, smsMessage()); !errors.Is(err, providers.ErrPermanent) {
		t.Errorf("403 with a token: %v, want permanent", err)
	}
	open, err := providers.NewWebhook(providers.Config{Name: "open", Channel: "sms", Kind: "webhook", URL: fake.URL(), Rate: 100, Timeout: time.Second}, providers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	for i := range 3 {
		fake.FailNext(1, 401)
		if err := open.Send(ctx, smsMessage()); !errors.Is(err, providers.ErrSender) || errors.Is(err, providers.ErrPermanent) {
			t.Errorf("401 without a token, send %d: %v, want ErrSender", i, err)
		}
	}
}

// TestWebhookTransportResends: what retry_on_timeout: false closes and
// what it leaves to the receiver. The receiver answers the first request
// of each connection and, on the second, reads it whole and closes the
// connection without an answer. With retry_on_timeout true (the default)
// net/http itself sends the request again on a new connection, unseen by
// the dispatcher, because it carries Idempotency-Key (Request.isReplayable):
// the receiver gets it twice and must drop the copy by its key. With false
// it gets it once, and the failure is ambiguous (the conformance suite's
// NoReplayWithoutRetryOnTimeout holds every kind to that).
func TestWebhookTransportResends(t *testing.T) {
	t.Parallel()
	for _, retry := range []bool{true, false} {
		url, requests := providertest.DropSecondRequest(t, providertest.Reply{Status: 200})
		w := newWebhook(t, url, 5*time.Second, func(c *providers.Config) { c.RetryOnTimeout = new(retry) })
		for i := range 2 {
			err := w.Send(context.Background(), smsMessage())
			var pe *providers.Error
			switch {
			case i == 0 || retry:
				if err != nil {
					t.Errorf("retry_on_timeout %v, send %d: %v", retry, i, err)
				}
			case !errors.As(err, &pe) || !pe.Ambiguous:
				t.Errorf("retry_on_timeout false, send %d: %v, want ambiguous", i, err)
			}
		}
		want := int32(2)
		if retry {
			want = 3
		}
		if n := requests.Load(); n != want {
			t.Errorf("retry_on_timeout %v: the receiver got %d requests for 2 sends, want %d", retry, n, want)
		}
	}
}
