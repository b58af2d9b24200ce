package providers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/notifier/notifier/providers"
	"github.com/notifier/notifier/testenv"
)

func BenchmarkSegments(b *testing.B) {
	for name, body := range map[string]string{
		"gsm-160":  strings.Repeat("a", 160),
		"gsm-459":  strings.Repeat("Hello [world] ", 33),
		"ucs2-140": strings.Repeat("Привет 👋 ", 14),
	} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				providers.Segments(body)
			}
		})
	}
}

func BenchmarkMask(b *testing.B) {
	for b.Loop() {
		providers.Mask("sms", "+447911123456")
	}
}

// BenchmarkWebhookSend measures one provider sending in parallel to a local
// server over its pooled keep-alive connections.
func BenchmarkWebhookSend(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	w, err := providers.NewWebhook(providers.Config{Name: "bench", Channel: "sms", Kind: "webhook", URL: srv.URL, Rate: 1},
		providers.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	b.RunParallel(func(pb *testing.PB) {
		m := smsMessage()
		for pb.Next() {
			if err := w.Send(context.Background(), m); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// The kinds' benchmarks send in parallel to their testenv fakes over
// loopback: what they measure is the client's own cost (encoding, auth,
// the connection pool or HTTP/2 stream, the SMTP dialogue) plus the fake's.

func BenchmarkTwilioSend(b *testing.B) {
	fake := testenv.FakeTwilio(b)
	p, err := providers.NewTwilio(providers.Config{Name: "tw", Channel: "sms", Kind: "twilio", URL: fake.URL(), Rate: 1,
		AccountSID: fake.AccountSID(), From: "+15005550006", CredentialsEnv: "T"},
		providers.Options{Getenv: env(map[string]string{"T": fake.AuthToken()})})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	benchSend(b, p, smsMessage)
}

func BenchmarkFCMSend(b *testing.B) {
	for _, sa := range []bool{false, true} {
		name := "bearer"
		if sa {
			name = "service-account"
		}
		b.Run(name, func(b *testing.B) {
			fake := testenv.FakeFCM(b)
			cfg := providers.Config{Name: "push", Channel: "push", Kind: "fcm", URL: fake.URL(), Rate: 1, ProjectID: fake.ProjectID()}
			if sa {
				cfg.CredentialsFile = fake.ServiceAccountFile()
			} else {
				cfg.CredentialsEnv = "T"
			}
			p, err := providers.NewFCM(cfg, providers.Options{Getenv: env(map[string]string{"T": fake.BearerToken()})})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			benchSend(b, p, pushMessage)
		})
	}
}

func BenchmarkAPNsSend(b *testing.B) {
	fake := testenv.FakeAPNs(b)
	p, err := providers.NewAPNs(providers.Config{Name: "ios", Channel: "push", Kind: "apns", URL: fake.URL(), Rate: 1,
		TLSCAFile: fake.CAFile(), KeyFile: fake.KeyFile(), KeyID: fake.KeyID(), TeamID: fake.TeamID(), Topic: fake.Topic()},
		providers.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	benchSend(b, p, iosMessage)
}

func BenchmarkSMTPSend(b *testing.B) {
	fake := testenv.FakeSMTP(b)
	p, err := providers.NewSMTP(providers.Config{Name: "mail", Channel: "email", Kind: "smtp", Rate: 1, Host: fake.Host(),
		Port: fake.Port(), TLSCAFile: fake.CAFile(), From: "no-reply@example.com", Username: fake.Username(), PasswordEnv: "PW"},
		providers.Options{Getenv: env(map[string]string{"PW": fake.Password()})})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	benchSend(b, p, emailMessage)
	b.ReportMetric(float64(fake.Connections()), "conns")
}

// benchSend sends in parallel, one message per operation.
func benchSend(b *testing.B, p providers.Provider, msg func() *providers.Message) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		m := msg()
		for pb.Next() {
			if err := p.Send(context.Background(), m); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
