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
			Body: `{"code":21610,"message":"Attempt to send to unsubscribed recipient","more_info":"https://www.twilio.com/docs/errors/21610","status":400}`},
		RefusalReason: "Twilio error 21610: Attempt to send to unsubscribed recipient",
		Secrets:       []string{twilioToken, basicAuthValue("AC0123456789abcdef0123456789abcdef", twilioToken)},
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
		{"bad credentials", 401, nil, `{"code":20003,"message":"Authenticate","status":401}`, providers.ErrPermanent, "Twilio error 20003", 0},
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
			var rl *providers.RateLimitedError
			if errors.As(err, &rl) && rl.RetryAfter != c.after {
				t.Errorf("RetryAfter %s, want %s", rl.RetryAfter, c.after)
			}
		})
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

	// What Twilio checks, answered the way Twilio does.
	wrong := newTwilio(t, providers.Config{URL: fake.URL(), AccountSID: fake.AccountSID()}, "wrong-token")
	if err := wrong.Send(ctx, smsMessage()); !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "Twilio error 20003") {
		t.Errorf("wrong auth token: %v", err)
	}
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
	hung := newTwilio(t, providers.Config{URL: fake.URL(), AccountSID: fake.AccountSID(), Timeout: 200 * time.Millisecond}, fake.AuthToken())
	if err := hung.Send(ctx, smsMessage()); !errors.Is(err, providers.ErrTransient) || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("hung: %v", err)
	}
	fake.Reset()
	if n := len(fake.Messages()); n != 2 {
		t.Errorf("%d messages accepted, want 2", n)
	}
	for _, f := range []string{"%v", "%+v", "%#v"} {
		if s := fmt.Sprintf(f, p); strings.Contains(s, fake.AuthToken()) {
			t.Errorf("Sprintf(%q) prints the auth token", f)
		}
	}
}
