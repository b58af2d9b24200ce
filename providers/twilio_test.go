package providers_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/providers/providertest"
	"github.com/notifier/notifier/testenv"
)

const twilioToken = "twilio-auth-t0ken-value"

func newTwilio(t *testing.T, cfg providers.Config, token string) *providers.Twilio {
	t.Helper()
	cfg.Name, cfg.Channel, cfg.Kind, cfg.CredentialsEnv = "sms-twilio", "sms", "twilio", "TWILIO_AUTH_TOKEN"
	if cfg.Rate == 0 {
		cfg.Rate = 10
	}
	if cfg.AccountSID == "" {
		cfg.AccountSID = "AC0123456789abcdef0123456789abcdef"
	}
	if cfg.From == "" && cfg.MessagingServiceSID == "" {
		cfg.From = "+15005550006"
	}
	p, err := providers.NewTwilio(cfg, providers.Options{Getenv: env(map[string]string{"TWILIO_AUTH_TOKEN": token})})
	if err != nil {
		t.Fatalf("NewTwilio: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestTwilioConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Target{
		New: func(t *testing.T, url string, timeout time.Duration) providers.Provider {
			return newTwilio(t, providers.Config{URL: url, Timeout: timeout}, twilioToken)
		},
		Message:  smsMessage,
		Accepted: providertest.Reply{Status: 201, Body: `{"sid":"SM0123","status":"queued"}`},
		Refusal: providertest.Reply{Status: 400, Header: http.Header{"Content-Type": {"application/json"}},
			Body: `{"code":21617,"message":"The concatenated message body exceeds the 1600 character limit","more_info":"https://www.twilio.com/docs/errors/21617","status":400}`},
		RefusalReason:  "Twilio error 21617: The concatenated message body exceeds the 1600 character limit",
		Secrets:        []string{twilioToken, basicAuthValue("AC0123456789abcdef0123456789abcdef", twilioToken)},
		SenderStatuses: []int{http.StatusUnauthorized}, // Twilio's credentials refused
		NoRetryOnTimeout: func(t *testing.T, url string, timeout time.Duration) providers.Provider {
			return newTwilio(t, providers.Config{URL: url, Timeout: timeout, RetryOnTimeout: new(false)}, twilioToken)
		},
		Gone: providertest.Reply{Status: 400, Header: http.Header{"Content-Type": {"application/json"}},
			Body: `{"code":21610,"message":"Attempt to send to unsubscribed recipient","more_info":"https://www.twilio.com/docs/errors/21610","status":400}`},
	})
}

// TestTwilioAnswers maps Twilio's own error bodies.
func TestTwilioAnswers(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		status int
		header http.Header
		body   string
		class  error
		detail string
		after  time.Duration
	}{
		{"20429 as 429", 429, nil, `{"code":20429,"message":"Too Many Requests","status":429}`, providers.ErrRateLimited,
			"HTTP 429 Too Many Requests: Twilio error 20429: Too Many Requests", providers.DefaultRetryAfter},
		{"20429 on another status", 503, http.Header{"Retry-After": {"4"}}, `{"code":20429,"message":"Too Many Requests","status":503}`,
			providers.ErrRateLimited, "Twilio error 20429", 4 * time.Second},
		{"invalid number", 400, nil, `{"code":21211,"message":"The 'To' number +447700900123 is not a valid phone number.","status":400}`,
			providers.ErrPermanent, "HTTP 400 Bad Request: Twilio error 21211: The 'To' number +4477•••••23 is not a valid phone number.", 0},
		{"unsubscribed", 400, nil, `{"code":21610,"message":"Attempt to send to unsubscribed recipient","status":400}`,
			providers.ErrPermanent, "Twilio error 21610: Attempt to send to unsubscribed recipient", 0},
		{"bad credentials", 401, nil, `{"code":20003,"message":"Authenticate","status":401}`, providers.ErrSender, "Twilio error 20003", 0},
		{"401 without Twilio's body", 401, nil, `<html>Unauthorized</html>`, providers.ErrSender, "HTTP 401 Unauthorized", 0},
		{"account not active", 403, nil, `{"code":20005,"message":"Account not active","status":403}`, providers.ErrSender, "Twilio error 20005", 0},
		{"account suspended", 401, nil, `{"code":10001,"message":"Account is not active","status":401}`, providers.ErrSender, "Twilio error 10001", 0},
		{"invalid From", 400, nil, `{"code":21212,"message":"The 'From' number +15005550006 is not a valid phone number, shortcode, or alphanumeric sender ID.","status":400}`,
			providers.ErrSender, "Twilio error 21212: The 'From' number ••• is not a valid phone number", 0},
		{"From not SMS-capable", 400, nil, `{"code":21661,"message":"'From' number is not SMS-capable","status":400}`, providers.ErrSender, "Twilio error 21661", 0},
		{"Messaging Service gone", 404, nil, `{"code":21701,"message":"The Messaging Service does not exist","status":404}`, providers.ErrSender, "Twilio error 21701", 0},
		{"From not for this destination", 400, nil, `{"code":21606,"message":"The 'From' phone number provided is not a valid message-capable Twilio phone number for this destination/account","status":400}`,
			providers.ErrPermanent, "Twilio error 21606", 0},
		{"body too long", 400, nil, `{"code":21617,"message":"The concatenated message body exceeds the 1600 character limit.","status":400}`, providers.ErrPermanent, "Twilio error 21617", 0},
		{"internal", 500, nil, `{"code":20500,"message":"Internal Server Error","status":500}`, providers.ErrTransient, "Twilio error 20500", 0},
		{"malformed error body", 400, nil, `{"code":"twenty","message":`, providers.ErrPermanent, "HTTP 400 Bad Request", 0},
		{"code as a string", 400, nil, `{"code":"21211","message":"bad number"}`, providers.ErrPermanent, "Twilio error 21211: bad number", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := newReplier(t, c.status, c.header, c.body)
			err := newTwilio(t, providers.Config{URL: srv}, twilioToken).Send(context.Background(), smsMessage())
			if !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.detail) {
				t.Fatalf("Send = %v, want %v with %q", err, c.class, c.detail)
			}
			if c.class == providers.ErrSender && errors.Is(err, providers.ErrPermanent) {
				t.Errorf("Send = %v: both ErrSender and ErrPermanent", err)
			}
			var rl *providers.RateLimitedError
			if errors.As(err, &rl) && rl.RetryAfter != c.after {
				t.Errorf("RetryAfter %s, want %s", rl.RetryAfter, c.after)
			}
		})
	}
}

// TestTwilioSenders: every kind of sender Twilio takes goes out as From.
func TestTwilioSenders(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeTwilio(t)
	for _, from := range []string{"+15005550006", "12345", "123456", "Notifier", "My Shop"} {
		p := newTwilio(t, providers.Config{URL: fake.URL(), AccountSID: fake.AccountSID(), From: from}, fake.AuthToken())
		if err := p.Send(context.Background(), smsMessage()); err != nil {
			t.Errorf("From %q: %v", from, err)
		}
	}
	for i, m := range fake.Messages() {
		if want := []string{"+15005550006", "12345", "123456", "Notifier", "My Shop"}[i]; m.From != want {
			t.Errorf("message %d From %q, want %q", i, m.From, want)
		}
	}
}

// TestTwilioValidityPeriod: expires_at goes out as ValidityPeriod, the
// seconds left by the provider's clock within Twilio's 1 to 36000; a job
// without one has none.
func TestTwilioValidityPeriod(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeTwilio(t)
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	p, err := providers.NewTwilio(providers.Config{Name: "tw", Channel: "sms", Kind: "twilio", Rate: 1, URL: fake.URL(),
		AccountSID: fake.AccountSID(), From: "+15005550006", CredentialsEnv: "T"},
		providers.Options{Getenv: env(map[string]string{"T": fake.AuthToken()}), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	cases := []struct {
		left time.Duration // nil expiry when < 0 ... see below
		want int
	}{
		{5 * time.Minute, 300},
		{5*time.Minute + 900*time.Millisecond, 300}, // whole seconds: never past the expiry
		{400 * time.Millisecond, 1},                 // Twilio's least
		{-time.Hour, 1},                             // already expired: the dispatcher's call, never 0
		{48 * time.Hour, 36000},                     // Twilio's most
	}
	for _, c := range cases {
		m := smsMessage()
		exp := now.Add(c.left)
		m.ExpiresAt = exp
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatalf("expiry in %s: %v", c.left, err)
		}
	}
	if err := p.Send(context.Background(), smsMessage()); err != nil {
		t.Fatal(err)
	}
	got := fake.Messages()
	for i, c := range cases {
		if got[i].ValidityPeriod != c.want {
			t.Errorf("expiry in %s: ValidityPeriod %d, want %d", c.left, got[i].ValidityPeriod, c.want)
		}
	}
	if last := got[len(got)-1]; last.ValidityPeriod != 0 {
		t.Errorf("no expiry: ValidityPeriod %d sent, want none", last.ValidityPeriod)
	}
}

// TestTwilioBodyLimit: a body over 1600 characters is refused before any
// request, the way Twilio would (21617).
func TestTwilioBodyLimit(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeTwilio(t)
	p := newTwilio(t, providers.Config{URL: fake.URL(), AccountSID: fake.AccountSID()}, fake.AuthToken())
	m := smsMessage()
	m.Body = strings.Repeat("é", providers.TwilioMaxBody) // 1600 characters, 3200 bytes: taken
	if err := p.Send(context.Background(), m); err != nil {
		t.Fatalf("1600 characters: %v", err)
	}
	m.Body += "!"
	err := p.Send(context.Background(), m)
	if !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "1601 characters") || !strings.Contains(err.Error(), "21617") ||
		strings.Contains(err.Error(), "éé") {
		t.Errorf("1601 characters: %v, want a permanent refusal naming the size", err)
	}
	if n := len(fake.Requests()); n != 1 {
		t.Errorf("%d requests, want 1 (the long body is not sent)", n)
	}
}

func TestTwilioAgainstFake(t *testing.T) {
	t.Parallel()
	fake := testenv.FakeTwilio(t)
	p := newTwilio(t, providers.Config{URL: fake.URL(), AccountSID: fake.AccountSID()}, fake.AuthToken())
	ctx := context.Background()
	m := smsMessage()
	m.Body = "Grüße & <b>€</b> = 100%"
	if err := p.Send(ctx, m); err != nil {
		t.Fatalf("Send: %v", err)
	}
	service := "MG" + strings.Repeat("0a", 16)
	viaService := newTwilio(t, providers.Config{URL: fake.URL() + "/", AccountSID: fake.AccountSID(), MessagingServiceSID: service},
		fake.AuthToken())
	if err := viaService.Send(ctx, smsMessage()); err != nil {
		t.Fatalf("Send through a Messaging Service: %v", err)
	}
	got := fake.Messages()
	if len(got) != 2 {
		t.Fatalf("fake accepted %d messages", len(got))
	}
	if got[0].To != m.To || got[0].From != "+15005550006" || got[0].Body != m.Body || got[0].MessagingServiceSID != "" {
		t.Errorf("first message %+v", got[0])
	}
	if got[1].From != "" || got[1].MessagingServiceSID != service {
		t.Errorf("Messaging Service message %+v", got[1])
	}
	reqs := fake.Requests()
	if ua := reqs[0].Header.Get("User-Agent"); !strings.HasPrefix(ua, "notifier/") {
		t.Errorf("User-Agent %q", ua)
	}

	// What Twilio checks, answered the way Twilio does. A refused auth
	// token refuses the sender, not the message.
	wrong := newTwilio(t, providers.Config{URL: fake.URL(), AccountSID: fake.AccountSID()}, "wrong-token")
	if err := wrong.Send(ctx, smsMessage()); !errors.Is(err, providers.ErrSender) || !strings.Contains(err.Error(), "Twilio error 20003") {
		t.Errorf("wrong auth token: %v", err)
	}
	fake.FailFor(time.Hour, http.StatusUnauthorized) // the auth token revoked at Twilio
	if err := p.Send(ctx, smsMessage()); !errors.Is(err, providers.ErrSender) || !strings.Contains(err.Error(), "Twilio error 20003") {
		t.Errorf("injected 401: %v, want ErrSender with code 20003", err)
	}
	fake.Reset()
	bad := smsMessage()
	bad.To = "07700900123"
	if err := p.Send(ctx, bad); !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "Twilio error 21211") {
		t.Errorf("not E.164: %v", err)
	}
	fake.RefuseNumber("+447700900999", providers.TwilioUnsubscribed)
	stop := smsMessage()
	stop.To = "+447700900999"
	err := p.Send(ctx, stop)
	if !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "Twilio error 21610") || strings.Contains(err.Error(), "900999") {
		t.Errorf("unsubscribed recipient: %v", err)
	}

	fake.FailNext(1, 503)
	if err := p.Send(ctx, smsMessage()); !errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "20503") {
		t.Errorf("injected 503: %v", err)
	}
	date := time.Now().Add(20 * time.Second).UTC().Format(http.TimeFormat)
	fake.RateLimitFor(time.Hour, date)
	var rl *providers.RateLimitedError
	if err := p.Send(ctx, smsMessage()); !errors.As(err, &rl) || !rl.Explicit || rl.RetryAfter < 18*time.Second || rl.RetryAfter > 21*time.Second ||
		!strings.Contains(err.Error(), "Twilio error 20429") {
		t.Errorf("rate limited with an HTTP-date: %v", err)
	}
	fake.Reset()
	fake.HangFor(time.Hour)
	hung := newTwilio(t, providers.Config{URL: fake.URL(), AccountSID: fake.AccountSID(), Timeout: time.Second}, fake.AuthToken())
	var pe *providers.Error
	// The fake held it without taking it, but the client cannot know:
	// ambiguous, once the request reached the fake.
	if err := hung.Send(ctx, smsMessage()); !errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "timeout") ||
		!errors.As(err, &pe) || pe.Ambiguous != (fake.Count(0) == 1) {
		t.Errorf("hung: %v, want a transient timeout, ambiguous if the fake got it (held: %d)", err, fake.Count(0))
	}
	fake.Reset()
	if n := len(fake.Messages()); n != 2 {
		t.Errorf("%d messages accepted, want 2", n)
	}
	// Twilio created the message and the answer was lost: ambiguous.
	fake.AcceptThenHang(time.Hour)
	if err := hung.Send(ctx, smsMessage()); !errors.As(err, &pe) || !errors.Is(err, providers.ErrTransient) || !pe.Ambiguous {
		t.Errorf("accepted, then no answer: %v, want transient and ambiguous", err)
	}
	fake.Reset()
	if n := len(fake.Messages()); n != 3 {
		t.Errorf("%d messages accepted, want 3", n)
	}
	for _, f := range []string{"%v", "%+v", "%#v"} {
		if s := fmt.Sprintf(f, p); strings.Contains(s, fake.AuthToken()) {
			t.Errorf("Sprintf(%q) prints the auth token", f)
		}
	}
}
