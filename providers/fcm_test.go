package providers_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/providers/providertest"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

const fcmToken = "fcm-bearer-t0ken-value"

func pushMessage() *providers.Message {
	return &providers.Message{Job: queue.Job{ID: "job-42", UserID: "user-7", Channel: "push", To: "dKx9-device:APA91b" + strings.Repeat("Q", 140),
		Title: "Hello", Body: "Your code is 493817", Data: map[string]string{"k": "v"}}}
}

func newFCM(t *testing.T, cfg providers.Config, token string, opts providers.Options) *providers.FCM {
	t.Helper()
	cfg.Name, cfg.Channel, cfg.Kind, cfg.Rate = "push-fcm", "push", "fcm", 10
	if cfg.ProjectID == "" {
		cfg.ProjectID = "notifier-test"
	}
	if cfg.CredentialsFile == "" {
		cfg.CredentialsEnv = "FCM_TOKEN"
	}
	opts.Getenv = env(map[string]string{"FCM_TOKEN": token})
	p, err := providers.NewFCM(cfg, opts)
	if err != nil {
		t.Fatalf("NewFCM: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestFCMConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Target{
		New: func(t *testing.T, url string, timeout time.Duration) providers.Provider {
			return newFCM(t, providers.Config{URL: url, Timeout: timeout}, fcmToken, providers.Options{})
		},
		Message:  pushMessage,
		Accepted: providertest.Reply{Status: 200, Body: `{"name":"projects/notifier-test/messages/0:1500415314455276%31bd1c9631bd1c96"}`},
		Refusal: providertest.Reply{Status: 400, Header: http.Header{"Content-Type": {"application/json"}},
			Body: `{"error":{"code":400,"message":"The registration token is not a valid FCM registration token","status":"INVALID_ARGUMENT",` +
				`"details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"INVALID_ARGUMENT"}]}}`},
		RefusalReason:  "INVALID_ARGUMENT: The registration token is not a valid FCM registration token",
		Secrets:        []string{fcmToken},
		SenderStatuses: []int{http.StatusUnauthorized}, // the configured token refused
		NoRetryOnTimeout: func(t *testing.T, url string, timeout time.Duration) providers.Provider {
			return newFCM(t, providers.Config{URL: url, Timeout: timeout, RetryOnTimeout: new(false)}, fcmToken, providers.Options{})
		},
		Gone: providertest.Reply{Status: 404, Header: http.Header{"Content-Type": {"application/json"}},
			Body: `{"error":{"code":404,"message":"Requested entity was not found.","status":"NOT_FOUND",` +
				`"details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}`},
	})
}

func googleBody(code int, status, errorCode, message string) string {
	details := ""
	if errorCode != "" {
		details = `,"details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"` + errorCode + `"}]`
	}
	return `{"error":{"code":` + itoa(code) + `,"message":"` + message + `","status":"` + status + `"` + details + `}}`
}

// quotaBody is a 429 QUOTA_EXCEEDED whose google.rpc.QuotaFailure has the
// violations (subject, description pairs).
func quotaBody(violations ...[2]string) string {
	var vs []string
	for _, v := range violations {
		vs = append(vs, `{"subject":"`+v[0]+`","description":"`+v[1]+`"}`)
	}
	return `{"error":{"code":429,"message":"Quota exceeded.","status":"RESOURCE_EXHAUSTED","details":[` +
		`{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"QUOTA_EXCEEDED"},` +
		`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[` + strings.Join(vs, ",") + `]}]}}`
}

// TestFCMAnswers maps google.rpc error bodies.
func TestFCMAnswers(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		status int
		header http.Header
		body   string
		class  error
		detail string
		after  time.Duration   // a rate limit's RetryAfter, always explicit
		scope  providers.Scope // a rate limit's scope
	}{
		{"unregistered", 404, nil, googleBody(404, "NOT_FOUND", "UNREGISTERED", "Requested entity was not found."), providers.ErrPermanent,
			"HTTP 404 Not Found: UNREGISTERED (NOT_FOUND): Requested entity was not found.", 0, 0},
		{"invalid argument", 400, nil, googleBody(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token"),
			providers.ErrPermanent, "HTTP 400 Bad Request: INVALID_ARGUMENT: The registration token is not a valid FCM registration token", 0, 0},
		{"invalid argument without details", 400, nil, googleBody(400, "INVALID_ARGUMENT", "", "Invalid JSON payload received."),
			providers.ErrPermanent, "INVALID_ARGUMENT: Invalid JSON payload received.", 0, 0},
		{"sender id mismatch: the token is another project's", 403, nil, googleBody(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH", "SenderId mismatch"),
			providers.ErrPermanent, "SENDER_ID_MISMATCH (PERMISSION_DENIED)", 0, 0},
		{"permission denied: the credentials may not send", 403, nil, googleBody(403, "PERMISSION_DENIED", "",
			"Permission 'cloudmessaging.messages.create' denied on resource"), providers.ErrSender, "PERMISSION_DENIED: Permission", 0, 0},
		{"third party auth", 401, nil, googleBody(401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR", "Auth error from APNS or Web Push Service"),
			providers.ErrSender, "THIRD_PARTY_AUTH_ERROR", 0, 0},
		{"bad bearer token", 401, nil, googleBody(401, "UNAUTHENTICATED", "", "Request had invalid authentication credentials."),
			providers.ErrSender, "UNAUTHENTICATED", 0, 0},
		{"401 without a google body", 401, nil, "Unauthorized", providers.ErrSender, "HTTP 401 Unauthorized", 0, 0},
		{"quota, no detail: the project's, a minute at least", 429, http.Header{"Retry-After": {"9"}},
			googleBody(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", "Quota exceeded."),
			providers.ErrRateLimited, "QUOTA_EXCEEDED (RESOURCE_EXHAUSTED)", time.Minute, providers.ScopeProvider},
		{"quota, Retry-After over a minute", 429, http.Header{"Retry-After": {"90"}}, quotaBody([2]string{"project:123", "Message rate exceeded"}),
			providers.ErrRateLimited, "QUOTA_EXCEEDED", 90 * time.Second, providers.ScopeProvider},
		{"quota of one device", 429, nil, quotaBody([2]string{"device", "Device message rate exceeded"}),
			providers.ErrRateLimited, "QUOTA_EXCEEDED", time.Minute, providers.ScopeRecipient},
		{"quota of one device, named in the description", 429, nil, quotaBody([2]string{"project:123", "Message rate limit exceeded for device"}),
			providers.ErrRateLimited, "QUOTA_EXCEEDED", time.Minute, providers.ScopeRecipient},
		{"quota of a topic", 429, nil, quotaBody([2]string{"topic:news", "Topic message rate exceeded"}),
			providers.ErrRateLimited, "QUOTA_EXCEEDED", time.Minute, providers.ScopeRecipient},
		{"device and project quotas: the project's wins", 429, nil,
			quotaBody([2]string{"device", "Device message rate exceeded"}, [2]string{"project:123", "Message rate exceeded"}),
			providers.ErrRateLimited, "QUOTA_EXCEEDED", time.Minute, providers.ScopeProvider},
		{"project quota in an ErrorInfo", 429, nil, `{"error":{"code":429,"message":"Quota exceeded for quota metric 'Send requests'",` +
			`"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMIT_EXCEEDED",` +
			`"domain":"googleapis.com"}]}}`, providers.ErrRateLimited, "RESOURCE_EXHAUSTED", time.Minute, providers.ScopeProvider},
		{"overloaded, no quota named", 429, http.Header{"Retry-After": {"9"}}, googleBody(429, "RESOURCE_EXHAUSTED", "", "Overloaded."),
			providers.ErrRateLimited, "RESOURCE_EXHAUSTED", 9 * time.Second, providers.ScopeProvider},
		{"unavailable", 503, http.Header{"Retry-After": {"11"}}, googleBody(503, "UNAVAILABLE", "UNAVAILABLE", "The service is currently unavailable."),
			providers.ErrTransient, "UNAVAILABLE: The service is currently unavailable., retry after 11s", 0, 0},
		{"internal", 500, nil, googleBody(500, "INTERNAL", "INTERNAL", "Internal error encountered."), providers.ErrTransient, "INTERNAL", 0, 0},
		{"malformed body", 404, nil, `{"error":{"code":404,"status":`, providers.ErrPermanent, "HTTP 404 Not Found", 0, 0},
		{"html body", 502, nil, "<html><body>Bad Gateway</body></html>", providers.ErrTransient, "HTTP 502 Bad Gateway", 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := newReplier(t, c.status, c.header, c.body)
			err := newFCM(t, providers.Config{URL: srv}, fcmToken, providers.Options{}).Send(context.Background(), pushMessage())
			if !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.detail) {
				t.Fatalf("Send = %v, want %v with %q", err, c.class, c.detail)
			}
			if c.class == providers.ErrSender && errors.Is(err, providers.ErrPermanent) {
				t.Errorf("Send = %v: both ErrSender and ErrPermanent", err)
			}
			var rl *providers.RateLimitedError
			if errors.As(err, &rl) && (rl.RetryAfter != c.after || !rl.Explicit || rl.Scope != c.scope) {
				t.Errorf("RetryAfter %s explicit %v scope %s, want %s explicit, scope %s", rl.RetryAfter, rl.Explicit, rl.Scope, c.after, c.scope)
			}
		})
	}
}

func TestFCMAgainstFake(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeFCM(t)
	p := newFCM(t, providers.Config{URL: fake.URL(), ProjectID: fake.ProjectID()}, fake.BearerToken(), providers.Options{})
	ctx := context.Background()
	m := pushMessage()
	m.Body = "hello <b>&</b> 🎉"
	if err := p.Send(ctx, m); err != nil {
		t.Fatalf("Send: %v", err)
	}
	noTitle := pushMessage()
	noTitle.Title, noTitle.Data = "", nil
	if err := p.Send(ctx, noTitle); err != nil {
		t.Fatalf("Send without title and data: %v", err)
	}
	got := fake.Messages()
	if len(got) != 2 {
		t.Fatalf("fake accepted %d", len(got))
	}
	if got[0].Token != m.To || got[0].Title != "Hello" || got[0].Body != m.Body || got[0].Data["k"] != "v" || got[0].OAuth {
		t.Errorf("message %+v", got[0])
	}
	body := string(fake.Requests()[0].Body)
	if !strings.Contains(body, `<b>&</b>`) || !strings.HasPrefix(body, `{"message":{"token":`) {
		t.Errorf("body %s", body)
	}
	if got[1].Title != "" || got[1].Data != nil {
		t.Errorf("message without title and data %+v", got[1])
	}

	gone := pushMessage()
	gone.To = "uninstalled-" + strings.Repeat("x", 100)
	fake.Unregister(gone.To)
	if err := p.Send(ctx, gone); !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "UNREGISTERED") {
		t.Errorf("unregistered token: %v", err)
	}
	bad := pushMessage()
	bad.To = "short"
	if err := p.Send(ctx, bad); !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "INVALID_ARGUMENT") {
		t.Errorf("malformed token: %v", err)
	}
	reserved := pushMessage()
	reserved.Data = map[string]string{"google.x": "1"}
	sent := len(fake.Requests())
	if err := p.Send(ctx, reserved); !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), `data key "google.x" is reserved by FCM`) {
		t.Errorf("reserved data key: %v", err)
	}
	if n := len(fake.Requests()); n != sent {
		t.Errorf("a reserved data key was sent")
	}
	// The credentials refused: the sender, not the message.
	wrongProject := newFCM(t, providers.Config{URL: fake.URL(), ProjectID: "other"}, fake.BearerToken(), providers.Options{})
	if err := wrongProject.Send(ctx, pushMessage()); !errors.Is(err, providers.ErrSender) || !strings.Contains(err.Error(), "PERMISSION_DENIED") {
		t.Errorf("wrong project: %v", err)
	}
	wrongToken := newFCM(t, providers.Config{URL: fake.URL(), ProjectID: fake.ProjectID()}, "nope", providers.Options{})
	if err := wrongToken.Send(ctx, pushMessage()); !errors.Is(err, providers.ErrSender) || !strings.Contains(err.Error(), "UNAUTHENTICATED") {
		t.Errorf("wrong bearer token: %v", err)
	}
	fake.FailNext(1, http.StatusUnauthorized) // the configured token expired
	if err := p.Send(ctx, pushMessage()); !errors.Is(err, providers.ErrSender) || !strings.Contains(err.Error(), "UNAUTHENTICATED") {
		t.Errorf("injected 401: %v", err)
	}
	fake.ErrorCodeFor(http.StatusUnauthorized, "THIRD_PARTY_AUTH_ERROR")
	fake.FailNext(1, http.StatusUnauthorized)
	if err := p.Send(ctx, pushMessage()); !errors.Is(err, providers.ErrSender) || !strings.Contains(err.Error(), "THIRD_PARTY_AUTH_ERROR") {
		t.Errorf("injected THIRD_PARTY_AUTH_ERROR: %v", err)
	}
	fake.FailNext(1, 503)
	if err := p.Send(ctx, pushMessage()); !errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "UNAVAILABLE") {
		t.Errorf("injected 503: %v", err)
	}
	// FCM's quota: a minute at least, whatever the Retry-After.
	fake.RateLimitFor(time.Hour, "3")
	var rl *providers.RateLimitedError
	if err := p.Send(ctx, pushMessage()); !errors.As(err, &rl) || rl.RetryAfter != time.Minute || !rl.Explicit ||
		rl.Scope != providers.ScopeProvider || !strings.Contains(err.Error(), "QUOTA_EXCEEDED") {
		t.Errorf("rate limited: %v", err)
	}
	fake.Reset()
	busy := pushMessage()
	busy.To = "busy-device-" + strings.Repeat("b", 40)
	fake.ThrottleDevice(busy.To)
	if err := p.Send(ctx, busy); !errors.As(err, &rl) || rl.Scope != providers.ScopeRecipient || rl.RetryAfter != time.Minute {
		t.Errorf("throttled device: %v, want a recipient-scoped limit of a minute", err)
	}
	// FCM took it and the answer was lost.
	fake.AcceptThenHang(time.Hour)
	hung := newFCM(t, providers.Config{URL: fake.URL(), ProjectID: fake.ProjectID(), Timeout: time.Second}, fake.BearerToken(), providers.Options{})
	var pe *providers.Error
	if err := hung.Send(ctx, pushMessage()); !errors.As(err, &pe) || !errors.Is(err, providers.ErrTransient) || !pe.Ambiguous {
		t.Errorf("accepted, then no answer: %v, want transient and ambiguous", err)
	}
	fake.Reset()
	if n := len(fake.Messages()); n != 3 {
		t.Errorf("%d accepted, want 3", n)
	}
}

// TestFCMExpiry: expires_at goes to every platform: android.ttl (the whole
// seconds left, within 0 and 28 days), apns-expiration (UNIX seconds) and
// the web push TTL; no expiry leaves FCM's defaults.
func TestFCMExpiry(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeFCM(t)
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	p := newFCM(t, providers.Config{URL: fake.URL(), ProjectID: fake.ProjectID()}, fake.BearerToken(),
		providers.Options{Now: func() time.Time { return now }})
	cases := []struct {
		left                  time.Duration
		ttl, apns, webpushTTL string
	}{
		{5*time.Minute + 500*time.Millisecond, "300s", "1893499500", "300"},
		{-time.Minute, "0s", "1893499140", "0"}, // expired: now or never
		{60 * 24 * time.Hour, "2419200s", "1898683200", "2419200"},
	}
	for _, c := range cases {
		m := pushMessage()
		exp := now.Add(c.left)
		m.ExpiresAt = exp
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatalf("expiry in %s: %v", c.left, err)
		}
	}
	if err := p.Send(context.Background(), pushMessage()); err != nil {
		t.Fatal(err)
	}
	got := fake.Messages()
	for i, c := range cases {
		if m := got[i]; m.AndroidTTL != c.ttl || m.APNsExpiration != c.apns || m.WebpushTTL != c.webpushTTL {
			t.Errorf("expiry in %s: ttl %q, apns-expiration %q, webpush TTL %q; want %q %q %q",
				c.left, m.AndroidTTL, m.APNsExpiration, m.WebpushTTL, c.ttl, c.apns, c.webpushTTL)
		}
	}
	if m := got[len(got)-1]; m.AndroidTTL != "" || m.APNsExpiration != "" || m.WebpushTTL != "" {
		t.Errorf("no expiry: %+v, want FCM's defaults", m)
	}
	if body := string(fake.Requests()[len(got)-1].Body); strings.Contains(body, "android") || strings.Contains(body, "apns") {
		t.Errorf("a message without expiry sends platform options: %s", body)
	}
}

// TestFCMDataLimit: data over 4096 bytes, keys and values, is refused
// before any request.
func TestFCMDataLimit(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeFCM(t)
	p := newFCM(t, providers.Config{URL: fake.URL(), ProjectID: fake.ProjectID()}, fake.BearerToken(), providers.Options{})
	m := pushMessage()
	m.Data = map[string]string{"k": strings.Repeat("v", providers.FCMMaxData-1)}
	if err := p.Send(context.Background(), m); err != nil {
		t.Fatalf("4096 bytes: %v", err)
	}
	m.Data["k2"] = "v"
	err := p.Send(context.Background(), m)
	if !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "data of 4099 bytes is over FCM's limit of 4096") {
		t.Errorf("4099 bytes: %v", err)
	}
	for _, key := range []string{"from", "message_type", "gcm.notification.x", "googleAnalytics"} {
		m := pushMessage()
		m.Data = map[string]string{key: "1"}
		if err := p.Send(context.Background(), m); !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("data key %q: %v", key, err)
		}
	}
	if n := len(fake.Requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// clock is a manual clock shared by a provider and a fake.
func newClock() *testenv.Clock { return testenv.NewClock(time.Now()) }

// TestFCMServiceAccount: the key is exchanged for an access token at its
// token_uri, cached until a minute before it expires, fetched again after,
// and dropped when FCM refuses it.
func TestFCMServiceAccount(t *testing.T) {
	t.Parallel()
	clk := newClock()
	fake := testenv.FakeFCM(t, testenv.WithClock(clk.Now))
	p := newFCM(t, providers.Config{URL: fake.URL(), ProjectID: fake.ProjectID(), CredentialsFile: fake.ServiceAccountFile()},
		"", providers.Options{Now: clk.Now})
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := p.Send(ctx, pushMessage()); err != nil {
				t.Errorf("Send: %v", err)
			}
		})
	}
	wg.Wait()
	if n := fake.TokenRequests(); n != 1 {
		t.Fatalf("8 concurrent sends fetched %d tokens, want 1", n)
	}
	for _, m := range fake.Messages() {
		if !m.OAuth {
			t.Fatalf("a message was not sent with an issued token")
		}
	}
	clk.Advance(54 * time.Minute)
	if err := p.Send(ctx, pushMessage()); err != nil || fake.TokenRequests() != 1 {
		t.Fatalf("at 54 min: %v, %d token requests, want the cached token", err, fake.TokenRequests())
	}
	// Within five minutes of the expiry: the send goes out with the cached
	// token while a new one is fetched in the background.
	clk.Advance(2 * time.Minute)
	if err := p.Send(ctx, pushMessage()); err != nil {
		t.Fatalf("at 56 min: %v", err)
	}
	testenv.WaitFor(t, 10*time.Second, "a token fetched ahead of the expiry", func() bool { return fake.TokenRequests() == 2 })
	clk.Advance(3*time.Minute + 30*time.Second) // the first token has 30 s left: unusable
	if err := p.Send(ctx, pushMessage()); err != nil || fake.TokenRequests() != 2 {
		t.Fatalf("at 59.5 min: %v, %d token requests, want the token fetched ahead", err, fake.TokenRequests())
	}
	// With no token left at all, the send fetches one itself.
	clk.Advance(2 * time.Hour)
	if err := p.Send(ctx, pushMessage()); err != nil || fake.TokenRequests() != 3 {
		t.Fatalf("after both expired: %v, %d token requests, want 3", err, fake.TokenRequests())
	}

	// FCM refuses the token before its expiry (revoked): transient, and
	// the next send fetches a new one.
	fake.FailNext(1, http.StatusUnauthorized)
	err := p.Send(ctx, pushMessage())
	if !errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "401") {
		t.Fatalf("refused access token: %v, want transient", err)
	}
	if err := p.Send(ctx, pushMessage()); err != nil || fake.TokenRequests() != 4 {
		t.Fatalf("after a refused token: %v, %d token requests, want 4", err, fake.TokenRequests())
	}
	// FCM's APNs credentials refused: the sender, and the access token is
	// fine (kept).
	fake.ErrorCodeFor(http.StatusUnauthorized, "THIRD_PARTY_AUTH_ERROR")
	fake.FailNext(1, http.StatusUnauthorized)
	if err := p.Send(ctx, pushMessage()); !errors.Is(err, providers.ErrSender) || !strings.Contains(err.Error(), "THIRD_PARTY_AUTH_ERROR") {
		t.Fatalf("THIRD_PARTY_AUTH_ERROR: %v, want ErrSender", err)
	}
	if err := p.Send(ctx, pushMessage()); err != nil || fake.TokenRequests() != 4 {
		t.Fatalf("after THIRD_PARTY_AUTH_ERROR: %v, %d token requests, want the token kept (4)", err, fake.TokenRequests())
	}

	// Token endpoint failures, classed like sends.
	clk.Advance(2 * time.Hour)
	fake.FailTokens(1, http.StatusServiceUnavailable)
	if err := p.Send(ctx, pushMessage()); !errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "oauth token: HTTP 503") {
		t.Errorf("token endpoint 503: %v", err)
	}
	// The key revoked: the sender refused, not the message.
	fake.FailTokens(1, http.StatusBadRequest)
	err = p.Send(ctx, pushMessage())
	if !errors.Is(err, providers.ErrSender) || errors.Is(err, providers.ErrPermanent) ||
		!strings.Contains(err.Error(), "oauth token: HTTP 400 Bad Request: Invalid grant") {
		t.Errorf("token endpoint invalid_grant: %v", err)
	}
	if err := p.Send(ctx, pushMessage()); err != nil {
		t.Errorf("after the token endpoint recovered: %v", err)
	}
}

func TestFCMServiceAccountTransport(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeFCM(t)
	key, err := os.ReadFile(fake.ServiceAccountFile())
	if err != nil {
		t.Fatal(err)
	}
	// The key's token_uri points at a port nobody listens on, then at a
	// server that never answers.
	write := func(tokenURI string) string {
		path := filepath.Join(t.TempDir(), "key.json")
		if err := os.WriteFile(path, []byte(strings.Replace(string(key), fake.TokenURL(), tokenURI, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	refused := newFCM(t, providers.Config{URL: fake.URL(), CredentialsFile: write("http://127.0.0.1:1/token")}, "", providers.Options{})
	if err := refused.Send(context.Background(), pushMessage()); !errors.Is(err, providers.ErrTransient) ||
		!strings.Contains(err.Error(), "oauth token: connection refused") {
		t.Errorf("token endpoint refused: %v", err)
	}
	hung := newFCM(t, providers.Config{URL: fake.URL(), CredentialsFile: write(newHanger(t)), Timeout: 200 * time.Millisecond}, "", providers.Options{})
	if err := hung.Send(context.Background(), pushMessage()); !errors.Is(err, providers.ErrTransient) ||
		!strings.Contains(err.Error(), "oauth token: timeout") {
		t.Errorf("token endpoint hung: %v", err)
	}
	busy := newFCM(t, providers.Config{URL: fake.URL(), CredentialsFile: write(newReplier(t, 503, http.Header{"Retry-After": {"7"}},
		`{"error":"internal_failure"}`))}, "", providers.Options{})
	var pe *providers.Error
	if err := busy.Send(context.Background(), pushMessage()); !errors.As(err, &pe) || !errors.Is(err, providers.ErrTransient) ||
		pe.RetryAfter != 7*time.Second {
		t.Errorf("token endpoint 503 with Retry-After: %v, want transient with RetryAfter 7s", err)
	}
	garbage := newReplier(t, 200, nil, "not json")
	junk := newFCM(t, providers.Config{URL: fake.URL(), CredentialsFile: write(garbage)}, "", providers.Options{})
	if err := junk.Send(context.Background(), pushMessage()); !errors.Is(err, providers.ErrTransient) ||
		!strings.Contains(err.Error(), "oauth token: unreadable") {
		t.Errorf("token endpoint answered garbage: %v", err)
	}
	for _, secret := range []string{"PRIVATE KEY", "MII"} {
		for _, p := range []*providers.FCM{refused, hung, junk} {
			if err := p.Send(context.Background(), pushMessage()); err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("error %q leaks the key", err)
			}
		}
	}
}

func TestNewFCMErrors(t *testing.T) {
	t.Parallel()
	base := providers.Config{Name: "push", Channel: "push", Kind: "fcm", Rate: 1, ProjectID: "p"}
	file := func(content string) string {
		path := filepath.Join(t.TempDir(), "key.json")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cases := map[string]struct {
		file string
		want string
	}{
		"missing file": {"/nonexistent/key.json", "credentials_file: open /nonexistent/key.json"},
		"not json":     {file("-----BEGIN PRIVATE KEY-----\nMIIsecret\n-----END PRIVATE KEY-----\n"), "credentials_file"},
		"user creds":   {file(`{"type":"authorized_user","client_id":"x","client_secret":"s3cr3t-client","refresh_token":"r"}`), "service_account"},
	}
	for name, c := range cases {
		cfg := base
		cfg.CredentialsFile = c.file
		_, err := providers.NewFCM(cfg, providers.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
			continue
		}
		for _, leak := range []string{"MIIsecret", "s3cr3t-client"} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("%s: error %q leaks the key", name, err)
			}
		}
	}
	both := base
	both.CredentialsEnv, both.CredentialsFile = "T", "k.json"
	if _, err := providers.NewFCM(both, providers.Options{}); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("both credentials: %v", err)
	}
}

// TestFCMOverloadBacksOffExponentially: FCM overloaded answers 429
// RESOURCE_EXHAUSTED without an FCM code or Retry-After (the fake's
// OverloadFor). Firebase asks for exponential backoff (ErrorCode:
// "if you waited one second before the first retry, wait at least two
// seconds before the next one, then 4 seconds and so on"), where the fcm
// kind paused 1 s every time: a run of them pauses 1 s, 2 s, 4 s, each
// counted once for the requests already on their way; a request accepted
// after a pause ends the run. QUOTA_EXCEEDED without Retry-After starts at
// a minute ("exponential backoff with a minimum initial delay of 1
// minute") and doubles the same way.
func TestFCMOverloadBacksOffExponentially(t *testing.T) {
	t.Parallel()
	clock := newClock()
	fake := testenv.FakeFCM(t, testenv.WithClock(clock.Now))
	p := newFCM(t, providers.Config{URL: fake.URL(), ProjectID: fake.ProjectID()}, fake.BearerToken(), providers.Options{Now: clock.Now})
	ctx := context.Background()
	pause := func(what string, want time.Duration, explicit bool) {
		t.Helper()
		err := p.Send(ctx, pushMessage())
		var rl *providers.RateLimitedError
		if !errors.As(err, &rl) || rl.Scope != providers.ScopeProvider || rl.RetryAfter != want || rl.Explicit != explicit {
			t.Fatalf("%s: %v, want a provider rate limit of %s (explicit %v)", what, err, want, explicit)
		}
	}
	fake.OverloadFor(time.Hour)
	pause("first overload", time.Second, false)
	pause("a request sent during that pause", time.Second, false)
	clock.Advance(time.Second)
	pause("second overload", 2*time.Second, false)
	clock.Advance(2 * time.Second)
	pause("third overload", 4*time.Second, false)
	clock.Advance(4 * time.Second)
	fake.OverloadFor(0)
	if err := p.Send(ctx, pushMessage()); err != nil {
		t.Fatalf("after the overload: %v", err)
	}
	fake.OverloadFor(time.Hour)
	pause("an overload after a success", time.Second, false)
	if n := fake.Count(http.StatusTooManyRequests); n != 5 {
		t.Errorf("the fake answered %d 429s, want 5", n)
	}

	fake.OverloadFor(0)
	clock.Advance(time.Second)
	if err := p.Send(ctx, pushMessage()); err != nil {
		t.Fatal(err)
	}
	fake.RateLimitFor(time.Hour, "") // QUOTA_EXCEEDED of the project, no Retry-After
	pause("quota exceeded", time.Minute, true)
	clock.Advance(time.Minute)
	pause("quota exceeded again", 2*time.Minute, true)
}
