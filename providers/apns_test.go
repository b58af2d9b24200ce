package providers_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/providers/providertest"
	"github.com/notifier/notifier/queue"
	"github.com/notifier/notifier/testenv"
)

const deviceToken = "a4f1c3d2e5b6a7980f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a6978"

func iosMessage() *providers.Message {
	return &providers.Message{Job: queue.Job{ID: "job-42", UserID: "user-7", Channel: "push", To: deviceToken,
		Title: "Hello", Body: "Your code is 493817", Data: map[string]string{"k": "v"}}}
}

// writeP8 writes a fresh .p8 key and returns its path and PEM text.
func writeP8(t *testing.T) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	text := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	path := filepath.Join(t.TempDir(), "AuthKey.p8")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, text
}

func newAPNs(t *testing.T, cfg providers.Config, opts providers.Options) *providers.APNs {
	t.Helper()
	cfg.Name, cfg.Channel, cfg.Kind, cfg.Rate = "push-apns", "push", "apns", 10
	if cfg.KeyID == "" {
		cfg.KeyID, cfg.TeamID, cfg.Topic = "ABC123DEFG", "TEAM123456", "com.example.notifier"
	}
	p, err := providers.NewAPNs(cfg, opts)
	if err != nil {
		t.Fatalf("NewAPNs: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// apnsAgainst builds an apns provider for fake.
func apnsAgainst(t *testing.T, fake *testenv.APNsFake, cfg providers.Config, now func() time.Time) *providers.APNs {
	t.Helper()
	cfg.URL, cfg.TLSCAFile, cfg.KeyFile = fake.URL(), fake.CAFile(), fake.KeyFile()
	cfg.KeyID, cfg.TeamID, cfg.Topic = fake.KeyID(), fake.TeamID(), fake.Topic()
	return newAPNs(t, cfg, providers.Options{Now: now})
}

func TestAPNsConformance(t *testing.T) {
	t.Parallel()
	certs := testenv.NewCerts(t)
	keyFile, keyText := writeP8(t)
	providertest.Run(t, providertest.Target{
		New: func(t *testing.T, url string, timeout time.Duration) providers.Provider {
			return newAPNs(t, providers.Config{URL: url, Timeout: timeout, KeyFile: keyFile, TLSCAFile: certs.CAFile}, providers.Options{})
		},
		Message: iosMessage,
		Refusal: providertest.Reply{Status: 400, Header: http.Header{"Content-Type": {"application/json"}},
			Body: `{"reason":"BadDeviceToken"}`},
		RefusalReason: "HTTP 400 Bad Request: BadDeviceToken",
		Secrets:       []string{keyText, strings.Split(keyText, "\n")[1]},
		ServerTLS:     serverTLS(t, certs),
		Gone: providertest.Reply{Status: 410, Header: http.Header{"Content-Type": {"application/json"}},
			Body: `{"reason":"Unregistered","timestamp":1700000000000}`},
		GoneStatuses: []int{410}, // "The device token is no longer active for the topic."
		// Apple: "After 15 minutes, you can retry JSON payloads that
		// receive response status codes that begin with 5XX."
		MinRetry: providers.APNsRetry5xx,
	})
}

func TestAPNsID(t *testing.T) {
	t.Parallel()
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	for _, id := range []string{"job-42", "a", "x:y.z", strings.Repeat("9", 128)} {
		got := providers.APNsID(id)
		if !uuid.MatchString(got) || providers.APNsID(id) != got {
			t.Errorf("APNsID(%q) = %q: want a stable version-5 UUID", id, got)
		}
	}
	// Cross-checked with Python: uuid.uuid5(uuid.NAMESPACE_URL, "urn:notifier:job:job-42").
	if got := providers.APNsID("job-42"); got != "2120edd1-23d8-5583-97dc-651420d1082a" {
		t.Errorf("APNsID(job-42) = %q, want the RFC 9562 version-5 UUID 2120edd1-23d8-5583-97dc-651420d1082a", got)
	}
	if providers.APNsID("job-42") == providers.APNsID("job-43") {
		t.Error("two ids give one apns-id")
	}
	if got := providers.APNsID("8E3D1A5C-2B4F-4C6D-9E8F-0A1B2C3D4E5F"); got != "8e3d1a5c-2b4f-4c6d-9e8f-0a1b2c3d4e5f" {
		t.Errorf("a UUID id is not kept: %q", got)
	}
}

func TestAPNsAgainstFake(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeAPNs(t)
	p := apnsAgainst(t, fake, providers.Config{}, nil)
	ctx := context.Background()
	exp := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	m := iosMessage()
	m.ExpiresAt = exp
	m.Data = map[string]string{"k": "v", "aps": "overridden?"}
	if err := p.Send(ctx, m); err != nil {
		t.Fatalf("Send: %v", err)
	}
	n := fake.Notifications()
	if len(n) != 1 {
		t.Fatalf("fake accepted %d", len(n))
	}
	got := n[0]
	if got.Token != deviceToken || got.Topic != fake.Topic() || got.PushType != "alert" || got.Priority != "10" ||
		got.ID != providers.APNsID("job-42") || got.Expiration != "1924992000" {
		t.Errorf("notification %+v", got)
	}
	if s := fmt.Sprint(got.Payload); s != "map[aps:map[alert:map[body:Your code is 493817 title:Hello]] k:v]" {
		t.Errorf("payload %s", s)
	}
	if r := fake.Requests()[0]; r.Proto != "HTTP/2.0" {
		t.Errorf("sent over %s, want HTTP/2.0", r.Proto)
	}
	if time.Since(got.IssuedAt) > time.Minute {
		t.Errorf("provider token issued at %s", got.IssuedAt)
	}

	bg := apnsAgainst(t, fake, providers.Config{PushType: "background"}, nil)
	if err := bg.Send(ctx, iosMessage()); err != nil {
		t.Fatalf("background Send: %v", err)
	}
	// Without an expiry: apns-expiration 0, delivered once and not stored.
	if got := fake.Notifications()[1]; got.PushType != "background" || got.Priority != "5" || got.Expiration != "0" ||
		fmt.Sprint(got.Payload) != "map[aps:map[content-available:1] k:v]" {
		t.Errorf("background notification %+v", got)
	}

	bad := iosMessage()
	bad.To = "not-hex"
	if err := p.Send(ctx, bad); !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "HTTP 400 Bad Request: BadDeviceToken") {
		t.Errorf("bad device token: %v", err)
	}
	gone := iosMessage()
	gone.To = strings.Repeat("ab", 32)
	fake.Unregister(gone.To)
	// The token's last valid time is in the detail, so it can be dropped.
	if err := p.Send(ctx, gone); !errors.Is(err, providers.ErrPermanent) ||
		!regexp.MustCompile(`HTTP 410 Gone: Unregistered \(token inactive since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)$`).MatchString(err.Error()) {
		t.Errorf("unregistered: %v", err)
	}
	// Too large for APNs: refused before any request.
	sent := len(fake.Requests())
	big := iosMessage()
	big.Body = strings.Repeat("x", 5000)
	if err := p.Send(ctx, big); !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "PayloadTooLarge") ||
		!strings.Contains(err.Error(), "over APNs's limit of 4096") || strings.Contains(err.Error(), "xxxx") {
		t.Errorf("too large: %v", err)
	}
	if n := len(fake.Requests()); n != sent {
		t.Errorf("the payload over 4096 bytes was sent (%d requests, want %d)", n, sent)
	}
	// The key, the team or the topic refused: the sender, not the
	// notification.
	wrongTopic := newAPNs(t, providers.Config{URL: fake.URL(), TLSCAFile: fake.CAFile(), KeyFile: fake.KeyFile(), KeyID: fake.KeyID(),
		TeamID: fake.TeamID(), Topic: "com.other.app"}, providers.Options{})
	if err := wrongTopic.Send(ctx, iosMessage()); !errors.Is(err, providers.ErrSender) || !strings.Contains(err.Error(), "TopicDisallowed") {
		t.Errorf("wrong topic: %v", err)
	}
	otherKey, _ := writeP8(t)
	forged := newAPNs(t, providers.Config{URL: fake.URL(), TLSCAFile: fake.CAFile(), KeyFile: otherKey, KeyID: fake.KeyID(),
		TeamID: fake.TeamID(), Topic: fake.Topic()}, providers.Options{})
	if err := forged.Send(ctx, iosMessage()); !errors.Is(err, providers.ErrSender) || !strings.Contains(err.Error(), "InvalidProviderToken") {
		t.Errorf("token signed by another key: %v", err)
	}
	wrongTeam := newAPNs(t, providers.Config{URL: fake.URL(), TLSCAFile: fake.CAFile(), KeyFile: fake.KeyFile(), KeyID: fake.KeyID(),
		TeamID: "OTHERTEAM1", Topic: fake.Topic()}, providers.Options{})
	if err := wrongTeam.Send(ctx, iosMessage()); !errors.Is(err, providers.ErrSender) || errors.Is(err, providers.ErrPermanent) ||
		!strings.Contains(err.Error(), "InvalidProviderToken") {
		t.Errorf("wrong team: %v", err)
	}
	fake.FailNext(1, http.StatusForbidden) // the key revoked at Apple
	if err := p.Send(ctx, iosMessage()); !errors.Is(err, providers.ErrSender) || !strings.Contains(err.Error(), "InvalidProviderToken") {
		t.Errorf("injected 403: %v", err)
	}

	fake.FailNext(1, 503)
	if err := p.Send(ctx, iosMessage()); !errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "ServiceUnavailable") {
		t.Errorf("injected 503: %v", err)
	}
	// APNs's 429 TooManyRequests is about one device token.
	fake.RateLimitFor(time.Hour, "")
	var rl *providers.RateLimitedError
	if err := p.Send(ctx, iosMessage()); !errors.As(err, &rl) || rl.Explicit || rl.Scope != providers.ScopeRecipient ||
		!strings.Contains(err.Error(), "TooManyRequests") {
		t.Errorf("rate limited: %v, want a recipient-scoped limit", err)
	}
	fake.Reset()
	busy := iosMessage()
	busy.To = strings.Repeat("cd", 32)
	fake.ThrottleDevice(busy.To)
	if err := p.Send(ctx, busy); !errors.As(err, &rl) || rl.Scope != providers.ScopeRecipient {
		t.Errorf("throttled device: %v, want a recipient-scoped limit", err)
	}
	if err := p.Send(ctx, iosMessage()); err != nil {
		t.Errorf("another device meanwhile: %v", err)
	}
	// APNs took it and the answer was lost.
	fake.AcceptThenHang(time.Hour)
	hung := apnsAgainst(t, fake, providers.Config{Timeout: time.Second}, nil)
	var pe *providers.Error
	if err := hung.Send(ctx, iosMessage()); !errors.As(err, &pe) || !errors.Is(err, providers.ErrTransient) || !pe.Ambiguous {
		t.Errorf("accepted, then no answer: %v, want transient and ambiguous", err)
	}
	fake.Reset()
	if n := len(fake.Notifications()); n != 4 {
		t.Errorf("%d accepted, want 4", n)
	}
}

// apnsReplier starts an HTTP/2 TLS server that answers every request with
// status and body, and returns its URL and CA file.
func apnsReplier(t *testing.T, status int, body string) (string, string) {
	t.Helper()
	certs := testenv.NewCerts(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	srv.EnableHTTP2 = true
	srv.TLS = serverTLS(t, certs)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, certs.CAFile
}

// TestAPNsAnswers maps APNs's reasons: the sender's, the recipient's and
// the throttles of each scope.
func TestAPNsAnswers(t *testing.T) {
	t.Parallel()
	keyFile, _ := writeP8(t)
	cases := []struct {
		status int
		body   string
		class  error
		scope  providers.Scope
		detail string
	}{
		{403, `{"reason":"InvalidProviderToken"}`, providers.ErrSender, 0, "HTTP 403 Forbidden: InvalidProviderToken"},
		{403, `{"reason":"MissingProviderToken"}`, providers.ErrSender, 0, "MissingProviderToken"},
		{403, `{"reason":"BadCertificate"}`, providers.ErrSender, 0, "BadCertificate"},
		{403, `{"reason":"BadCertificateEnvironment"}`, providers.ErrSender, 0, "BadCertificateEnvironment"},
		{400, `{"reason":"TopicDisallowed"}`, providers.ErrSender, 0, "TopicDisallowed"},
		{403, `{"reason":"Forbidden"}`, providers.ErrPermanent, 0, "HTTP 403 Forbidden: Forbidden"},
		{400, `{"reason":"BadDeviceToken"}`, providers.ErrPermanent, 0, "BadDeviceToken"},
		{400, `{"reason":"DeviceTokenNotForTopic"}`, providers.ErrPermanent, 0, "DeviceTokenNotForTopic"},
		{410, `{"reason":"Unregistered","timestamp":1796040000000}`, providers.ErrPermanent, 0,
			"HTTP 410 Gone: Unregistered (token inactive since 2026-11-30T12:00:00Z)"},
		{410, `{"reason":"ExpiredToken","timestamp":1796040000000}`, providers.ErrPermanent, 0,
			"ExpiredToken (token inactive since 2026-11-30T12:00:00Z)"},
		{410, `{"reason":"Unregistered"}`, providers.ErrPermanent, 0, "HTTP 410 Gone: Unregistered"},
		{429, `{"reason":"TooManyRequests"}`, providers.ErrRateLimited, providers.ScopeRecipient, "TooManyRequests"},
		{429, `{"reason":"TooManyProviderTokenUpdates"}`, providers.ErrRateLimited, providers.ScopeProvider, "TooManyProviderTokenUpdates"},
		{429, `not json`, providers.ErrRateLimited, providers.ScopeProvider, "HTTP 429"},
		{503, `{"reason":"ServiceUnavailable"}`, providers.ErrTransient, 0, "ServiceUnavailable"},
	}
	for _, c := range cases {
		url, ca := apnsReplier(t, c.status, c.body)
		p := newAPNs(t, providers.Config{URL: url, TLSCAFile: ca, KeyFile: keyFile}, providers.Options{})
		err := p.Send(context.Background(), iosMessage())
		if !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.detail) {
			t.Errorf("%d %s: %v, want %v with %q", c.status, c.body, err, c.class, c.detail)
			continue
		}
		if c.class == providers.ErrSender && errors.Is(err, providers.ErrPermanent) {
			t.Errorf("%d %s: both ErrSender and ErrPermanent", c.status, c.body)
		}
		var rl *providers.RateLimitedError
		if errors.As(err, &rl) && rl.Scope != c.scope {
			t.Errorf("%d %s: scope %s, want %s", c.status, c.body, rl.Scope, c.scope)
		}
	}
}

// TestAPNsPayloadLimit: 4096 bytes for an alert, 5120 for voip; over it,
// refused without a request.
func TestAPNsPayloadLimit(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeAPNs(t)
	alert := apnsAgainst(t, fake, providers.Config{}, nil)
	voip := apnsAgainst(t, fake, providers.Config{PushType: "voip"}, nil)
	overhead := len(`{"aps":{"alert":{"body":"","title":"Hello"}},"k":"v"}`)
	m := iosMessage()
	m.Body = strings.Repeat("x", providers.APNsMaxPayload-overhead)
	if err := alert.Send(context.Background(), m); err != nil {
		t.Fatalf("4096 bytes: %v", err)
	}
	m.Body += "x"
	if err := alert.Send(context.Background(), m); !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "4097 bytes") {
		t.Errorf("4097 bytes: %v", err)
	}
	if err := voip.Send(context.Background(), m); err != nil {
		t.Errorf("4097 bytes of voip: %v", err)
	}
	m.Body = strings.Repeat("x", providers.APNsMaxVoIPPayload-overhead+1)
	if err := voip.Send(context.Background(), m); !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "limit of 5120") {
		t.Errorf("5121 bytes of voip: %v", err)
	}
	if n := len(fake.Requests()); n != 2 {
		t.Errorf("%d requests, want 2 (the ones within the limit)", n)
	}
}

// skewedAPNs is an apns provider against the fake, whose clock (apns) runs
// skew ahead of the provider's (host).
type skewedAPNs struct {
	p          *providers.APNs
	fake       *testenv.APNsFake
	host, apns *testenv.Clock
}

func newSkewedAPNs(t *testing.T, skew time.Duration) skewedAPNs {
	t.Helper()
	host := newClock()
	apns := testenv.NewClock(host.Now().Add(skew))
	fake := testenv.FakeAPNs(t, testenv.WithClock(apns.Now))
	return skewedAPNs{p: apnsAgainst(t, fake, providers.Config{}, host.Now), fake: fake, host: host, apns: apns}
}

// advance moves both clocks by d.
func (s skewedAPNs) advance(d time.Duration) {
	s.host.Advance(d)
	s.apns.Advance(d)
}

// TestAPNsProviderToken: the JWT is reused and replaced at 50 minutes
// (Apple: "Refresh your token no more than once every 20 minutes and no
// less than once every 60 minutes"), without a TooManyProviderTokenUpdates.
func TestAPNsProviderToken(t *testing.T) {
	t.Parallel()
	s := newSkewedAPNs(t, 0)
	fake := s.fake
	ctx := context.Background()
	send := func() error { return s.p.Send(ctx, iosMessage()) }
	for range 5 {
		if err := send(); err != nil {
			t.Fatal(err)
		}
	}
	if n := fake.ProviderTokens(); n != 1 {
		t.Fatalf("5 sends used %d provider tokens, want 1", n)
	}
	s.advance(49 * time.Minute)
	if err := send(); err != nil || fake.ProviderTokens() != 1 {
		t.Fatalf("at 49 min: %v, %d tokens, want the same token", err, fake.ProviderTokens())
	}
	s.advance(time.Minute)
	if err := send(); err != nil || fake.ProviderTokens() != 2 {
		t.Fatalf("at 50 min: %v, %d tokens, want a new token", err, fake.ProviderTokens())
	}
	if n := fake.Count(http.StatusTooManyRequests); n != 0 {
		t.Errorf("APNs answered TooManyProviderTokenUpdates %d times", n)
	}
}

// TestAPNsExpiredProviderTokenIsReplacedAtOnce: APNs's clock runs 40
// minutes ahead of the host's, so it calls a token the host made 25
// minutes ago expired. Before, the send failed (transient, an attempt
// burnt) and only the next one carried a new token; now the send makes a
// new token at once and goes through with it, in the same Send.
func TestAPNsExpiredProviderTokenIsReplacedAtOnce(t *testing.T) {
	t.Parallel()
	s := newSkewedAPNs(t, 40*time.Minute)
	p, fake := s.p, s.fake
	ctx := context.Background()
	if err := p.Send(ctx, iosMessage()); err != nil {
		t.Fatal(err)
	}
	s.advance(25 * time.Minute)
	if err := p.Send(ctx, iosMessage()); err != nil {
		t.Fatalf("a token APNs calls expired: %v, want it replaced and the notification sent", err)
	}
	if got, want := fake.Count(http.StatusForbidden), 1; got != want {
		t.Errorf("%d answers 403, want %d (the one ExpiredProviderToken)", got, want)
	}
	if n := len(fake.Notifications()); n != 2 || fake.ProviderTokens() != 2 {
		t.Errorf("%d notifications with %d tokens, want 2 and 2", n, fake.ProviderTokens())
	}
}

// TestAPNsPersistentlyExpiredTokenIsTheSender: APNs's clock runs two hours
// ahead: every token the host makes is expired to APNs, fresh ones too.
// Before, each send was transient until the job died of max_attempts; now
// the send that finds a fresh token refused is ErrSender (the dispatcher
// pauses the provider and keeps the jobs) and says the clock is probably
// skewed. The next send does not make a third token (that would break the
// 20-minute rule and cannot help): one request, ErrSender again. Once the
// clocks agree, the token made at the refusal goes through.
func TestAPNsPersistentlyExpiredTokenIsTheSender(t *testing.T) {
	t.Parallel()
	s := newSkewedAPNs(t, 2*time.Hour)
	p, fake := s.p, s.fake
	ctx := context.Background()

	err := p.Send(ctx, iosMessage())
	if !errors.Is(err, providers.ErrSender) || errors.Is(err, providers.ErrTransient) ||
		!strings.Contains(err.Error(), "ExpiredProviderToken") || !strings.Contains(err.Error(), "clock") {
		t.Fatalf("a fresh token refused as expired: %v, want ErrSender naming the clock", err)
	}
	if n, tokens := len(fake.Requests()), fake.ProviderTokens(); n != 2 || tokens != 0 {
		t.Errorf("%d requests, %d tokens accepted: want 2 (the send and its one retry with a new token), 0", n, tokens)
	}
	s.advance(time.Minute)
	if err := p.Send(ctx, iosMessage()); !errors.Is(err, providers.ErrSender) {
		t.Fatalf("the next send: %v, want ErrSender", err)
	}
	if n := len(fake.Requests()); n != 3 {
		t.Errorf("%d requests after the next send, want 3 (no retry with yet another token)", n)
	}
	// The host's clock is fixed: the token it made at the refusal is now
	// an ordinary one, a minute old.
	s.apns.Advance(-2 * time.Hour)
	if err := p.Send(ctx, iosMessage()); err != nil {
		t.Fatalf("after the clocks agree: %v", err)
	}
	if n := fake.Count(http.StatusTooManyRequests); n != 0 {
		t.Errorf("APNs answered TooManyProviderTokenUpdates %d times", n)
	}
}

// TestAPNsRequiresHTTP2: a TLS server that speaks only HTTP/1.1 is not
// APNs.
func TestAPNsRequiresHTTP2(t *testing.T) {
	t.Parallel()
	certs := testenv.NewCerts(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) }))
	srv.TLS = serverTLS(t, certs)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	srv.StartTLS()
	t.Cleanup(srv.Close)
	keyFile, _ := writeP8(t)
	p := newAPNs(t, providers.Config{URL: srv.URL, KeyFile: keyFile, TLSCAFile: certs.CAFile}, providers.Options{})
	if err := p.Send(context.Background(), iosMessage()); !errors.Is(err, providers.ErrTransient) {
		t.Errorf("HTTP/1.1-only server: %v, want a transient failure", err)
	}
}

func TestNewAPNsErrors(t *testing.T) {
	t.Parallel()
	base := providers.Config{Name: "ios", Channel: "push", Kind: "apns", Rate: 1, KeyID: "K", TeamID: "T", Topic: "t"}
	notKey := filepath.Join(t.TempDir(), "cert.pem")
	if err := os.WriteFile(notKey, []byte("-----BEGIN CERTIFICATE-----\nMIIBsecretish\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"/nonexistent/k.p8": "key_file: open /nonexistent/k.p8", notKey: "not a PEM-encoded EC (.p8) key"} {
		cfg := base
		cfg.KeyFile = file
		_, err := providers.NewAPNs(cfg, providers.Options{})
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "MIIB") {
			t.Errorf("key file %s: %v, want %q", file, err, want)
		}
	}
	plain := base
	plain.KeyFile, plain.URL = "k.p8", "http://127.0.0.1:1"
	if _, err := providers.NewAPNs(plain, providers.Options{}); err == nil || !strings.Contains(err.Error(), "must be https") {
		t.Errorf("http url: %v", err)
	}
	bgPriority := base
	bgPriority.KeyFile, bgPriority.PushType, bgPriority.Priority = "k.p8", "background", 10
	if err := bgPriority.Validate(); err == nil || !strings.Contains(err.Error(), "must be 5 for push_type background") {
		t.Errorf("background with priority 10: %v", err)
	}
	keyFile, keyText := writeP8(t)
	ok := base
	ok.KeyFile = keyFile
	p := newAPNs(t, ok, providers.Options{})
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(format, p); strings.Contains(s, strings.Split(keyText, "\n")[1][:20]) {
			t.Errorf("Sprintf(%q, apns) prints the key", format)
		}
	}
}

// TestAPNsConfigurationRefusalsAreTheSender: answers that refuse the key,
// its environment or the topic whatever the notification (Apple, "Handling
// notification responses from APNs"; "Establishing a token-based
// connection to APNs" for the two key ids) are ErrSender: the dispatcher
// pauses the provider and keeps the jobs, where before every push job was
// dead-lettered (UnrelatedKeyIdInToken, BadEnvironmentKeyIdInToken,
// BadTopic, MissingTopic were permanent).
func TestAPNsConfigurationRefusalsAreTheSender(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeAPNs(t)
	p := apnsAgainst(t, fake, providers.Config{}, nil)
	for _, c := range []struct {
		status int
		reason string
	}{
		{403, "UnrelatedKeyIdInToken"},      // a key of another team, or not the connection's first
		{403, "BadEnvironmentKeyIdInToken"}, // a key for the other environment
		{400, "BadTopic"},                   // the apns-topic is not valid
		{400, "MissingTopic"},               // no apns-topic where the credentials need one
	} {
		fake.ReasonFor(c.status, c.reason)
		fake.FailNext(1, c.status)
		err := p.Send(context.Background(), iosMessage())
		if !errors.Is(err, providers.ErrSender) || errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%d %s: %v, want ErrSender naming the reason", c.status, c.reason, err)
		}
	}
}

// TestAPNs5xxWaitsAsAppleAsks: Apple, "Handling notification responses
// from APNs": "After 15 minutes, you can retry JSON payloads that receive
// response status codes that begin with 5XX." A 500 or 503 is transient
// with Error.RetryAfter 15 minutes (the dispatcher's retry waits at least
// that long), where before it was retried by the dispatcher's backoff (1 s
// for the first).
func TestAPNs5xxWaitsAsAppleAsks(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeAPNs(t)
	p := apnsAgainst(t, fake, providers.Config{}, nil)
	for _, status := range []int{500, 503} {
		fake.FailNext(1, status)
		err := p.Send(context.Background(), iosMessage())
		var pe *providers.Error
		if !errors.As(err, &pe) || !errors.Is(err, providers.ErrTransient) || pe.RetryAfter != 15*time.Minute {
			t.Errorf("%d: %v, want transient with RetryAfter 15m", status, err)
		}
	}
}

// TestAPNsCollapseID: every notification carries apns-collapse-id, derived
// from the job id (the id itself up to APNs's 64 bytes, else its stable
// UUID), the same on every attempt: a push sent twice (a retry after an
// ambiguous timeout) replaces the first on the device instead of stacking.
func TestAPNsCollapseID(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeAPNs(t)
	p := apnsAgainst(t, fake, providers.Config{}, nil)
	ctx := context.Background()
	long := iosMessage()
	long.ID = strings.Repeat("j", 128) // SPEC §2's longest id, twice APNs's limit
	for _, m := range []*providers.Message{iosMessage(), iosMessage(), long} {
		if err := p.Send(ctx, m); err != nil {
			t.Fatalf("%s: %v", m.ID, err)
		}
	}
	got := fake.Notifications()
	if len(got) != 3 {
		t.Fatalf("%d notifications, want 3", len(got))
	}
	if got[0].CollapseID != "job-42" || got[1].CollapseID != got[0].CollapseID {
		t.Errorf("collapse ids %q and %q for one job, want job-42 twice", got[0].CollapseID, got[1].CollapseID)
	}
	if c := got[2].CollapseID; len(c) > providers.APNsMaxCollapseID || c == "" || c != providers.APNsCollapseID(long.ID) {
		t.Errorf("a 128-byte id's collapse id %q: want a stable one of at most 64 bytes", c)
	}
}
