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
	"github.com/notifier/notifier/testenv"
)

const fcmToken = "fcm-bearer-t0ken-value"

func pushMessage() *providers.Message {
	return &providers.Message{ID: "job-42", UserID: "user-7", Channel: "push", To: "dKx9-device:APA91b" + strings.Repeat("Q", 140),
		Title: "Hello", Body: "Your code is 493817", Data: map[string]string{"k": "v"}}
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
		Refusal: providertest.Reply{Status: 404, Header: http.Header{"Content-Type": {"application/json"}},
			Body: `{"error":{"code":404,"message":"Requested entity was not found.","status":"NOT_FOUND",` +
				`"details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}`},
		RefusalReason: "UNREGISTERED (NOT_FOUND): Requested entity was not found.",
		Secrets:       []string{fcmToken},
	})
}

func googleBody(code int, status, errorCode, message string) string {
	details := ""
	if errorCode != "" {
		details = `,"details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"` + errorCode + `"}]`
	}
	return `{"error":{"code":` + itoa(code) + `,"message":"` + message + `","status":"` + status + `"` + details + `}}`
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
	}{
		{"unregistered", 404, nil, googleBody(404, "NOT_FOUND", "UNREGISTERED", "Requested entity was not found."), providers.ErrPermanent,
			"HTTP 404 Not Found: UNREGISTERED (NOT_FOUND): Requested entity was not found."},
		{"invalid argument", 400, nil, googleBody(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token"),
			providers.ErrPermanent, "HTTP 400 Bad Request: INVALID_ARGUMENT: The registration token is not a valid FCM registration token"},
		{"invalid argument without details", 400, nil, googleBody(400, "INVALID_ARGUMENT", "", "Invalid JSON payload received."),
			providers.ErrPermanent, "INVALID_ARGUMENT: Invalid JSON payload received."},
		{"sender id mismatch", 403, nil, googleBody(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH", "SenderId mismatch"),
			providers.ErrPermanent, "SENDER_ID_MISMATCH (PERMISSION_DENIED)"},
		{"third party auth", 401, nil, googleBody(401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR", "Auth error from APNS or Web Push Service"),
			providers.ErrPermanent, "THIRD_PARTY_AUTH_ERROR"},
		{"bad bearer token", 401, nil, googleBody(401, "UNAUTHENTICATED", "", "Request had invalid authentication credentials."),
			providers.ErrPermanent, "UNAUTHENTICATED"},
		{"quota", 429, http.Header{"Retry-After": {"9"}}, googleBody(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", "Quota exceeded."),
			providers.ErrRateLimited, "QUOTA_EXCEEDED (RESOURCE_EXHAUSTED)"},
		{"unavailable", 503, http.Header{"Retry-After": {"11"}}, googleBody(503, "UNAVAILABLE", "UNAVAILABLE", "The service is currently unavailable."),
			providers.ErrTransient, "UNAVAILABLE: The service is currently unavailable., retry after 11s"},
		{"internal", 500, nil, googleBody(500, "INTERNAL", "INTERNAL", "Internal error encountered."), providers.ErrTransient, "INTERNAL"},
		{"malformed body", 404, nil, `{"error":{"code":404,"status":`, providers.ErrPermanent, "HTTP 404 Not Found"},
		{"html body", 502, nil, "<html><body>Bad Gateway</body></html>", providers.ErrTransient, "HTTP 502 Bad Gateway"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := newReplier(t, c.status, c.header, c.body)
			err := newFCM(t, providers.Config{URL: srv}, fcmToken, providers.Options{}).Send(context.Background(), pushMessage())
			if !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.detail) {
				t.Fatalf("Send = %v, want %v with %q", err, c.class, c.detail)
			}
			var rl *providers.RateLimitedError
			if errors.As(err, &rl) && rl.RetryAfter != 9*time.Second {
				t.Errorf("RetryAfter %s, want 9s", rl.RetryAfter)
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
	if err := p.Send(ctx, reserved); !errors.Is(err, providers.ErrPermanent) {
		t.Errorf("reserved data key: %v", err)
	}
	wrongProject := newFCM(t, providers.Config{URL: fake.URL(), ProjectID: "other"}, fake.BearerToken(), providers.Options{})
	if err := wrongProject.Send(ctx, pushMessage()); !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "PERMISSION_DENIED") {
		t.Errorf("wrong project: %v", err)
	}
	wrongToken := newFCM(t, providers.Config{URL: fake.URL(), ProjectID: fake.ProjectID()}, "nope", providers.Options{})
	if err := wrongToken.Send(ctx, pushMessage()); !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "UNAUTHENTICATED") {
		t.Errorf("wrong bearer token: %v", err)
	}
	fake.FailNext(1, 503)
	if err := p.Send(ctx, pushMessage()); !errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "UNAVAILABLE") {
		t.Errorf("injected 503: %v", err)
	}
	fake.RateLimitFor(time.Hour, "3")
	var rl *providers.RateLimitedError
	if err := p.Send(ctx, pushMessage()); !errors.As(err, &rl) || rl.RetryAfter != 3*time.Second || !strings.Contains(err.Error(), "QUOTA_EXCEEDED") {
		t.Errorf("rate limited: %v", err)
	}
	fake.Reset()
	if n := len(fake.Messages()); n != 2 {
		t.Errorf("%d accepted, want 2", n)
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

	// Token endpoint failures, classed like sends.
	clk.Advance(2 * time.Hour)
	fake.FailTokens(1, http.StatusServiceUnavailable)
	if err := p.Send(ctx, pushMessage()); !errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "oauth token: HTTP 503") {
		t.Errorf("token endpoint 503: %v", err)
	}
	fake.FailTokens(1, http.StatusBadRequest)
	err = p.Send(ctx, pushMessage())
	if !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "oauth token: HTTP 400 Bad Request: Invalid grant") {
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
